"""redrive: a Python client for the redrive job engine.

``Client`` enqueues, reads and cancels jobs over the REST API; ``Worker``
runs handlers for jobs leased from a ``redrive serve`` over its HTTP
worker protocol, with heartbeats, progress, cancellation, classified
failures and a graceful shutdown. Only the standard library is used.
"""

from ._http import AnswerTooLarge
from .client import Client
from .errors import (
    APIError,
    JobError,
    LeaseLost,
    NeedsAuth,
    Permanent,
    RateLimited,
    Snooze,
    Transient,
    Unknown,
)
from .worker import MAX_RESULT, Job, Worker

__version__ = "0.1.0"

__all__ = [
    "Client",
    "Worker",
    "Job",
    "MAX_RESULT",
    "JobError",
    "Permanent",
    "NeedsAuth",
    "RateLimited",
    "Transient",
    "Unknown",
    "Snooze",
    "APIError",
    "LeaseLost",
    "AnswerTooLarge",
]
