"""A proxy in front of a test's serve that forwards each request and may
cut the connection once serve has answered: serve applied the request,
the client never hears of it."""

import http.client
import http.server
import socket
import threading
import urllib.parse


class CutProxy:
    """Forwards every request to upstream. For each answer, cut(n, path,
    body, status, data) decides, under the proxy's lock, whether to close
    the connection instead of passing the answer on (n: the request's
    number on its connection, from 1). Subclasses override cut."""

    def __init__(self, upstream, timeout=30):
        u = urllib.parse.urlsplit(upstream)
        proxy = self
        self._lock = threading.Lock()

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _any(self):
                self.n = getattr(self, "n", 0) + 1
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                conn.request(self.command, self.path, body=body or None, headers=headers)
                resp = conn.getresponse()
                status, data = resp.status, resp.read()
                conn.close()
                with proxy._lock:
                    cut = proxy.cut(self.n, self.path, body, status, data)
                if cut:
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = _any

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def cut(self, n, path, body, status, data):
        return False

    def close(self):
        self.server.shutdown()
        self.server.server_close()
