"""A small HTTP proxy in front of an S3 server on 127.0.0.1 that fails or delays requests: the
tests' transient 5xx, slow responses, cut and changed bodies, S3 error replies, objects replaced
behind a server that ignores If-Match, outages of the endpoint; the benchmark's added latency
per request.

    python benchmarks/s3_proxy.py http://127.0.0.1:5000 --delay-ms 30    # prints its endpoint
"""

from __future__ import annotations

import argparse
import http.client
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

COPY_BYTES = 1 << 20


class FaultProxy:
    """Forwards HTTP requests to ``upstream``; answers every ``fail_every``-th GET with 503
    (without forwarding it) and delays every ``slow_every``-th request (of ``slow_methods``)
    by ``delay`` seconds (all three may be changed while it runs). ``failed`` and ``delayed``
    count what it did. Setting ``drop_after``
    resets the connection of the next GET whose body is longer, after that many bytes of it
    (``dropped`` counts them); setting ``flip_at`` to (text, n) changes byte n of the body of
    the next GET whose path holds the text (``flipped`` counts them). ``requests`` logs (method, path, Range header, whether it
    carried an Authorization header) of every request.

    Faults of a changed world (each may be set while it runs): ``errors`` maps a text to
    (HTTP status, S3 error code): every GET or HEAD whose path holds it is answered so, with an
    S3 XML error body; ``replaced`` maps a text to another: a GET whose path holds the first is
    answered with the object whose path holds the second instead, and its If-Match header is
    dropped (a server that ignores it) unless ``drop_if_match`` is False; ``outage_at`` = (text, n, seconds): the next GET whose
    path holds the text sends ``n`` bytes of its body, then the endpoint is down for ``seconds``
    (every open connection reset, new ones refused), then listens again on the same port
    (``outages`` counts them)."""

    def __init__(self, upstream: str, *, fail_every: int = 0, slow_every: int = 0,
                 delay: float = 0.0, slow_methods: tuple[str, ...] = ("GET", "PUT", "HEAD")) -> None:
        host, port = upstream.removeprefix("http://").split(":")
        proxy = self
        self.fail_every, self.slow_every, self.delay = fail_every, slow_every, delay
        self.failed = self.delayed = self.dropped = self.flipped = self._count = 0
        self.drop_after: int | None = None
        self.flip_at: tuple[str, int] | None = None
        self.errors: dict[str, tuple[int, str]] = {}
        self.replaced: dict[str, str] = {}
        self.drop_if_match = True
        self.outage_at: tuple[str, int, float] | None = None
        self.outages = 0
        self._connections: set[socket.socket] = set()
        self.requests: list[tuple[str, str, str | None, bool]] = []
        self._lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def setup(self) -> None:
                super().setup()  # headers and body go out in separate writes: no Nagle delay
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                with proxy._lock:
                    proxy._connections.add(self.connection)

            def finish(self) -> None:
                with proxy._lock:
                    proxy._connections.discard(self.connection)
                try:
                    super().finish()
                except OSError:
                    pass

            def _forward(self) -> None:
                with proxy._lock:
                    proxy._count += 1
                    n = proxy._count
                    proxy.requests.append((self.command, self.path, self.headers.get("Range"),
                                           "Authorization" in self.headers))
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if proxy.fail_every and self.command == "GET" and n % proxy.fail_every == 0:
                    proxy.failed += 1
                    self.send_response(503)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if proxy.slow_every and n % proxy.slow_every == 0 and self.command in slow_methods:
                    proxy.delayed += 1
                    time.sleep(proxy.delay)
                error = next((v for k, v in proxy.errors.items() if k in self.path), None)
                if error is not None and self.command in ("GET", "HEAD"):
                    self._s3_error(*error)
                    return
                self._replace()
                reply = self._upstream(body)
                self.send_response(reply.status)
                for key, value in reply.getheaders():
                    if key.lower() not in ("transfer-encoding", "connection"):
                        self.send_header(key, value)
                if self.command == "HEAD":
                    self.end_headers()
                    reply.read()
                    return
                data = reply.read() if reply.getheader("Content-Length") is None else None
                if data is not None:
                    self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if data is not None:
                    self.wfile.write(data)
                    return
                length = int(reply.getheader("Content-Length"))
                cut, flip, outage = self._cut(length), self._flip(length), self._outage(length)
                cut = outage[0] if outage else cut
                sent = 0
                while chunk := reply.read(COPY_BYTES if cut is None else min(COPY_BYTES, cut - sent)):
                    if flip is not None and sent <= flip < sent + len(chunk):
                        chunk = bytearray(chunk)
                        chunk[flip - sent] ^= 0x01
                    self.wfile.write(chunk)  # streamed: large GETs are not held whole
                    sent += len(chunk)
                    if cut is not None and sent >= cut:
                        if outage:
                            proxy._down(outage[1])
                        self._reset()
                        return

            def _s3_error(self, status: int, code: str) -> None:
                """An S3 error reply: ``status``, an XML body with ``code``."""
                xml = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code><Message>injected '
                       f'{code}</Message><Resource>{self.path}</Resource><RequestId>1</RequestId></Error>').encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", str(len(xml)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(xml)

            def _replace(self) -> None:
                """Ask for the object that ``replaced`` puts in this one's place (If-Match dropped)."""
                for text, other in proxy.replaced.items():
                    if text in self.path and self.command == "GET":
                        self.path = self.path.replace(text, other)
                        if proxy.drop_if_match:
                            del self.headers["If-Match"]
                        return

            def _outage(self, length: int) -> tuple[int, float] | None:
                """(bytes to send, seconds down) when this GET starts an outage (``outage_at``)."""
                with proxy._lock:
                    if self.command != "GET" or proxy.outage_at is None:
                        return None
                    text, after, seconds = proxy.outage_at
                    if text not in self.path or length <= after:
                        return None
                    proxy.outage_at = None
                    proxy.outages += 1
                    return after, seconds

            def _cut(self, length: int) -> int | None:
                """Where to reset this GET's body (``drop_after``, once), None to send it whole."""
                with proxy._lock:
                    if self.command != "GET" or proxy.drop_after is None or length <= proxy.drop_after:
                        return None
                    cut, proxy.drop_after = proxy.drop_after, None
                    proxy.dropped += 1
                    return cut

            def _flip(self, length: int) -> int | None:
                """The byte of this GET's body to change (``flip_at``, once), None for none."""
                with proxy._lock:
                    if self.command != "GET" or proxy.flip_at is None:
                        return None
                    text, flip = proxy.flip_at
                    if text not in self.path or length <= flip:
                        return None
                    proxy.flip_at = None
                    proxy.flipped += 1
                    return flip

            def _reset(self) -> None:
                try:
                    self.wfile.flush()
                    self.connection.shutdown(socket.SHUT_RDWR)
                except OSError:  # reset already (an outage)
                    pass
                self.close_connection = True
                self._conn = None  # its upstream reply was not read to the end

            def _upstream(self, body: bytes) -> http.client.HTTPResponse:
                """The upstream reply, over this client connection's own kept-alive upstream
                connection (a new one if the server closed it)."""
                try:
                    return self._request(body)
                except (http.client.HTTPException, ConnectionError):
                    self._conn = None
                    return self._request(body)

            def _request(self, body: bytes) -> http.client.HTTPResponse:
                if getattr(self, "_conn", None) is None:
                    self._conn = http.client.HTTPConnection(host, int(port), timeout=60)
                self._conn.request(self.command, self.path, body=body or None,
                                   headers={k: v for k, v in self.headers.items()})
                return self._conn.getresponse()

            do_GET = do_PUT = do_HEAD = do_POST = do_DELETE = _forward

        self._handler = Handler
        self._listen(0)
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"

    def _listen(self, port: int) -> None:
        self._server = _QuietServer(("127.0.0.1", port), self._handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def _down(self, seconds: float) -> None:
        """Stop listening and reset every open connection; listen again after ``seconds``."""
        port = self._server.server_address[1]
        self._server.shutdown()
        self._server.server_close()
        with self._lock:
            for connection in list(self._connections):
                try:
                    connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        threading.Timer(seconds, self._listen, args=(port,)).start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class _QuietServer(ThreadingHTTPServer):
    """A server that does not print the tracebacks of clients that hung up mid-reply."""

    def handle_error(self, request, client_address) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def main(argv: list[str] | None = None) -> None:
    """Serve until killed, every request delayed by ``--delay-ms``; print the endpoint first."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("upstream")
    parser.add_argument("--delay-ms", type=float, default=0.0)
    args = parser.parse_args(argv)
    proxy = FaultProxy(args.upstream, slow_every=1 if args.delay_ms else 0, delay=args.delay_ms / 1000)
    print(proxy.endpoint, flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
