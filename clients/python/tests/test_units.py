"""Unit tests of what needs no server: exception mapping, arguments."""

import pytest

import redrive
from redrive.client import enqueue_body
from redrive.worker import failure_outcome, default_name


def test_failure_classes():
    assert failure_outcome(redrive.Permanent("bad pdf")) == {"outcome": "fail", "class": "permanent", "error": "bad pdf"}
    assert failure_outcome(redrive.NeedsAuth("token expired", reason="http_401"))["class"] == "needs_auth"
    assert failure_outcome(redrive.Transient("timeout"))["class"] == "transient"
    assert failure_outcome(redrive.Unknown("what"))["class"] == "unknown"
    rl = failure_outcome(redrive.RateLimited("429", retry_after=2.5, reason="http_429", dependency="crm"))
    assert rl == {"outcome": "fail", "class": "rate_limited", "error": "429", "retry_after": "2500ms",
                  "reason": "http_429", "dependency": "crm"}
    assert failure_outcome(redrive.RateLimited("429", retry_after="3s"))["retry_after"] == "3s"


def test_plain_exception_is_transient():
    out = failure_outcome(KeyError("x"))
    assert out == {"outcome": "fail", "class": "transient", "error": "KeyError: 'x'"}
    assert failure_outcome(RuntimeError())["error"] == "RuntimeError"


def test_cause_from_chain():
    try:
        try:
            raise ConnectionRefusedError("refused")
        except OSError as e:
            raise redrive.Transient("ocr down") from e
    except redrive.Transient as e:
        out = failure_outcome(e)
    assert out["cause"] == "ConnectionRefusedError: refused"
    assert failure_outcome(redrive.Permanent("x", cause="given"))["cause"] == "given"


def test_snooze_delay():
    assert redrive.Snooze(30).delay == "30s"
    assert redrive.Snooze("1m").delay == "1m"
    with pytest.raises(ValueError):
        redrive.Snooze(-1)


def test_enqueue_body():
    assert enqueue_body("scan.pdf", {"doc": "a"}, queue="scan", priority=5, delay=1.5, max_retries=2) == {
        "kind": "scan.pdf", "payload": {"doc": "a"}, "queue": "scan", "priority": 5, "delay": "1500ms",
        "max_retries": 2}
    with pytest.raises(ValueError):
        enqueue_body("k", run_at="2026-01-01T00:00:00Z", delay=1)
    with pytest.raises(ValueError):
        enqueue_body("")


def test_enqueue_workflows_checks_before_sending():
    c = redrive.Client("http://127.0.0.1:9")  # nothing listens: nothing may be sent
    job = {"name": "a", "kind": "k"}
    with pytest.raises(ValueError, match="1 to 1000"):
        c.enqueue_workflows([])
    with pytest.raises(ValueError, match="want a list"):
        c.enqueue_workflows({"jobs": [job]})
    with pytest.raises(ValueError, match=r"workflows\[0\]: unknown key jbos"):
        c.enqueue_workflows([{"jbos": [job]}])
    with pytest.raises(ValueError, match=r"workflows\[0\].jobs: want a non-empty list"):
        c.enqueue_workflows([{"jobs": []}])
    with pytest.raises(ValueError, match=r"workflows\[1\].jobs\[0\]: unknown argument qeue"):
        c.enqueue_workflows([{"jobs": [job]}, {"jobs": [{"name": "a", "kind": "k", "qeue": "x"}]}])
    with pytest.raises(ValueError, match=r"workflows\[0\].jobs\[0\].name"):
        c.enqueue_workflows([{"jobs": [{"kind": "k"}]}])
    with pytest.raises(ValueError, match=r"workflows\[0\].jobs\[0\].after"):
        c.enqueue_workflows([{"jobs": [{"name": "a", "kind": "k", "after": "b"}]}])
    with pytest.raises(ValueError, match=r"workflows\[0\].on_success: kind"):
        c.enqueue_workflows([{"jobs": [job], "on_success": {"kind": ""}}])
    with pytest.raises(ValueError, match="1 to 1000"):
        c.enqueue_workflows([{"jobs": [job]}] * 1001)


def test_enqueue_many_checks_before_sending():
    c = redrive.Client("http://127.0.0.1:9")  # nothing listens: nothing may be sent
    with pytest.raises(ValueError, match="unknown argument"):
        c.enqueue_many([{"kind": "a", "qeue": "x"}])
    with pytest.raises(ValueError, match="1 to 1000"):
        c.enqueue_many([])
    with pytest.raises(ValueError):
        c.get(0)


def test_worker_settings():
    assert default_name().startswith("py-")
    with pytest.raises(ValueError):
        redrive.Worker(name="has space")
    with pytest.raises(ValueError):
        redrive.Worker(concurrency=0)
    with pytest.raises(ValueError):
        redrive.Worker(queues=[])
    with pytest.raises(ValueError):
        redrive.Worker("ftp://x")
    w = redrive.Worker(name="py-1@box")

    @w.handler("a")
    def a(job):
        return None

    with pytest.raises(ValueError):
        w.register("a", a)
    assert w.host == "box"


def test_long_error_clipped():
    from redrive.worker import MAX_ERROR
    out = failure_outcome(redrive.Transient("\u00e9" * MAX_ERROR, cause="x" * (2 * MAX_ERROR)))
    assert len(out["error"].encode("utf-8")) <= MAX_ERROR and out["error"].endswith("(cut)")
    assert len(out["cause"].encode("utf-8")) <= MAX_ERROR


def test_lease_sent_again_lists_held_and_dropped_jobs():
    w = redrive.Worker("http://127.0.0.1:1", queues=["q"], concurrency=4, poll=1.0, handle_signals=False)
    w.register("k", lambda job: None)
    w._lease_secs = 2.0
    held = redrive.Job(w, {"id": 1, "lease": 3, "kind": "k"})
    w._held[held.key] = held
    with w._cv:
        w._drop((2, 1))
    w._dropped[(3, 1)] = 0.0  # dropped long ago: forgotten
    fresh = w._lease_body(4, "r1", False, 1000)
    assert fresh["request"] == "r1" and "resend" not in fresh and "held" not in fresh and fresh["max"] == 4
    again = w._lease_body(4, "r1", True, 2)
    assert again["resend"] is True and again["max"] == 2
    assert sorted((h["id"], h["lease"]) for h in again["held"]) == [(1, 3), (2, 1)]
    assert (3, 1) not in w._dropped
