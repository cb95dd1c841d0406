"""The worker and the client against a real `redrive serve` (see conftest)."""

import os
import signal
import subprocess
import threading

import pytest

import redrive
from conftest import PYTHON, new_worker
from redrive._wire import parse_time

HERE = os.path.dirname(os.path.abspath(__file__))


def events(job, kind):
    return [e for e in job.get("history") or [] if e.get("kind") == kind]


def test_success(serve, run_worker):
    w = new_worker(serve)

    @w.handler("echo")
    def echo(job):
        return {"doubled": job.payload["n"] * 2, "attempt": job.attempt}

    run_worker(w)
    job = serve.client.enqueue("echo", {"n": 21}, queue="py")
    done = serve.wait_job(job["id"], lambda j: j["state"] == "completed")
    assert done["attempt"] == 1
    assert done["result"] == {"doubled": 42, "attempt": 1}
    live = [x for x in serve.workers() if x["id"] == w.name]
    assert live and live[0].get("remote") is True, serve.workers()
    assert "py" in live[0]["queues"] and live[0]["kinds"] == ["echo"]


def test_transient_retried_on_policy_schedule(serve, run_worker):
    w = new_worker(serve)

    @w.handler("flaky")
    def flaky(job):
        if job.attempt == 1:
            raise ConnectionError("ocr timed out")
        return "ok"

    run_worker(w)
    job = serve.client.enqueue("flaky", {}, queue="py")
    done = serve.wait_job(job["id"], lambda j: j["state"] == "completed")
    assert done["attempt"] == 2
    assert done["result"] == "ok"
    (retry,) = events(done, "retry")
    assert retry["class"] == "transient"
    assert "ConnectionError: ocr timed out" in retry["error"]
    assert retry["delay"] == 500  # the policy's base, no jitter: its first retry
    assert retry.get("worker") == w.name
    # Not run again before the policy said.
    assert (parse_time(done["attempted_at"]) - parse_time(retry["at"])).total_seconds() >= 0.5


def test_retry_after_obeyed(serve, run_worker):
    w = new_worker(serve)

    @w.handler("crm.sync", dependency="crm")
    def sync(job):
        if job.attempt == 1:
            raise redrive.RateLimited("429 from CRM", retry_after=1.5, reason="http_429")
        return None

    run_worker(w)
    job = serve.client.enqueue("crm.sync", {"id": 7}, queue="py")
    done = serve.wait_job(job["id"], lambda j: j["state"] == "completed")
    (retry,) = events(done, "retry")
    assert retry["class"] == "rate_limited"
    assert retry.get("reason") == "http_429"
    assert retry["delay"] == 1500  # Retry-After over the policy's 500ms
    assert (parse_time(done["attempted_at"]) - parse_time(retry["at"])).total_seconds() >= 1.5


def test_permanent_is_dead(serve, run_worker):
    w = new_worker(serve)

    @w.handler("scan.pdf")
    def scan(job):
        raise redrive.Permanent("not a PDF", reason="bad_input")

    run_worker(w)
    job = serve.client.enqueue("scan.pdf", {"doc": "a.txt"}, queue="py")
    dead = serve.wait_job(job["id"], lambda j: j["state"] == "dead")
    assert dead["attempt"] == 1
    assert dead["last_error_class"] == "permanent"
    assert "not a PDF" in dead["last_error"]


def test_plain_exception_retried_until_dead(serve, run_worker):
    w = new_worker(serve)

    @w.handler("boom")
    def boom(job):
        raise KeyError("page")

    run_worker(w)
    job = serve.client.enqueue("boom", {}, queue="py", max_retries=1)
    dead = serve.wait_job(job["id"], lambda j: j["state"] == "dead")
    assert dead["attempt"] == 2
    assert dead["last_error_class"] == "transient"


def test_cancel_reaches_running_handler(serve, run_worker):
    w = new_worker(serve)
    started = threading.Event()
    saw_cancel = threading.Event()

    @w.handler("long")
    def long(job):
        started.set()
        if job.cancel_event.wait(60) and job.canceled:
            saw_cancel.set()
            raise redrive.Transient("canceled")  # returning would complete it, as in Go
        return None

    run_worker(w)
    job = serve.client.enqueue("long", {}, queue="py")
    assert started.wait(30)
    serve.client.cancel(job["id"])
    # The issue's bound: a cancellation reaches a running handler within 1 s.
    assert saw_cancel.wait(1.0), "the cancellation did not reach the handler within 1 s"
    serve.wait_job(job["id"], lambda j: j["state"] == "canceled")


def test_deadline_stops_handler(serve, run_worker):
    w = new_worker(serve)
    seen = {}
    stopped = threading.Event()

    @w.handler("slow", timeout=0.5)
    def slow(job):
        seen["deadline"] = job.deadline
        if job.cancel_event.wait(60):
            seen["reason"] = job.stop_reason
            stopped.set()
            raise redrive.Transient("deadline exceeded")
        return None

    run_worker(w)
    job = serve.client.enqueue("slow", {}, queue="py")
    assert stopped.wait(30), "the handler was not stopped at its deadline"
    assert seen["reason"] == "deadline"
    assert seen["deadline"] is not None
    serve.wait_job(job["id"], lambda j: j["state"] == "scheduled" and j["attempt"] == 1)


def test_progress_shown_by_api(serve, run_worker):
    w = new_worker(serve)
    reported = threading.Event()
    release = threading.Event()

    @w.handler("ocr")
    def ocr(job):
        job.progress(40, 100)
        reported.set()
        release.wait(60)
        return None

    run_worker(w)
    job = serve.client.enqueue("ocr", {}, queue="py")
    assert reported.wait(30)
    try:
        running = serve.wait_job(job["id"], lambda j: (j.get("progress") or {}).get("done") == 40)
        assert running["progress"]["total"] == 100
        assert running["state"] == "running"
    finally:
        release.set()
    serve.wait_job(job["id"], lambda j: j["state"] == "completed")


def test_snooze_uses_no_attempt(serve, run_worker):
    w = new_worker(serve)

    @w.handler("later")
    def later(job):
        raise redrive.Snooze(3600)

    run_worker(w)
    job = serve.client.enqueue("later", {}, queue="py")
    snoozed = serve.wait_job(job["id"], lambda j: j["state"] == "scheduled")
    assert events(snoozed, "snoozed")
    assert (parse_time(snoozed["run_at"]) - parse_time(snoozed["attempted_at"])).total_seconds() >= 3500


def test_killed_worker_job_rescued_by_another(serve, run_worker):
    proc = subprocess.Popen([PYTHON, os.path.join(HERE, "proc_worker.py"), serve.url, serve.token, "30"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        job = serve.client.enqueue("hold", {}, queue="py")
        line = proc.stdout.readline().split()
        assert line[:2] == ["started", str(job["id"])]
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    w = new_worker(serve)
    ran = threading.Event()

    @w.handler("hold")
    def hold(job):
        ran.set()
        return {"rescued": True}

    run_worker(w)
    done = serve.wait_job(job["id"], lambda j: j["state"] == "completed")
    assert ran.is_set()
    assert done["attempt"] == 2


def test_late_outcome_refused(serve):
    """An attempt rescued and leased again: the first worker's outcome is
    refused with 409 lease_lost and changes nothing."""
    a, b = serve.conn(), serve.conn()
    job = serve.client.enqueue("late", {}, queue="py")
    lease = {"queues": ["py"], "kinds": ["late"], "max": 1, "wait": "10s"}
    got = a.call("POST", "/v1/worker/lease", dict(lease, worker="py-late-a"))["jobs"]
    assert [j["id"] for j in got] == [job["id"]]
    first = got[0]["lease"]
    # a never heartbeats: at lease expiry the job is rescued and b's
    # long-poll gets it.
    again = []
    for _ in range(10):
        again = b.call("POST", "/v1/worker/lease", dict(lease, worker="py-late-b", wait="5s"))["jobs"]
        if again:
            break
    assert [j["id"] for j in again] == [job["id"]]
    assert again[0]["lease"] > first
    with pytest.raises(redrive.LeaseLost) as e:
        a.call("POST", "/v1/worker/jobs/%d/outcome" % job["id"],
               {"worker": "py-late-a", "lease": first, "outcome": "complete"})
    assert e.value.status == 409
    batch = a.call("POST", "/v1/worker/outcomes", {"worker": "py-late-a", "outcomes": [
        {"id": job["id"], "lease": first, "outcome": "fail", "class": "permanent", "error": "late"}]})
    assert batch["outcomes"][0]["status"] == 409
    assert serve.client.get(job["id"])["state"] == "running"
    ok = b.call("POST", "/v1/worker/outcomes", {"worker": "py-late-b", "outcomes": [
        {"id": job["id"], "lease": again[0]["lease"], "outcome": "complete"}]})
    assert ok["outcomes"][0]["status"] == 200
    assert serve.client.get(job["id"])["state"] == "completed"


def test_sigterm_lets_running_handler_finish(serve):
    proc = subprocess.Popen([PYTHON, os.path.join(HERE, "proc_worker.py"), serve.url, serve.token, "30"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        job = serve.client.enqueue("hold", {}, queue="py")
        line = proc.stdout.readline().split()
        assert line[:2] == ["started", str(job["id"])]
        name = line[2]
        proc.send_signal(signal.SIGTERM)
        proc.stdin.write("finish\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "stopped"
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    done = serve.client.get(job["id"])
    assert done["state"] == "completed"
    mine = [x for x in serve.workers() if x["id"] == name]
    assert mine and mine[0].get("stopped_at"), serve.workers()
    assert mine[0].get("remote") is True


def test_shutdown_hands_back_after_grace(serve):
    proc = subprocess.Popen([PYTHON, os.path.join(HERE, "proc_worker.py"), serve.url, serve.token, "0.2"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        job = serve.client.enqueue("hold", {}, queue="py")
        assert proc.stdout.readline().split()[:2] == ["started", str(job["id"])]
        proc.send_signal(signal.SIGINT)
        assert proc.stdout.readline().strip() == "stopped"
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    back = serve.client.get(job["id"])
    assert back["state"] == "pending", back
    assert events(back, "released"), back


def test_enqueue_client(serve):
    c = serve.client
    one = c.enqueue("echo", {"n": 1}, queue="py", idempotency_key="k-1", priority=5, delay=3600)
    assert one["state"] == "scheduled" and one["priority"] == 5
    same = c.enqueue("echo", {"n": 1}, queue="py", idempotency_key="k-1")
    assert same["id"] == one["id"] and same.get("existing") is True
    many = c.enqueue_many([{"kind": "echo", "payload": {"n": i}, "queue": "py"} for i in range(3)])
    assert len(many) == 3 and len({j["id"] for j in many}) == 3
    assert c.get(many[0]["id"])["payload"] == {"n": 0}
    assert c.cancel(one["id"])["state"] == "canceled"
    with pytest.raises(redrive.APIError) as e:
        c.enqueue("echo", {}, queue="py", priority=1000)
    assert e.value.status == 400 and e.value.field == "priority"
    with pytest.raises(redrive.APIError) as e:
        c.get(10**9)
    assert e.value.status == 404
    bad = redrive.Client(serve.url, "wrong-token-wrong-token")
    with pytest.raises(redrive.APIError) as e:
        bad.get(one["id"])
    assert e.value.status == 401


def test_many_jobs_batched(serve, run_worker):
    """Leases of several jobs, outcomes sent together: every job completes once."""
    w = new_worker(serve, concurrency=8)
    seen = []
    lock = threading.Lock()

    @w.handler("noop")
    def noop(job):
        with lock:
            seen.append(job.id)
        return job.payload

    jobs = serve.client.enqueue_many([{"kind": "noop", "payload": i, "queue": "py"} for i in range(300)])
    run_worker(w)
    for j in jobs:
        serve.wait_job(j["id"], lambda x: x["state"] == "completed")
    assert sorted(seen) == sorted(j["id"] for j in jobs)


def test_result_not_json_fails_permanent(serve, run_worker):
    w = new_worker(serve)

    @w.handler("bad.result")
    def bad(job):
        return {"when": object()}

    run_worker(w)
    job = serve.client.enqueue("bad.result", {}, queue="py")
    dead = serve.wait_job(job["id"], lambda j: j["state"] == "dead")
    assert dead["last_error_class"] == "permanent"
    assert "result is not JSON" in dead["last_error"]


def test_refused_worker_raises(serve):
    w = redrive.Worker(serve.url, "not-the-token-not-the-token", queues=["py"], handle_signals=False, poll=1.0)

    @w.handler("x")
    def x(job):
        return None

    with pytest.raises(redrive.APIError) as e:
        w.run()
    assert e.value.status == 401


def test_refused_outcome_reported_as_failure(serve, run_worker):
    """A reason the server refuses (a control character): the job still fails at once,
    with the refusal in its error, instead of waiting for its lease."""
    w = new_worker(serve)

    @w.handler("bad.reason")
    def bad(job):
        raise redrive.Permanent("no such customer", reason="line\nbreak")

    run_worker(w)
    job = serve.client.enqueue("bad.reason", {}, queue="py")
    dead = serve.wait_job(job["id"], lambda j: j["state"] == "dead")
    assert "no such customer" in dead["last_error"] and "refused" in dead["last_error"]
    assert dead["last_error_class"] == "permanent"


class _CutOff(redrive.Worker):
    """A worker whose heartbeats do not reach the server while cut is set."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.cut = threading.Event()

    def _heartbeat(self, conn, jobs):
        if self.cut.is_set():
            return None
        return super()._heartbeat(conn, jobs)


def test_cut_off_worker_loses_its_job(serve, run_worker):
    """A worker whose heartbeats stop: its job is rescued at lease expiry and
    completed by another; its handler is told (lease_lost: its lease ran
    out unrenewed) and its outcome is dropped."""
    a = _CutOff(serve.url, serve.token, queues=["py"], concurrency=1, poll=5.0, handle_signals=False)
    started, lost, back = threading.Event(), threading.Event(), threading.Event()
    reasons = []

    @a.handler("part")
    def part_a(job):
        started.set()
        if job.cancel_event.wait(60):
            reasons.append(job.stop_reason)
            lost.set()
        # Holds a's only slot until it is back: a does not lease the
        # rescued job again while cut off.
        back.wait(60)
        return "from a"

    run_worker(a)
    job = serve.client.enqueue("part", {}, queue="py")
    assert started.wait(30)
    a.cut.set()
    b = new_worker(serve)

    @b.handler("part")
    def part_b(job):
        return "from b"

    run_worker(b)
    done = serve.wait_job(job["id"], lambda j: j["state"] == "completed")
    assert done["attempt"] == 2
    a.cut.clear()
    back.set()
    assert lost.wait(30), "the cut-off worker's handler was not told"
    assert reasons == ["lease_lost"]
    after = serve.client.get(job["id"])
    assert after["state"] == "completed" and after["attempt"] == 2 and after["lease"] == done["lease"]


def test_enqueue_workflows(serve, run_worker):
    """Many workflows in one call: answered in order with their jobs, a
    held key answers the workflow holding it, a refusal names the
    workflow's field and stores nothing, and the workflows run."""
    c = serve.client

    def flow(i, key=None):
        w = {"name": "order-%d" % i, "on_dead": "wait",
             "jobs": [{"name": "reserve", "kind": "wf.step", "payload": {"flow": i, "step": "reserve"}, "queue": "py"},
                      {"name": "charge", "kind": "wf.step", "payload": {"flow": i, "step": "charge"}, "queue": "py",
                       "after": ["reserve"], "max_retries": 2}],
             "on_success": {"kind": "wf.done", "payload": {"flow": i}, "queue": "py"}}
        if key:
            w["idempotency_key"] = key
        return w

    got = c.enqueue_workflows([flow(0, key="wf-0"), flow(1)])
    assert [w["name"] for w in got] == ["order-0", "order-1"]
    for w in got:
        assert not w.get("existing") and w["total"] == 2 and w["on_success"] > 0, w
        by_name = {j["name"]: j for j in w["jobs"]}
        assert by_name["reserve"]["state"] == "pending" and by_name["charge"]["state"] == "blocked", w
        assert by_name["charge"]["after"] == [by_name["reserve"]["job_id"]], w
    again = c.enqueue_workflows([flow(0, key="wf-0"), flow(2, key="wf-2")])
    assert again[0]["id"] == got[0]["id"] and again[0].get("existing") is True
    assert not again[1].get("existing") and again[1]["name"] == "order-2"

    bad = flow(3)
    bad["jobs"][1]["after"] = ["nowhere"]
    with pytest.raises(redrive.APIError) as e:
        c.enqueue_workflows([flow(4, key="wf-4"), bad])
    assert e.value.status == 400 and e.value.field.startswith("workflows[1].jobs"), (e.value.field, e.value.message)
    again = c.enqueue_workflows([flow(4, key="wf-4")])
    assert not again[0].get("existing"), "the refused call stored its first workflow"

    ran = []
    lock = threading.Lock()
    w = new_worker(serve)

    @w.handler("wf.step")
    def step(job):
        with lock:
            ran.append((job.payload["flow"], job.payload["step"]))

    @w.handler("wf.done")
    def done(job):
        return None

    run_worker(w)
    for wf in got + again:
        serve.wait_job(wf["on_success"], lambda j: j["state"] == "completed", what="the success callback's completion")
    with lock:
        for i in (0, 1, 4):
            assert ran.index((i, "reserve")) < ran.index((i, "charge")), ran
