"""The permit API's answers: the JSON body as TypedDicts, and the Decision dataclass the clients return."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Literal, Mapping, Optional, Tuple, TypedDict, Union

#: What a take costs: a number charges every limit of the policy that many tokens; a mapping charges
#: each limit it names its own cost (``{"requests": 1, "tokens": 1200}``), and a limit it does not name 0.
#: An adjustment's cost has the same form; below 0 it refunds.
Cost = Union[int, Mapping[str, int]]

#: Why a decision was not made by the bucket itself (absent when it was).
Reason = Literal["store_error", "deny_cache", "lease", "local", "blocked"]

#: The response headers a decision carries for its caller to pass on (lower-case names).
RATE_LIMIT_HEADERS = ("ratelimit", "ratelimit-policy", "retry-after", "x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset", "x-ratelimit-reason")


class LimitBody(TypedDict):
    """One limit's numbers in the answer for a policy with several limits."""

    name: str
    limit: int
    remaining: int
    resetAfterMs: int
    retryAfterMs: int
    waitMs: int


class _DecisionBodyRequired(TypedDict):
    allowed: bool
    policy: str
    key: str
    limit: int
    retryAfterMs: int
    waitMs: int


class DecisionBody(_DecisionBodyRequired, total=False):
    """The JSON body of a 200 or 429 from ``POST /v1/permits`` (and of ``/v1/adjustments`` and ``GET /v1/buckets``)."""

    remaining: int
    resetAfterMs: int
    reason: Reason
    repeated: bool
    charge: str
    limits: List[LimitBody]
    refusedBy: List[str]
    #: The key's numbers were changed at runtime: each limit's ``{"name", "capacity", "refillPerSecond"}`` in force.
    limitsInForce: List[Dict[str, Any]]


@dataclass(frozen=True)
class LimitDecision:
    """One limit's numbers in a decision of a policy with several limits."""

    name: str
    limit: int
    #: Whole tokens left in it after this decision.
    remaining: int
    #: Ms until it is full again.
    reset_after_ms: int
    #: On a refusal: ms until this limit admits its cost (0: another limit refused). 0 when allowed.
    retry_after_ms: int
    #: On an allowed reservation: ms until this limit's part is due.
    wait_ms: int


@dataclass(frozen=True)
class Decision:
    """One decision of the permit API: whether the request may proceed, and the bucket's numbers.

    ``allowed`` with ``wait_ms > 0`` is a reservation: the permit is yours after ``wait_ms``
    (``acquire`` sleeps it for you). ``remaining`` and ``reset_after_ms`` are None only when the store
    did not answer and the policy's fail mode decided (``reason == "store_error"``).
    """

    allowed: bool
    policy: str
    key: str
    #: The bucket's capacity (with several limits, the most constraining one's).
    limit: int
    remaining: Optional[int]
    #: 0 when allowed; otherwise ms until the requested tokens exist.
    retry_after_ms: int
    reset_after_ms: Optional[int]
    #: Ms to wait before acting on an allowed reservation; 0 for an immediate permit.
    wait_ms: int
    reason: Optional[Reason] = None
    #: The request's Idempotency-Key was applied before: this is the first answer; nothing was charged again.
    repeated: bool = False
    #: A take sent with an Idempotency-Key: that key, which names this charge for a settlement (settle_charge).
    charge: Optional[str] = None
    #: A policy with several limits: each limit's numbers, in the policy's order.
    limits: Optional[Tuple[LimitDecision, ...]] = None
    #: A refusal of a policy with several limits: the limits that refused.
    refused_by: Optional[Tuple[str, ...]] = None
    #: The HTTP status the decision came with (200 or 429).
    status: int = 200
    #: The answer's headers, names in lower case.
    headers: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False)
    #: The JSON body as the server sent it.
    body: Optional[DecisionBody] = field(default=None, repr=False, compare=False)

    @property
    def rate_limit_headers(self) -> Dict[str, str]:
        """The rate-limit headers of ``headers`` (``ratelimit``, ``ratelimit-policy``, ``retry-after``,
        ``x-ratelimit-*``) that the server sent, under their lower-case names and with the values it sent,
        to pass on to your own caller (e.g. on your own 429)."""
        return {name: value for name, value in self.headers.items() if name in RATE_LIMIT_HEADERS}

    @classmethod
    def from_body(cls, body: DecisionBody, status: int = 200, headers: Optional[Mapping[str, str]] = None) -> "Decision":
        limits = body.get("limits")
        refused_by = body.get("refusedBy")
        return cls(
            allowed=body["allowed"],
            policy=body["policy"],
            key=body["key"],
            limit=body["limit"],
            remaining=body.get("remaining"),
            retry_after_ms=body["retryAfterMs"],
            reset_after_ms=body.get("resetAfterMs"),
            wait_ms=body["waitMs"],
            reason=body.get("reason"),
            repeated=body.get("repeated", False),
            charge=body.get("charge"),
            limits=None
            if limits is None
            else tuple(
                LimitDecision(l["name"], l["limit"], l["remaining"], l["resetAfterMs"], l["retryAfterMs"], l["waitMs"]) for l in limits
            ),
            refused_by=None if refused_by is None else tuple(refused_by),
            status=status,
            headers=dict(headers or {}),
            body=body,
        )


def is_decision_body(value: Any) -> bool:
    """Whether a parsed JSON value is a decision (an object with a boolean ``allowed``)."""
    return isinstance(value, dict) and isinstance(value.get("allowed"), bool)
