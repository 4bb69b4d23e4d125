"""The server's input rules (src/core/key.ts and src/http/permit-app.ts), checked before anything is sent.

Every message is the server's problem ``detail`` for the same input, word for word, so a log line reads
the same whichever side refused. The server's JSON is JavaScript's: numbers are printed as JavaScript
prints them, and a type is named as ``typeof`` names it.
"""
from __future__ import annotations

import math
import numbers
import operator
from decimal import Decimal
from typing import Any, Dict, Mapping, Union

from .errors import InvalidInputError

MAX_KEY_BYTES = 512
#: The longest wait one permit request may reserve (MAX_PERMIT_WAIT_MS in permit-app.ts).
MAX_PERMIT_WAIT_MS = 300_000
#: The most tokens one adjustment may refund or charge per limit.
MAX_ADJUST_TOKENS = 10**9
MAX_IDEMPOTENCY_KEY_LENGTH = 256
#: How much of a limit's name the server shows in a field and a message (``name.slice(0, 40)`` in key.ts).
MAX_LIMIT_NAME_SHOWN = 40

Number = Union[int, float]


def is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def as_json_number(v: Any) -> Any:
    """``v`` as JSON would carry it, for numbers of other types than int and float: an integral one
    (anything ``numbers.Integral``, such as numpy integers, through ``operator.index``; a Decimal or a
    Fraction that is exactly an integer) becomes an int, a non-integral one a float (which every check
    then refuses as the server refuses a fraction). Bools, ints, floats and what is no number stay as
    they are."""
    if isinstance(v, bool):
        return v
    if isinstance(v, int):
        return v if type(v) is int else int(v)  # IntEnum and other int subclasses: a plain int
    if isinstance(v, float):
        return v if type(v) is float else float(v)
    if isinstance(v, numbers.Integral):
        return operator.index(v)
    if isinstance(v, numbers.Rational):  # Fraction
        if v.denominator == 1:
            return int(v.numerator)
        try:
            return float(v)
        except OverflowError:
            return math.inf if v.numerator > 0 else -math.inf
    if isinstance(v, Decimal):
        if v.is_finite() and v == v.to_integral_value():
            return int(v)
        return math.nan if v.is_nan() else float(v)
    if isinstance(v, numbers.Real):  # e.g. numpy.float32: exactly a float
        try:
            return float(v)
        except (TypeError, ValueError, OverflowError):
            return v
    return v


def is_integer(v: Any) -> bool:
    """JavaScript's Number.isInteger of the value as JSON would carry it."""
    if not is_number(v):
        return False
    return isinstance(v, int) or (math.isfinite(v) and float(v).is_integer())


_is_integer = is_integer


def js_typeof(v: Any) -> str:
    """What JavaScript's ``typeof`` says of the value once it is JSON (Python types JSON cannot carry by name)."""
    if isinstance(v, bool):
        return "boolean"
    if is_number(v):
        return "number"
    if isinstance(v, str):
        return "string"
    if v is None or isinstance(v, (list, tuple, dict)):
        return "object"
    return type(v).__name__


def js_number(x: Number) -> str:
    """``String(x)`` in JavaScript for the number JSON.parse makes of ``x``."""
    if isinstance(x, int):
        try:
            x = float(x)  # JSON.parse reads any integer literal as the nearest double
        except OverflowError:
            return "Infinity" if x > 0 else "-Infinity"
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    if x == 0:
        return "0"
    sign = "-" if x < 0 else ""
    # repr gives the shortest digits that round-trip, as JavaScript does; only the layout differs.
    _, digit_tuple, exponent = Decimal(repr(abs(x))).as_tuple()
    digits = "".join(map(str, digit_tuple)).rstrip("0")
    assert isinstance(exponent, int)
    n = exponent + len("".join(map(str, digit_tuple)))  # the decimal point's position after the first digit
    k = len(digits)
    if k <= n <= 21:
        out = digits + "0" * (n - k)
    elif 0 < n <= 21:
        out = f"{digits[:n]}.{digits[n:]}"
    elif -6 < n <= 0:
        out = "0." + "0" * (-n) + digits
    else:
        e = n - 1
        mantissa = digits if k == 1 else f"{digits[0]}.{digits[1:]}"
        out = f"{mantissa}e{'+' if e >= 0 else '-'}{abs(e)}"
    return sign + out


def js_string(v: Any) -> str:
    """``String(v)`` in JavaScript for the value JSON.parse makes of ``v``."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if is_number(v):
        return js_number(v)
    if isinstance(v, str):
        return v
    if isinstance(v, (list, tuple)):
        return ",".join("" if x is None else js_string(x) for x in v)
    if isinstance(v, dict):
        return "[object Object]"
    return str(v)


def _utf16_length(s: str) -> int:
    return sum(2 if ord(c) > 0xFFFF else 1 for c in s)


def js_slice(s: str, n: int) -> str:
    """JavaScript's ``s.slice(0, n)``: the first ``n`` UTF-16 code units (it may split a surrogate pair, as JavaScript does)."""
    data = s.encode("utf-16-le", "surrogatepass")
    return s if len(data) <= 2 * n else data[: 2 * n].decode("utf-16-le", "surrogatepass")


def _well_formed(s: str) -> str:
    """``s`` with surrogate pairs written as two code points (as JSON escapes them) joined into the
    characters they encode; UnicodeError when a lone surrogate is left."""
    s = s.encode("utf-16-le", "surrogatepass").decode("utf-16-le")
    s.encode("utf-8")
    return s


def check_policy(policy: Any) -> str:
    """A policy: a non-empty string that UTF-8 (and so the bucket's path) can carry.

    No policy name has a lone surrogate (the server's names are ``[A-Za-z0-9_.-]``), and a path cannot
    carry one: refused here for every operation rather than sent to be a 404 for some and unsendable for others.
    """
    if not isinstance(policy, str) or policy == "":
        raise InvalidInputError("policy", "`policy` is required and must be a string")
    try:
        return _well_formed(policy)
    except UnicodeError:
        raise InvalidInputError("policy", "`policy` must be well-formed Unicode (no lone surrogates): no policy has such a name") from None


def check_key(key: Any) -> str:
    """A key is any well-formed UTF-8 string of 1 to 512 bytes, but ``.`` and ``..``.

    Returns the key as the server will read it: surrogate pairs written as two code points (as JSON
    escapes them) joined into one character.
    """
    if not isinstance(key, str):
        raise InvalidInputError("key", f"invalid key: must be a string, got {'null' if key is None else js_typeof(key)}")
    if key == "":
        raise InvalidInputError("key", "invalid key: must not be empty")
    try:
        # Pairs of surrogate code points become the characters they encode; a lone one stays and fails.
        key = _well_formed(key)
        size = len(key.encode("utf-8"))
    except UnicodeError:
        raise InvalidInputError("key", "invalid key: must be well-formed Unicode (no lone surrogates)") from None
    if size > MAX_KEY_BYTES:
        raise InvalidInputError("key", f"invalid key: must be at most {MAX_KEY_BYTES} bytes of UTF-8")
    if key in (".", ".."):
        raise InvalidInputError(
            "key", '`key` must not be "." or "..": no URL path can name them, so /v1/buckets could not read or reset the bucket'
        )
    return key


def _cost_object(cost: Any) -> Mapping[str, Any]:
    if not isinstance(cost, Mapping):
        got = "null" if cost is None else "an array" if isinstance(cost, (list, tuple)) else js_typeof(cost)
        raise InvalidInputError("cost", f"invalid cost: must be a number of tokens, or an object of tokens per limit, got {got}")
    for name in cost:
        if not isinstance(name, str):
            # JSON names are strings: the server never sees such a name (nor a message about it).
            raise InvalidInputError("cost", f"invalid cost: a limit's name must be a string, got {js_typeof(name)}")
    return cost


def limit_field(name: str) -> str:
    """``cost.<name>`` as the server names it: at most 40 UTF-16 code units of the name (key.ts costObject).
    The server's limit names are at most 32 characters, so only a name no policy has is cut."""
    return f"cost.{js_slice(name, MAX_LIMIT_NAME_SHOWN)}"


def _as_int(v: Number) -> int:
    return v if isinstance(v, int) else int(v)


def check_take_cost(cost: Any) -> Union[int, Dict[str, int]]:
    """A take's cost. What the client cannot know, the policy's capacities and limit names, the server checks."""
    cost = as_json_number(cost)
    if is_number(cost):
        if not _is_integer(cost) or cost < 1:
            raise InvalidInputError("cost", f"invalid cost: must be an integer of at least 1, got {js_number(cost)}")
        return _as_int(cost)
    costs = _cost_object(cost)
    out: Dict[str, int] = {}
    for name, c in costs.items():
        c = as_json_number(c)
        if not _is_integer(c) or c < 0:
            field = limit_field(name)
            raise InvalidInputError(field, f"invalid {field}: must be an integer of at least 0, got {js_string(c)}")
        out[name] = _as_int(c)
    if all(c == 0 for c in out.values()):
        raise InvalidInputError("cost", "invalid cost: must charge at least one limit at least 1 token")
    return out


def check_adjust_cost(cost: Any) -> Union[int, Dict[str, int]]:
    """An adjustment's cost: an integer, or one per limit, each from -1e9 to 1e9; not 0 (everywhere)."""

    def check(field: str, c: Any) -> int:
        c = as_json_number(c)
        if not _is_integer(c) or abs(c) > MAX_ADJUST_TOKENS:
            raise InvalidInputError(field, f"invalid {field}: must be an integer from -1e9 to 1e9 (below 0 a refund), got {js_string(c)}")
        return _as_int(c)

    cost = as_json_number(cost)
    if is_number(cost):
        n = check("cost", cost)
        if n == 0:
            raise InvalidInputError("cost", "invalid cost: must not be 0: an adjustment refunds (below 0) or charges (above 0)")
        return n
    out = {name: check(limit_field(name), c) for name, c in _cost_object(cost).items()}
    if all(c == 0 for c in out.values()):
        raise InvalidInputError("cost", "invalid cost: must not be 0 on every limit: an adjustment refunds (below 0) or charges (above 0)")
    return out


def check_max_wait_ms(value: Any) -> int:
    """0 to 300000. None too is refused, as the server refuses ``"maxWaitMs": null``: leave it out for 0."""
    value = as_json_number(value)
    if not _is_integer(value) or value < 0 or value > MAX_PERMIT_WAIT_MS:
        raise InvalidInputError("maxWaitMs", f"`maxWaitMs` must be an integer from 0 to {MAX_PERMIT_WAIT_MS}")
    return _as_int(value)


def check_settle_cost(cost: Any) -> Union[int, Dict[str, int]]:
    """A settlement's actual cost: an integer, or one per limit, each from 0 to 1e9 (0: the whole charge back)."""

    def check(field: str, c: Any) -> int:
        c = as_json_number(c)
        if not _is_integer(c) or c < 0 or c > MAX_ADJUST_TOKENS:
            raise InvalidInputError(field, f"invalid {field}: must be an integer from 0 to 1e9 (the actual cost: a settlement refunds at most what its charge took), got {js_string(c)}")
        return _as_int(c)

    cost = as_json_number(cost)
    if is_number(cost):
        return check("cost", cost)
    return {name: check(limit_field(name), c) for name, c in _cost_object(cost).items()}


def check_charge(value: Any) -> str:
    """A charge: the Idempotency-Key its take was sent with (1 to 256 printable ASCII characters)."""
    try:
        return check_idempotency_key(value)
    except InvalidInputError as err:
        raise InvalidInputError("charge", str(err).replace("Idempotency-Key", "charge")) from None


def check_idempotency_key(value: Any) -> str:
    """1 to 256 printable ASCII characters (space to ``~``): what the Idempotency-Key header can carry."""
    if isinstance(value, str) and 1 <= len(value) <= MAX_IDEMPOTENCY_KEY_LENGTH and all(" " <= c <= "~" for c in value):
        return value
    if not isinstance(value, str):
        got = js_typeof(value)
    else:
        n = _utf16_length(value)
        got = f"{n} characters" if n == 0 or n > MAX_IDEMPOTENCY_KEY_LENGTH else "a character outside space to ~"
    raise InvalidInputError(
        "Idempotency-Key",
        f"invalid Idempotency-Key: must be 1 to {MAX_IDEMPOTENCY_KEY_LENGTH} printable ASCII characters (space to ~), got {got}",
    )


def idempotency_header(key: str) -> str:
    """The key as a Structured Field String, as draft-ietf-httpapi-idempotency-key-header writes it."""
    return '"' + key.replace("\\", "\\\\").replace('"', '\\"') + '"'
