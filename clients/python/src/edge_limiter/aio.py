"""The asyncio client: HTTP/1.1 over ``asyncio.open_connection`` (TLS through ``ssl`` for https); it never
blocks the event loop. Its waits are ``asyncio.sleep``; the one thing it leaves to another thread is what
asyncio does there for any client: looking up a host name (``loop.getaddrinfo``, on the loop's default
executor; an IP address needs no lookup)."""
from __future__ import annotations

import asyncio
import os
import select
import socket
import ssl
import weakref
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Tuple

from . import _core, _http
from .errors import MalformedAnswerError, PermitError
from .types import Cost, Decision

if TYPE_CHECKING:
    from contextlib import AbstractAsyncContextManager

    from .settle import Settlement

_MAX_HEAD = _http.MAX_HEAD
_MAX_BODY = _http.MAX_BODY


class _Connection:
    __slots__ = ("reader", "writer", "loop", "pid")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, loop: asyncio.AbstractEventLoop) -> None:
        self.reader = reader
        self.writer = writer
        self.loop = loop
        self.pid = os.getpid()

    def usable(self, loop: asyncio.AbstractEventLoop) -> bool:
        """Whether the connection may carry a request: this process's and this loop's, open, and nothing
        arrived on it since its last answer. Bytes that came while it was idle (a stray answer, or the
        server's close) would be read as the next request's answer, so any of them rules it out: bytes
        the stream has buffered (what a running loop reads while the connection sits in the pool), its
        end, or bytes and a FIN still in the kernel (what arrived while the loop was not running), as
        the sync client checks an idle socket."""
        if self.pid != os.getpid() or self.loop is not loop or self.writer.is_closing():
            return False
        reader = self.reader
        # StreamReader has no public look at its buffer; both names are there since Python 3.4.
        buffered: bytes = getattr(reader, "_buffer", b"")
        ended: bool = getattr(reader, "_eof", False)
        if buffered or ended or reader.exception() is not None:
            return False
        sock = self.writer.get_extra_info("socket")
        return sock is None or not _readable(sock)

    def abort(self) -> None:
        try:
            self.writer.transport.abort()
        except RuntimeError:  # its event loop is closed already
            pass


class AsyncPermitClient:
    """The permit endpoint's client for asyncio; the same operations and rules as :class:`PermitClient`.

    ``async with AsyncPermitClient(url, token) as permits: await permits.acquire("openai", "org-42")``.
    Connections are kept alive per event loop; ``aclose()`` closes the idle ones. For https without
    ``ssl_context``, the system's default context (loading the CA bundle takes tens of ms) is built once
    and shared by every connection: in the constructor when no event loop runs there, else at the first
    connection on the loop's default executor, so never on a running loop.
    After ``os.fork()`` a child opens its own connections and leaves the parent's alone.
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
        if ssl_context is None and self._options.origin.scheme == "https" and not _loop_running():
            ssl_context = ssl.create_default_context()
        self._ssl = ssl_context
        #: The default context being built for a client made on a running loop (and that loop).
        self._ssl_building: Optional["asyncio.Future[ssl.SSLContext]"] = None
        self._idle: List[_Connection] = []
        _CLIENTS.add(self)

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

    async def settle_charge(self, policy: str, key: str, *, charge: str, cost: Cost) -> Decision:
        """Settles a charge by its actual cost, at most once; see :meth:`PermitClient.settle_charge`."""
        return await self._decision(self._options.settle_charge(policy, key, charge, cost))

    async def peek(self, policy: str, key: str) -> Decision:
        """The bucket's state; consumes nothing."""
        return await self._decision(self._options.bucket("GET", policy, key))

    async def reset(self, policy: str, key: str) -> None:
        """Refills the bucket."""
        await self._call(self._options.bucket("DELETE", policy, key))


    # Runtime limits and blocks (the token needs the `admin` right). Each answers the key's (or the
    # policy's) limits as the server sends them: {"limits": [{"name", "capacity", "refillPerSecond"}],
    # "source": "policy" | "key" | "policy-wide", "expiresInMs"?, "blockedForMs"?, "previous"?}.

    async def set_limits(self, policy: str, key: str, limits: Mapping[str, Any], *, expires_in_ms: Optional[int] = None) -> Dict[str, Any]:
        """Sets the key's own numbers (``PUT /v1/limits/<policy>/<key>``), written as the policy's are
        (``{"capacity": 100, "refill": "100/minute"}``, or ``{"limits": {"day": {...}}}``), until
        ``expires_in_ms`` (None: until cleared). Every node's next decision on the key uses them."""
        return await self._limits(self._options.limits_request("PUT", policy, key, _core.limits_body(limits, expires_in_ms)))

    async def get_limits(self, policy: str, key: str) -> Dict[str, Any]:
        """The key's limits in force, where they come from, and its block (``GET /v1/limits/<policy>/<key>``)."""
        return await self._limits(self._options.limits_request("GET", policy, key))

    async def clear_limits(self, policy: str, key: str) -> Dict[str, Any]:
        """Drops the key's own numbers (``DELETE /v1/limits/<policy>/<key>``)."""
        return await self._limits(self._options.limits_request("DELETE", policy, key))

    async def block(self, policy: str, key: str, *, for_ms: int) -> Dict[str, Any]:
        """Refuses every take on the key for ``for_ms``, on every node (``PUT /v1/blocks/<policy>/<key>``)."""
        return await self._limits(self._options.limits_request("PUT", policy, key, {"forMs": for_ms}, route="blocks"))

    async def unblock(self, policy: str, key: str) -> Dict[str, Any]:
        """Ends the key's block (``DELETE /v1/blocks/<policy>/<key>``)."""
        return await self._limits(self._options.limits_request("DELETE", policy, key, route="blocks"))

    async def set_policy_limits(self, policy: str, limits: Mapping[str, Any], *, expires_in_ms: Optional[int] = None) -> Dict[str, Any]:
        """Changes the numbers of every key of the policy without its own (``PUT /v1/limits/<policy>``),
        obeyed by every node within its policy refresh (1 s by default)."""
        return await self._limits(self._options.policy_limits_request("PUT", policy, _core.limits_body(limits, expires_in_ms)))

    async def get_policy_limits(self, policy: str) -> Dict[str, Any]:
        """The policy-wide change in force, if any (``GET /v1/limits/<policy>``)."""
        return await self._limits(self._options.policy_limits_request("GET", policy))

    async def clear_policy_limits(self, policy: str) -> Dict[str, Any]:
        """Ends the policy-wide change (``DELETE /v1/limits/<policy>``)."""
        return await self._limits(self._options.policy_limits_request("DELETE", policy))

    def settle(
        self, policy: str, key: str, estimate: Cost, *, timeout_ms: int = 30_000, on_settle_error: "Optional[Callable[[Settlement], None]]" = None
    ) -> "AbstractAsyncContextManager[Settlement]":
        """``async with client.settle(policy, key, estimate) as s: ...``: see :func:`edge_limiter.asettle`."""
        from .settle import asettle

        return asettle(self, policy, key, estimate, timeout_ms=timeout_ms, on_settle_error=on_settle_error)

    async def aclose(self) -> None:
        """Closes the idle connections (a later call opens new ones)."""
        idle, self._idle = self._idle, []
        loop = asyncio.get_running_loop()
        for conn in idle:
            if conn.pid != os.getpid():
                _orphan(conn)
                continue
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
        assert isinstance(result, Decision)
        return result

    async def _limits(self, request: _core.Request) -> Dict[str, Any]:
        result = await self._call(request)
        assert isinstance(result, dict)
        return result

    async def _call(self, request: _core.Request) -> _core.Outcome:
        attempt = 0
        while True:
            try:
                return await self._attempt(request)
            except PermitError as error:
                delay = _core.retry_delay(error, request, attempt, self._options)
                if delay is None:
                    raise
            await asyncio.sleep(delay)
            attempt += 1

    async def _attempt(self, request: _core.Request) -> _core.Outcome:
        loop = asyncio.get_running_loop()
        if self._ssl is None and self._options.origin.scheme == "https":
            await self._default_context(loop)  # once per client, before the attempt's clock starts
        timeout_ms = self._options.timeout_ms
        holder: List[_Connection] = []
        try:
            status, headers, body, keep = await asyncio.wait_for(self._exchange(loop, request, holder), timeout_ms / 1000)
        except asyncio.TimeoutError as error:
            for conn in holder:
                conn.abort()
            raise _core.network_error(error, True, timeout_ms) from error
        except (OSError, EOFError, asyncio.LimitOverrunError, _http.ProtocolError, ValueError) as error:
            for conn in holder:
                conn.abort()
            raise _core.network_error(error, False, timeout_ms) from error
        except BaseException:
            # Cancelled mid-exchange: the connection's state is unknown.
            for conn in holder:
                conn.abort()
            raise
        conn = holder[0]
        try:
            return _core.outcome(request, status, headers, body)
        except MalformedAnswerError:
            keep = False  # whatever follows on this connection is not to be trusted either
            raise
        finally:
            # Reused only when nothing is left unread after the answer (stray bytes would be the next one's).
            if keep and conn.usable(loop):
                self._idle.append(conn)
            else:
                conn.writer.close()

    async def _exchange(self, loop: asyncio.AbstractEventLoop, request: _core.Request, holder: List[_Connection]) -> Tuple[int, Dict[str, str], bytes, bool]:
        conn = await self._checkout(loop)
        holder.append(conn)
        conn.writer.write(_http.request_bytes(request))
        await conn.writer.drain()
        return await _read_response(conn.reader, request.method)

    async def _checkout(self, loop: asyncio.AbstractEventLoop) -> _Connection:
        while self._idle:
            conn = self._idle.pop()
            if conn.usable(loop):
                return conn
            if conn.pid != os.getpid():
                _orphan(conn)
            else:
                conn.abort()
        origin = self._options.origin
        if origin.scheme == "https":
            context = self._ssl or await self._default_context(loop)
            reader, writer = await asyncio.open_connection(origin.host, origin.port, ssl=context, server_hostname=origin.host, limit=_MAX_HEAD)
        else:
            reader, writer = await asyncio.open_connection(origin.host, origin.port, limit=_MAX_HEAD)
        return _Connection(reader, writer, loop)

    async def _default_context(self, loop: asyncio.AbstractEventLoop) -> ssl.SSLContext:
        """The system's default context, built once on the loop's default executor (concurrent first
        connections wait for the same one)."""
        building = self._ssl_building
        if building is None or building.get_loop() is not loop or (building.done() and (building.cancelled() or building.exception() is not None)):
            building = self._ssl_building = loop.run_in_executor(None, ssl.create_default_context)
        context = await asyncio.shield(building)
        self._ssl = context
        return context

    def _after_fork_in_child(self) -> None:
        self._ssl_building = None
        idle, self._idle = self._idle, []
        for conn in idle:
            _orphan(conn)


async def _read_response(reader: asyncio.StreamReader, method: str) -> Tuple[int, Dict[str, str], bytes, bool]:
    """One HTTP/1.1 answer: status, headers (lower-case names), body, and whether the connection may be
    reused. Interim answers (1xx: 100 Continue, 103 Early Hints) are read past."""
    while True:
        head = _http.parse_head(await _until(reader, b"\r\n\r\n", _MAX_HEAD, "the answer's head"))
        if not head.interim:
            break
    how, length, reusable = _http.framing(head, method)
    keep = head.keep_alive and reusable
    if how == "none":
        return head.status, head.headers, b"", keep
    if how == "length":
        return head.status, head.headers, await reader.readexactly(length), keep
    if how == "chunked":
        return head.status, head.headers, await _read_chunked(reader), keep
    # The body runs to the end of the connection.
    body = await reader.read(_MAX_BODY + 1)
    while body and len(body) <= _MAX_BODY:
        more = await reader.read(_MAX_BODY + 1 - len(body))
        if not more:
            break
        body += more
    _http.check_body_size(len(body))
    return head.status, head.headers, body, False


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    body = b""
    while True:
        size = _http.chunk_size(await _until(reader, b"\r\n", _http.MAX_CHUNK_LINE, "a chunk-size line"))
        if size == 0:
            trailers = 0  # the trailer section, with the blank line that ends it: MAX_HEAD in all
            while True:
                line = await _until(reader, b"\r\n", _MAX_HEAD - trailers, "the trailer section")
                trailers += len(line)
                if line == b"\r\n":
                    return body
        _http.check_body_size(len(body) + size)
        body += await reader.readexactly(size)
        if await reader.readexactly(2) != b"\r\n":
            raise _http.ProtocolError("a chunk is not followed by CRLF")


async def _until(reader: asyncio.StreamReader, separator: bytes, limit: int, what: str) -> bytes:
    """The bytes up to and with ``separator``: at most ``limit`` of them, as the sync client reads them
    (the stream's own limit, MAX_HEAD, only bounds what it buffers)."""
    try:
        data = await reader.readuntil(separator)
    except asyncio.LimitOverrunError:
        raise _http.too_long(what, limit) from None
    except asyncio.IncompleteReadError:
        raise EOFError("the server closed the connection before its whole answer came") from None
    return _http.check_line(data, what, limit)


def _readable(sock: "socket.socket") -> bool:
    """Whether the kernel holds bytes or a FIN for ``sock`` (an idle connection's: either ends it)."""
    try:
        if hasattr(select, "poll"):  # select() cannot watch a descriptor above 1023
            poller = select.poll()
            poller.register(sock.fileno(), select.POLLIN)
            return bool(poller.poll(0))
        readable, _, _ = select.select([sock.fileno()], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


#: Connections a forked child inherited. They are the parent's: the child never writes, reads, closes
#: or unregisters them (its copy of the parent's event loop shares the parent's epoll instance, so even
#: an abort there would stop the parent's loop watching the socket). Kept referenced here so that no
#: finalizer does either.
_INHERITED: List[_Connection] = []


def _orphan(conn: _Connection) -> None:
    _INHERITED.append(conn)


#: Every client of this process, for the fork hook (weakly: a client that is gone is not kept).
_CLIENTS: "weakref.WeakSet[AsyncPermitClient]" = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for client in list(_CLIENTS):
        client._after_fork_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
