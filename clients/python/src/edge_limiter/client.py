"""The synchronous client: HTTP/1.1 over ``socket`` (TLS through ``ssl`` for https). Thread-safe: threads
share its pool of keep-alive connections. Each attempt runs to a deadline: name resolution, connecting,
the TLS handshake, sending and the whole answer together take at most ``timeout_ms``."""
from __future__ import annotations

import os
import select
import socket
import ssl
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from . import _core, _http
from .errors import MalformedAnswerError, PermitError
from .types import Cost, Decision

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from .settle import Settlement


class PermitClient:
    """A client of the permit endpoint.

    ``url`` is the service's base URL (``https://limits.internal``, or with a path prefix); ``token`` one
    of the server's PERMIT_TOKENS. Every call is bounded by ``timeout_ms`` per attempt. A 503 (the
    server's store is down; nothing consumed) is retried after the server's Retry-After (at most
    ``max_retry_delay_ms``); a call that got no answer is retried (after 100 ms, 200 ms, ...) when it
    carries an Idempotency-Key, which every take, acquire and adjust does unless ``idempotency=False``:
    the server applies a key once. At most ``retries`` retries. Redirects are never followed.

    For https without ``ssl_context``, the system's default context is built once, at the first
    connection, and reused. After ``os.fork()`` a child opens its own connections: the parent's are
    never shared.
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
        self._ssl_lock = threading.Lock()
        self._lock = threading.Lock()
        self._idle: List[_Connection] = []
        _CLIENTS.add(self)

    @property
    def url(self) -> str:
        return self._options.origin.url

    def take(self, policy: str, key: str, *, cost: Cost = 1, max_wait_ms: int = 0, idempotency_key: Optional[str] = None) -> Decision:
        """One decision (``POST /v1/permits``). A refusal (429) is not an error: ``allowed`` is False.

        ``cost`` is a number (every limit) or per limit, ``{"requests": 1, "tokens": 1200}``. With
        ``max_wait_ms`` the server may reserve a future slot: ``allowed`` with ``wait_ms > 0``.
        """
        return self._decision(self._options.take(policy, key, cost, max_wait_ms, idempotency_key))

    def acquire(self, policy: str, key: str, *, cost: Cost = 1, timeout_ms: int = 30_000, idempotency_key: Optional[str] = None) -> Decision:
        """Reserves a permit in one request (a wait of up to ``timeout_ms``, at most 300000), then sleeps
        until it is due: no polling. Raises AcquireTimeoutError, consuming nothing, when no permit can be
        had within that time (and MalformedAnswerError, sleeping nothing, for an answer whose wait is
        longer than the one asked for)."""
        wait = _core.acquire_wait_ms(timeout_ms)
        decision = _core.acquired(self.take(policy, key, cost=cost, max_wait_ms=wait, idempotency_key=idempotency_key), wait)
        if decision.wait_ms > 0:
            time.sleep(decision.wait_ms / 1000)
        return decision

    def adjust(self, policy: str, key: str, cost: Cost, *, idempotency_key: Optional[str] = None) -> Decision:
        """A free-form adjustment (``POST /v1/adjustments`` without a charge; the token needs the ``admin``
        right): below 0 a refund (never fuller than full), above 0 a charge (it may put a limit into debt),
        tied to no charge. Returns the bucket as peek reads it after."""
        return self._decision(self._options.adjust(policy, key, cost, idempotency_key))

    def settle_charge(self, policy: str, key: str, *, charge: str, cost: Cost) -> Decision:
        """Settles a charge (``POST /v1/adjustments`` with ``charge``; the token needs the ``settle``
        right): the take sent with Idempotency-Key ``charge`` (its decision's ``charge``), by what the
        work really cost (at least 0 per limit). Refunds at most what that charge took, once: the same
        settlement again answers ``repeated``, so it is retried after a lost answer. UnknownChargeError
        (404), ChargeSettledError (409: settled before with another cost)."""
        return self._decision(self._options.settle_charge(policy, key, charge, cost))

    def peek(self, policy: str, key: str) -> Decision:
        """The bucket's state; consumes nothing. ``allowed``: a take of 1 would pass now."""
        return self._decision(self._options.bucket("GET", policy, key))

    def reset(self, policy: str, key: str) -> None:
        """Refills the bucket (``DELETE /v1/buckets/<policy>/<key>``)."""
        self._call(self._options.bucket("DELETE", policy, key))


    # Runtime limits and blocks (the token needs the `admin` right). Each answers the key's (or the
    # policy's) limits as the server sends them: {"limits": [{"name", "capacity", "refillPerSecond"}],
    # "source": "policy" | "key" | "policy-wide", "expiresInMs"?, "blockedForMs"?, "previous"?}.

    def set_limits(self, policy: str, key: str, limits: Mapping[str, Any], *, expires_in_ms: Optional[int] = None) -> Dict[str, Any]:
        """Sets the key's own numbers (``PUT /v1/limits/<policy>/<key>``), written as the policy's are
        (``{"capacity": 100, "refill": "100/minute"}``, or ``{"limits": {"day": {...}}}``), until
        ``expires_in_ms`` (None: until cleared). Every node's next decision on the key uses them."""
        return self._limits(self._options.limits_request("PUT", policy, key, _core.limits_body(limits, expires_in_ms)))

    def get_limits(self, policy: str, key: str) -> Dict[str, Any]:
        """The key's limits in force, where they come from, and its block (``GET /v1/limits/<policy>/<key>``)."""
        return self._limits(self._options.limits_request("GET", policy, key))

    def clear_limits(self, policy: str, key: str) -> Dict[str, Any]:
        """Drops the key's own numbers (``DELETE /v1/limits/<policy>/<key>``)."""
        return self._limits(self._options.limits_request("DELETE", policy, key))

    def block(self, policy: str, key: str, *, for_ms: int) -> Dict[str, Any]:
        """Refuses every take on the key for ``for_ms``, on every node (``PUT /v1/blocks/<policy>/<key>``)."""
        return self._limits(self._options.limits_request("PUT", policy, key, {"forMs": for_ms}, route="blocks"))

    def unblock(self, policy: str, key: str) -> Dict[str, Any]:
        """Ends the key's block (``DELETE /v1/blocks/<policy>/<key>``)."""
        return self._limits(self._options.limits_request("DELETE", policy, key, route="blocks"))

    def set_policy_limits(self, policy: str, limits: Mapping[str, Any], *, expires_in_ms: Optional[int] = None) -> Dict[str, Any]:
        """Changes the numbers of every key of the policy without its own (``PUT /v1/limits/<policy>``),
        obeyed by every node within its policy refresh (1 s by default)."""
        return self._limits(self._options.policy_limits_request("PUT", policy, _core.limits_body(limits, expires_in_ms)))

    def get_policy_limits(self, policy: str) -> Dict[str, Any]:
        """The policy-wide change in force, if any (``GET /v1/limits/<policy>``)."""
        return self._limits(self._options.policy_limits_request("GET", policy))

    def clear_policy_limits(self, policy: str) -> Dict[str, Any]:
        """Ends the policy-wide change (``DELETE /v1/limits/<policy>``)."""
        return self._limits(self._options.policy_limits_request("DELETE", policy))

    def settle(
        self, policy: str, key: str, estimate: Cost, *, timeout_ms: int = 30_000, on_settle_error: "Optional[Callable[[Settlement], None]]" = None
    ) -> "AbstractContextManager[Settlement]":
        """``with client.settle(policy, key, estimate) as s: ...; s.actual = ...``: see :func:`edge_limiter.settle`."""
        from .settle import settle

        return settle(self, policy, key, estimate, timeout_ms=timeout_ms, on_settle_error=on_settle_error)

    def close(self) -> None:
        """Closes the idle connections (a later call opens new ones)."""
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def __enter__(self) -> "PermitClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"PermitClient({self.url!r})"

    # The HTTP side.

    def _decision(self, request: _core.Request) -> Decision:
        result = self._call(request)
        assert isinstance(result, Decision)
        return result

    def _limits(self, request: _core.Request) -> Dict[str, Any]:
        result = self._call(request)
        assert isinstance(result, dict)
        return result

    def _call(self, request: _core.Request) -> _core.Outcome:
        attempt = 0
        while True:
            try:
                return self._attempt(request)
            except PermitError as error:
                delay = _core.retry_delay(error, request, attempt, self._options)
                if delay is None:
                    raise
            time.sleep(delay)
            attempt += 1

    def _attempt(self, request: _core.Request) -> _core.Outcome:
        context = self._context()  # built before the attempt's clock starts: once per client
        timeout_ms = self._options.timeout_ms
        deadline = time.monotonic() + timeout_ms / 1000
        conn: Optional[_Connection] = None
        try:
            conn = self._checkout(deadline, context)
            conn.send(_http.request_bytes(request), deadline)
            status, headers, body, keep = conn.read_response(request.method, deadline)
        except (OSError, EOFError, _http.ProtocolError) as error:
            if conn is not None:
                conn.close()
            timed_out = isinstance(error, (TimeoutError, socket.timeout)) or time.monotonic() >= deadline
            raise _core.network_error(error, timed_out, timeout_ms) from error
        except BaseException:
            # Interrupted mid-exchange: the connection's state is unknown.
            if conn is not None:
                conn.close()
            raise
        try:
            return _core.outcome(request, status, headers, body)
        except MalformedAnswerError:
            keep = False  # whatever follows on this connection is not to be trusted either
            raise
        finally:
            assert conn is not None
            if keep and not conn.buffer:
                with self._lock:
                    self._idle.append(conn)
            else:
                conn.close()

    def _context(self) -> Optional[ssl.SSLContext]:
        """The TLS context of an https client: the caller's, or the system's default, built once (loading
        the CA bundle takes tens of ms) and shared by every connection."""
        if self._options.origin.scheme != "https":
            return None
        if self._ssl is None:
            with self._ssl_lock:
                if self._ssl is None:
                    self._ssl = ssl.create_default_context()
        return self._ssl

    def _checkout(self, deadline: float, context: Optional[ssl.SSLContext]) -> "_Connection":
        """An idle keep-alive connection the server has not closed, or a new one."""
        pid = os.getpid()
        while True:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                break
            if conn.pid == pid and not conn.buffer and not _dropped(conn.sock):
                return conn
            conn.close()  # closes this process's descriptor only: a parent's connection is not shut down
        origin = self._options.origin
        return _Connection(_connect(origin.host, origin.port, deadline, context), pid)

    def _after_fork_in_child(self) -> None:
        # The parent's idle connections are the parent's: a child that wrote on one would read the
        # parent's answers (and the parent the child's). Locks held by another thread at the fork
        # would never be released here.
        self._lock = threading.Lock()
        self._ssl_lock = threading.Lock()
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


class _Connection:
    """A socket, what was read from it beyond the last answer, and the process that opened it."""

    __slots__ = ("sock", "buffer", "pid")

    def __init__(self, sock: socket.socket, pid: int) -> None:
        self.sock = sock
        self.buffer = bytearray()
        self.pid = pid

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def send(self, data: bytes, deadline: float) -> None:
        view = memoryview(data)
        while view:
            self.sock.settimeout(_left(deadline))
            sent = self.sock.send(view)
            view = view[sent:]

    def _fill(self, deadline: float) -> None:
        self.sock.settimeout(_left(deadline))
        data = self.sock.recv(65536)
        if not data:
            raise EOFError("the server closed the connection before its whole answer came")
        self.buffer += data

    def _until(self, separator: bytes, limit: int, deadline: float, what: str) -> bytes:
        """The bytes up to and with ``separator``: at most ``limit`` of them, however they arrived."""
        start = 0
        while True:
            at = self.buffer.find(separator, start, limit + 1)
            if at >= 0:
                end = at + len(separator)
                out = _http.check_line(bytes(self.buffer[:end]), what, limit)
                del self.buffer[:end]
                return out
            if len(self.buffer) >= limit:
                raise _http.too_long(what, limit)
            start = max(0, len(self.buffer) - len(separator) + 1)
            self._fill(deadline)

    def _exactly(self, n: int, deadline: float) -> bytes:
        while len(self.buffer) < n:
            self._fill(deadline)
        out = bytes(self.buffer[:n])
        del self.buffer[:n]
        return out

    def _to_end(self, deadline: float) -> bytes:
        _http.check_body_size(len(self.buffer))
        while True:
            try:
                self._fill(deadline)
            except EOFError:
                break
            _http.check_body_size(len(self.buffer))
        out = bytes(self.buffer)
        self.buffer.clear()
        return out

    def read_response(self, method: str, deadline: float) -> Tuple[int, Dict[str, str], bytes, bool]:
        """One HTTP/1.1 answer: status, headers (lower-case names), body, and whether the connection may
        be reused. Interim answers (1xx: 100 Continue, 103 Early Hints) are read past."""
        while True:
            head = _http.parse_head(self._until(b"\r\n\r\n", _http.MAX_HEAD, deadline, "the answer's head"))
            if not head.interim:
                break
        how, length, reusable = _http.framing(head, method)
        keep = head.keep_alive and reusable
        if how == "none":
            return head.status, head.headers, b"", keep
        if how == "length":
            return head.status, head.headers, self._exactly(length, deadline), keep
        if how == "chunked":
            body = bytearray()
            while True:
                size = _http.chunk_size(self._until(b"\r\n", _http.MAX_CHUNK_LINE, deadline, "a chunk-size line"))
                if size == 0:
                    trailers = 0  # the trailer section, with the blank line that ends it: MAX_HEAD in all
                    while True:
                        line = self._until(b"\r\n", _http.MAX_HEAD - trailers, deadline, "the trailer section")
                        trailers += len(line)
                        if line == b"\r\n":
                            break
                    return head.status, head.headers, bytes(body), keep
                _http.check_body_size(len(body) + size)
                body += self._exactly(size, deadline)
                if self._exactly(2, deadline) != b"\r\n":
                    raise _http.ProtocolError("a chunk is not followed by CRLF")
        # The body runs to the end of the connection.
        return head.status, head.headers, self._to_end(deadline), False


def _left(deadline: float) -> float:
    """What is left of an attempt's time, or socket.timeout once nothing is."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise socket.timeout("timed out")
    return remaining


def _connect(host: str, port: int, deadline: float, context: Optional[ssl.SSLContext]) -> socket.socket:
    """A connection to the first address of ``host`` that answers (and its TLS handshake), by the deadline."""
    error: Optional[OSError] = None
    for family, kind, proto, _, address in _resolve(host, port, deadline):
        sock = socket.socket(family, kind, proto)
        try:
            sock.settimeout(_left(deadline))
            sock.connect(address)
        except OSError as e:
            sock.close()
            if isinstance(e, (TimeoutError, socket.timeout)):
                raise
            error = e
            continue
        except BaseException:
            sock.close()
            raise
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if context is None:
                return sock
            # The handshake, however many reads it takes, is bounded by this one timeout.
            sock.settimeout(_left(deadline))
            return context.wrap_socket(sock, server_hostname=host)
        except BaseException:
            sock.close()
            raise
    raise error or OSError(f"{host} has no address")


_AddrInfo = Sequence[Tuple[socket.AddressFamily, socket.SocketKind, int, str, Any]]

#: The most lookup threads this process runs at once, over every client and host. A lookup that hangs
#: (a resolver that does not answer) holds its thread until the system gives up on it; calls meanwhile
#: wait on the lookup in flight for their (host, port), and a lookup of another name past this bound
#: fails at once (a network error, retried as one) rather than start yet another thread.
MAX_LOOKUP_THREADS = 8


class _Lookup:
    """One ``getaddrinfo`` in flight, on its own daemon thread; every call that needs it waits on it."""

    __slots__ = ("done", "result")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.result: Union[_AddrInfo, OSError, None] = None


_lookups: Dict[Tuple[str, int], _Lookup] = {}
_lookups_lock = threading.Lock()


def _resolve(host: str, port: int, deadline: float) -> _AddrInfo:
    """``getaddrinfo``, bounded by the deadline. An IP address needs no lookup; a host name is looked up
    on a daemon thread, shared by every call that needs the same (host, port) while it runs, and at most
    MAX_LOOKUP_THREADS of them at once (the lookup itself cannot be interrupted: past a call's deadline it
    is left to finish on its own, and the call fails as timed out). Nothing is cached: a lookup that has
    finished is not reused by the next call."""
    try:
        return socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST)
    except socket.gaierror:
        pass  # a name, not an address
    name = (host, port)
    with _lookups_lock:
        lookup = _lookups.get(name)
        if lookup is None:
            if len(_lookups) >= MAX_LOOKUP_THREADS:
                raise OSError(f"cannot look up {host!r}: {len(_lookups)} name lookups are in flight already (the resolver does not answer?)")
            lookup = _lookups[name] = _Lookup()
            try:
                threading.Thread(target=_look_up, args=(host, port, lookup), name="edge-limiter-resolve", daemon=True).start()
            except Exception as e:  # RuntimeError: the process's thread limit (a hanging resolver's pile-up)
                del _lookups[name]
                raise OSError(f"cannot start a thread to look up {host!r}: {e}") from e
    if not lookup.done.wait(_left(deadline)):
        raise socket.timeout(f"looking up {host} took longer than the timeout")
    result = lookup.result
    if isinstance(result, OSError):
        raise result
    assert result is not None
    return result


def _look_up(host: str, port: int, lookup: _Lookup) -> None:
    try:
        lookup.result = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as e:
        lookup.result = e
    except Exception as e:  # UnicodeError (IDNA) and the like: the name cannot be looked up
        lookup.result = OSError(f"cannot look up {host!r}: {e}")
    finally:
        with _lookups_lock:
            if _lookups.get((host, port)) is lookup:
                del _lookups[(host, port)]
        if lookup.result is None:
            lookup.result = OSError(f"cannot look up {host!r}")
        lookup.done.set()


def _dropped(sock: socket.socket) -> bool:
    """Whether an idle connection was closed by the server (readable while idle: its FIN, or stray bytes)."""
    try:
        if isinstance(sock, ssl.SSLSocket) and sock.pending():
            return True
        if hasattr(select, "poll"):  # select() cannot watch a descriptor above 1023
            poller = select.poll()
            poller.register(sock, select.POLLIN)
            return bool(poller.poll(0))
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)


#: Every client of this process, for the fork hook (weakly: a client that is gone is not kept).
_CLIENTS: "weakref.WeakSet[PermitClient]" = weakref.WeakSet()


def _after_fork_in_child() -> None:
    # The lookups in flight at the fork run in the parent only: the child would wait on them for nothing.
    global _lookups_lock
    _lookups_lock = threading.Lock()
    _lookups.clear()
    for client in list(_CLIENTS):
        client._after_fork_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
