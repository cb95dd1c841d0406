"""Findings of the adversarial review of the worker protocol (issue 33):
the worker against a real serve behind a proxy that misbehaves."""

import http.client
import http.server
import threading
import urllib.parse

import pytest

import redrive


class _Proxy:
    """An HTTP proxy in front of serve; spoil(path) answers a request to
    path itself, or None to forward it."""

    def __init__(self, upstream, spoil):
        u = urllib.parse.urlsplit(upstream)

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _any(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                spoiled = spoil(self.path)
                if spoiled is not None:
                    status, data = spoiled
                else:
                    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=90)
                    headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                    conn.request(self.command, self.path, body=body or None, headers=headers)
                    resp = conn.getresponse()
                    status, data = resp.status, resp.read()
                    conn.close()
                self.send_response(status)
                self.send_header("Content-Type", "application/json" if data.startswith(b"{") else "text/html")
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
def proxied(serve):
    made = []

    def make(spoil):
        p = _Proxy(serve.url, spoil)
        made.append(p)
        return p

    yield make
    for p in made:
        p.close()


def _spoil_first(path, times):
    """spoil answering the first `times` requests to path 200 with a page
    that is no JSON (a captive portal, a misconfigured proxy)."""
    left = {"n": times}
    lock = threading.Lock()

    def spoil(p):
        if p != path:
            return None
        with lock:
            if left["n"] <= 0:
                return None
            left["n"] -= 1
        return 200, b"<html>gateway</html>"

    return spoil


# FINDING: a lease answered 200 with a body that is no JSON object killed
# the lease thread (AttributeError on None): the worker went on
# heartbeating but never leased again, silently.
def test_lease_answer_not_json_is_retried(serve, proxied, run_worker):
    p = proxied(_spoil_first("/v1/worker/lease", 1))
    w = redrive.Worker(p.url, serve.token, queues=["py-garbage-lease"], poll=5.0, handle_signals=False)
    w.register("k", lambda job: "ok")
    run_worker(w)
    j = serve.client.enqueue("k", {}, queue="py-garbage-lease")
    serve.wait_job(j["id"], lambda x: x["state"] == "completed", what="completed")


# FINDING: outcomes answered 200 with a body that is no JSON were taken
# as delivered: the outcome was dropped and the job ran again after its
# lease expired.
def test_outcomes_answer_not_json_is_sent_again(serve, proxied, run_worker):
    p = proxied(_spoil_first("/v1/worker/outcomes", 1))
    runs = []
    w = redrive.Worker(p.url, serve.token, queues=["py-garbage-outcome"], poll=5.0, handle_signals=False)
    w.register("k", lambda job: runs.append(job.attempt) or "ok")
    run_worker(w)
    j = serve.client.enqueue("k", {}, queue="py-garbage-outcome")
    got = serve.wait_job(j["id"], lambda x: x["state"] == "completed", what="completed")
    assert got["attempt"] == 1, got
    assert runs == [1]


def _spoil_sequence(answers):
    """spoil answering requests to each path with its answers in turn
    ((status, body)), then forwarding them."""
    left = {p: list(a) for p, a in answers.items()}
    lock = threading.Lock()

    def spoil(p):
        if p.startswith("/v1/worker/jobs/"):
            p = "/v1/worker/jobs/{id}/outcome"
        with lock:
            queue = left.get(p)
            return queue.pop(0) if queue else None

    return spoil


# FINDING: an outcome sent alone (after its batch was refused, e.g. 413
# for large results) was dropped on a 5xx or a network failure: the job,
# left running, was rescued at lease expiry and ran again.
def test_outcome_sent_alone_retried_on_5xx(serve, proxied, run_worker):
    too_large = b'{"error":{"code":"body_too_large","message":"the body is larger than 1048576 bytes"}}'
    unavailable = b'{"error":{"code":"unavailable","message":"the store is unavailable"}}'
    p = proxied(_spoil_sequence({"/v1/worker/outcomes": [(413, too_large)],
                                 "/v1/worker/jobs/{id}/outcome": [(503, unavailable)]}))
    runs = []
    w = redrive.Worker(p.url, serve.token, queues=["py-alone"], poll=5.0, handle_signals=False)
    w.register("k", lambda job: runs.append(job.attempt) or "ok")
    run_worker(w)
    j = serve.client.enqueue("k", {}, queue="py-alone")
    got = serve.wait_job(j["id"], lambda x: x["state"] == "completed", what="completed")
    assert got["attempt"] == 1, got
    assert runs == [1]
