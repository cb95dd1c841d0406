"""A lease answer lost after serve leased its jobs (issue 33): sent again
with its request id, it answers the same jobs; answers beyond the
client's bound are not read."""

import http.client
import http.server
import json
import threading
import urllib.parse

import pytest

import redrive
from cutproxy import CutProxy


class _LeaseCutProxy(CutProxy):
    """A proxy in front of serve that forwards each request and, for the
    first `cuts` lease answers holding jobs, closes the connection instead
    of passing the answer on: serve leased the jobs, the worker never
    learns their tokens. leases records each lease body forwarded."""

    def __init__(self, upstream, cuts=1):
        self.cuts = cuts
        self.cut_jobs = []  # the jobs of the answers cut
        self.leases = []
        super().__init__(upstream, timeout=90)

    def cut(self, n, path, body, status, data):
        if path != "/v1/worker/lease":
            return False
        jobs = json.loads(data).get("jobs") or [] if status == 200 else []
        self.leases.append(json.loads(body))
        if jobs and len(self.cut_jobs) < self.cuts:
            self.cut_jobs.append(jobs)
            return True
        return False


@pytest.fixture
def lease_cut_proxy(serve):
    made = []

    def make(**kw):
        p = _LeaseCutProxy(serve.url, **kw)
        made.append(p)
        return p

    yield make
    for p in made:
        p.close()


# FINDING: a lease answer cut after serve leased its jobs stranded them
# until their leases expired (then rescued: a second attempt), the worker
# sending a new lease call instead.
def test_lease_answer_cut_is_sent_again_for_the_same_jobs(serve, lease_cut_proxy, run_worker):
    p = lease_cut_proxy(cuts=2)
    w = redrive.Worker(p.url, serve.token, queues=["py-resend"], concurrency=4, poll=1.0, handle_signals=False)
    ran = []
    w.register("k", lambda job: ran.append((job.id, job.lease)))
    ids = [serve.client.enqueue("k", {"n": n}, queue="py-resend")["id"] for n in range(3)]
    run_worker(w)
    for i in ids:
        got = serve.wait_job(i, lambda x: x["state"] == "completed", what="completed")
        # Not rescued: the first attempt, its lease the one cut.
        assert got["attempt"] == 1, got
        assert not [e for e in got.get("history") or [] if e.get("reason") == "lease_expired"], got
    cut_keys = {(j["id"], j["lease"]) for jobs in p.cut_jobs for j in jobs}
    assert cut_keys and cut_keys <= set(ran), (p.cut_jobs, ran)
    assert sorted(i for i, _ in ran) == sorted(ids)
    # Each cut call was sent again with its id, marked, listing the jobs held.
    resent = [b for b in p.leases if b.get("resend")]
    assert len(resent) >= len(p.cut_jobs)
    for b in resent:
        assert any(a["request"] == b["request"] and not a.get("resend") for a in p.leases)
        assert isinstance(b.get("held"), list)
    fresh = [b["request"] for b in p.leases if not b.get("resend")]
    assert len(set(fresh)) == len(fresh), "a new call reused a request id"


# A lease answer longer than the worker's bound is not read: sent again
# for fewer jobs, its jobs are the same (handed back beyond the smaller
# max), none stranded.
def test_lease_answer_beyond_the_bound_is_sent_again_for_fewer_jobs(serve, run_worker):
    big = "x" * 1500
    ids = [serve.client.enqueue("k", {"pad": big}, queue="py-big")["id"] for _ in range(4)]
    done = threading.Event()
    ran = []
    lock = threading.Lock()

    def handler(job):
        with lock:
            ran.append(job.id)
            if len(ran) == len(ids):
                done.set()

    w = redrive.Worker(serve.url, serve.token, queues=["py-big"], concurrency=4, poll=1.0, handle_signals=False,
                       max_answer=4500)
    w.register("k", handler)
    run_worker(w)
    assert done.wait(30)
    for i in ids:
        got = serve.wait_job(i, lambda x: x["state"] == "completed", what="completed")
        assert got["attempt"] == 1, got
    assert sorted(ran) == sorted(ids)


class _BigServer:
    """An HTTP server answering every request 200 with a JSON body of
    `size` bytes, with a Content-Length or chunked."""

    def __init__(self, size, chunked):
        body = b'{"pad":"' + b"x" * (size - 10) + b'"}'
        assert len(body) == size

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                if chunked:
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    try:
                        for i in range(0, len(body), 4096):
                            part = body[i:i + 4096]
                            self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
                        self.wfile.write(b"0\r\n\r\n")
                    except OSError:
                        pass  # the client stopped reading: what is tested
                else:
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    try:
                        self.wfile.write(body)
                    except OSError:
                        pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize("chunked", [False, True])
def test_answer_beyond_the_bound_is_refused(chunked):
    srv = _BigServer(100_000, chunked)
    try:
        with redrive.Client(srv.url, max_answer=50_000) as c:
            with pytest.raises(redrive.AnswerTooLarge) as e:
                c.get(1)
            assert "50000" in str(e.value)
            assert e.value.limit == 50_000
        with redrive.Client(srv.url, max_answer=100_000) as c:
            assert len(c.get(1)["pad"]) == 100_000 - 10  # at the bound: read
    finally:
        srv.close()


def test_max_answer_must_be_positive():
    for bad in (0, -1, 1.5, True, "1"):
        with pytest.raises(ValueError):
            redrive.Client("http://127.0.0.1:1", max_answer=bad)
        with pytest.raises(ValueError):
            redrive.Worker("http://127.0.0.1:1", max_answer=bad)


class _OldServeProxy:
    """A proxy in front of serve that answers a lease body naming request,
    resend or held as a serve older than them does (400 unknown_field),
    and forwards everything else."""

    def __init__(self, upstream):
        u = urllib.parse.urlsplit(upstream)
        proxy = self
        self.refused = 0

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _any(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path == "/v1/worker/lease":
                    unknown = [k for k in json.loads(body) if k in ("request", "resend", "held")]
                    if unknown:
                        proxy.refused += 1
                        data = json.dumps({"error": {"code": "unknown_field", "field": unknown[0],
                                                     "message": "unknown field %r" % unknown[0]}}).encode()
                        self.send_response(400)
                        self.send_header("Content-Type", "application/json")
                        self.send_header("Content-Length", str(len(data)))
                        self.end_headers()
                        self.wfile.write(data)
                        return
                conn = http.client.HTTPConnection(u.hostname, u.port, timeout=90)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                conn.request(self.command, self.path, body=body or None, headers=headers)
                resp = conn.getresponse()
                status, data = resp.status, resp.read()
                conn.close()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = _any

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


# A serve older than lease request ids refuses the field: the worker
# leases without them rather than stop.
def test_older_serve_without_lease_ids(serve, run_worker):
    p = _OldServeProxy(serve.url)
    try:
        w = redrive.Worker(p.url, serve.token, queues=["py-old"], concurrency=2, poll=1.0, handle_signals=False)
        w.register("k", lambda job: "ok")
        j = serve.client.enqueue("k", queue="py-old")
        run_worker(w)
        serve.wait_job(j["id"], lambda x: x["state"] == "completed", what="completed")
        assert p.refused == 1
    finally:
        p.close()
