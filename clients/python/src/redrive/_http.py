"""A small JSON-over-HTTP transport on http.client with keep-alive."""

import http.client
import json
import select
import socket
import ssl
import threading
import urllib.parse

from .errors import APIError, LeaseLost

__all__ = ["Endpoint", "Connection", "Aborted", "MalformedAnswer", "AnswerTooLarge", "DEFAULT_MAX_ANSWER"]

_VERSION = "0.1.0"

#: The default bound on the body of one answer, in bytes: far above what
#: serve sends (a lease of its most jobs of payloads at its default
#: bound, 1 MiB, are sent again in smaller batches: see Worker).
DEFAULT_MAX_ANSWER = 64 << 20

# Errors of a kept-alive connection the server closed between two
# requests: most often the request never reached it. The same errors come
# of a connection cut after the server read the request (a proxy cutting
# it, the server dying after its commit): only a request a second copy of
# which changes nothing is sent again on a new connection (see
# Connection.raw).
_STALE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError, ConnectionAbortedError)


class Aborted(Exception):
    """The connection was aborted by Connection.abort (a worker stopping)."""


class MalformedAnswer(http.client.HTTPException):
    """A successful answer whose body is not what the API sends (not JSON,
    or not the object expected): something between the client and the
    server (a proxy, a captive portal) answered, so the request may not
    have reached the server. Retried like a network failure."""


class AnswerTooLarge(MalformedAnswer):
    """An answer whose body is longer than the client's bound
    (``max_answer``): a broken or hostile server (or something between)
    may not make the client read it all. Nothing of it is used; the
    connection is closed. Retried like a network failure."""

    def __init__(self, message, limit):
        super().__init__(message)
        self.limit = limit


class Endpoint:
    """Where the API is (a base URL: http or https, optional path prefix),
    how to authenticate (a bearer token, or None), and how long an answer
    may be (``max_answer`` bytes of body, DEFAULT_MAX_ANSWER by default)."""

    def __init__(self, url, token=None, max_answer=DEFAULT_MAX_ANSWER):
        if isinstance(max_answer, bool) or not isinstance(max_answer, int) or max_answer < 1:
            raise ValueError("max_answer %r: want a whole number of bytes, at least 1" % (max_answer,))
        self.max_answer = max_answer
        u = urllib.parse.urlsplit(url)
        if u.scheme not in ("http", "https"):
            raise ValueError("url %r: want http:// or https://" % (url,))
        if not u.hostname:
            raise ValueError("url %r: no host" % (url,))
        if u.query or u.fragment:
            raise ValueError("url %r: a base URL has no query or fragment" % (url,))
        self.scheme = u.scheme
        self.host = u.hostname
        self.port = u.port or (443 if u.scheme == "https" else 80)
        self.prefix = u.path.rstrip("/")
        self.token = token
        self.ssl_context = ssl.create_default_context() if u.scheme == "https" else None

    def headers(self, has_body):
        h = {"Accept": "application/json", "User-Agent": "redrive-python/" + _VERSION}
        if has_body:
            h["Content-Type"] = "application/json"
        if self.token:
            h["Authorization"] = "Bearer " + self.token
        return h


class Connection:
    """One kept-alive HTTP connection, used by one thread at a time.

    abort() may be called from any thread: it breaks a request in flight
    (a long-poll) and makes every later request raise Aborted.
    ``idempotent`` is the default of raw's: whether the requests sent on
    it may be sent twice (the worker protocol's may).
    """

    def __init__(self, endpoint, idempotent=False):
        self._ep = endpoint
        self._idempotent = idempotent
        self._conn = None
        self._used = False
        self._aborted = False
        self._lock = threading.Lock()

    def _new(self, timeout):
        ep = self._ep
        if ep.scheme == "https":
            return http.client.HTTPSConnection(ep.host, ep.port, timeout=timeout, context=ep.ssl_context)
        return http.client.HTTPConnection(ep.host, ep.port, timeout=timeout)

    def abort(self):
        """Breaks the request in flight, if any; later requests raise Aborted."""
        with self._lock:
            self._aborted = True
            conn = self._conn
        if conn is not None and conn.sock is not None:
            try:
                conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self):
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def call(self, method, path, body=None, timeout=30.0, idempotent=None):
        """Sends a request and answers its decoded JSON body (None when empty).

        An answer of 400 or above raises APIError (LeaseLost for 409
        lease_lost); a network failure raises OSError or
        http.client.HTTPException; an aborted connection raises Aborted.
        """
        status, data = self.raw(method, path, body, timeout, idempotent)
        decoded = None
        if data:
            try:
                decoded = json.loads(data)
            except ValueError:
                if status < 400:
                    raise MalformedAnswer("%s %s: answer %d is not JSON: %r" % (method, path, status, data[:200])) from None
                decoded = None
        if status >= 400:
            raise error_of(status, decoded, data)
        return decoded

    def call_object(self, method, path, body=None, timeout=30.0, idempotent=None):
        """call, for an answer that must be a JSON object: anything else
        raises MalformedAnswer."""
        decoded = self.call(method, path, body, timeout, idempotent)
        if not isinstance(decoded, dict):
            raise MalformedAnswer("%s %s: the answer is not a JSON object: %.200r" % (method, path, decoded))
        return decoded

    def raw(self, method, path, body=None, timeout=30.0, idempotent=None):
        """Sends a request and answers its status and body.

        A request cut on a kept connection before any answer is sent once
        more on a new one when ``idempotent``: when a second copy, should
        the server have read the first, changes nothing the first did not
        (a read, the worker protocol's calls, an enqueue with idempotency
        keys). Default: the connection's, else True for GET only.
        """
        if idempotent is None:
            idempotent = self._idempotent or method == "GET"
        payload = None if body is None else json.dumps(body, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")
        headers = self._ep.headers(payload is not None)
        url = self._ep.prefix + path
        for attempt in (0, 1):
            with self._lock:
                if self._aborted:
                    raise Aborted("connection aborted")
                if self._conn is not None and self._used and _closed_by_peer(self._conn.sock):
                    # Serve closed the kept connection while it was idle
                    # (after 2 minutes): open a new one rather than send
                    # on it, which a request not idempotent could not
                    # survive.
                    self._conn.close()
                    self._conn = None
                if self._conn is None:
                    self._conn = self._new(timeout)
                    self._used = False
                conn = self._conn
                reused = self._used
            try:
                conn.timeout = timeout
                if conn.sock is not None:
                    conn.sock.settimeout(timeout)
                conn.request(method, url, body=payload, headers=headers)
                resp = conn.getresponse()
                data = _read_bounded(resp, self._ep.max_answer, method, path)
            except _STALE:
                self.close()
                if self._aborted:
                    raise Aborted("connection aborted") from None
                if attempt == 0 and reused and idempotent:
                    continue
                raise
            except BaseException:
                self.close()
                if self._aborted:
                    raise Aborted("connection aborted") from None
                raise
            if resp.will_close:
                self.close()
            else:
                self._used = True
            return resp.status, data
        raise AssertionError("unreachable")


def _read_bounded(resp, limit, method, path):
    """The body of resp, at most limit bytes: a longer one (said by its
    Content-Length, or read past the bound) raises AnswerTooLarge, read
    no further."""
    length = resp.getheader("Content-Length")
    if length is not None and length.strip().isdigit() and int(length) > limit:
        raise AnswerTooLarge("%s %s: the answer's body is %s bytes, more than the bound of %d (max_answer)"
                             % (method, path, length.strip(), limit), limit)
    data = resp.read(limit + 1)
    if len(data) > limit:
        raise AnswerTooLarge("%s %s: the answer's body is more than the bound of %d bytes (max_answer)"
                             % (method, path, limit), limit)
    if not resp.isclosed():
        # Read to its end: the bound was not reached, so what is left is
        # nothing (a chunked body's last chunk).
        rest = resp.read(1)
        if rest:
            raise AnswerTooLarge("%s %s: the answer's body is more than the bound of %d bytes (max_answer)"
                                 % (method, path, limit), limit)
    return data


def _closed_by_peer(sock):
    """Whether a kept connection, idle between two requests, was closed
    by the server (or holds bytes it should not): it is readable. An idle
    HTTP/1.1 connection has nothing to read until the next answer."""
    if sock is None:
        return True
    try:
        if hasattr(select, "poll"):  # select.select cannot take a descriptor past 1023
            p = select.poll()
            p.register(sock, select.POLLIN)
            return bool(p.poll(0))
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


def error_of(status, decoded, data=b""):
    """The APIError of an error answer's decoded body."""
    err = decoded.get("error") if isinstance(decoded, dict) else None
    if isinstance(err, dict):
        code = str(err.get("code") or "http_%d" % status)
        message = str(err.get("message") or "")
        field = err.get("field")
    else:
        code = "http_%d" % status
        message = data[:200].decode("utf-8", "replace") if data else http.client.responses.get(status, "")
        field = None
    cls = LeaseLost if status == 409 and code == "lease_lost" else APIError
    return cls(status, code, message, field)


class ThreadConnections:
    """A Connection per thread, for a client shared by threads."""

    def __init__(self, endpoint):
        self._ep = endpoint
        self._local = threading.local()
        self._all = []
        self._lock = threading.Lock()

    def get(self):
        c = getattr(self._local, "conn", None)
        if c is None:
            c = Connection(self._ep)
            self._local.conn = c
            with self._lock:
                self._all.append(c)
        return c

    def close(self):
        with self._lock:
            conns, self._all = self._all, []
        for c in conns:
            c.close()
