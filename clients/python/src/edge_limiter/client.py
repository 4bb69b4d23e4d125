"""The synchronous client, on http.client. Thread-safe: threads share its pool of keep-alive connections."""
from __future__ import annotations

import http.client
import select
import socket
import ssl
import threading
import time
from typing import TYPE_CHECKING, Dict, List, Optional, Tuple

from . import _core
from .errors import PermitError
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
        self._lock = threading.Lock()
        self._idle: List[http.client.HTTPConnection] = []

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
        had within that time."""
        wait = _core.acquire_wait_ms(timeout_ms)
        decision = _core.acquired(self.take(policy, key, cost=cost, max_wait_ms=wait, idempotency_key=idempotency_key), wait)
        if decision.wait_ms > 0:
            time.sleep(decision.wait_ms / 1000)
        return decision

    def adjust(self, policy: str, key: str, cost: Cost, *, idempotency_key: Optional[str] = None) -> Decision:
        """Settles a cost after the fact (``POST /v1/adjustments``): below 0 a refund (never fuller than
        full), above 0 a charge (it may put a limit into debt). Returns the bucket as peek reads it after."""
        return self._decision(self._options.adjust(policy, key, cost, idempotency_key))

    def peek(self, policy: str, key: str) -> Decision:
        """The bucket's state; consumes nothing. ``allowed``: a take of 1 would pass now."""
        return self._decision(self._options.bucket("GET", policy, key))

    def reset(self, policy: str, key: str) -> None:
        """Refills the bucket (``DELETE /v1/buckets/<policy>/<key>``)."""
        self._call(self._options.bucket("DELETE", policy, key))

    def settle(self, policy: str, key: str, estimate: Cost, *, timeout_ms: int = 30_000) -> "AbstractContextManager[Settlement]":
        """``with client.settle(policy, key, estimate) as s: ...; s.actual = ...``: see :func:`edge_limiter.settle`."""
        from .settle import settle

        return settle(self, policy, key, estimate, timeout_ms=timeout_ms)

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
        assert result is not None
        return result

    def _call(self, request: _core.Request) -> Optional[Decision]:
        attempt = 0
        while True:
            try:
                status, headers, body = self._attempt(request)
                return _core.outcome(request, status, headers, body)
            except PermitError as error:
                delay = _core.retry_delay(error, request, attempt, self._options)
                if delay is None:
                    raise
            time.sleep(delay)
            attempt += 1

    def _attempt(self, request: _core.Request) -> Tuple[int, Dict[str, str], bytes]:
        timeout_ms = self._options.timeout_ms
        deadline = time.monotonic() + timeout_ms / 1000

        def left() -> float:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("deadline passed")
            return remaining

        conn: Optional[http.client.HTTPConnection] = None
        try:
            conn = self._checkout(left())
            conn.request(request.method, request.path, body=request.body, headers=dict(request.headers))
            # Each socket operation gets what is left of the call's time.
            if conn.sock is not None:
                conn.sock.settimeout(left())
            response = conn.getresponse()
            if conn.sock is not None:
                conn.sock.settimeout(left())
            body = response.read()
            headers: Dict[str, str] = {}
            for name, value in response.getheaders():
                name = name.lower()
                headers[name] = f"{headers[name]}, {value}" if name in headers else value
            status = response.status
        except (OSError, http.client.HTTPException) as error:
            if conn is not None:
                conn.close()
            raise _core.network_error(error, isinstance(error, (TimeoutError, socket.timeout)) or time.monotonic() >= deadline, timeout_ms) from error
        if response.will_close or conn.sock is None:
            conn.close()
        else:
            with self._lock:
                self._idle.append(conn)
        return status, headers, body

    def _checkout(self, timeout: float) -> http.client.HTTPConnection:
        """An idle keep-alive connection the server has not closed, or a new one."""
        while True:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                break
            if conn.sock is not None and not _dropped(conn.sock):
                conn.sock.settimeout(timeout)
                return conn
            conn.close()
        origin = self._options.origin
        if origin.scheme == "https":
            context = self._ssl or ssl.create_default_context()
            return http.client.HTTPSConnection(origin.host, origin.port, timeout=timeout, context=context)
        return http.client.HTTPConnection(origin.host, origin.port, timeout=timeout)


def _dropped(sock: object) -> bool:
    """Whether an idle connection was closed by the server (readable while idle: its FIN, or stray bytes)."""
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)
