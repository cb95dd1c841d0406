"""The enqueue client: jobs in, jobs read and canceled, over the REST API."""

from ._http import DEFAULT_MAX_ANSWER, Endpoint, ThreadConnections
from ._wire import format_duration, format_time

__all__ = ["Client"]

_FIELDS = ("queue", "priority", "idempotency_key", "run_at", "delay", "max_retries", "dependency", "not_reprocessable")


def enqueue_body(kind, payload=None, queue=None, priority=None, idempotency_key=None, run_at=None,
                 delay=None, max_retries=None, dependency=None, not_reprocessable=None):
    """The JSON body of one job to enqueue (docs/api.md, EnqueueRequest)."""
    if not isinstance(kind, str) or not kind:
        raise ValueError("kind: want a non-empty string")
    body = {"kind": kind}
    if payload is not None:
        body["payload"] = payload
    if queue is not None:
        body["queue"] = queue
    if priority is not None:
        body["priority"] = priority
    if idempotency_key is not None:
        body["idempotency_key"] = idempotency_key
    if run_at is not None and delay is not None:
        raise ValueError("run_at and delay: give one, not both")
    if run_at is not None:
        body["run_at"] = run_at if isinstance(run_at, str) else format_time(run_at)
    if delay is not None:
        body["delay"] = delay if isinstance(delay, str) else format_duration(delay)
    if max_retries is not None:
        body["max_retries"] = max_retries
    if dependency is not None:
        body["dependency"] = dependency
    if not_reprocessable:
        body["not_reprocessable"] = True
    return body


_WORKFLOW_KEYS = ("name", "idempotency_key", "on_dead", "jobs", "on_success", "on_complete", "on_death")


def _job_args(where, j, extra=()):
    """enqueue_body of a dict of enqueue's arguments (and the keys extra,
    left out), refusing an unknown argument; where names it in errors."""
    if not isinstance(j, dict):
        raise ValueError("%s: want a dict of enqueue's arguments" % where)
    unknown = set(j) - set(_FIELDS) - {"kind", "payload"} - set(extra)
    if unknown:
        raise ValueError("%s: unknown argument %s" % (where, ", ".join(sorted(unknown))))
    try:
        return enqueue_body(**{k: v for k, v in j.items() if k not in extra})
    except (TypeError, ValueError) as e:
        raise ValueError("%s: %s" % (where, e)) from None


def workflow_body(where, w):
    """The JSON body of one workflow to enqueue (docs/workflows.md): a dict
    with ``jobs`` (each a dict of enqueue's arguments plus ``name`` and
    ``after``), and optionally ``name``, ``idempotency_key``, ``on_dead``
    and the callbacks ``on_success``, ``on_complete``, ``on_death`` (dicts
    of enqueue's arguments)."""
    if not isinstance(w, dict):
        raise ValueError("%s: want a dict (jobs, name, on_dead, ...)" % where)
    unknown = set(w) - set(_WORKFLOW_KEYS)
    if unknown:
        raise ValueError("%s: unknown key %s" % (where, ", ".join(sorted(unknown))))
    jobs = w.get("jobs")
    if not isinstance(jobs, (list, tuple)) or not jobs:
        raise ValueError("%s.jobs: want a non-empty list of jobs" % where)
    body = {}
    for k in ("name", "idempotency_key", "on_dead"):
        if w.get(k) is not None:
            body[k] = w[k]
    body["jobs"] = []
    for i, j in enumerate(jobs):
        at = "%s.jobs[%d]" % (where, i)
        job = _job_args(at, j, extra=("name", "after"))
        if not isinstance(j.get("name"), str) or not j["name"]:
            raise ValueError("%s.name: want a non-empty string" % at)
        job["name"] = j["name"]
        after = j.get("after")
        if after is not None:
            if isinstance(after, str) or not all(isinstance(a, str) for a in after):
                raise ValueError("%s.after: want a list of job names" % at)
            job["after"] = list(after)
        body["jobs"].append(job)
    for k in ("on_success", "on_complete", "on_death"):
        if w.get(k) is not None:
            body[k] = _job_args("%s.%s" % (where, k), w[k])
    return body


class Client:
    """Enqueues, reads and cancels jobs through a redrive server's REST API.

    ``url`` is the server's base URL (``http://127.0.0.1:8080``), ``token``
    its bearer token (None on a loopback server without one). A Client may
    be shared by threads: each thread keeps its own kept-alive connection.
    Error answers raise ``redrive.APIError``; network failures ``OSError``;
    an answer longer than ``max_answer`` bytes (64 MiB by default)
    ``redrive.AnswerTooLarge``, unread.
    Jobs are answered as the API's JSON objects (dicts: ``id``, ``state``,
    ``attempt``, ``history``, ``progress``, ...).
    """

    def __init__(self, url="http://127.0.0.1:8080", token=None, *, timeout=30.0, max_answer=DEFAULT_MAX_ANSWER):
        self._conns = ThreadConnections(Endpoint(url, token, max_answer))
        self.timeout = timeout

    def _call(self, method, path, body=None, idempotent=None):
        return self._conns.get().call(method, path, body, timeout=self.timeout, idempotent=idempotent)

    def enqueue(self, kind, payload=None, *, queue=None, priority=None, idempotency_key=None, run_at=None,
                delay=None, max_retries=None, dependency=None, not_reprocessable=None):
        """Enqueues one job and answers it.

        ``run_at`` is a datetime (a naive one is UTC) or RFC 3339 text,
        ``delay`` seconds, a timedelta or a Go duration ("10s"): give one of
        them, or neither for now. A job answered with ``"existing": True``
        already held ``idempotency_key``.
        """
        body = enqueue_body(kind, payload, queue=queue, priority=priority, idempotency_key=idempotency_key,
                            run_at=run_at, delay=delay, max_retries=max_retries, dependency=dependency,
                            not_reprocessable=not_reprocessable)
        # Sent again after a cut connection only with a key: serve may have
        # stored the first copy, and a second without one is a second job.
        return self._call("POST", "/v1/jobs", body, idempotent="idempotency_key" in body)

    def enqueue_many(self, jobs):
        """Enqueues 1 to 1000 jobs atomically (``POST /v1/jobs/batch``).

        Each job is a dict of ``enqueue``'s arguments (``kind``, ``payload``,
        ``queue``, ...). Answers the jobs in order.
        """
        bodies = []
        for i, j in enumerate(jobs):
            if not isinstance(j, dict):
                raise ValueError("jobs[%d]: want a dict of enqueue's arguments" % i)
            unknown = set(j) - set(_FIELDS) - {"kind", "payload"}
            if unknown:
                raise ValueError("jobs[%d]: unknown argument %s" % (i, ", ".join(sorted(unknown))))
            bodies.append(enqueue_body(**j))
        if not 1 <= len(bodies) <= 1000:
            raise ValueError("jobs: want 1 to 1000 jobs, got %d" % len(bodies))
        keyed = all("idempotency_key" in b for b in bodies)
        return self._call("POST", "/v1/jobs/batch", {"jobs": bodies}, idempotent=keyed)["jobs"]

    def enqueue_workflows(self, workflows):
        """Enqueues 1 to 1000 workflows atomically, in one transaction
        (``POST /v1/workflows/batch``; their jobs together at most 10,000).

        Each workflow is a dict: ``jobs``, each a dict of ``enqueue``'s
        arguments with its ``name`` (unique in the workflow) and ``after``
        (the names of the jobs it waits for); optionally ``name``,
        ``idempotency_key``, ``on_dead`` (``"wait"``, ``"cancel"`` or
        ``"run"``) and the callbacks ``on_success``, ``on_complete`` and
        ``on_death`` (dicts of ``enqueue``'s arguments). Answers the
        workflows in order, each with its jobs; one whose
        ``idempotency_key`` another held (or an earlier one of the call)
        is that workflow, with ``"existing": True``. A refusal names the
        workflow's field (``workflows[2].jobs[0].kind``) and stores nothing.
        """
        if isinstance(workflows, dict):
            raise ValueError("workflows: want a list of workflows")
        bodies = [workflow_body("workflows[%d]" % i, w) for i, w in enumerate(workflows)]
        if not 1 <= len(bodies) <= 1000:
            raise ValueError("workflows: want 1 to 1000 workflows, got %d" % len(bodies))
        # Sent again after a cut connection only when every workflow has a
        # key: a second copy of one without would be a second workflow.
        keyed = all("idempotency_key" in b for b in bodies)
        return self._call("POST", "/v1/workflows/batch", {"workflows": bodies}, idempotent=keyed)["workflows"]

    def get(self, job_id):
        """The job with its history (``GET /v1/jobs/{id}``); a completed job
        has under ``"result"`` what its handler returned, if anything (masked
        like the payload: fields named like secrets show ``"•••"``)."""
        return self._call("GET", "/v1/jobs/%d" % _job_id(job_id))

    def cancel(self, job_id):
        """Cancels a job (``POST /v1/jobs/{id}/cancel``): a waiting one at
        once; a running one gets ``cancel_requested`` and its worker is asked
        to stop it. Answers the job."""
        return self._call("POST", "/v1/jobs/%d/cancel" % _job_id(job_id))

    def close(self):
        """Closes the kept-alive connections."""
        self._conns.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _job_id(job_id):
    if isinstance(job_id, bool) or not isinstance(job_id, int) or job_id < 1:
        raise ValueError("job id %r: want a positive integer" % (job_id,))
    return job_id

