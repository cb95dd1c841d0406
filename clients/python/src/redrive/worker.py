"""The worker: runs handlers for jobs leased from a redrive server.

Concurrency is threads: handlers are usually blocking I/O code (HTTP
calls, database queries, subprocesses), which threads run side by side
while the GIL is released. An asyncio program runs its event loop in a
thread of its own and has handlers submit coroutines to it
(``asyncio.run_coroutine_threadsafe(coro, loop).result()``).
"""

import datetime as _dt
import http.client
import json
import logging
import os
import queue as _queue
import re
import secrets
import signal
import socket
import threading
import time
import traceback

from ._http import DEFAULT_MAX_ANSWER, Aborted, AnswerTooLarge, Connection, Endpoint, MalformedAnswer
from ._wire import format_duration, parse_duration, parse_time
from .client import Client
from .errors import APIError, JobError, RateLimited, Snooze

__all__ = ["Worker", "Job", "MAX_RESULT"]

log = logging.getLogger("redrive")

#: Largest JSON encoding of a handler's result, in bytes (the server's bound).
MAX_RESULT = 64 << 10

_NAME = re.compile(r"[A-Za-z0-9._:@-]{1,100}\Z")


def default_name(prefix="py"):
    """``<prefix>-<pid>@<hostname>``, the characters a worker name may not
    hold replaced by ``-``, cut to 100 characters."""
    host = re.sub(r"[^A-Za-z0-9._:-]", "-", socket.gethostname() or "localhost")
    return ("%s-%d@%s" % (prefix, os.getpid(), host))[:100]


class Job:
    """A job handed to a handler, for one attempt.

    ``payload`` is the job's payload as enqueued; ``attempt`` counts from
    1; ``deadline`` (a datetime, or None) is when the attempt must end, on
    serve's clock (the worker times it from the lease's start, whatever
    the skew between serve's clock and this machine's).
    ``cancel_event`` is set when the handler should stop: a user canceled
    the job (``canceled``), it is no longer this worker's (``lease_lost``),
    its deadline passed, or the worker is shutting down and its grace
    period ended (``stop_reason`` says which). A long handler checks it
    (``job.cancel_event.is_set()``, or waits on it instead of sleeping).
    """

    def __init__(self, worker, raw):
        self._worker = worker
        self.raw = raw
        self.id = raw["id"]
        self.lease = raw["lease"]
        self.queue = raw.get("queue")
        self.kind = raw.get("kind")
        self.payload = raw.get("payload")
        self.attempt = raw.get("attempt", 1)
        self.max_retries = raw.get("max_retries")
        self.priority = raw.get("priority", 0)
        self.trace = raw.get("trace")
        self.lease_until = _time_or_none(raw.get("lease_until"))
        self.deadline = _time_or_none(raw.get("deadline"))
        self.enqueued_at = _time_or_none(raw.get("enqueued_at"))
        self.cancel_event = threading.Event()
        self.stop_reason = None
        self._progress = None
        self._progress_sent = None
        self._done = False  # the handler returned (its outcome is queued or dropped)
        self._released = False
        # When the lease ends unrenewed, on this process's monotonic clock
        # (serve's lease_until is on its clock, which may be skewed).
        self._expires = None
        # When the deadline passes, on the monotonic clock (see _local_deadline).
        self._deadline_at = None

    @property
    def key(self):
        return (self.id, self.lease)

    @property
    def canceled(self):
        """True once a user canceled the job while it ran."""
        return self.stop_reason == "canceled"

    @property
    def lease_lost(self):
        """True once the job is no longer this worker's: its outcome would be
        refused."""
        return self.stop_reason == "lease_lost"

    @property
    def worker(self):
        """The name of the worker running the job."""
        return self._worker.name

    def progress(self, done, total=0):
        """Records how far the handler is (``done`` of ``total`` units, 0 for
        unknown): sent with the next heartbeat, within about a second."""
        if isinstance(done, bool) or isinstance(total, bool) or not isinstance(done, int) or not isinstance(total, int):
            raise ValueError("progress: want whole numbers, got %r of %r" % (done, total))
        if done < 0 or total < 0:
            raise ValueError("progress: want non-negative numbers, got %d of %d" % (done, total))
        self._progress = (done, total)
        self._worker._progress_changed()

    def _stop(self, reason):
        if self.stop_reason is None:
            self.stop_reason = reason
        self.cancel_event.set()

    def __repr__(self):
        return "<redrive.Job %d lease %d %s>" % (self.id, self.lease, self.kind)


def _local_deadline(job, received, lease_secs):
    """The job's deadline on the monotonic clock, the answer having arrived
    at received: its distance from the lease's start, both on serve's clock
    (which may be skewed from this machine's); without lease_until, from
    this machine's clock."""
    if job.deadline is None:
        return None
    if job.lease_until is not None:
        return received + (job.deadline - job.lease_until).total_seconds() + lease_secs
    return received + (job.deadline - _dt.datetime.now(_dt.timezone.utc)).total_seconds()


def _time_or_none(v):
    if not v:
        return None
    try:
        return parse_time(v)
    except ValueError:
        return None


class _Stopping(Exception):
    pass


class Worker:
    """Leases jobs of ``queues`` from a redrive server and runs their handlers.

    ``concurrency`` handlers run at once, each in a thread; the worker
    leases at most as many jobs as it has free slots, long-polling up to
    ``poll`` seconds when none is due. Heartbeats, the cancellations'
    long-poll and the outcomes run in background threads; outcomes
    reported together travel in one request.

    A handler is a function of a ``Job``; what it returns (JSON-able, at
    most MAX_RESULT bytes encoded) is the job's result. What it raises
    decides what happens next: ``Permanent``, ``NeedsAuth``,
    ``RateLimited(retry_after=...)``, ``Transient``, ``Unknown`` name the
    failure class, ``Snooze(delay)`` runs it again later without using an
    attempt, and any other exception is reported as ``transient`` (retried
    on the queue's policy). The server applies the queue's policy,
    breakers and DLQ exactly as for a Go handler.

    ``run()`` blocks until the worker stops: on SIGTERM or SIGINT (when run
    in the main thread) or ``stop()``, it stops leasing, lets running
    handlers finish for up to ``grace`` seconds, hands the others back to
    the server untried (their ``cancel_event`` set), sends the outcomes
    and tells the server it stopped. A second signal hands back at once.

    A lease call whose answer is lost (its connection cut, a timeout, a
    proxy's 5xx) is sent again with its request id and the jobs the
    worker holds: the server answers the jobs it leased for the lost
    answer, rather than leave them to their leases' expiry. An answer
    longer than ``max_answer`` bytes (64 MiB by default) is not read
    (``AnswerTooLarge``): a lease answer that is is sent again for fewer
    jobs.
    """

    def __init__(self, url="http://127.0.0.1:8080", token=None, *, queues=("default",), concurrency=8,
                 name=None, poll=30.0, grace=25.0, max_batch=1000, handle_signals=True,
                 max_answer=DEFAULT_MAX_ANSWER):
        if isinstance(queues, str):
            queues = [queues]
        queues = list(queues)
        if not queues:
            raise ValueError("queues: want at least one queue")
        if not isinstance(concurrency, int) or isinstance(concurrency, bool) or concurrency < 1:
            raise ValueError("concurrency %r: want a whole number of at least 1" % (concurrency,))
        if name is None:
            name = default_name()
        if not _NAME.match(name):
            raise ValueError("name %r: want 1 to 100 characters of A-Z a-z 0-9 . _ : @ -" % (name,))
        if not 0 < poll <= 60:
            raise ValueError("poll %r: want more than 0 and at most 60 seconds" % (poll,))
        if not 1 <= max_batch <= 1000:
            raise ValueError("max_batch %r: want 1 to 1000" % (max_batch,))
        self._ep = Endpoint(url, token, max_answer)
        self.client = Client(url, token, max_answer=max_answer)
        self.name = name
        self.queues = queues
        self.concurrency = concurrency
        self.poll = poll
        self.grace = grace
        self.max_batch = max_batch
        self.handle_signals = handle_signals
        self.host = name.split("@", 1)[1] if "@" in name else socket.gethostname()
        self._handlers = {}
        self._dependencies = {}
        self._timeouts = {}

        self._cv = threading.Condition()
        self._running = {}  # key -> Job, handler running
        self._held = {}  # key -> Job, handler running or outcome not yet acknowledged
        # key -> when dropped: jobs whose handlers ended with no outcome
        # sent (lease lost, handed back at shutdown), listed as held by a
        # lease sent again for two leases' time, so that the server does
        # not answer them again.
        self._dropped = {}
        self._outcomes = []  # (job, outcome dict) waiting to be sent
        self._stop_requested = threading.Event()
        self._hurry = False
        self._senders_done = threading.Event()  # outcomes flushed: background threads end
        self._progress_wake = threading.Event()
        self._heartbeat_every = 10.0
        self._lease_secs = 30.0  # the lease answer's "lease"
        self._fatal = None
        # Whether lease calls carry their request id (an older serve
        # refuses the field: then they do not, and are not sent again).
        self._lease_ids = True
        self._lease_conn = None
        self._cancels_conn = None
        self._started = False

    # -- handlers --

    def handler(self, kind, dependency=None, timeout=None):
        """Decorator registering a function as the handler of ``kind``;
        ``dependency`` names the circuit breaker its jobs call (a job's own
        dependency wins); ``timeout`` (seconds or a timedelta) bounds each
        attempt, as Go's ``redrive.Timeout``: serve hands the job out with
        its ``deadline``, at which ``job.cancel_event`` is set."""

        def register(fn):
            self.register(kind, fn, dependency=dependency, timeout=timeout)
            return fn

        return register

    def register(self, kind, fn, dependency=None, timeout=None):
        """Registers ``fn`` as the handler of ``kind`` (see handler)."""
        if self._started:
            raise RuntimeError("register %r: the worker is already running" % (kind,))
        if not isinstance(kind, str) or not kind:
            raise ValueError("kind: want a non-empty string")
        if kind in self._handlers:
            raise ValueError("kind %r: a handler is already registered" % (kind,))
        if timeout is not None:
            self._timeouts[kind] = format_duration(timeout)
        self._handlers[kind] = fn
        if dependency is not None:
            self._dependencies[kind] = dependency

    # -- running --

    def stop(self, hurry=False):
        """Asks the worker to stop (from any thread, or a signal handler):
        gracefully, or at once with ``hurry`` (running jobs handed back)."""
        if hurry or self._stop_requested.is_set():
            self._hurry = True
        self._stop_requested.set()
        conn = self._lease_conn
        if conn is not None:
            conn.abort()
        with self._cv:
            self._cv.notify_all()

    def run(self):
        """Runs until stopped (see the class); raises the APIError that
        stopped it, if the server refused the worker (a bad token, a role
        other than worker or admin, bad settings)."""
        if not self._handlers:
            raise RuntimeError("no handler registered")
        if self._started:
            raise RuntimeError("a Worker runs once")
        self._started = True
        restore = self._install_signals()
        pool = _queue.Queue()
        threads = [threading.Thread(target=self._handler_loop, args=(pool,), name="redrive-handler-%d" % i, daemon=True)
                   for i in range(self.concurrency)]
        lease = threading.Thread(target=self._lease_loop, args=(pool,), name="redrive-lease", daemon=True)
        background = [
            threading.Thread(target=self._heartbeat_loop, name="redrive-heartbeat", daemon=True),
            threading.Thread(target=self._cancels_loop, name="redrive-cancels", daemon=True),
            threading.Thread(target=self._outcomes_loop, name="redrive-outcomes", daemon=True),
        ]
        try:
            for t in threads + background + [lease]:
                t.start()
            while not self._stop_requested.wait(1.0):
                pass
            log.info("redrive worker %s: stopping", self.name)
            lease.join()
            self._finish_running()
            self._senders_done.set()
            self._progress_wake.set()
            if self._cancels_conn is not None:
                self._cancels_conn.abort()
            with self._cv:
                self._cv.notify_all()
            for t in background:
                t.join(timeout=30)
            for _ in threads:
                pool.put(None)
            try:
                Connection(self._ep, idempotent=True).call("POST", "/v1/worker/stop", {"worker": self.name}, timeout=10)
            except (APIError, OSError) as e:
                log.warning("redrive worker %s: stop: %s", self.name, e)
            log.info("redrive worker %s: stopped", self.name)
        finally:
            restore()
            self.client.close()
        if self._fatal is not None:
            raise self._fatal

    def _install_signals(self):
        if not self.handle_signals or threading.current_thread() is not threading.main_thread():
            return lambda: None
        previous = {}

        def on_signal(signum, frame):
            log.info("redrive worker %s: %s", self.name, signal.Signals(signum).name)
            self.stop()

        for s in (signal.SIGTERM, signal.SIGINT):
            previous[s] = signal.signal(s, on_signal)

        def restore():
            for s, h in previous.items():
                signal.signal(s, h)

        return restore

    def _finish_running(self):
        """Waits up to the grace period for running handlers, then hands the
        others back (release outcomes)."""
        end = time.monotonic() + self.grace
        with self._cv:
            while self._running and not self._hurry:
                left = end - time.monotonic()
                if left <= 0:
                    break
                self._cv.wait(min(left, 0.5))
            for job in list(self._running.values()):
                job._released = True
                job._stop("shutdown")
                self._outcomes.append((job, {"outcome": "release"}))
                log.info("redrive worker %s: job %d handed back", self.name, job.id)
            self._cv.notify_all()

    def _drop(self, key):
        """Records key dropped without an outcome (under _cv), forgetting
        those dropped more than two leases ago."""
        now = time.monotonic()
        for k, at in list(self._dropped.items()):
            if now - at > 2 * self._lease_secs + self.poll:
                del self._dropped[k]
        self._dropped[key] = now

    def _lease_body(self, free, request, resend, cap):
        body = {"worker": self.name, "pid": os.getpid(), "host": self.host, "queues": self.queues,
                "kinds": sorted(self._handlers), "max": max(1, min(free, self.max_batch, cap)),
                "wait": format_duration(self.poll)}
        if not self._lease_ids:
            return self._lease_extras(body)
        body["request"] = request
        if resend:
            # The jobs this worker knows it holds: the server answers
            # those it holds in the store but not among them, leased for
            # the answer lost.
            body["resend"] = True
            now = time.monotonic()
            with self._cv:
                for key, at in list(self._dropped.items()):
                    if now - at > 2 * self._lease_secs + self.poll:
                        del self._dropped[key]
                keys = list(self._held) + [k for k in self._dropped if k not in self._held]
            body["held"] = [{"id": i, "lease": lease} for i, lease in keys]
        return self._lease_extras(body)

    def _lease_extras(self, body):
        if self._dependencies:
            body["dependencies"] = dict(self._dependencies)
        if self._timeouts:
            body["timeouts"] = dict(self._timeouts)
        return body

    def _lease_loop(self, pool):
        # The worker's other connections send a cut request again
        # (idempotent): a heartbeat, a cancels poll and a stop change
        # nothing the first copy did not, and a second outcome is refused
        # by its lease token. A lease call is not sent again as it was: a
        # copy of one whose answer was lost after serve leased its jobs
        # would lease others. This loop sends it again itself, marked as
        # such (see _lease_body).
        conn = Connection(self._ep, idempotent=False)
        self._lease_conn = conn
        if self._stop_requested.is_set():
            conn.abort()
        backoff = _Backoff()
        request = None  # the id of the call whose answer was lost, to send again
        cap = self.max_batch  # lowered while lease answers are too large to read
        try:
            while not self._stop_requested.is_set():
                with self._cv:
                    # A free slot, and at most a batch of outcomes not yet
                    # sent: when the server is slow to take outcomes,
                    # leasing waits for it rather than pile them up.
                    while ((len(self._running) >= self.concurrency or len(self._held) - len(self._running) >= 1000)
                           and not self._stop_requested.is_set()):
                        self._cv.wait()
                    free = self.concurrency - len(self._running)
                if self._stop_requested.is_set():
                    break
                resend = request is not None
                if not resend:
                    request = secrets.token_hex(12)
                try:
                    answer = conn.call_object("POST", "/v1/worker/lease", self._lease_body(free, request, resend, cap),
                                              timeout=self.poll + 30)
                except Aborted:
                    break
                except APIError as e:
                    if e.status == 400 and e.code == "unknown_field" and e.field in ("request", "resend", "held") and self._lease_ids:
                        # A serve older than lease request ids: lease
                        # without them (a cut lease's jobs then wait for
                        # their leases' expiry, as they did).
                        log.warning("redrive worker %s: this server does not take lease request ids: "
                                    "a lease answer lost leaves its jobs to their leases' expiry", self.name)
                        self._lease_ids = False
                        request = None
                        continue
                    if e.status in (400, 401, 403, 404, 405, 415):
                        log.error("redrive worker %s: lease refused: %s", self.name, e)
                        self._fatal = e
                        self.stop(hurry=True)
                        break
                    # Sent again: a proxy's 502 may hide serve's answer.
                    log.warning("redrive worker %s: lease: %s", self.name, e)
                    backoff.wait(self._stop_requested)
                    continue
                except (OSError, ValueError, http.client.HTTPException) as e:
                    if isinstance(e, AnswerTooLarge):
                        cap = max(1, min(cap, free) // 2)
                    log.warning("redrive worker %s: lease: %s (sent again)", self.name, e)
                    if backoff.attempts > 0:
                        backoff.wait(self._stop_requested)
                    else:
                        # The first failure is sent again at once: most
                        # often a kept connection serve had closed.
                        backoff.attempts += 1
                    continue
                request = None
                cap = min(self.max_batch, cap * 2)
                received = time.monotonic()
                backoff.reset()
                self._took_settings(answer)
                raws = answer.get("jobs") or []
                if raws:
                    # A job leased again: an earlier lease of it here was
                    # lost unnoticed (no heartbeat between its end and the
                    # job's rescue). That handler's attempt is over; tell
                    # it before the new one starts.
                    fresh = {raw.get("id"): raw.get("lease") for raw in raws}
                    with self._cv:
                        for old in self._held.values():
                            if old.id in fresh and old.lease != fresh[old.id] and not old._done:
                                old._stop("lease_lost")
                for raw in raws:
                    job = Job(self, raw)
                    job._expires = received + self._lease_secs
                    job._deadline_at = _local_deadline(job, received, self._lease_secs)
                    with self._cv:
                        self._held[job.key] = job
                        if self._stop_requested.is_set():
                            # Leased while stopping: hand it back untried.
                            job._released = True
                            self._outcomes.append((job, {"outcome": "release"}))
                            self._cv.notify_all()
                            continue
                        self._running[job.key] = job
                        self._cv.notify_all()
                    pool.put(job)
        finally:
            conn.close()

    def _took_settings(self, answer):
        lease = answer.get("lease")
        if lease:
            try:
                secs = parse_duration(lease)
            except ValueError:
                secs = 0
            if secs > 0:
                self._lease_secs = secs
        every = answer.get("heartbeat_every")
        if every:
            try:
                secs = parse_duration(every)
            except ValueError:
                return
            if secs > 0 and secs != self._heartbeat_every:
                self._heartbeat_every = secs
                self._progress_wake.set()

    def _handler_loop(self, pool):
        while True:
            job = pool.get()
            if job is None:
                return
            self._run_job(job)

    def _run_job(self, job):
        fn = self._handlers.get(job.kind)
        started = time.monotonic()
        try:
            if fn is None:
                raise _NoHandler("no handler registered for kind %r" % (job.kind,))
            result = fn(job)
            outcome = {"outcome": "complete"}
            if result is not None:
                try:
                    encoded = json.dumps(result, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
                except (TypeError, ValueError) as e:
                    raise _BadResult("result is not JSON: %s" % e) from None
                if len(encoded.encode("utf-8")) > MAX_RESULT:
                    raise _BadResult("result too large: %d bytes (at most %d)" % (len(encoded.encode("utf-8")), MAX_RESULT))
                outcome["result"] = result
        except Snooze as s:
            outcome = {"outcome": "snooze", "delay": s.delay}
        except BaseException as e:  # noqa: B902 - a handler's SystemExit is its failure too
            outcome = failure_outcome(e)
        log.debug("redrive worker %s: job %d %s in %.3fs", self.name, job.id, outcome["outcome"],
                  time.monotonic() - started)
        with self._cv:
            job._done = True
            self._running.pop(job.key, None)
            if job._released or job.lease_lost:
                # Handed back at shutdown, or no longer ours: the server
                # would refuse the outcome.
                self._held.pop(job.key, None)
                self._drop(job.key)
            else:
                self._outcomes.append((job, outcome))
            self._cv.notify_all()

    def _outcomes_loop(self):
        conn = Connection(self._ep, idempotent=True)
        backoff = _Backoff()
        try:
            while True:
                with self._cv:
                    while not self._outcomes and not self._senders_done.is_set():
                        self._cv.wait()
                    if not self._outcomes:
                        return
                    batch = self._outcomes[:1000]
                    del self._outcomes[:1000]
                try:
                    self._send_outcomes(conn, batch)
                    backoff.reset()
                except (OSError, Aborted, http.client.HTTPException) as e:
                    log.warning("redrive worker %s: outcomes: %s", self.name, e)
                    with self._cv:
                        self._outcomes[:0] = batch
                    if self._senders_done.is_set() and backoff.attempts >= 3:
                        log.error("redrive worker %s: %d outcomes not sent: the jobs are rescued at lease expiry",
                                  self.name, len(self._outcomes))
                        return
                    backoff.wait(None)
                except APIError as e:
                    if e.status >= 500 or e.status == 429:
                        with self._cv:
                            self._outcomes[:0] = batch
                        backoff.wait(None)
                        continue
                    # The whole batch was refused: send them one by one,
                    # so that one bad outcome does not hold the others;
                    # those the server could not take now wait for the
                    # next round.
                    log.warning("redrive worker %s: outcomes refused (%s): sending them one by one", self.name, e)
                    for k, (job, outcome) in enumerate(batch):
                        if not self._send_one(conn, job, outcome):
                            with self._cv:
                                self._outcomes[:0] = batch[k:]
                            if self._senders_done.is_set() and backoff.attempts >= 3:
                                log.error("redrive worker %s: %d outcomes not sent: the jobs are rescued at lease expiry",
                                          self.name, len(self._outcomes))
                                return
                            backoff.wait(None)
                            break
        finally:
            conn.close()

    def _item(self, job, outcome):
        item = {"id": job.id, "lease": job.lease}
        item.update(outcome)
        return item

    def _send_outcomes(self, conn, batch):
        # A completed job keeps its final progress: send what the
        # heartbeats have not carried yet before the outcomes.
        unsent = [j for j, o in batch if o["outcome"] == "complete" and j._progress is not None
                  and j._progress != j._progress_sent]
        if unsent:
            try:
                self._heartbeat(conn, unsent)
            except APIError as e:
                log.warning("redrive worker %s: final progress: %s", self.name, e)
        answer = conn.call_object("POST", "/v1/worker/outcomes",
                                  {"worker": self.name, "outcomes": [self._item(j, o) for j, o in batch]}, timeout=60)
        entries = answer.get("outcomes")
        if (not isinstance(entries, list) or len(entries) != len(batch)
                or not all(isinstance(e, dict) and isinstance(e.get("status"), int) for e in entries)):
            # Not the server's answer: the outcomes may not have reached
            # it. Sent again: one that had is refused as lease lost.
            raise MalformedAnswer("outcomes: the answer does not give the %d outcomes' status: %.200r" % (len(batch), answer))
        for (job, outcome), entry in zip(batch, entries):
            self._acknowledged(job, outcome, entry["status"], entry.get("error"))

    def _send_one(self, conn, job, outcome, refused_before=False):
        """Sends one outcome alone; answers False when the server could not
        take it now (5xx, 429, the network: send it again later), True
        once it is settled (applied, or refused for good)."""
        body = {"worker": self.name}
        body.update(self._item(job, outcome))
        del body["id"]
        try:
            conn.call("POST", "/v1/worker/jobs/%d/outcome" % job.id, body, timeout=60)
            status, err = 200, None
        except APIError as e:
            if e.status >= 500 or e.status == 429:
                log.warning("redrive worker %s: job %d: outcome: %s", self.name, job.id, e)
                return False
            if e.status in (400, 413) and not refused_before:
                # The server refused what the handler reported (a reason
                # that is no name, a Retry-After beyond its bound, a
                # result beyond its body bound): report a plain failure
                # saying so rather than leave the job to its lease's
                # expiry.
                log.error("redrive worker %s: job %d: outcome refused: %s", self.name, job.id, e)
                return self._send_one(conn, job, refused_outcome(outcome, e), refused_before=True)
            status, err = e.status, {"code": e.code, "message": e.message, "field": e.field}
        except (OSError, Aborted, http.client.HTTPException) as e:
            log.warning("redrive worker %s: job %d: outcome: %s", self.name, job.id, e)
            return False
        self._acknowledged(job, outcome, status, err)
        return True

    def _acknowledged(self, job, outcome, status, err):
        if status == 409:
            log.warning("redrive worker %s: job %d: outcome %s refused: lease lost", self.name, job.id, outcome["outcome"])
        elif status != 200:
            log.error("redrive worker %s: job %d: outcome %s refused: %s %s", self.name, job.id,
                      outcome["outcome"], status, err)
        with self._cv:
            self._held.pop(job.key, None)
            self._cv.notify_all()

    def _progress_changed(self):
        self._progress_wake.set()

    def _heartbeat_loop(self):
        conn = Connection(self._ep, idempotent=True)
        last_beat = 0.0
        last_progress = 0.0
        try:
            while not self._senders_done.is_set():
                now = time.monotonic()
                next_beat = last_beat + self._heartbeat_every
                with self._cv:
                    jobs = list(self._held.values())
                dirty = [j for j in jobs if j._progress is not None and j._progress != j._progress_sent and not j._done]
                self._stop_past_deadlines(jobs)
                self._stop_past_leases(jobs)
                due = now >= next_beat or (dirty and now >= last_progress + 1.0)
                if not due:
                    wait = next_beat - now
                    if dirty:
                        wait = min(wait, last_progress + 1.0 - now)
                    ends = [t for j in jobs if not j._done and not j.cancel_event.is_set()
                            for t in (j._expires, j._deadline_at) if t is not None]
                    if ends:
                        wait = min(wait, min(ends) - now)
                    if self._progress_wake.wait(max(wait, 0.01)):
                        self._progress_wake.clear()
                    continue
                last_beat = now
                if dirty:
                    last_progress = now
                try:
                    self._heartbeat(conn, jobs)
                except (OSError, Aborted, APIError, http.client.HTTPException) as e:
                    log.warning("redrive worker %s: heartbeat: %s", self.name, e)
        finally:
            conn.close()

    def _heartbeat(self, conn, jobs):
        items = []
        for j in jobs:
            item = {"id": j.id, "lease": j.lease}
            p = j._progress
            if p is not None and p != j._progress_sent:
                item["progress"] = {"done": p[0], "total": p[1]}
            items.append((j, p, item))
        by_key = {}
        sent = time.monotonic()
        for i in range(0, max(len(items), 1), 1000):  # the server's bound per heartbeat
            answer = conn.call_object("POST", "/v1/worker/heartbeat",
                               {"worker": self.name, "jobs": [it for _, _, it in items[i:i + 1000]]}, timeout=30)
            for e in (answer or {}).get("jobs") or []:
                by_key[(e.get("id"), e.get("lease"))] = e
        for j, p, item in items:
            if "progress" in item:
                j._progress_sent = p
            e = by_key.get(j.key)
            if e is None:
                continue
            if e.get("held"):
                # Extended from serve's now, after sent: a bound on the
                # lease's end that is never late.
                j._expires = sent + self._lease_secs
                until = _time_or_none(e.get("lease_until"))
                if until is not None:
                    j.lease_until = until
            if e.get("canceled"):
                j._stop("canceled")
            elif e.get("held") is False:
                j._stop("lease_lost")

    def _stop_past_deadlines(self, jobs):
        now = time.monotonic()
        for j in jobs:
            if j._deadline_at is not None and not j.cancel_event.is_set() and now >= j._deadline_at:
                j._stop("deadline")

    def _stop_past_leases(self, jobs):
        """Stops the handlers whose leases ran out unrenewed (the heartbeats
        failing): serve may have rescued their jobs for another worker."""
        now = time.monotonic()
        for j in jobs:
            if j._expires is not None and not j._done and not j._released and not j.cancel_event.is_set():
                if now >= j._expires:
                    log.warning("redrive worker %s: job %d: its lease ran out unrenewed: stopped", self.name, j.id)
                    j._stop("lease_lost")

    def _cancels_loop(self):
        conn = Connection(self._ep, idempotent=True)
        self._cancels_conn = conn
        if self._senders_done.is_set():
            conn.abort()
        backoff = _Backoff()
        try:
            while True:
                with self._cv:
                    while not self._running and not self._senders_done.is_set():
                        self._cv.wait()
                if self._senders_done.is_set():
                    return
                try:
                    answer = conn.call_object("POST", "/v1/worker/cancels", {"worker": self.name, "wait": "20s"}, timeout=50)
                except Aborted:
                    return
                except (OSError, APIError, http.client.HTTPException) as e:
                    log.warning("redrive worker %s: cancels: %s", self.name, e)
                    backoff.wait(self._senders_done)
                    continue
                backoff.reset()
                fresh = False
                with self._cv:
                    for c in (answer or {}).get("canceled") or []:
                        job = self._held.get((c.get("id"), c.get("lease")))
                        if job is not None and not job.cancel_event.is_set():
                            job._stop("canceled")
                            fresh = True
                if (answer or {}).get("canceled") and not fresh:
                    # The server answers a cancellation at every call until
                    # its job ends: when all were passed on already (their
                    # handlers still running), pause before asking again
                    # rather than spin. A new one waits at most this long.
                    self._senders_done.wait(0.25)
        finally:
            conn.close()


class _NoHandler(Exception):
    pass


class _BadResult(Exception):
    pass


def failure_outcome(e):
    """The fail outcome reporting exception ``e`` (see Worker)."""
    if isinstance(e, JobError):
        cls = e.failure_class
        message = str(e) or type(e).__name__
    elif isinstance(e, (_NoHandler, _BadResult)):
        cls = "permanent"
        message = str(e)
    else:
        cls = "transient"
        message = "%s: %s" % (type(e).__name__, e) if str(e) else type(e).__name__
    out = {"outcome": "fail", "class": cls, "error": clip(message)}
    if isinstance(e, JobError):
        if e.reason:
            out["reason"] = e.reason
        if e.dependency:
            out["dependency"] = e.dependency
        if e.cause:
            out["cause"] = clip(str(e.cause))
        if isinstance(e, RateLimited) and e.retry_after:
            out["retry_after"] = e.retry_after
    if "cause" not in out:
        inner = e.__cause__ or (None if e.__suppress_context__ else e.__context__)
        if inner is not None:
            out["cause"] = clip("".join(traceback.format_exception_only(type(inner), inner)).strip())
    return out


#: The server's bound on a failure's error and cause, in bytes.
MAX_ERROR = 64 << 10


def clip(text, limit=MAX_ERROR):
    """text cut to at most limit bytes of UTF-8, marked when cut."""
    b = text.encode("utf-8")
    if len(b) <= limit:
        return text
    return b[:limit - 20].decode("utf-8", "ignore") + " ... (cut)"


def refused_outcome(outcome, err):
    """A plain fail reporting that the server refused outcome (err)."""
    if outcome["outcome"] == "fail":
        cls, what = outcome.get("class", "transient"), outcome.get("error", "")
    elif outcome["outcome"] == "complete":
        cls, what = "permanent", "completed"
    else:
        cls, what = "transient", outcome["outcome"]
    return {"outcome": "fail", "class": cls,
            "error": clip("%s; the worker's outcome was refused: %s" % (what, err))}


class _Backoff:
    """1 s doubling to 30 s between attempts after a failure."""

    def __init__(self):
        self.attempts = 0

    def reset(self):
        self.attempts = 0

    def wait(self, event):
        delay = min(30.0, 1.0 * (2 ** self.attempts))
        self.attempts += 1
        if event is None:
            time.sleep(delay)  # nothing to wake on: the server is away
        else:
            event.wait(delay)

