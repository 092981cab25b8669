"""A fault-injecting HTTP proxy in front of a real S3 store (SeaweedFS): a network fault
between the nodes and the store, the store itself staying real. Each request is forwarded
whole (headers unchanged, Host included, so S3's SigV4 signatures still verify) unless the
proxy's mode says otherwise:

- `pass`: forwarded;
- `fail`: answered 503 SlowDown with S3's XML error body, without reaching the store (what
  an overloaded S3 answers; botocore retries it, then raises);
- `slow`: forwarded after `delay_s` (a store answering late: timeouts, a full reader pool).

Only the methods of the requests are matched (`methods`, all by default), so a test can
fail writes while reads go on. Loopback by default (`host`: the fault campaign's network lab
gives its bridge address, where nodes in namespaces reach it); stopped by `close()`.
"""

from __future__ import annotations

import http.client
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

_ERROR_BODY = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
    b"<Message>injected by the test's fault proxy</Message></Error>"
)
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection"}


class S3FaultProxy:
    def __init__(self, upstream_url: str, host: str = "127.0.0.1") -> None:
        parts = urlsplit(upstream_url)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.mode = "pass"
        self.methods: frozenset[str] | None = None
        self.delay_s = 0.0
        self.injected = 0  # requests failed or delayed so far
        self.forwarded = 0
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def _handle(self) -> None:
                body = _read_body(self)
                mode = proxy._mode_for(self.command)
                if mode == "fail":
                    self.send_response(503)
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(_ERROR_BODY)))
                    self.end_headers()
                    self.wfile.write(_ERROR_BODY)
                    return
                if mode == "slow":
                    time.sleep(proxy.delay_s)
                try:
                    status, headers, answer = proxy._forward(self, body)
                except OSError:
                    # The store itself down (killed by a fault): the client's connection is
                    # closed unanswered, as if it had reached the dead store.
                    self.close_connection = True
                    return
                self.send_response(status)
                for name, value in headers:
                    if name.lower() not in _HOP_BY_HOP and name.lower() != "content-length":
                        self.send_header(name, value)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(answer)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

        self._server = _QuietServer((host, 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def endpoint_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def set(self, mode: str, *, methods: set[str] | None = None, delay_s: float = 0.0) -> None:
        if mode not in ("pass", "fail", "slow"):
            raise ValueError(f"unknown mode {mode!r}")
        with self._lock:
            self.mode = mode
            self.methods = frozenset(methods) if methods else None
            self.delay_s = delay_s

    def _mode_for(self, method: str) -> str:
        with self._lock:
            mode = self.mode
            if mode != "pass" and (self.methods is None or method in self.methods):
                self.injected += 1
                return mode
            self.forwarded += 1
            return "pass"

    def _forward(
        self, request: BaseHTTPRequestHandler, body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        connection = http.client.HTTPConnection(*self.upstream, timeout=30)
        try:
            headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP}
            headers["Content-Length"] = str(len(body))
            connection.request(request.command, request.path, body=body, headers=headers)
            answer = connection.getresponse()
            return answer.status, answer.getheaders(), answer.read()
        finally:
            connection.close()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        # A client killed mid-request (a node SIGKILLed by a fault campaign) resets its
        # connection: expected, not worth a traceback.
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)  # type: ignore[arg-type]


def _read_body(request: BaseHTTPRequestHandler) -> bytes:
    if request.headers.get("Transfer-Encoding", "").lower() == "chunked":
        parts = []
        while True:
            size = int(request.rfile.readline().split(b";")[0].strip(), 16)
            if size == 0:
                request.rfile.readline()
                return b"".join(parts)
            parts.append(request.rfile.read(size))
            request.rfile.readline()
    length = int(request.headers.get("Content-Length") or 0)
    return request.rfile.read(length) if length else b""
