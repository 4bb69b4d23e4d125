"""The client refuses what the server would refuse, before sending anything, in the server's words: each
bad input is given to the client (through a proxy that counts what reaches the server: nothing may),
then sent raw to the real server, and the client's message is compared with the problem's detail."""
from __future__ import annotations

import enum
import numbers
import unittest
from decimal import Decimal
from fractions import Fraction
from typing import Any, Callable, Dict, List, Optional, Tuple

from edge_limiter import AsyncPermitClient, InvalidInputError, PermitClient
from edge_limiter._validate import idempotency_header

from support import TOKEN, URL, Proxy, SyncFace, raw, unique

#: (what the test calls it, body fields of POST /v1/permits over a valid base)
TAKES: List[Tuple[str, Dict[str, Any]]] = [
    ("empty key", {"key": ""}),
    ("key of 513 bytes", {"key": "x" * 513}),
    ("key of 514 bytes in 257 characters", {"key": "é" * 257}),
    ("key with a lone surrogate", {"key": "a\ud800b"}),
    ("key that is a number", {"key": 5}),
    ("key that is null", {"key": None}),
    ("key that is a list", {"key": ["a"]}),
    ("key that is a boolean", {"key": True}),
    ("key .", {"key": "."}),
    ("key ..", {"key": ".."}),
    ("empty policy", {"policy": ""}),
    ("policy that is a number", {"policy": 7}),
    ("cost a string", {"cost": "3"}),
    ("cost null", {"cost": None}),
    ("cost an array", {"cost": [1]}),
    ("cost a boolean", {"cost": True}),
    ("cost an empty object", {"cost": {}}),
    ("cost object of zeros", {"policy": "llm", "cost": {"requests": 0, "tokens": 0}}),
    ("maxWaitMs negative", {"maxWaitMs": -1}),
    ("maxWaitMs too large", {"maxWaitMs": 300_001}),
    ("maxWaitMs fractional", {"maxWaitMs": 1.5}),
    ("maxWaitMs a string", {"maxWaitMs": "5"}),
    ("maxWaitMs a boolean", {"maxWaitMs": False}),
]

#: Costs the client can refuse without knowing the policy (below 1, not integers, a limit's part below 0).
COSTS: List[Tuple[str, Dict[str, Any]]] = [
    ("cost 0", {"cost": 0}),
    ("cost -1", {"cost": -1}),
    ("cost 1.5", {"cost": 1.5}),
    ("cost 0.5", {"cost": 0.5}),
    ("cost 1e-7", {"cost": 1e-7}),
    ("cost -1e21", {"cost": -1e21}),
    ("cost 0 on a policy of two limits", {"policy": "llm", "cost": 0}),
    ("a limit's part negative", {"policy": "llm", "cost": {"tokens": -1}}),
    ("a limit's part fractional", {"policy": "llm", "cost": {"tokens": 2.5e-5}}),
    ("a limit's part a string", {"policy": "llm", "cost": {"tokens": "many"}}),
]

ADJUSTS: List[Tuple[str, Dict[str, Any]]] = [
    ("cost 0", {"cost": 0}),
    ("cost 0.0", {"cost": 0.0}),
    ("cost fractional", {"cost": 1.5}),
    ("cost above 1e9", {"cost": 10**9 + 1}),
    ("cost below -1e9", {"cost": -(10**9) - 1}),
    ("cost a string", {"cost": "x"}),
    ("cost null", {"cost": None}),
    ("cost an array", {"cost": [1, 2]}),
    ("cost an empty object", {"cost": {}}),
    ("cost object of zeros", {"policy": "llm", "cost": {"tokens": 0}}),
    ("a limit's part fractional", {"policy": "llm", "cost": {"tokens": 0.5}}),
    ("a limit's part a string", {"policy": "llm", "cost": {"tokens": "a"}}),
    ("a limit's part null", {"policy": "llm", "cost": {"tokens": None}}),
    ("a limit's part an array", {"policy": "llm", "cost": {"tokens": [1, None, 2]}}),
    ("a limit's part an object", {"policy": "llm", "cost": {"tokens": {"a": 1}}}),
    ("a limit's part above 1e9", {"policy": "llm", "cost": {"tokens": 1e10}}),
    ("empty key", {"key": ""}),
    ("key ..", {"key": ".."}),
]

IDEMPOTENCY_KEYS: List[Tuple[str, str]] = [
    ("empty", ""),
    ("257 characters", "k" * 257),
    ("a tab", "a\tb"),
    ("a character beyond ASCII", "caf\u00e9"),
]


class Count(enum.IntEnum):
    TWO = 2


class Int64:
    """An integer of another type, as numpy.int64 is: a registered numbers.Integral, not an int."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __index__(self) -> int:
        return self.n

    def __int__(self) -> int:
        return self.n


numbers.Integral.register(Int64)


class Validation(unittest.TestCase):
    kind = "sync"

    def setUp(self) -> None:
        self.proxy = Proxy(URL)
        self.client: Any = (
            PermitClient(self.proxy.url, TOKEN) if self.kind == "sync" else SyncFace(AsyncPermitClient(self.proxy.url, TOKEN))
        )
        self.key = unique("validation")

    def tearDown(self) -> None:
        self.client.close()
        # Before anything is sent: not one request of any case reached the server.
        self.assertEqual(self.proxy.requests, 0)
        self.proxy.close()

    def refusal(self, call: Callable[[], Any]) -> InvalidInputError:
        with self.assertRaises(InvalidInputError) as caught:
            call()
        return caught.exception

    def server_problem(self, path: str, body: Dict[str, Any], headers: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
        status, _, problem = raw(URL, "POST", path, body, headers)
        self.assertEqual(status, 400, problem)
        self.assertEqual(problem["type"], "urn:edge-limiter:problem:invalid-request")
        return problem

    def test_take_refusals_say_what_the_server_says(self) -> None:
        for name, fields in TAKES + COSTS:
            with self.subTest(name):
                body = {"policy": "api", "key": self.key, "cost": 1, "maxWaitMs": 0, **fields}
                err = self.refusal(lambda: self.client.take(body["policy"], body["key"], cost=body["cost"], max_wait_ms=body["maxWaitMs"]))
                problem = self.server_problem("/v1/permits", body)
                self.assertEqual(str(err), problem["detail"])
                self.assertEqual(err.field, problem["field"])

    def test_acquire_refuses_as_take_does(self) -> None:
        body = {"policy": "api", "key": self.key, "cost": 1, "maxWaitMs": -5}
        err = self.refusal(lambda: self.client.acquire("api", self.key, timeout_ms=-5))
        self.assertEqual(str(err), self.server_problem("/v1/permits", body)["detail"])
        err = self.refusal(lambda: self.client.acquire("api", "", timeout_ms=100))
        self.assertEqual(str(err), "invalid key: must not be empty")

    def test_adjust_refusals_say_what_the_server_says(self) -> None:
        for name, fields in ADJUSTS:
            with self.subTest(name):
                body = {"policy": "api", "key": self.key, "cost": 1, **fields}
                err = self.refusal(lambda: self.client.adjust(body["policy"], body["key"], body["cost"]))
                problem = self.server_problem("/v1/adjustments", body)
                self.assertEqual(str(err), problem["detail"])
                self.assertEqual(err.field, problem["field"])

    def test_idempotency_keys_out_of_the_rules(self) -> None:
        for name, key in IDEMPOTENCY_KEYS:
            with self.subTest(name):
                body = {"policy": "api", "key": self.key, "cost": 1, "maxWaitMs": 0}
                # The header exactly as the client would have sent it.
                problem = self.server_problem("/v1/permits", body, {"Idempotency-Key": idempotency_header(key)})
                for call in (
                    lambda: self.client.take("api", self.key, idempotency_key=key),
                    lambda: self.client.acquire("api", self.key, idempotency_key=key),
                    lambda: self.client.adjust("api", self.key, -1, idempotency_key=key),
                ):
                    err = self.refusal(call)
                    self.assertEqual(str(err), problem["detail"])
                    self.assertEqual(err.field, "Idempotency-Key")
                    self.assertEqual(problem["field"], "Idempotency-Key")

    def test_peek_and_reset_refuse_keys_no_path_can_name(self) -> None:
        # A key too long: the server's GET says the same.
        long_key = "z" * 513
        status, _, problem = raw(URL, "GET", "/v1/buckets/api/" + long_key)
        self.assertEqual(status, 400)
        for op in (self.client.peek, self.client.reset):
            with self.subTest(op.__name__ if hasattr(op, "__name__") else "op"):
                self.assertEqual(str(self.refusal(lambda: op("api", long_key))), problem["detail"])
                # "." and "..": no URL can carry them (the server would see another route); the POST's message.
                for dots in (".", ".."):
                    self.assertIn("no URL path can name them", str(self.refusal(lambda: op("api", dots))))
                self.assertEqual(str(self.refusal(lambda: op("", "k"))), "`policy` is required and must be a string")

    def test_runtime_limits_refuse_a_key_or_policy_no_path_can_name(self) -> None:
        # An empty key, "." or ".." (a dot segment, which the server's URL parser resolves), or None would
        # reach /v1/limits/<policy>, the policy-wide change, or another route (review 5, H1); so would the
        # policy "." (`/v1/limits/./wide` is `/v1/limits/wide`). Refused, and nothing sent (tearDown).
        limits = {"capacity": 1000, "refill": "1000/second"}
        key_calls: Dict[str, Callable[[Any, Any], Any]] = {
            "set_limits": lambda p, k: self.client.set_limits(p, k, limits),
            "get_limits": lambda p, k: self.client.get_limits(p, k),
            "clear_limits": lambda p, k: self.client.clear_limits(p, k),
            "block": lambda p, k: self.client.block(p, k, for_ms=60_000),
            "unblock": lambda p, k: self.client.unblock(p, k),
            "peek": lambda p, k: self.client.peek(p, k),
            "reset": lambda p, k: self.client.reset(p, k),
        }
        dots = "no URL path can name them"
        for name, call in key_calls.items():
            for key, says in (("", "invalid key: must not be empty"), (".", dots), ("..", dots), (None, "must be a string, got null")):
                with self.subTest(op=name, key=key):
                    err = self.refusal(lambda: call("wide", key))
                    self.assertEqual(err.field, "key")
                    self.assertIn(says, str(err))
            for policy in (".", ".."):
                with self.subTest(op=name, policy=policy):
                    err = self.refusal(lambda: call(policy, "wide"))
                    self.assertEqual(err.field, "policy")
                    self.assertIn(dots, str(err))
        for policy in (".", ".."):
            for name, wide in (
                ("set_policy_limits", lambda: self.client.set_policy_limits(policy, limits)),
                ("get_policy_limits", lambda: self.client.get_policy_limits(policy)),
                ("clear_policy_limits", lambda: self.client.clear_policy_limits(policy)),
            ):
                with self.subTest(op=name, policy=policy):
                    err = self.refusal(wide)
                    self.assertEqual(err.field, "policy")
                    self.assertIn(dots, str(err))

    def test_what_the_server_accepts_the_client_sends(self) -> None:
        # The other side of the same rules: the limits themselves pass, and integral floats are integers
        # to JSON as to the server.
        with Proxy(URL) as counted:
            client: Any = PermitClient(counted.url, TOKEN) if self.kind == "sync" else SyncFace(AsyncPermitClient(counted.url, TOKEN))
            try:
                edge = self.key + "x" * (len(self.key) % 2)
                edge += "é" * ((512 - len(edge)) // 2)
                self.assertEqual(len(edge.encode()), 512)
                self.assertTrue(client.take("api", edge, cost=2.0, max_wait_ms=300_000.0).allowed)
                self.assertEqual(client.peek("api", edge).remaining, 8)
                self.assertTrue(client.take("api", self.key, idempotency_key=" " + "~" * 255).allowed)
                # A surrogate pair written as two code points (as JSON escapes it) is one character to the server.
                pair = "\ud83d\ude00"
                self.assertEqual(client.take("api", pair + self.key).key, "\U0001F600" + self.key)
                self.assertEqual(client.adjust("api", self.key, -(10**9)).remaining, 10)
                self.assertEqual(counted.requests, 5)
            finally:
                client.close()


    def test_a_policy_no_path_can_carry_is_refused_for_every_operation(self) -> None:
        for op, call in (
            ("take", lambda: self.client.take("a\ud800", self.key)),
            ("acquire", lambda: self.client.acquire("\udfff", self.key)),
            ("adjust", lambda: self.client.adjust("\ud800", self.key, -1)),
            ("peek", lambda: self.client.peek("\ud800", self.key)),
            ("reset", lambda: self.client.reset("x\udc00", self.key)),
        ):
            with self.subTest(op):
                err = self.refusal(call)
                self.assertEqual(err.field, "policy")
                self.assertIn("well-formed Unicode", str(err))

    def test_a_limit_name_is_shown_as_the_server_shows_it_at_most_40_characters(self) -> None:
        # The server names a limit it does not know by its first 40 UTF-16 code units (key.ts costObject).
        for name in ("x" * 60, "\U0001F600" * 25, "n" * 39 + "\U0001F600"):
            with self.subTest(name=name[:8]):
                body = {"policy": "llm", "key": self.key, "cost": {name: -1}, "maxWaitMs": 0}
                problem = self.server_problem("/v1/permits", body)
                err = self.refusal(lambda: self.client.take("llm", self.key, cost={name: -1}))
                self.assertEqual(err.field, problem["field"])
                self.assertEqual(str(err), f"invalid {problem['field']}: must be an integer of at least 0, got -1")
                adjust = self.refusal(lambda: self.client.adjust("llm", self.key, {name: 0.5}))
                self.assertEqual(adjust.field, self.server_problem("/v1/adjustments", {"policy": "llm", "key": self.key, "cost": {name: 0.5}})["field"])

    def test_max_wait_ms_none_is_refused_as_the_server_refuses_null(self) -> None:
        for call in (lambda: self.client.take("api", self.key, max_wait_ms=None), lambda: self.client.acquire("api", self.key, timeout_ms=None)):
            err = self.refusal(call)
            self.assertEqual((err.field, str(err)), ("maxWaitMs", "`maxWaitMs` must be an integer from 0 to 300000"))

    def test_a_limit_name_that_is_not_a_string_is_refused(self) -> None:
        for cost in ({1: 1}, {("tokens",): 1}, {None: 1}):
            with self.subTest(cost=cost):
                err = self.refusal(lambda: self.client.take("llm", self.key, cost=cost))
                self.assertEqual(err.field, "cost")
                self.assertIn("a limit's name must be a string", str(err))
                self.assertEqual(self.refusal(lambda: self.client.adjust("llm", self.key, cost)).field, "cost")

    def test_numbers_of_other_types_are_refused_when_not_integers(self) -> None:
        for value, shown in ((Decimal("1.5"), "1.5"), (Fraction(1, 2), "0.5"), (Decimal("NaN"), "NaN"), (Decimal("-2"), "-2")):
            with self.subTest(value=value):
                self.assertEqual(str(self.refusal(lambda: self.client.take("api", self.key, cost=value))), f"invalid cost: must be an integer of at least 1, got {shown}")
                err = self.refusal(lambda: self.client.take("llm", self.key, cost={"tokens": value}))
                self.assertEqual(str(err), f"invalid cost.tokens: must be an integer of at least 0, got {shown}")
        self.assertEqual(self.refusal(lambda: self.client.take("api", self.key, max_wait_ms=Decimal("0.5"))).field, "maxWaitMs")
        self.assertEqual(self.refusal(lambda: self.client.adjust("api", self.key, Fraction(3, 2))).field, "cost")

    def test_integral_numbers_of_other_types_are_sent_as_integers(self) -> None:
        with Proxy(URL) as counted:
            client: Any = PermitClient(counted.url, TOKEN) if self.kind == "sync" else SyncFace(AsyncPermitClient(counted.url, TOKEN))
            try:
                self.assertEqual(client.take("api", self.key, cost=Decimal(2)).remaining, 8)
                self.assertEqual(client.take("api", self.key, cost=Fraction(4, 2), max_wait_ms=Decimal("1E+3")).remaining, 6)
                self.assertEqual(client.take("api", self.key, cost=Count.TWO, max_wait_ms=Int64(0)).remaining, 4)
                self.assertEqual(client.take("api", self.key, cost=Int64(1)).remaining, 3)
                self.assertEqual(client.adjust("api", self.key, Int64(-3)).remaining, 6)
                self.assertEqual(client.acquire("api", self.key, cost=Decimal(1), timeout_ms=Decimal(400_000)).remaining, 5)
                d = client.take("llm", self.key, cost={"requests": Int64(1), "tokens": Decimal("250")})
                self.assertEqual([l.remaining for l in d.limits], [9, 750])
                self.assertEqual(counted.requests, 7)
            finally:
                client.close()


class AsyncValidation(Validation):
    kind = "async"


if __name__ == "__main__":
    unittest.main()
