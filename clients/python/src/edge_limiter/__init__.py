"""Client for the edge-limiter permit endpoint (``POST /v1/permits`` and friends).

    from edge_limiter import PermitClient

    permits = PermitClient("https://limits.internal", token=os.environ["PERMIT_TOKEN"])
    permits.acquire("openai", "org-42", timeout_ms=20_000)  # AcquireTimeoutError if it cannot

Standard library only; :class:`PermitClient` is synchronous (sockets, thread-safe),
:class:`AsyncPermitClient` runs on asyncio streams.
"""
from ._core import __version__
from ._validate import MAX_KEY_BYTES, MAX_PERMIT_WAIT_MS
from .aio import AsyncPermitClient
from .client import PermitClient
from .errors import (
    AcquireTimeoutError,
    ChargeSettledError,
    EdgeLimiterError,
    ForbiddenError,
    IdempotencyKeyReusedError,
    InvalidInputError,
    InvalidRequestError,
    MalformedAnswerError,
    PermitError,
    RedirectError,
    StoreUnavailableError,
    UnauthorizedError,
    UnknownChargeError,
    UnknownPolicyError,
)
from .settle import Settlement, asettle, cost_difference, settle
from .types import Cost, Decision, DecisionBody, LimitBody, LimitDecision, Reason

__all__ = [
    "AcquireTimeoutError",
    "AsyncPermitClient",
    "ChargeSettledError",
    "Cost",
    "Decision",
    "DecisionBody",
    "EdgeLimiterError",
    "ForbiddenError",
    "IdempotencyKeyReusedError",
    "InvalidInputError",
    "InvalidRequestError",
    "LimitBody",
    "LimitDecision",
    "MAX_KEY_BYTES",
    "MalformedAnswerError",
    "MAX_PERMIT_WAIT_MS",
    "PermitClient",
    "PermitError",
    "Reason",
    "RedirectError",
    "Settlement",
    "StoreUnavailableError",
    "UnauthorizedError",
    "UnknownChargeError",
    "UnknownPolicyError",
    "__version__",
    "asettle",
    "cost_difference",
    "settle",
]
