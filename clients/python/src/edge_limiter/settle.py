"""Reserve an estimate, do the costly work, then settle by what it really cost (src/settle.ts).

    with settle(permits, "llm", org_id, estimate={"requests": 1, "tokens": 2000}) as s:
        reply = complete(prompt)
        s.actual = {"requests": 1, "tokens": reply.usage.total_tokens}
"""
from __future__ import annotations

from contextlib import asynccontextmanager, contextmanager
import uuid
import warnings
from typing import Any, AsyncIterator, Callable, Dict, Iterator, Mapping, Optional, Protocol, Union

from . import _validate as v
from .errors import InvalidInputError
from .types import Cost, Decision


class Settles(Protocol):
    """What :func:`settle` needs: a :class:`PermitClient` (or anything that acquires and settles a charge)."""

    def acquire(self, policy: str, key: str, *, cost: Cost = 1, timeout_ms: int = 30_000, idempotency_key: Optional[str] = None) -> Decision: ...

    def settle_charge(self, policy: str, key: str, *, charge: str, cost: Cost) -> Decision: ...


class AsyncSettles(Protocol):
    """What :func:`asettle` needs: an :class:`AsyncPermitClient`."""

    async def acquire(self, policy: str, key: str, *, cost: Cost = 1, timeout_ms: int = 30_000, idempotency_key: Optional[str] = None) -> Decision: ...

    async def settle_charge(self, policy: str, key: str, *, charge: str, cost: Cost) -> Decision: ...


class Settlement:
    """One settlement in progress: set ``actual`` to what the work cost before the block ends."""

    def __init__(self, permit: Decision, estimate: Cost, charge: str) -> None:
        #: The estimate's permit (acquired: its wait, if any, is over).
        self.permit = permit
        self.estimate = estimate
        #: The charge: the Idempotency-Key the acquire was sent with (a fresh UUID), which the settlement names.
        self.charge = charge
        #: What the work really cost, in the same form as ``estimate``. Left None, the estimate stands.
        self.actual: Optional[Cost] = None
        #: The bucket after the settlement, when one was made.
        self.adjustment: Optional[Decision] = None
        #: Why the settlement was not applied, when it failed (the work's outcome stands all the same).
        self.error: Optional[BaseException] = None

    @property
    def charged(self) -> bool:
        """Whether the store charged the permit: not when its fail mode admitted it (reason
        ``store_error`` or ``local``); such a permit is never settled against the store."""
        return self.permit.reason not in ("store_error", "local")

    def difference(self) -> Optional[Cost]:
        """What the settlement adjusts by: ``actual - estimate`` (None when nothing is to be settled).

        InvalidInputError (field ``actual``) when ``actual`` is not a cost of the estimate's form: a
        number of tokens (at least 0) for a number, a mapping of tokens per limit for a mapping."""
        if self.actual is None or not self.charged:
            return None
        estimate = _settled_cost("estimate", self.estimate)
        actual = _settled_cost("actual", self.actual)
        if isinstance(actual, int) != isinstance(estimate, int):
            # settle.ts's costDifference throws a TypeError here; the same words.
            raise InvalidInputError(
                "actual",
                "settle: `estimate` and `actual` must both be numbers or both be objects of tokens per limit, "
                f"got {_form(estimate)} estimate and {_form(actual)} actual",
            )
        return cost_difference(actual, estimate)


def _form(cost: Union[int, Mapping[str, int]]) -> str:
    return "a number" if isinstance(cost, int) else "an object"


def _settled_cost(field: str, value: Any) -> Union[int, Dict[str, int]]:
    """A settlement's cost as ints: a whole number of tokens of at least 0, or a mapping of them per limit."""

    def tokens(name: str, c: Any) -> int:
        c = v.as_json_number(c)
        if not v.is_integer(c) or c < 0:
            raise InvalidInputError(name, f"settle: `{name}` must be a whole number of tokens of at least 0, got {v.js_string(c)}")
        return int(c)

    value = v.as_json_number(value)
    if v.is_number(value):
        return tokens(field, value)
    if isinstance(value, Mapping):
        out: Dict[str, int] = {}
        for name, c in value.items():
            if not isinstance(name, str):
                raise InvalidInputError(field, f"settle: `{field}` must name its limits by strings, got {v.js_typeof(name)}")
            out[name] = tokens(f"{field}.{v.js_slice(name, v.MAX_LIMIT_NAME_SHOWN)}", c)
        return out
    raise InvalidInputError(field, f"settle: `{field}` must be a number of tokens or an object of tokens per limit, got {v.js_typeof(value)}")


def cost_difference(actual: Cost, estimate: Cost) -> Optional[Cost]:
    """``actual - estimate``, per limit (a limit only one side names counts 0 on the other); None when equal.

    TypeError (as settle.ts's costDifference) when one is a number and the other a mapping."""
    if isinstance(actual, int) and isinstance(estimate, int):
        return None if actual == estimate else actual - estimate
    if isinstance(actual, int) or isinstance(estimate, int):
        raise TypeError("settle: `estimate` and `actual` must both be numbers or both be objects of tokens per limit")
    diff: Dict[str, int] = {}
    for name in list(actual) + [n for n in estimate if n not in actual]:
        d = actual.get(name, 0) - estimate.get(name, 0)
        if d != 0:
            diff[name] = d
    return diff or None


def _nothing(estimate: Cost) -> Cost:
    """A cost of 0 in the estimate's form: the whole charge back."""
    return {} if isinstance(estimate, Mapping) else 0


def _actual(s: Settlement) -> Cost:
    """The actual cost to settle at, checked as :meth:`Settlement.difference` checks it."""
    s.difference()
    return _settled_cost("actual", s.actual)


def _report(s: Settlement, error: BaseException, on_settle_error: Optional[Callable[[Settlement], None]]) -> None:
    """A settlement that failed: kept on ``s.error`` and reported, never raised over the work's outcome."""
    s.error = error
    try:
        if on_settle_error is not None:
            on_settle_error(s)
        else:
            warnings.warn(f"edge_limiter.settle: the settlement of charge {s.charge} was not applied; the charge stays as estimated: {error}", RuntimeWarning, stacklevel=3)
    except Exception:
        pass


@contextmanager
def settle(
    client: Settles, policy: str, key: str, estimate: Cost, *, timeout_ms: int = 30_000, on_settle_error: Optional[Callable[[Settlement], None]] = None
) -> Iterator[Settlement]:
    """Reserves ``estimate`` (acquire with a fresh Idempotency-Key, which names the charge; one
    reservation, then a sleep until it is due; AcquireTimeoutError, consuming nothing, when it cannot be
    had within ``timeout_ms``), runs the block, then settles that charge by ``actual``
    (:meth:`PermitClient.settle_charge`): a refund when the work cost less, never more than the estimate
    took, a charge when it cost more. When the block raises, the charge is settled at 0 (the whole
    estimate back) and the block's error re-raised. When ``actual`` is not a cost of the estimate's form,
    or one the server refuses, the estimate goes back likewise and InvalidInputError is raised.

    When the settlement itself fails (the service is down, or the block outlasted the server's
    idempotency window), the block's outcome stands: nothing is raised for it; the error is kept on
    ``s.error`` and passed to ``on_settle_error(s)`` (default: a RuntimeWarning), and
    ``client.settle_charge(policy, key, charge=s.charge, cost=s.actual)`` may be sent again later,
    applied at most once.
    """
    charge = str(uuid.uuid4())
    s = Settlement(client.acquire(policy, key, cost=estimate, timeout_ms=timeout_ms, idempotency_key=charge), estimate, charge)

    def back() -> None:
        try:
            client.settle_charge(policy, key, charge=charge, cost=_nothing(estimate))
        except Exception:
            pass

    try:
        yield s
    except BaseException:
        if s.charged:
            back()
        raise
    if s.actual is None or not s.charged:
        return
    try:
        actual = _actual(s)
        s.adjustment = client.settle_charge(policy, key, charge=charge, cost=actual)
    except InvalidInputError:
        back()
        raise
    except Exception as err:
        _report(s, err, on_settle_error)


@asynccontextmanager
async def asettle(
    client: AsyncSettles, policy: str, key: str, estimate: Cost, *, timeout_ms: int = 30_000, on_settle_error: Optional[Callable[[Settlement], None]] = None
) -> AsyncIterator[Settlement]:
    """:func:`settle` for asyncio: ``async with asettle(permits, ...) as s``."""
    charge = str(uuid.uuid4())
    s = Settlement(await client.acquire(policy, key, cost=estimate, timeout_ms=timeout_ms, idempotency_key=charge), estimate, charge)

    async def back() -> None:
        try:
            await client.settle_charge(policy, key, charge=charge, cost=_nothing(estimate))
        except Exception:
            pass

    try:
        yield s
    except BaseException:
        if s.charged:
            await back()
        raise
    if s.actual is None or not s.charged:
        return
    try:
        actual = _actual(s)
        s.adjustment = await client.settle_charge(policy, key, charge=charge, cost=actual)
    except InvalidInputError:
        await back()
        raise
    except Exception as err:
        _report(s, err, on_settle_error)
