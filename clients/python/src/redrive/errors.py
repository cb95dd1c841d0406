"""Exceptions: those a handler raises to classify a failure, and the API's."""

from ._wire import format_duration

__all__ = [
    "JobError",
    "Permanent",
    "NeedsAuth",
    "RateLimited",
    "Transient",
    "Unknown",
    "Snooze",
    "APIError",
    "LeaseLost",
]


class JobError(Exception):
    """Base of the failures a handler raises to tell redrive their class.

    ``reason`` is a short machine-readable word kept in the job's history
    (``http_429``, ``quota``), ``dependency`` the circuit breaker the
    attempt called when it is not the handler's own, ``cause`` a longer
    text kept beside the error. Any other exception a handler raises is
    reported as ``transient`` (see ``Transient``).
    """

    #: The failure class sent to the server.
    failure_class = "unknown"

    def __init__(self, message="", *, reason=None, dependency=None, cause=None):
        super().__init__(message)
        self.reason = reason
        self.dependency = dependency
        self.cause = cause


class Permanent(JobError):
    """Retrying cannot help (bad input, a 404): the job goes to the DLQ now."""

    failure_class = "permanent"


class NeedsAuth(JobError):
    """Credentials are missing or refused: dead at once, as needs_auth, so an
    operator can fix them and redrive the job."""

    failure_class = "needs_auth"


class Transient(JobError):
    """A passing failure (a timeout, a 503): retried on the policy's
    schedule. Any exception that is not a JobError counts as one."""

    failure_class = "transient"


class Unknown(JobError):
    """A failure of unknown nature: retried like a transient one, but shown as
    unknown so it stands out when grouping the DLQ by class."""

    failure_class = "unknown"


class RateLimited(JobError):
    """The callee said to slow down: retried no sooner than ``retry_after``
    (seconds, a timedelta or a Go duration string) when given, and not
    counted against the breaker unless the server is told to."""

    failure_class = "rate_limited"

    def __init__(self, message="", *, retry_after=None, reason=None, dependency=None, cause=None):
        super().__init__(message, reason=reason, dependency=dependency, cause=cause)
        if retry_after is not None and not isinstance(retry_after, str):
            retry_after = format_duration(retry_after)
        self.retry_after = retry_after


class Snooze(Exception):
    """Not a failure: run the job again after ``delay`` (seconds, a timedelta
    or a Go duration string) without using an attempt."""

    def __init__(self, delay):
        if not isinstance(delay, str):
            delay = format_duration(delay)
        super().__init__("snooze %s" % delay)
        self.delay = delay


class APIError(Exception):
    """An error answer of the API: ``status`` (HTTP), ``code`` ("invalid",
    "lease_lost", ...), ``message`` and ``field`` (the input at fault, or
    None)."""

    def __init__(self, status, code, message, field=None):
        text = "%d %s: %s" % (status, code, message)
        if field:
            text += " (field %s)" % field
        super().__init__(text)
        self.status = status
        self.code = code
        self.message = message
        self.field = field


class LeaseLost(APIError):
    """409 lease_lost: the (id, lease) pair is no longer this worker's (the
    job was rescued, finished or canceled); nothing was changed."""
