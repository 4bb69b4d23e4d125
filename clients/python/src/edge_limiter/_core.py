"""What the sync and async clients share, with no I/O: the base URL, the requests each operation makes,
how an answer becomes a Decision or an error, and when a failure is retried."""
from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Optional
from urllib.parse import quote, urlsplit

from . import _validate as v
from .errors import AcquireTimeoutError, PermitError, RedirectError, error_for
from .types import Cost, Decision, DecisionBody, is_decision_body

__version__ = "0.1.0"

#: What encodeURIComponent leaves as it is, besides letters and digits.
_URI_COMPONENT_SAFE = "-_.!~*'()"


@dataclass(frozen=True)
class Origin:
    """The configured base URL: the only place the token is ever sent."""

    scheme: str
    host: str
    port: int
    #: The Host header: host, with the port when it is not the scheme's default.
    authority: str
    #: The base URL's path without a trailing slash ("" or e.g. "/limits").
    path: str

    @classmethod
    def parse(cls, url: str) -> "Origin":
        if not isinstance(url, str) or not url:
            raise ValueError("url is required, e.g. https://limits.internal")
        u = urlsplit(url)
        if u.scheme not in ("http", "https"):
            raise ValueError(f"url must be http:// or https://, got {u.scheme or 'no scheme'}")
        if not u.hostname:
            raise ValueError("url must name a host")
        if u.username is not None or u.password is not None:
            raise ValueError("url must not hold credentials: pass the token as `token`")
        if u.query or u.fragment:
            raise ValueError("url must not have a query or fragment")
        if not u.path.isascii():
            raise ValueError("url's path must be ASCII: percent-encode it")
        default = 443 if u.scheme == "https" else 80
        port = u.port or default
        host = u.hostname
        shown = f"[{host}]" if ":" in host else host
        return cls(u.scheme, host, port, shown if port == default else f"{shown}:{port}", u.path.rstrip("/"))

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.authority}{self.path}"


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    #: Authorization among them: never in a repr.
    headers: Mapping[str, str] = field(repr=False)
    body: Optional[bytes]
    #: The call's Idempotency-Key, if it sends one: only then is a request without an answer retried.
    idempotency_key: Optional[str]


@dataclass(frozen=True)
class Options:
    """The client's settings, checked once."""

    origin: Origin
    token: str = field(repr=False)
    timeout_ms: int
    retries: int
    max_retry_delay_ms: int
    idempotency: bool

    @classmethod
    def of(cls, url: str, token: str, timeout_ms: int, retries: int, max_retry_delay_ms: int, idempotency: bool) -> "Options":
        origin = Origin.parse(url)
        if not isinstance(token, str) or not token or not all("!" <= c <= "~" for c in token):
            raise ValueError("token is required: one of the server's PERMIT_TOKENS (printable ASCII, no spaces)")
        for name, value, least in (("timeout_ms", timeout_ms, 1), ("retries", retries, 0), ("max_retry_delay_ms", max_retry_delay_ms, 0)):
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                raise ValueError(f"{name} must be an integer of at least {least}, got {value!r}")
        return cls(origin, token, timeout_ms, retries, max_retry_delay_ms, bool(idempotency))

    def request(self, method: str, path: str, body: Optional[Dict[str, Any]] = None, idempotency_key: Optional[str] = None) -> Request:
        headers = {
            "Host": self.origin.authority,
            "Authorization": f"Bearer {self.token}",
            "Accept": "application/json, application/problem+json",
            "User-Agent": f"edge-limiter-python/{__version__}",
        }
        data = None
        if body is not None:
            data = json.dumps(body, separators=(",", ":"), allow_nan=False).encode("ascii")
            headers["Content-Type"] = "application/json"
            headers["Content-Length"] = str(len(data))
        elif method != "GET":
            headers["Content-Length"] = "0"
        if idempotency_key is not None:
            headers["Idempotency-Key"] = v.idempotency_header(idempotency_key)
        return Request(method, self.origin.path + path, headers, data, idempotency_key)

    def idempotency_key(self, given: Optional[str]) -> Optional[str]:
        """The key a call sends: its own (checked as the server would), else a fresh UUID, unless idempotency is off."""
        if given is not None:
            return v.check_idempotency_key(given)
        return str(uuid.uuid4()) if self.idempotency else None

    # The requests of the operations: arguments checked in the server's order, then the request.

    def take(self, policy: str, key: str, cost: Cost, max_wait_ms: int, idempotency_key: Optional[str]) -> Request:
        once = self.idempotency_key(idempotency_key)
        body = {"policy": v.check_policy(policy), "key": v.check_key(key), "cost": v.check_take_cost(cost), "maxWaitMs": v.check_max_wait_ms(max_wait_ms)}
        return self.request("POST", "/v1/permits", body, once)

    def adjust(self, policy: str, key: str, cost: Cost, idempotency_key: Optional[str]) -> Request:
        once = self.idempotency_key(idempotency_key)
        body = {"policy": v.check_policy(policy), "key": v.check_key(key), "cost": v.check_adjust_cost(cost)}
        return self.request("POST", "/v1/adjustments", body, once)

    def bucket(self, method: str, policy: str, key: str) -> Request:
        """GET (peek) or DELETE (reset) of ``/v1/buckets/<policy>/<key>``, each part encoded as encodeURIComponent does."""
        p = quote(v.check_policy(policy), safe=_URI_COMPONENT_SAFE)
        k = quote(v.check_key(key), safe=_URI_COMPONENT_SAFE)
        return self.request(method, f"/v1/buckets/{p}/{k}")


def acquire_wait_ms(timeout_ms: int) -> int:
    """The reservation an acquire asks for: its timeout, at most the server's longest wait (what is not a
    number is left for the check of maxWaitMs to refuse)."""
    return min(timeout_ms, v.MAX_PERMIT_WAIT_MS) if v.is_number(timeout_ms) else timeout_ms


def outcome(request: Request, status: int, headers: Mapping[str, str], body: bytes) -> Optional[Decision]:
    """An answer as the call's result: a Decision (200/429), None (a reset's 204), or the typed error."""
    parsed: Any = None
    try:
        parsed = json.loads(body.decode("utf-8")) if body else None
    except ValueError:
        parsed = None
    if status in (200, 429) and is_decision_body(parsed):
        body_dict: DecisionBody = parsed
        return Decision.from_body(body_dict, status, headers)
    if status == 204 and request.method == "DELETE":
        return None
    if 300 <= status < 400:
        raise RedirectError(status, headers.get("location"))
    problem = parsed if isinstance(parsed, dict) else None
    raise error_for(status, problem, headers.get("retry-after"))


def network_error(error: BaseException, timed_out: bool, timeout_ms: int) -> PermitError:
    if timed_out:
        return PermitError(0, None, message=f"permit API did not answer within {timeout_ms} ms", code="permit_timeout")
    return PermitError(0, None, message=f"permit API unreachable: {error.__class__.__name__}: {error}", code="permit_network_error")


def retry_delay(error: PermitError, request: Request, attempt: int, options: Options) -> Optional[float]:
    """Seconds to wait before retrying after ``error`` on attempt ``attempt`` (0-based), or None: raise it.

    No answer (status 0): retried after 100 ms, 200 ms, ... only when the server can tell the retry from a
    new request (it carries an Idempotency-Key, or is a GET). A 503 (nothing consumed): after the
    server's Retry-After, at most max_retry_delay_ms. Nothing else is retried.
    """
    if attempt >= options.retries:
        return None
    if error.status == 0:
        if request.idempotency_key is None and request.method != "GET":
            return None
        return 0.1 * (1 << attempt)
    if error.status != 503:
        return None
    ms = _retry_after_ms(error)
    return min(max(0.0, ms), float(options.max_retry_delay_ms)) / 1000


def _retry_after_ms(error: PermitError) -> float:
    # Retry-After is whole seconds (RFC 9110; an HTTP date is not honoured); the problem may say it in ms.
    header = (error.retry_after or "").strip()
    if header.isdigit():
        return int(header) * 1000
    ms: Any = (error.problem or {}).get("retryAfterMs")
    return float(ms) if isinstance(ms, (int, float)) and not isinstance(ms, bool) else 1000.0


def acquired(decision: Decision, wait_ms: int) -> Decision:
    """An acquire's reservation, or AcquireTimeoutError when none could be had within its wait."""
    if not decision.allowed:
        raise AcquireTimeoutError(f"no permit within {wait_ms} ms; tokens exist in {decision.retry_after_ms} ms", decision.retry_after_ms)
    return decision
