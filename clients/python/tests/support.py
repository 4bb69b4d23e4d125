"""What the tests share: the servers they run against (test/load/python-client.test.ts starts them and
names them in the environment), a TCP proxy that counts requests and can cut answers off, a scripted
HTTP server, raw requests, and a synchronous face for the asyncio client."""
from __future__ import annotations

import asyncio
import http.client
import http.server
import json
import os
import socket
import ssl
import threading
import unittest
import uuid
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple, Union
from urllib.parse import urlsplit

from edge_limiter import AsyncPermitClient, PermitClient


def _env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise RuntimeError(
            f"{name} is not set: these tests run against real servers that test/load/python-client.test.ts starts; "
            "run `npx vitest run --project load test/load/python-client.test.ts`"
        )
    return value


#: Two `npm start` servers on one Redis.
URLS: List[str] = _env("EDGE_LIMITER_URLS").split(",")
URL = URLS[0]
TOKEN = _env("EDGE_LIMITER_TOKEN")
#: A token of the same servers that may only take permits, of policy `api` only.
NARROW_TOKEN = _env("EDGE_LIMITER_NARROW_TOKEN")
#: The servers' LIMITER_POLICIES.
POLICIES: Dict[str, Any] = json.loads(_env("EDGE_LIMITER_POLICIES"))
#: A server whose Redis does not answer: policy `closed` fails closed (503), `open` fails open.
DOWN_URL = _env("EDGE_LIMITER_DOWN_URL")


#: A self-signed certificate for 127.0.0.1 and localhost (valid until 2126), and its key: test use only.
TLS_CERT = Path(__file__).with_name("tls") / "cert.pem"
TLS_KEY = Path(__file__).with_name("tls") / "key.pem"


def tls_server_context() -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(TLS_CERT, TLS_KEY)
    return context


def tls_client_context() -> ssl.SSLContext:
    """What a caller passes as ssl_context to trust the test certificate (and verify it, hostname included)."""
    return ssl.create_default_context(cafile=str(TLS_CERT))


def unique(prefix: str = "k") -> str:
    """A bucket key no other test (nor an earlier run on the same Redis) uses."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def raw(url: str, method: str, path: str, body: Any = None, headers: Optional[Dict[str, str]] = None) -> Tuple[int, Dict[str, str], Any]:
    """One request without the client: status, headers (lower-case names), parsed JSON body (or None)."""
    u = urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname or "127.0.0.1", u.port or 80, timeout=10)
    try:
        data = None if body is None else json.dumps(body).encode()
        h = {"Authorization": f"Bearer {TOKEN}", **({"Content-Type": "application/json"} if data is not None else {}), **(headers or {})}
        conn.request(method, path, body=data, headers=h)
        res = conn.getresponse()
        text = res.read()
        return res.status, {k.lower(): v for k, v in res.getheaders()}, json.loads(text) if text else None
    finally:
        conn.close()


class Proxy:
    """A TCP proxy to ``upstream`` that counts the HTTP requests passing through, and, while ``drop`` is
    above 0, cuts both connections when an answer arrives: the server has applied the request and
    answered, and the client never hears it. With ``tls``, it is an https front of the server."""

    def __init__(self, upstream: str, tls: Optional[ssl.SSLContext] = None) -> None:
        u = urlsplit(upstream)
        self._upstream = (u.hostname or "127.0.0.1", u.port or 80)
        self._server = socket.create_server(("127.0.0.1", 0))
        self._tls = tls
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self._server.getsockname()[1]}"
        self._lock = threading.Lock()
        self._drop = 0
        self.dropped = 0
        self.requests = 0
        self._sockets: List[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def drop_next(self, n: int) -> None:
        with self._lock:
            self._drop = n

    def reset_count(self) -> None:
        with self._lock:
            self.requests = 0

    def close(self) -> None:
        self._closed = True
        self._server.close()
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for s in sockets:
            _shut(s)

    def __enter__(self) -> "Proxy":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            if self._tls is not None:
                try:
                    client.settimeout(5)
                    client = self._tls.wrap_socket(client, server_side=True)
                    client.settimeout(None)
                except OSError:  # ssl.SSLError too
                    client.close()
                    continue
            try:
                upstream = socket.create_connection(self._upstream)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._sockets += [client, upstream]
            threading.Thread(target=self._requests, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._answers, args=(upstream, client), daemon=True).start()

    def _requests(self, src: socket.socket, dst: socket.socket) -> None:
        """Client to server, counting request heads (each request's body is skipped by its Content-Length)
        before passing them on."""
        buf = b""
        body_left = 0
        while True:
            try:
                chunk = src.recv(65536)
            except OSError:
                break
            if not chunk:
                break
            buf += chunk
            while True:
                if body_left:
                    take = min(body_left, len(buf))
                    buf, body_left = buf[take:], body_left - take
                    if body_left:
                        break
                end = buf.find(b"\r\n\r\n")
                if end < 0:
                    break
                head, buf = buf[:end].decode("latin-1"), buf[end + 4:]
                with self._lock:
                    self.requests += 1
                for line in head.split("\r\n")[1:]:
                    name, _, value = line.partition(":")
                    if name.strip().lower() == "content-length":
                        body_left = int(value)
            # Counted before it is passed on: once the answer is back, the count has it.
            try:
                dst.sendall(chunk)
            except OSError:
                break
        _shut(dst, both=False)

    def _answers(self, src: socket.socket, dst: socket.socket) -> None:
        while True:
            try:
                chunk = src.recv(65536)
            except OSError:
                break
            if not chunk:
                break
            with self._lock:
                cut = self._drop > 0
                if cut:
                    self._drop -= 1
                    self.dropped += 1
            if cut:
                _shut(src)
                _shut(dst)
                return
            try:
                dst.sendall(chunk)
            except OSError:
                break
        _shut(dst, both=False)


def _shut(s: socket.socket, both: bool = True) -> None:
    try:
        s.shutdown(socket.SHUT_RDWR if both else socket.SHUT_WR)
    except OSError:
        pass
    if both:
        s.close()


#: One scripted answer: (status, headers, body), or "hang" (never answer).
Answer = Union[Tuple[int, Dict[str, str], Any], str]


class ScriptedServer:
    """A local HTTP server that answers from a script, one entry per request (then 404s), and records
    each request (method, path, headers with lower-case names, body)."""

    def __init__(self, script: Optional[List[Answer]] = None) -> None:
        self.script: List[Answer] = list(script or [])
        self.received: List[Dict[str, Any]] = []
        self._release = threading.Event()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                outer.received.append({"method": self.command, "path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()}, "body": body})
                answer = outer.script.pop(0) if outer.script else (404, {}, {"detail": "script ended"})
                if answer == "hang":
                    outer._release.wait(30)
                    self.close_connection = True
                    return
                assert not isinstance(answer, str)
                status, headers, payload = answer
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode() if payload is not None else b""
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_DELETE = _serve

        self._httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._httpd.server_address[1]}"
        threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def close(self) -> None:
        self._release.set()
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> "ScriptedServer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


#: A RawServer's handler: (the connection, the request head, its body, the request's number from 1); it
#: writes what it likes, and returns "close" to close the connection.
RawHandler = Callable[[socket.socket, str, bytes, int], Optional[str]]


class RawServer:
    """A local server that reads HTTP/1.1 requests (head, then a Content-Length body) and lets a handler
    write any bytes at all in answer: what ScriptedServer cannot (interim 1xx answers, an answer dripped
    a byte at a time, a body of any size or framing). Records each request as (head, body)."""

    def __init__(self, handler: RawHandler) -> None:
        self.handler = handler
        self.requests: List[Tuple[str, bytes]] = []
        self.connections = 0
        self._lock = threading.Lock()
        self._server = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._server.getsockname()[1]}"
        self._sockets: List[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._server.close()
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for s in sockets:
            _shut(s)

    def __enter__(self) -> "RawServer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            with self._lock:
                self.connections += 1
                self._sockets.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        buf = b""
        try:
            while True:
                while b"\r\n\r\n" not in buf:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buf += data
                head, _, rest = buf.partition(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value.strip())
                while len(rest) < length:
                    data = conn.recv(65536)
                    if not data:
                        return
                    rest += data
                body, buf = rest[:length], rest[length:]
                with self._lock:
                    self.requests.append((head.decode("latin-1"), body))
                    n = len(self.requests)
                if self.handler(conn, head.decode("latin-1"), body, n) == "close":
                    _shut(conn)
                    return
        except OSError:
            return


def http_answer(status: int, body: bytes = b"", headers: Optional[Dict[str, Optional[str]]] = None, reason: str = "X") -> bytes:
    """An answer's bytes: status line, Content-Type (JSON) and Content-Length unless given (None: left out), body."""
    h: Dict[str, Optional[str]] = {"Content-Type": "application/json", "Content-Length": str(len(body)), **(headers or {})}
    return (f"HTTP/1.1 {status} {reason}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items() if v is not None) + "\r\n").encode("latin-1") + body


def echo_decision(body: bytes, **over: Any) -> bytes:
    """A decision's JSON for the request whose body (a take's or an adjustment's) is ``body``."""
    request = json.loads(body)
    return json.dumps(decision_json(policy=request["policy"], key=request["key"], **over)).encode()


def decision_json(**over: Any) -> Dict[str, Any]:
    body = {"allowed": True, "policy": "p", "key": "k", "limit": 1, "remaining": 0, "retryAfterMs": 0, "resetAfterMs": 1000, "waitMs": 0}
    body.update(over)
    return body


class SyncFace:
    """AsyncPermitClient's operations as plain calls, each run to completion on one event loop kept for
    the test: the contract tests run unchanged against both clients."""

    def __init__(self, client: AsyncPermitClient) -> None:
        self.client = client
        self.loop = asyncio.new_event_loop()

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self.client, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            return self.loop.run_until_complete(method(*args, **kwargs))

        return call

    def close(self) -> None:
        self.loop.run_until_complete(self.client.aclose())
        self.loop.close()


def make_client(kind: str, url: str = URL, **options: Any) -> Any:
    """A PermitClient ("sync"), or an AsyncPermitClient behind a SyncFace ("async"). Close it after."""
    if kind == "sync":
        return PermitClient(url, options.pop("token", TOKEN), **options)
    return SyncFace(AsyncPermitClient(url, options.pop("token", TOKEN), **options))


class RawServerCase(unittest.TestCase):
    """A test case that closes the clients it makes and the raw servers it starts."""

    kind = "sync"

    def setUp(self) -> None:
        self.clients: List[Any] = []
        self.servers: List[Any] = []

    def tearDown(self) -> None:
        for c in self.clients:
            try:
                c.close()
            except RuntimeError:  # an async client whose loop a stuck call still runs (a failed test)
                pass
        for s in self.servers:
            s.close()

    def make(self, url: str, **options: Any) -> Any:
        client = make_client(self.kind, url, **options)
        self.clients.append(client)
        return client

    def serve(self, handler: Callable[[socket.socket, str, bytes, int], Optional[str]]) -> RawServer:
        server = RawServer(handler)
        self.servers.append(server)
        return server
