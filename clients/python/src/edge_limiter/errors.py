"""Typed errors. ``code`` is stable and safe to branch on; the message is for people."""
from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Type

PROBLEM_PREFIX = "urn:edge-limiter:problem:"


class EdgeLimiterError(Exception):
    """Base class of every error this package raises."""

    code: str = "edge_limiter_error"


class InvalidInputError(EdgeLimiterError, ValueError):
    """An argument the server would refuse (key, cost, wait, policy, Idempotency-Key).

    Raised before anything is sent; ``str(err)`` is the text the server's problem ``detail`` would
    have (see the README for the two that name the policy's capacity). ``field`` names the argument
    as the server does: ``key``, ``cost``, ``cost.tokens``, ``maxWaitMs``, ``policy``,
    ``Idempotency-Key``; ``actual`` (or ``actual.<limit>``) for a settlement's actual cost. Also a
    ``ValueError``.
    """

    code = "invalid_input"

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


class AcquireTimeoutError(EdgeLimiterError):
    """``acquire`` could not get a permit within its timeout. Nothing was consumed."""

    code = "acquire_timeout"

    def __init__(self, message: str, retry_after_ms: int) -> None:
        super().__init__(message)
        #: Ms until the requested tokens exist.
        self.retry_after_ms = retry_after_ms


class PermitError(EdgeLimiterError):
    """The permit call failed.

    Either the server answered with a status other than 200/429 (``status`` and ``problem``, its
    RFC 9457 body; code ``permit_http_<status>``), or no answer came (``status`` 0; code
    ``permit_network_error`` or ``permit_timeout``, the underlying error as ``__cause__``).
    Subclasses name the common problems; :class:`MalformedAnswerError` an answer that cannot be trusted.
    """

    def __init__(
        self,
        status: int,
        problem: Optional[Mapping[str, Any]] = None,
        *,
        message: Optional[str] = None,
        code: Optional[str] = None,
        retry_after: Optional[str] = None,
    ) -> None:
        if message is None:
            detail = (problem or {}).get("detail") or (problem or {}).get("title") or "no detail"
            message = f"permit API answered {status}: {detail}"
        super().__init__(message)
        self.status = status
        self.problem: Optional[Mapping[str, Any]] = problem
        self.code = code or f"permit_http_{status}"
        #: The response's ``Retry-After`` header, when it had one.
        self.retry_after = retry_after

    @property
    def problem_type(self) -> Optional[str]:
        """The problem's short type, e.g. ``store-unavailable`` (``type`` without its URN prefix)."""
        t = (self.problem or {}).get("type")
        if isinstance(t, str) and t.startswith(PROBLEM_PREFIX):
            return t[len(PROBLEM_PREFIX):]
        return None


class InvalidRequestError(InvalidInputError, PermitError):
    """The server refused the request's input (400 ``invalid-request`` or ``invalid-json``).

    What the client cannot check alone, such as a cost above the policy's capacity or a limit the
    policy does not have. ``str(err)`` is the problem's ``detail``, as for a local InvalidInputError.
    """

    def __init__(self, status: int, problem: Mapping[str, Any], retry_after: Optional[str] = None) -> None:
        detail = str(problem.get("detail") or problem.get("title") or "invalid request")
        PermitError.__init__(self, status, problem, message=detail, retry_after=retry_after)
        self.field = str(problem.get("field") or "")


class UnauthorizedError(PermitError):
    """401: no or a wrong bearer token."""


class ForbiddenError(PermitError):
    """403 ``forbidden``: the client's token may not do this. ``right`` names the right it lacks
    (``permit``, ``settle``, ``admin`` or ``stats``), or ``policy`` the policy it may not use; the
    message carries the server's detail. Nothing was read or changed, and it is never retried."""

    def __init__(self, status: int, problem: Optional[Mapping[str, Any]] = None, *, retry_after: Optional[str] = None) -> None:
        super().__init__(status, problem, retry_after=retry_after)
        right = (problem or {}).get("right")
        policy = (problem or {}).get("policy")
        #: The right the token lacks, when that was the reason.
        self.right: Optional[str] = right if isinstance(right, str) else None
        #: The policy the token may not use, when that was the reason.
        self.policy: Optional[str] = policy if isinstance(policy, str) else None


class UnknownPolicyError(PermitError):
    """404 ``unknown-policy``: the server has no policy of that name."""


class IdempotencyKeyReusedError(PermitError):
    """422: this Idempotency-Key was used before for another request; nothing was applied."""


class UnknownChargeError(PermitError):
    """404 ``unknown-charge``: a settlement named a charge the server holds no take of on that policy and
    key (no take was sent with that Idempotency-Key there, or it is older than the server's idempotency
    window). Nothing was applied."""


class ChargeSettledError(PermitError):
    """409 ``charge-settled``: the charge was settled before with another cost. Nothing was applied."""


class StoreUnavailableError(PermitError):
    """503: the server's store is unavailable and the policy fails closed; nothing was consumed.

    Raised only once the client's retries (each after the server's Retry-After) are used up.
    """


class MalformedAnswerError(PermitError):
    """The server's answer is not one this request can have: not a decision (or a field of it missing or
    of the wrong type) where one was due, a decision for another policy or key than the request's (a
    connection whose answers got crossed), or a wait longer than the request allowed. The server (or
    something between it and the client) misbehaves; nothing is slept on, and the call is not retried.
    ``status`` is the answer's; code ``permit_malformed_answer``."""

    def __init__(self, status: int, what: str, retry_after: Optional[str] = None) -> None:
        super().__init__(status, None, message=f"permit API answered {status}: malformed answer: {what}", code="permit_malformed_answer", retry_after=retry_after)


class RedirectError(PermitError):
    """The server answered a redirect (3xx). The client never follows one: the bearer token is sent
    to the configured base URL only. ``location`` is where the server pointed."""

    def __init__(self, status: int, location: Optional[str]) -> None:
        where = location if location is not None else "no Location"
        super().__init__(
            status,
            None,
            message=f"permit API answered {status} (a redirect to {where}); redirects are never followed, "
            "so the bearer token goes to the configured url only: configure the final url",
            code="permit_redirect",
        )
        self.location = location


_BY_TYPE: Dict[str, Type[PermitError]] = {
    "unauthorized": UnauthorizedError,
    "forbidden": ForbiddenError,
    "unknown-policy": UnknownPolicyError,
    "idempotency-key-reused": IdempotencyKeyReusedError,
    "unknown-charge": UnknownChargeError,
    "charge-settled": ChargeSettledError,
    "store-unavailable": StoreUnavailableError,
}


def error_for(status: int, problem: Optional[Mapping[str, Any]], retry_after: Optional[str]) -> PermitError:
    """The typed error for an HTTP answer that is not a decision, by the problem's ``type``."""
    t = problem.get("type") if problem is not None else None
    short = t[len(PROBLEM_PREFIX):] if isinstance(t, str) and t.startswith(PROBLEM_PREFIX) else ""
    if problem is not None and short in ("invalid-request", "invalid-json"):
        return InvalidRequestError(status, problem, retry_after)
    return _BY_TYPE.get(short, PermitError)(status, problem, retry_after=retry_after)
