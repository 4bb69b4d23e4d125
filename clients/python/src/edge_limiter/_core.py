"""What the sync and async clients share, with no I/O: the base URL, the requests each operation makes,
how an answer becomes a Decision or an error, and when a failure is retried."""
from __future__ import annotations

import ipaddress
import json
import math
import ssl
import uuid
from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Optional, Union
from urllib.parse import quote, urlsplit

from . import _validate as v
from .errors import AcquireTimeoutError, InvalidInputError, MalformedAnswerError, PermitError, RedirectError, error_for
from .types import Cost, Decision, DecisionBody

__version__ = "0.1.0"

#: What encodeURIComponent leaves as it is, besides letters and digits.
_URI_COMPONENT_SAFE = "-_.!~*'()"
#: What a URL's path may hold as it is (RFC 3986 pchar and "/"), besides letters, digits and %XX escapes.
_PATH_SAFE = frozenset("-._~!$&'()*+,;=:@/")
_HEX = frozenset("0123456789abcdefABCDEF")


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
        for i, c in enumerate(url):
            # urlsplit would drop some of them (tab, line breaks) and keep others in the request line.
            if c.isspace() or not c.isprintable():
                raise ValueError(f"url must not hold whitespace or control characters (percent-encode them in the path): {c!r} at {i}")
        u = urlsplit(url)
        if u.scheme not in ("http", "https"):
            raise ValueError(f"url must be http:// or https://, got {u.scheme or 'no scheme'}")
        if not u.hostname:
            raise ValueError("url must name a host")
        if u.username is not None or u.password is not None:
            raise ValueError("url must not hold credentials: pass the token as `token`")
        if u.query or u.fragment or url.endswith(("?", "#")):
            raise ValueError("url must not have a query or fragment")
        if not u.path.isascii():
            raise ValueError("url's path must be ASCII: percent-encode it")
        for i, c in enumerate(u.path):
            if c == "%":
                if not set(u.path[i + 1 : i + 3]) <= _HEX or len(u.path[i + 1 : i + 3]) != 2:
                    raise ValueError(f"url's path has a % that is not a %XX escape: {u.path!r}")
            elif not (c.isalnum() or c in _PATH_SAFE):
                raise ValueError(f"url's path may hold letters, digits, -._~!$&'()*+,;=:@/ and %XX escapes only: percent-encode {c!r}")
        try:
            given = u.port
        except ValueError:
            raise ValueError(f"url's port must be a number from 1 to 65535: {u.netloc!r}") from None
        if given == 0:
            raise ValueError("url's port must be from 1 to 65535, got 0")
        host = u.hostname
        try:
            ipaddress.ip_address(host)
        except ValueError:
            try:
                # The name as DNS, TLS and the Host header carry it (an internationalised one as xn--...).
                host = host.encode("idna").decode("ascii")
            except UnicodeError:
                raise ValueError(f"url's host is not a host name: {host!r}") from None
        default = 443 if u.scheme == "https" else 80
        port = default if given is None else given
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
    #: The policy and key (as the server reads them) a decision in answer must be for.
    policy: Optional[str] = None
    key: Optional[str] = None
    #: A take's maxWaitMs: an answer that would have the caller wait longer is not trusted.
    max_wait_ms: Optional[int] = None
    #: Applied at most once without an Idempotency-Key (a settlement, by its charge): retried like one that has it.
    once: bool = False
    #: A runtime-limits route: answered 200 with the limits (a JSON object with `limits` and `source`).
    limits: bool = False


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

    def request(
        self,
        method: str,
        path: str,
        body: Optional[Dict[str, Any]] = None,
        idempotency_key: Optional[str] = None,
        *,
        policy: Optional[str] = None,
        key: Optional[str] = None,
        max_wait_ms: Optional[int] = None,
        once: bool = False,
        limits: bool = False,
    ) -> Request:
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
        return Request(method, self.origin.path + path, headers, data, idempotency_key, policy, key, max_wait_ms, once, limits)

    def idempotency_key(self, given: Optional[str]) -> Optional[str]:
        """The key a call sends: its own (checked as the server would), else a fresh UUID, unless idempotency is off."""
        if given is not None:
            return v.check_idempotency_key(given)
        return str(uuid.uuid4()) if self.idempotency else None

    # The requests of the operations: arguments checked in the server's order, then the request.

    def take(self, policy: str, key: str, cost: Cost, max_wait_ms: int, idempotency_key: Optional[str]) -> Request:
        once = self.idempotency_key(idempotency_key)
        policy, key = v.check_policy(policy), v.check_key(key)
        checked_cost, wait = v.check_take_cost(cost), v.check_max_wait_ms(max_wait_ms)
        body = {"policy": policy, "key": key, "cost": checked_cost, "maxWaitMs": wait}
        return self.request("POST", "/v1/permits", body, once, policy=policy, key=key, max_wait_ms=wait)

    def adjust(self, policy: str, key: str, cost: Cost, idempotency_key: Optional[str]) -> Request:
        once = self.idempotency_key(idempotency_key)
        policy, key = v.check_policy(policy), v.check_key(key)
        body = {"policy": policy, "key": key, "cost": v.check_adjust_cost(cost)}
        return self.request("POST", "/v1/adjustments", body, once, policy=policy, key=key)

    def settle_charge(self, policy: str, key: str, charge: str, cost: Cost) -> Request:
        charge = v.check_charge(charge)
        policy, key = v.check_policy(policy), v.check_key(key)
        body = {"policy": policy, "key": key, "charge": charge, "cost": v.check_settle_cost(cost)}
        return self.request("POST", "/v1/adjustments", body, policy=policy, key=key, once=True)

    def bucket(self, method: str, policy: str, key: str) -> Request:
        """GET (peek) or DELETE (reset) of ``/v1/buckets/<policy>/<key>``, each part encoded as encodeURIComponent does."""
        policy, key = _path_policy(policy), v.check_key(key)
        p = quote(policy, safe=_URI_COMPONENT_SAFE)
        k = quote(key, safe=_URI_COMPONENT_SAFE)
        return self.request(method, f"/v1/buckets/{p}/{k}", policy=policy, key=key)


    def limits_request(self, method: str, policy: str, key: str, body: Optional[Dict[str, Any]] = None, route: str = "limits") -> Request:
        """A key's runtime-limits route: ``/v1/<route>/<policy>/<key>``, the key checked (``None`` too: the
        path without it is the policy-wide change's). A change sets, it does not add: a request that got
        no answer is retried like a read."""
        policy, key = _path_policy(policy), v.check_key(key)
        path = f"/v1/{route}/{quote(policy, safe=_URI_COMPONENT_SAFE)}/{quote(key, safe=_URI_COMPONENT_SAFE)}"
        return self.request(method, path, body, policy=policy, key=key, once=True, limits=True)

    def policy_limits_request(self, method: str, policy: str, body: Optional[Dict[str, Any]] = None) -> Request:
        """The policy-wide change: ``/v1/limits/<policy>``; retried as limits_request's are."""
        policy = _path_policy(policy)
        return self.request(method, f"/v1/limits/{quote(policy, safe=_URI_COMPONENT_SAFE)}", body, policy=policy, key=None, once=True, limits=True)


def _path_policy(policy: Any) -> str:
    """A policy as a segment of a URL path: ``.`` and ``..`` are dot segments, which the server's URL parser
    resolves (``/v1/limits/./free`` is ``/v1/limits/free``, the policy-wide change), so no path can name them."""
    name = v.check_policy(policy)
    if name in (".", ".."):
        raise InvalidInputError("policy", '`policy` must not be "." or "..": no URL path can name them, so the request would reach another route')
    return name


def limits_body(limits: Mapping[str, Any], expires_in_ms: Optional[int]) -> Dict[str, Any]:
    """The body of a PUT of limits: the limits as a policy writes them, and when they end (the server checks both)."""
    if not isinstance(limits, Mapping):
        raise TypeError(f"limits must be a mapping such as {{'capacity': 100, 'refill': '100/minute'}}, got {type(limits).__name__}")
    body = dict(limits)
    if expires_in_ms is not None:
        body["expiresInMs"] = expires_in_ms
    return body


def acquire_wait_ms(timeout_ms: int) -> int:
    """The reservation an acquire asks for: its timeout, at most the server's longest wait (what is not a
    number is left for the check of maxWaitMs to refuse)."""
    timeout_ms = v.as_json_number(timeout_ms)
    return min(timeout_ms, v.MAX_PERMIT_WAIT_MS) if v.is_number(timeout_ms) else timeout_ms


#: What one call answers: a Decision, the limits of a runtime-limits route, or None (a reset).
Outcome = Union[Decision, Dict[str, Any], None]


def outcome(request: Request, status: int, headers: Mapping[str, str], body: bytes) -> Outcome:
    """An answer as the call's result: a Decision (200/429), None (a reset's 204), the limits (a
    runtime-limits route's 200: the JSON object), or the typed error."""
    parsed: Any = None
    try:
        parsed = json.loads(body.decode("utf-8")) if body else None
    except (ValueError, RecursionError):  # not UTF-8, not JSON, or nested too deep to read
        parsed = None
    if request.limits:
        if status == 200 and isinstance(parsed, dict) and isinstance(parsed.get("limits"), list) and isinstance(parsed.get("source"), str):
            return parsed
        if 200 <= status < 300:
            raise MalformedAnswerError(status, "the body is not the limits (a JSON object with `limits` and `source`)")
    elif request.method == "DELETE":
        if status == 204:
            return None
        if 200 <= status < 300:
            raise MalformedAnswerError(status, "a reset is answered 204")
    elif status in (200, 429) and isinstance(parsed, dict) and "allowed" in parsed:
        return decision_of(request, status, headers, parsed)
    elif 200 <= status < 300:
        raise MalformedAnswerError(status, "the body is not a decision (a JSON object with `allowed`)")
    if 300 <= status < 400:
        if headers.get("location") is None:  # e.g. a 304 Not Modified: no redirect, and no answer to this request
            raise MalformedAnswerError(status, "a 3xx answer without a Location (not a redirect)", headers.get("retry-after"))
        raise RedirectError(status, headers.get("location"))
    problem = parsed if isinstance(parsed, dict) else None
    raise error_for(status, problem, headers.get("retry-after"))


def _integer(value: Any) -> Optional[int]:
    """A JSON integer (an integral float too, as some re-serializer may write it), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    return None


def decision_of(request: Request, status: int, headers: Mapping[str, str], body: Dict[str, Any]) -> Decision:
    """A decision's body, checked: every field of its type, for the request's policy and key, with no
    longer wait than the request allowed; else MalformedAnswerError."""

    def bad(what: str) -> MalformedAnswerError:
        return MalformedAnswerError(status, what, headers.get("retry-after"))

    def integer(obj: Mapping[str, Any], name: str, where: str = "", optional: bool = False, least: Optional[int] = None) -> Optional[int]:
        value = obj.get(name)
        if value is None and optional:
            return None
        n = _integer(value)
        if n is None:
            raise bad(f"`{where}{name}` is {'missing' if name not in obj else f'not an integer: {_shown(value)}'}")
        if least is not None and n < least:
            raise bad(f"`{where}{name}` is below {least}: {n}")
        return n

    def string(obj: Mapping[str, Any], name: str, where: str = "") -> str:
        value = obj.get(name)
        if not isinstance(value, str):
            raise bad(f"`{where}{name}` is {'missing' if name not in obj else f'not a string: {_shown(value)}'}")
        return value

    allowed = body.get("allowed")
    if not isinstance(allowed, bool):
        raise bad(f"`allowed` is not a boolean: {_shown(allowed)}")
    out: Dict[str, Any] = {"allowed": allowed, "policy": string(body, "policy"), "key": string(body, "key")}
    out["limit"] = integer(body, "limit")
    remaining = integer(body, "remaining", optional=True)
    if remaining is not None:
        out["remaining"] = remaining
    out["retryAfterMs"] = integer(body, "retryAfterMs", least=0)
    reset = integer(body, "resetAfterMs", optional=True, least=0)
    if reset is not None:
        out["resetAfterMs"] = reset
    out["waitMs"] = integer(body, "waitMs", least=0)
    if body.get("reason") is not None:
        out["reason"] = string(body, "reason")
    if body.get("repeated") is not None:
        if not isinstance(body["repeated"], bool):
            raise bad(f"`repeated` is not a boolean: {_shown(body['repeated'])}")
        out["repeated"] = body["repeated"]
    if body.get("charge") is not None:
        out["charge"] = string(body, "charge")
    if body.get("limits") is not None:
        limits = body["limits"]
        if not isinstance(limits, list) or not all(isinstance(l, dict) for l in limits):
            raise bad(f"`limits` is not a list of objects: {_shown(limits)}")
        out["limits"] = [
            {
                "name": string(l, "name", f"limits[{i}]."),
                "limit": integer(l, "limit", f"limits[{i}]."),
                "remaining": integer(l, "remaining", f"limits[{i}]."),
                "resetAfterMs": integer(l, "resetAfterMs", f"limits[{i}].", least=0),
                "retryAfterMs": integer(l, "retryAfterMs", f"limits[{i}].", least=0),
                "waitMs": integer(l, "waitMs", f"limits[{i}].", least=0),
            }
            for i, l in enumerate(limits)
        ]
    if body.get("limitsInForce") is not None:
        in_force = body["limitsInForce"]
        if not isinstance(in_force, list) or not all(isinstance(l, dict) for l in in_force):
            raise bad(f"`limitsInForce` is not a list of objects: {_shown(in_force)}")
        out["limitsInForce"] = in_force
    if body.get("refusedBy") is not None:
        refused: Any = body["refusedBy"]
        if not isinstance(refused, list) or not all(isinstance(n, str) for n in refused):
            raise bad(f"`refusedBy` is not a list of strings: {_shown(refused)}")
        out["refusedBy"] = list(refused)
    # An answer to another request: a connection whose answers are crossed (shared after a fork, or
    # desynchronised by something in between). Its decision is not this request's.
    if (request.policy is not None and out["policy"] != request.policy) or (request.key is not None and out["key"] != request.key):
        raise bad(
            f"it decides for policy {_shown(out['policy'])} and key {_shown(out['key'])}, "
            f"not the request's {_shown(request.policy)} and {_shown(request.key)}"
        )
    if request.max_wait_ms is not None and allowed and out["waitMs"] > request.max_wait_ms:
        raise bad(f"a wait of {out['waitMs']} ms, where the request allowed at most {request.max_wait_ms} ms")
    decision_body: DecisionBody = out  # type: ignore[assignment]
    return Decision.from_body(decision_body, status, headers)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


class ProtocolError(Exception):
    """The bytes that came back were not an HTTP/1.1 answer this client reads (or were too large)."""


def network_error(error: BaseException, timed_out: bool, timeout_ms: int) -> PermitError:
    """No answer the client can read: status 0, retried as a lost answer is (but for a TLS certificate that
    could not be verified: code ``permit_tls_error``, not retried)."""
    if timed_out:
        return PermitError(0, None, message=f"permit API did not answer within {timeout_ms} ms", code="permit_timeout")
    if isinstance(error, ssl.SSLCertVerificationError):
        # Not a network error: a retry meets the same certificate. Not retried.
        return PermitError(
            0,
            None,
            message=f"permit API's TLS certificate could not be verified: {error.verify_message or error}; "
            "pass ssl_context= a context that trusts its CA (or use the host name the certificate is for)",
            code="permit_tls_error",
        )
    if isinstance(error, ProtocolError):
        return PermitError(0, None, message=f"permit API's answer could not be read: {error}", code="permit_network_error")
    return PermitError(0, None, message=f"permit API unreachable: {error.__class__.__name__}: {error}", code="permit_network_error")


def retry_delay(error: PermitError, request: Request, attempt: int, options: Options) -> Optional[float]:
    """Seconds to wait before retrying after ``error`` on attempt ``attempt`` (0-based), or None: raise it.

    No answer (status 0): retried after 100 ms, 200 ms, ... only when the server can tell the retry from a
    new request (it carries an Idempotency-Key, or is a GET). A 503 (nothing consumed): after the
    server's Retry-After, at most max_retry_delay_ms. Nothing else is retried.
    """
    if attempt >= options.retries or isinstance(error, MalformedAnswerError) or error.code == "permit_tls_error":
        return None
    if error.status == 0:
        if request.idempotency_key is None and request.method != "GET" and not request.once:
            return None
        return 0.1 * (1 << attempt)
    if error.status != 503:
        return None
    ms = _retry_after_ms(error)
    return min(max(0.0, ms), float(options.max_retry_delay_ms)) / 1000


def _retry_after_ms(error: PermitError) -> float:
    # Retry-After is whole seconds (RFC 9110; an HTTP date is not honoured); the problem may say it in ms.
    # Anything else (a negative, a fraction, digits outside ASCII) is not read: a second, then.
    header = (error.retry_after or "").strip()
    if header.isascii() and header.isdigit():
        return float(min(int(header), 10**9)) * 1000
    ms: Any = (error.problem or {}).get("retryAfterMs")
    if isinstance(ms, bool) or not isinstance(ms, (int, float)):
        return 1000.0
    return float(min(max(ms, 0), 10**12)) if not isinstance(ms, float) or math.isfinite(ms) else 1000.0


def acquired(decision: Decision, wait_ms: int) -> Decision:
    """An acquire's reservation, or AcquireTimeoutError when none could be had within its wait."""
    if not decision.allowed:
        raise AcquireTimeoutError(f"no permit within {wait_ms} ms; tokens exist in {decision.retry_after_ms} ms", decision.retry_after_ms)
    if decision.wait_ms > wait_ms:  # outcome() refuses such an answer already; never sleep on one
        raise MalformedAnswerError(decision.status, f"a wait of {decision.wait_ms} ms, where the request allowed at most {wait_ms} ms")
    return decision
