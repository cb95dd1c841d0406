"""Fixtures: a real `redrive serve` per test, started from REDRIVE_BIN or
built from this checkout, on a fresh SQLite file, a free port and a token."""

import json
import os
import pathlib
import subprocess
import sys
import threading
import time

import pytest

import redrive
from redrive._http import Connection, Endpoint

REPO = pathlib.Path(__file__).resolve().parents[3]
TOKEN = "py-client-test-token-0123456789abcdef"

# Settings every test's serve runs with: a short lease, so that a killed
# worker's job is rescued soon, and a short retry policy without jitter,
# so that the schedule can be checked from the job's history.
LEASE = "2s"
RETRY = {"max_retries": 2, "base": "500ms", "max": "2s", "multiplier": 2, "jitter": "none", "after_jitter": "0"}


@pytest.fixture(scope="session")
def redrive_bin(tmp_path_factory):
    path = os.environ.get("REDRIVE_BIN")
    if path:
        return path
    out = tmp_path_factory.mktemp("bin") / "redrive"
    subprocess.run(["go", "build", "-o", str(out), "./cmd/redrive"], cwd=REPO, check=True)
    return str(out)


class Serve:
    """A running `redrive serve`: url, token, client and a raw connection."""

    def __init__(self, proc, url, log_path, token):
        self.proc = proc
        self.url = url
        self.token = token
        self.log_path = log_path
        self.client = redrive.Client(url, token)
        self.worker_errors = []  # what stopped the workers run_worker started

    def conn(self):
        """A raw connection to the API, for what the client does not wrap."""
        return Connection(Endpoint(self.url, self.token))

    def wait_job(self, job_id, pred, timeout=30.0, what="the expected state", missing_ok=False):
        """Polls the job until pred(job) holds, within a generous liveness
        bound; answers the job. With missing_ok, a job not enqueued yet
        (404) is waited for too."""
        end = time.monotonic() + timeout
        while True:
            try:
                job = self.client.get(job_id)
            except redrive.APIError as e:
                if not (missing_ok and e.status == 404):
                    raise
                job = None
            if job is not None and pred(job):
                return job
            if self.worker_errors:
                raise AssertionError("a worker stopped: %r" % self.worker_errors)
            if time.monotonic() > end:
                raise AssertionError("job %d did not reach %s within %ss: %s" % (job_id, what, timeout, json.dumps(job)))
            time.sleep(0.02)  # polling the API: nothing to wait on in-process

    def workers(self):
        return self.conn().call("GET", "/v1/workers")["workers"]


@pytest.fixture
def serve(redrive_bin, tmp_path, request):
    """A serve with a token; parametrized indirectly with {"token": None},
    one without (on loopback, as the docs' examples run)."""
    token = getattr(request, "param", {}).get("token", TOKEN)
    config = tmp_path / "redrive.json"
    config.write_text(json.dumps({"retry": RETRY}))
    log_path = tmp_path / "serve.log"
    args = [redrive_bin, "serve", "--db", str(tmp_path / "redrive.db"), "--addr", "127.0.0.1:0",
            "--lease", LEASE, "--log-format", "json", "--config", str(config), "--shutdown-timeout", "5s"]
    if token:
        args += ["--token", token]
    proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            cwd=tmp_path)
    serving = threading.Event()
    found = {}

    def read_log():
        with open(log_path, "wb") as f:
            for line in proc.stderr:
                f.write(line)
                f.flush()
                if not serving.is_set():
                    try:
                        rec = json.loads(line)
                    except ValueError:
                        continue
                    if rec.get("msg") == "redrive serving":
                        found["addr"] = rec["addr"]
                        serving.set()

    reader = threading.Thread(target=read_log, daemon=True)
    reader.start()
    try:
        if not serving.wait(60):
            raise RuntimeError("serve did not start: %s" % log_path.read_text()[-2000:])
        s = Serve(proc, "http://" + found["addr"], log_path, token)
        yield s
        s.client.close()
    finally:
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        reader.join(5)


@pytest.fixture
def run_worker(serve):
    """Starts Workers in threads; stops and joins them at the end of the test."""
    started = []

    def start(worker):
        errors = serve.worker_errors

        def target():
            try:
                worker.run()
            except BaseException as e:  # reported by wait_job and the test's end
                errors.append(e)

        t = threading.Thread(target=target, daemon=True)
        t.start()
        started.append((worker, t, errors))
        return t

    yield start
    for worker, t, errors in started:
        worker.stop(hurry=True)
        t.join(30)
        assert not t.is_alive(), "worker %s did not stop" % worker.name
    assert not serve.worker_errors, serve.worker_errors


def new_worker(serve, **kw):
    kw.setdefault("queues", ["py"])
    kw.setdefault("concurrency", 4)
    kw.setdefault("poll", 5.0)
    kw.setdefault("handle_signals", False)
    return redrive.Worker(serve.url, serve.token, **kw)


PYTHON = sys.executable
