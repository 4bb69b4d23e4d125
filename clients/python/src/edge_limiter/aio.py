"""The asyncio client: HTTP/1.1 over ``asyncio.open_connection`` (TLS through ``ssl`` for https), so it
never blocks the event loop and needs no thread; waits are ``asyncio.sleep``."""
from __future__ import annotations

import asyncio
import ssl
from typing import TYPE_CHECKING, Dict, List, Optional, Tuple

from . import _core
from .errors import PermitError
from .types import Cost, Decision

if TYPE_CHECKING:
    from contextlib import AbstractAsyncContextManager

    from .settle import Settlement

#: The largest answer head and body read (the server's are a few hundred bytes).
_MAX_HEAD = 64 * 1024
_MAX_BODY = 1024 * 1024


class _ProtocolError(Exception):
    """The bytes that came back were not an HTTP/1.1 answer this client reads."""


class _Connection:
    __slots__ = ("reader", "writer", "loop")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, loop: asyncio.AbstractEventLoop) -> None:
        self.reader = reader
        self.writer = writer
        self.loop = loop

    def usable(self, loop: asyncio.AbstractEventLoop) -> bool:
        return self.loop is loop and not self.reader.at_eof() and not self.writer.is_closing()

    def abort(self) -> None:
        try:
            self.writer.transport.abort()
        except RuntimeError:  # its event loop is closed already
            pass


class AsyncPermitClient:
    """The permit endpoint's client for asyncio; the same operations and rules as :class:`PermitClient`.

    ``async with AsyncPermitClient(url, token) as permits: await permits.acquire("openai", "org-42")``.
    Connections are kept alive per event loop; ``aclose()`` closes the idle ones.
    """

    def __init__(
        self,
        url: str,
        token: str,
        *,
        timeout_ms: int = 5000,
        retries: int = 2,
        max_retry_delay_ms: int = 5000,
        idempotency: bool = True,
        ssl_context: Optional[ssl.SSLContext] = None,
    ) -> None:
        self._options = _core.Options.of(url, token, timeout_ms, retries, max_retry_delay_ms, idempotency)
        self._ssl = ssl_context
        self._idle: List[_Connection] = []

    @property
    def url(self) -> str:
        return self._options.origin.url

    async def take(self, policy: str, key: str, *, cost: Cost = 1, max_wait_ms: int = 0, idempotency_key: Optional[str] = None) -> Decision:
        """One decision; see :meth:`PermitClient.take`."""
        return await self._decision(self._options.take(policy, key, cost, max_wait_ms, idempotency_key))

    async def acquire(self, policy: str, key: str, *, cost: Cost = 1, timeout_ms: int = 30_000, idempotency_key: Optional[str] = None) -> Decision:
        """One reservation, then ``asyncio.sleep`` until it is due; see :meth:`PermitClient.acquire`."""
        wait = _core.acquire_wait_ms(timeout_ms)
        decision = _core.acquired(await self.take(policy, key, cost=cost, max_wait_ms=wait, idempotency_key=idempotency_key), wait)
        if decision.wait_ms > 0:
            await asyncio.sleep(decision.wait_ms / 1000)
        return decision

    async def adjust(self, policy: str, key: str, cost: Cost, *, idempotency_key: Optional[str] = None) -> Decision:
        """A refund (below 0) or a charge (above 0) after the fact; see :meth:`PermitClient.adjust`."""
        return await self._decision(self._options.adjust(policy, key, cost, idempotency_key))

    async def peek(self, policy: str, key: str) -> Decision:
        """The bucket's state; consumes nothing."""
        return await self._decision(self._options.bucket("GET", policy, key))

    async def reset(self, policy: str, key: str) -> None:
        """Refills the bucket."""
        await self._call(self._options.bucket("DELETE", policy, key))

    def settle(self, policy: str, key: str, estimate: Cost, *, timeout_ms: int = 30_000) -> "AbstractAsyncContextManager[Settlement]":
        """``async with client.settle(policy, key, estimate) as s: ...``: see :func:`edge_limiter.asettle`."""
        from .settle import asettle

        return asettle(self, policy, key, estimate, timeout_ms=timeout_ms)

    async def aclose(self) -> None:
        """Closes the idle connections (a later call opens new ones)."""
        idle, self._idle = self._idle, []
        loop = asyncio.get_running_loop()
        for conn in idle:
            if conn.loop is not loop:
                conn.abort()
                continue
            conn.writer.close()
            try:
                await conn.writer.wait_closed()
            except OSError:
                pass

    async def __aenter__(self) -> "AsyncPermitClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"AsyncPermitClient({self.url!r})"

    # The HTTP side.

    async def _decision(self, request: _core.Request) -> Decision:
        result = await self._call(request)
        assert result is not None
        return result

    async def _call(self, request: _core.Request) -> Optional[Decision]:
        attempt = 0
        while True:
            try:
                status, headers, body = await self._attempt(request)
                return _core.outcome(request, status, headers, body)
            except PermitError as error:
                delay = _core.retry_delay(error, request, attempt, self._options)
                if delay is None:
                    raise
            await asyncio.sleep(delay)
            attempt += 1

    async def _attempt(self, request: _core.Request) -> Tuple[int, Dict[str, str], bytes]:
        loop = asyncio.get_running_loop()
        timeout_ms = self._options.timeout_ms
        holder: List[_Connection] = []
        try:
            status, headers, body, keep = await asyncio.wait_for(self._exchange(loop, request, holder), timeout_ms / 1000)
        except asyncio.TimeoutError as error:
            for conn in holder:
                conn.abort()
            raise _core.network_error(error, True, timeout_ms) from error
        except (OSError, EOFError, asyncio.LimitOverrunError, _ProtocolError, ValueError) as error:
            for conn in holder:
                conn.abort()
            raise _core.network_error(error, False, timeout_ms) from error
        except BaseException:
            # Cancelled mid-exchange: the connection's state is unknown.
            for conn in holder:
                conn.abort()
            raise
        conn = holder[0]
        if keep and conn.usable(loop):
            self._idle.append(conn)
        else:
            conn.writer.close()
        return status, headers, body

    async def _exchange(self, loop: asyncio.AbstractEventLoop, request: _core.Request, holder: List[_Connection]) -> Tuple[int, Dict[str, str], bytes, bool]:
        conn = await self._checkout(loop)
        holder.append(conn)
        head = f"{request.method} {request.path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in request.headers.items()) + "\r\n"
        conn.writer.write(head.encode("latin-1") + (request.body or b""))
        await conn.writer.drain()
        return await _read_response(conn.reader, request.method)

    async def _checkout(self, loop: asyncio.AbstractEventLoop) -> _Connection:
        while self._idle:
            conn = self._idle.pop()
            if conn.usable(loop):
                return conn
            conn.abort()
        origin = self._options.origin
        if origin.scheme == "https":
            context = self._ssl or ssl.create_default_context()
            reader, writer = await asyncio.open_connection(origin.host, origin.port, ssl=context, server_hostname=origin.host, limit=_MAX_HEAD)
        else:
            reader, writer = await asyncio.open_connection(origin.host, origin.port, limit=_MAX_HEAD)
        return _Connection(reader, writer, loop)


async def _read_response(reader: asyncio.StreamReader, method: str) -> Tuple[int, Dict[str, str], bytes, bool]:
    """One HTTP/1.1 answer: status, headers (lower-case names), body, and whether the connection may be reused."""
    while True:
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
        lines = head.split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            raise _ProtocolError(f"not an HTTP/1.1 status line: {lines[0][:80]!r}")
        version, status = parts[0], int(parts[1])
        headers: Dict[str, str] = {}
        for line in lines[1:]:
            if not line:
                continue
            name, sep, value = line.partition(":")
            if not sep:
                raise _ProtocolError(f"not a header line: {line[:80]!r}")
            name, value = name.strip().lower(), value.strip()
            headers[name] = f"{headers[name]}, {value}" if name in headers else value
        if not 100 <= status < 200:
            break  # an interim answer (1xx) is followed by the real one
    connection = {t.strip() for t in headers.get("connection", "").lower().split(",")}
    keep = version == "HTTP/1.1" and "close" not in connection
    if method == "HEAD" or status in (204, 304):
        return status, headers, b"", keep
    if "chunked" in headers.get("transfer-encoding", "").lower():
        return status, headers, await _read_chunked(reader), keep
    if "content-length" in headers:
        length = int(headers["content-length"])
        if not 0 <= length <= _MAX_BODY:
            raise _ProtocolError(f"Content-Length {length} is out of range")
        return status, headers, await reader.readexactly(length), keep
    # Neither: the body runs to the end of the connection.
    body = await reader.read(_MAX_BODY + 1)
    while body and len(body) <= _MAX_BODY:
        more = await reader.read(_MAX_BODY + 1 - len(body))
        if not more:
            break
        body += more
    if len(body) > _MAX_BODY:
        raise _ProtocolError("the body is too large")
    return status, headers, body, False


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    body = b""
    while True:
        size_line = (await reader.readuntil(b"\r\n")).split(b";", 1)[0].strip()
        size = int(size_line, 16)
        if size == 0:
            while (await reader.readuntil(b"\r\n")) != b"\r\n":
                pass  # trailers
            return body
        if len(body) + size > _MAX_BODY:
            raise _ProtocolError("the body is too large")
        body += await reader.readexactly(size)
        if await reader.readexactly(2) != b"\r\n":
            raise _ProtocolError("a chunk is not followed by CRLF")
