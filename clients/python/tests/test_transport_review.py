"""Findings of the second adversarial review of the clients (issue 33,
after the TypeScript transport change): the transport's retry of a cut
request, against a real serve behind a proxy that cuts."""

import datetime
import http.client
import http.server
import json
import socket
import threading
import urllib.parse

import pytest

import redrive
from cutproxy import CutProxy
import redrive._wire


class _CutProxy(CutProxy):
    """A proxy in front of serve that forwards each request and, for the
    first request to cut_path sent on a kept connection (the second request
    or later of its connection), closes the connection once serve has
    answered it: serve applied the request, the client gets no answer."""

    def __init__(self, upstream, cut_path):
        self.cut_path = cut_path
        self.forwarded = 0
        self.cuts = 0
        super().__init__(upstream)

    def cut(self, n, path, body, status, data):
        if path != self.cut_path:
            return False
        self.forwarded += 1
        if n >= 2 and self.cuts == 0:
            self.cuts += 1
            return True
        return False


@pytest.fixture
def cut_proxy(serve):
    made = []

    def make(cut_path):
        p = _CutProxy(serve.url, cut_path)
        made.append(p)
        return p

    yield make
    for p in made:
        p.close()


def _jobs_of(serve, queue):
    return serve.conn().call("GET", "/v1/jobs?queue=%s&limit=100" % queue)["jobs"]


# FINDING: a request cut on a kept connection before any answer was sent
# again on a new one, whatever it was: an enqueue without an idempotency
# key that serve had read and stored was stored twice.
def test_enqueue_without_key_cut_after_stored_is_not_sent_again(serve, cut_proxy):
    p = cut_proxy("/v1/jobs")
    with redrive.Client(p.url, serve.token) as c:
        c.enqueue("k", queue="py-cut", idempotency_key="warm")  # opens the kept connection
        with pytest.raises((ConnectionError, http.client.HTTPException)):
            c.enqueue("k", {"once": True}, queue="py-cut")
    assert p.cuts == 1
    jobs = _jobs_of(serve, "py-cut")
    assert len([j for j in jobs if not j.get("idempotency_key")]) == 1, jobs
    assert p.forwarded == 2


def test_batch_without_keys_cut_after_stored_is_not_sent_again(serve, cut_proxy):
    p = cut_proxy("/v1/jobs/batch")
    with redrive.Client(p.url, serve.token) as c:
        c.enqueue_many([{"kind": "k", "queue": "py-cut-batch", "idempotency_key": "warm-batch"}])
        with pytest.raises((ConnectionError, http.client.HTTPException)):
            c.enqueue_many([{"kind": "k", "queue": "py-cut-batch"}, {"kind": "k", "queue": "py-cut-batch"}])
    assert p.cuts == 1
    assert len(_jobs_of(serve, "py-cut-batch")) == 3


def test_cancel_cut_after_applied_is_not_sent_again(serve, cut_proxy):
    job = serve.client.enqueue("k", queue="py-cut-cancel", delay=3600)
    p = cut_proxy("/v1/jobs/%d/cancel" % job["id"])
    with redrive.Client(p.url, serve.token) as c:
        c.get(job["id"])
        # Before the fix: sent again, the second copy answered 409 (the job
        # is canceled already), raised as though the cancel had failed.
        with pytest.raises((ConnectionError, http.client.HTTPException)):
            c.cancel(job["id"])
    assert p.cuts == 1
    assert serve.client.get(job["id"])["state"] == "canceled"


# What held: an enqueue with a key is still sent again, its second copy
# answering the job the first stored.
def test_enqueue_with_key_cut_after_stored_is_sent_again(serve, cut_proxy):
    p = cut_proxy("/v1/jobs")
    with redrive.Client(p.url, serve.token) as c:
        c.enqueue("k", queue="py-cut-key", idempotency_key="warm-key")
        job = c.enqueue("k", queue="py-cut-key", idempotency_key="once")
    assert p.cuts == 1
    assert job.get("existing") is True
    jobs = _jobs_of(serve, "py-cut-key")
    assert len(jobs) == 2


class _RewriteProxy:
    """A proxy in front of serve that forwards each request, then answers
    rewrite(path, status, body) instead of serve's answer, or serve's when
    rewrite answers None."""

    def __init__(self, upstream, rewrite):
        u = urllib.parse.urlsplit(upstream)

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _any(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                conn = http.client.HTTPConnection(u.hostname, u.port, timeout=90)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                conn.request(self.command, self.path, body=body or None, headers=headers)
                resp = conn.getresponse()
                status, data = resp.status, resp.read()
                conn.close()
                changed = rewrite(self.path, status, data)
                if changed is not None:
                    status, data = changed
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = _any

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def rewrite_proxy(serve):
    made = []

    def make(rewrite):
        p = _RewriteProxy(serve.url, rewrite)
        made.append(p)
        return p

    yield make
    for p in made:
        p.close()


def _lazy_heartbeats(path, status, data):
    """Lease answers whose heartbeat interval is an hour: the worker does
    not heartbeat its jobs, so serve rescues them at their lease's end."""
    if path != "/v1/worker/lease" or status != 200:
        return None
    answer = json.loads(data)
    answer["heartbeat_every"] = "1h"
    return status, json.dumps(answer).encode()


# FINDING (the TypeScript worker's, found by its review, in the Python
# worker too): a job whose lease the worker lost unnoticed, leased again,
# ran its second attempt beside the first: the first handler was told
# only at the next heartbeat of its lease (never, with no heartbeat due).
def test_job_leased_again_stops_the_handler_of_its_lost_lease(serve, rewrite_proxy, run_worker):
    p = rewrite_proxy(_lazy_heartbeats)
    first = {}
    first_running = threading.Event()
    seen = {}
    second_ran = threading.Event()
    w = redrive.Worker(p.url, serve.token, queues=["py-relase"], concurrency=2, poll=1.0, handle_signals=False)

    def handler(job):
        if job.attempt == 1:
            first["job"] = job
            first_running.set()
            job.cancel_event.wait(30)
            return "first"
        first_running.wait(30)
        seen["stopped"] = first["job"].cancel_event.is_set()
        seen["reason"] = first["job"].stop_reason
        second_ran.set()
        return "second"

    w.register("k", handler)
    run_worker(w)
    j = serve.client.enqueue("k", queue="py-relase")
    assert second_ran.wait(30), "the job was not leased again"
    assert seen == {"stopped": True, "reason": "lease_lost"}
    got = serve.wait_job(j["id"], lambda x: x["state"] == "completed", what="completed")
    assert got["attempt"] == 2
    assert got["result"] == "second"


def _failed_heartbeats(path, status, data):
    if path != "/v1/worker/heartbeat":
        return None
    return 503, b'{"error":{"code":"unavailable","message":"the store is unavailable"}}'


# FINDING (the TypeScript worker stops a handler whose lease ran out with
# no heartbeat answered; the Python worker did not): with its heartbeats
# failing, the handler ran on past the job's lease, after serve rescued
# the job for another worker.
def test_handler_stopped_when_its_lease_runs_out_unrenewed(serve, rewrite_proxy, run_worker):
    p = rewrite_proxy(_failed_heartbeats)
    stopped = {}
    done = threading.Event()
    w = redrive.Worker(p.url, serve.token, queues=["py-unrenewed"], concurrency=1, poll=1.0, handle_signals=False)

    def handler(job):
        if job.cancel_event.wait(30):
            stopped["reason"] = job.stop_reason
        done.set()
        return "ran on"

    w.register("k", handler)
    run_worker(w)
    serve.client.enqueue("k", queue="py-unrenewed")
    assert done.wait(40)
    assert stopped == {"reason": "lease_lost"}


def _clock_behind(path, status, data):
    """Serve's answers as a serve whose clock is a minute behind gives them."""
    if status != 200 or path not in ("/v1/worker/lease", "/v1/worker/heartbeat"):
        return None
    answer = json.loads(data)
    for j in answer.get("jobs") or []:
        for field in ("lease_until", "deadline"):
            if j.get(field):
                t = redrive._wire.parse_time(j[field]) - datetime.timedelta(minutes=1)
                j[field] = redrive._wire.format_time(t)
    return status, json.dumps(answer).encode()


# FINDING: a handler's deadline (serve's clock) was compared with the
# worker's clock: with serve's clock behind the worker's by more than the
# kind's timeout, every handler was stopped ("deadline") as it started.
def test_server_clock_behind_does_not_stop_handlers_at_once(serve, rewrite_proxy, run_worker):
    beats = threading.Event()

    def rewrite(path, status, data):
        if path == "/v1/worker/heartbeat" and status == 200 and json.loads(data).get("jobs"):
            beats.set()
        return _clock_behind(path, status, data)

    p = rewrite_proxy(rewrite)
    reasons = []
    w = redrive.Worker(p.url, serve.token, queues=["py-skew"], concurrency=1, poll=1.0, handle_signals=False)

    def handler(job):
        # Runs until a heartbeat of it (a third of the lease), well
        # within its timeout and its lease.
        while not beats.is_set():
            if job.cancel_event.wait(0.02):
                reasons.append(job.stop_reason)
                raise RuntimeError("stopped: %s" % job.stop_reason)
        return "ok"

    w.register("k", handler, timeout=30)
    run_worker(w)
    j = serve.client.enqueue("k", queue="py-skew")
    serve.wait_job(j["id"], lambda x: x["state"] == "completed" or reasons, what="completed")
    assert reasons == []
    assert serve.client.get(j["id"])["attempt"] == 1


class _ClosingServer:
    """An HTTP server that answers each request 201 with {"n": <count>} on
    a connection it then closes at once, without saying so (no
    Connection: close): as a server closing a kept connection left idle
    does. closed is set once it closed the connection of the last answer."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.url = "http://127.0.0.1:%d" % self.sock.getsockname()[1]
        self.requests = 0
        self.closed = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    data += chunk
                head, _, body = data.partition(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                while len(body) < length:
                    body += conn.recv(65536)
                self.requests += 1
                answer = json.dumps({"n": self.requests}).encode()
                conn.sendall(b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                             % (len(answer), answer))
            self.closed.set()

    def close(self):
        self.sock.close()


# FINDING (of this review's own fix, before it reached main): the Python
# client sent each request on its kept connection without looking whether
# serve had closed it meanwhile (serve closes one left idle for 2
# minutes), and counted on sending it again. Now that an enqueue without
# a key is not sent again, such an enqueue after a pause failed.
def test_enqueue_after_serve_closed_the_idle_connection():
    srv = _ClosingServer()
    try:
        with redrive.Client(srv.url) as c:
            assert c.enqueue("k") == {"n": 1}
            assert srv.closed.wait(10)
            assert c.enqueue("k") == {"n": 2}
        assert srv.requests == 2
    finally:
        srv.close()
