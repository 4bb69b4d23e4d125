"""Reserve an estimate, do the costly work, then settle by what it really cost (src/settle.ts).

    with settle(permits, "llm", org_id, estimate={"requests": 1, "tokens": 2000}) as s:
        reply = complete(prompt)
        s.actual = {"requests": 1, "tokens": reply.usage.total_tokens}
"""
from __future__ import annotations

from contextlib import asynccontextmanager, contextmanager
from typing import Any, AsyncIterator, Dict, Iterator, Mapping, Optional, Protocol, Union

from . import _validate as v
from .errors import InvalidInputError
from .types import Cost, Decision


class Settles(Protocol):
    """What :func:`settle` needs: a :class:`PermitClient` (or anything that acquires and adjusts)."""

    def acquire(self, policy: str, key: str, *, cost: Cost = 1, timeout_ms: int = 30_000) -> Decision: ...

    def adjust(self, policy: str, key: str, cost: Cost) -> Decision: ...


class AsyncSettles(Protocol):
    """What :func:`asettle` needs: an :class:`AsyncPermitClient`."""

    async def acquire(self, policy: str, key: str, *, cost: Cost = 1, timeout_ms: int = 30_000) -> Decision: ...

    async def adjust(self, policy: str, key: str, cost: Cost) -> Decision: ...


class Settlement:
    """One settlement in progress: set ``actual`` to what the work cost before the block ends."""

    def __init__(self, permit: Decision, estimate: Cost) -> None:
        #: The estimate's permit (acquired: its wait, if any, is over).
        self.permit = permit
        self.estimate = estimate
        #: What the work really cost, in the same form as ``estimate``. Left None, the estimate stands.
        self.actual: Optional[Cost] = None
        #: The bucket after the settling adjustment, when one was needed.
        self.adjustment: Optional[Decision] = None

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


def _negate(cost: Cost) -> Cost:
    return -cost if isinstance(cost, int) else {name: -c for name, c in cost.items()}


def _refund(estimate: Cost) -> Cost:
    """The estimate to give back: its negation (ints; the acquire that charged it checked it)."""
    cost = v.as_json_number(estimate) if not isinstance(estimate, Mapping) else {n: v.as_json_number(c) for n, c in estimate.items()}
    return _negate(cost)


@contextmanager
def settle(client: Settles, policy: str, key: str, estimate: Cost, *, timeout_ms: int = 30_000) -> Iterator[Settlement]:
    """Reserves ``estimate`` (acquire: one reservation, then a sleep until it is due; AcquireTimeoutError,
    consuming nothing, when it cannot be had within ``timeout_ms``), runs the block, then settles the
    difference to ``actual`` in one adjustment: a refund when the work cost less, a charge when it cost
    more. When the block raises, the whole estimate is refunded and the block's error re-raised (if the
    refund fails too, the estimate stays charged, and the block's error is still the one raised). When
    ``actual`` is not a cost of the estimate's form (a number for a number, a mapping for a mapping),
    nothing can be settled: the whole estimate is refunded likewise, and InvalidInputError (field
    ``actual``) raised.
    """
    s = Settlement(client.acquire(policy, key, cost=estimate, timeout_ms=timeout_ms), estimate)
    try:
        yield s
    except BaseException:
        if s.charged:
            try:
                client.adjust(policy, key, _refund(estimate))
            except Exception:
                pass
        raise
    try:
        diff = s.difference()
    except InvalidInputError:
        try:
            client.adjust(policy, key, _refund(estimate))
        except Exception:
            pass
        raise
    if diff is not None:
        s.adjustment = client.adjust(policy, key, diff)


@asynccontextmanager
async def asettle(client: AsyncSettles, policy: str, key: str, estimate: Cost, *, timeout_ms: int = 30_000) -> AsyncIterator[Settlement]:
    """:func:`settle` for asyncio: ``async with asettle(permits, ...) as s``."""
    s = Settlement(await client.acquire(policy, key, cost=estimate, timeout_ms=timeout_ms), estimate)
    try:
        yield s
    except BaseException:
        if s.charged:
            try:
                await client.adjust(policy, key, _refund(estimate))
            except Exception:
                pass
        raise
    try:
        diff = s.difference()
    except InvalidInputError:
        try:
            await client.adjust(policy, key, _refund(estimate))
        except Exception:
            pass
        raise
    if diff is not None:
        s.adjustment = await client.adjust(policy, key, diff)
