"""Every operation's contract against the real server (`npm start` on Redis), for the sync client and,
through SyncFace, the asyncio one; then what only the asyncio client must do (never block the loop)."""
from __future__ import annotations

import asyncio
import ssl
import threading
import time
import unittest
from typing import Any, List

from edge_limiter import (
    AcquireTimeoutError,
    AsyncPermitClient,
    Decision,
    ForbiddenError,
    IdempotencyKeyReusedError,
    InvalidInputError,
    InvalidRequestError,
    PermitError,
    StoreUnavailableError,
    UnauthorizedError,
    UnknownPolicyError,
)

from support import (
    DOWN_URL,
    NARROW_TOKEN,
    POLICIES,
    TOKEN,
    URL,
    URLS,
    Proxy,
    ScriptedServer,
    decision_json,
    make_client,
    tls_client_context,
    tls_server_context,
    unique,
)

API_CAPACITY = POLICIES["api"]["capacity"]
PACED_INTERVAL_MS = 1000 / POLICIES["paced"]["refillPerSecond"]


class Contract(unittest.TestCase):
    kind = "sync"

    def setUp(self) -> None:
        self.clients: List[Any] = []
        self.proxies: List[Proxy] = []
        self.client = self.make()
        self.key = unique(f"ops-{self.kind}")

    def tearDown(self) -> None:
        for c in self.clients:
            c.close()
        for p in self.proxies:
            p.close()

    def make(self, url: str = URL, **options: Any) -> Any:
        client = make_client(self.kind, url, **options)
        self.clients.append(client)
        return client

    def proxy(self, upstream: str = URL) -> Proxy:
        p = Proxy(upstream)
        self.proxies.append(p)
        return p

    def test_take_allowed_then_refused(self) -> None:
        d = self.client.take("api", self.key, cost=4)
        self.assertIsInstance(d, Decision)
        self.assertEqual((d.allowed, d.status, d.policy, d.key, d.limit, d.remaining, d.wait_ms, d.retry_after_ms), (True, 200, "api", self.key, API_CAPACITY, 6, 0, 0))
        self.assertEqual(d.headers["ratelimit-policy"].split(";")[:2], ['"api"', f"q={API_CAPACITY}"])
        self.assertEqual(self.client.take("api", self.key, cost=6).remaining, 0)
        refused = self.client.take("api", self.key)
        self.assertFalse(refused.allowed)
        self.assertEqual(refused.status, 429)
        self.assertGreater(refused.retry_after_ms, 0)
        # What a service passes on to its own caller.
        self.assertEqual(set(refused.rate_limit_headers), {"ratelimit", "ratelimit-policy", "retry-after", "x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset"})
        self.assertEqual(refused.rate_limit_headers["retry-after"], str(-(-refused.retry_after_ms // 1000)))
        self.assertEqual(refused.body["allowed"], False)

    def test_runtime_limits_and_blocks(self) -> None:
        key = self.key
        set_ = self.client.set_limits("api", key, {"capacity": API_CAPACITY * 5, "refillPerSecond": 1}, expires_in_ms=60_000)
        self.assertEqual((set_["source"], set_["limits"][0]["capacity"], set_["expiresInMs"], set_["previous"]["source"]), ("key", API_CAPACITY * 5, 60_000, "policy"))
        d = self.client.take("api", key)
        self.assertEqual((d.limit, d.remaining), (API_CAPACITY * 5, API_CAPACITY * 5 - 1))
        self.assertEqual(d.body["limitsInForce"][0]["capacity"], API_CAPACITY * 5)
        # The other server's next decision on the key obeys it too (the numbers are in the store).
        self.assertEqual(self.make(URLS[1]).take("api", key).limit, API_CAPACITY * 5)
        self.assertEqual(self.client.get_limits("api", key)["source"], "key")
        cleared = self.client.clear_limits("api", key)
        self.assertEqual((cleared["source"], cleared["previous"]["source"]), ("policy", "key"))
        self.assertEqual(self.client.block("api", key, for_ms=60_000)["blockedForMs"], 60_000)
        refused = self.client.take("api", key)
        self.assertEqual((refused.allowed, refused.status, refused.reason), (False, 429, "blocked"))
        self.assertEqual(refused.rate_limit_headers["x-ratelimit-reason"], "blocked")
        self.assertNotIn("blockedForMs", self.client.unblock("api", key))
        self.assertTrue(self.client.take("api", key).allowed)
        # A bad body: the server's 400 names the field; a policy-wide change, set and cleared.
        with self.assertRaises(InvalidRequestError) as caught:
            self.client.set_limits("api", key, {"capacity": 0, "refillPerSecond": 1})
        self.assertEqual(caught.exception.field, "capacity")
        wide = self.client.set_policy_limits("wide", {"capacity": 3, "refillPerSecond": 1}, expires_in_ms=60_000)
        self.assertEqual((wide["source"], wide["limits"][0]["capacity"]), ("policy-wide", 3))
        self.assertEqual(self.client.get_policy_limits("wide")["source"], "policy-wide")
        self.assertEqual(self.client.take("wide", key).limit, 3)
        self.assertEqual(self.client.clear_policy_limits("wide")["source"], "policy")

    def test_the_two_servers_share_the_bucket(self) -> None:
        other = self.make(URLS[1])
        self.client.take("api", self.key, cost=3)
        self.assertEqual(other.take("api", self.key, cost=3).remaining, API_CAPACITY - 6)

    def test_cost_per_limit(self) -> None:
        d = self.client.take("llm", self.key, cost={"requests": 1, "tokens": 900})
        self.assertTrue(d.allowed)
        self.assertEqual([(l.name, l.remaining) for l in d.limits], [("requests", 9), ("tokens", 100)])
        self.assertEqual(d.headers["ratelimit-policy"].count('"llm.'), 2)
        # Refused by one limit: no limit is charged, and the answer names which refused.
        refused = self.client.take("llm", self.key, cost={"tokens": 200})
        self.assertFalse(refused.allowed)
        self.assertEqual(refused.refused_by, ("tokens",))
        self.assertEqual([(l.name, l.remaining, l.retry_after_ms > 0) for l in refused.limits], [("requests", 9, False), ("tokens", 100, True)])
        # A number charges every limit.
        d = self.client.take("llm", self.key, cost=5)
        self.assertEqual([l.remaining for l in d.limits], [4, 95])
        # What the client cannot check alone, the server does: a limit the policy lacks, a cost over capacity.
        with self.assertRaises(InvalidRequestError) as caught:
            self.client.take("llm", self.key, cost={"images": 1})
        self.assertEqual((caught.exception.status, caught.exception.field), (400, "cost.images"))
        self.assertEqual(str(caught.exception), "invalid cost.images: names no limit of policy llm (its limits: requests, tokens)")
        self.assertIsInstance(caught.exception, InvalidInputError)
        with self.assertRaises(InvalidRequestError):
            self.client.take("api", self.key, cost=API_CAPACITY + 1)

    def test_acquire_reserves_in_one_request_then_sleeps(self) -> None:
        proxy = self.proxy()
        client = self.make(proxy.url)
        self.assertEqual(client.acquire("paced", self.key).wait_ms, 0)
        proxy.reset_count()
        started = time.monotonic()
        d = client.acquire("paced", self.key, timeout_ms=5000)
        slept_ms = (time.monotonic() - started) * 1000
        self.assertTrue(d.allowed)
        self.assertGreater(d.wait_ms, PACED_INTERVAL_MS / 2)
        self.assertGreaterEqual(slept_ms, d.wait_ms)
        self.assertLess(slept_ms, d.wait_ms + 150)
        self.assertEqual(proxy.requests, 1)  # one reservation, no polling

    def test_acquire_timeout_consumes_nothing(self) -> None:
        self.client.acquire("paced", self.key)  # the token; the next is PACED_INTERVAL_MS away
        started = time.monotonic()
        with self.assertRaises(AcquireTimeoutError) as caught:
            self.client.acquire("paced", self.key, timeout_ms=20)
        self.assertLess(time.monotonic() - started, 0.5)  # refused at once, not after a wait
        self.assertGreater(caught.exception.retry_after_ms, 20)
        self.assertEqual(caught.exception.code, "acquire_timeout")
        # Nothing was reserved: the next reservation is still the first in line.
        d = self.client.take("paced", self.key, max_wait_ms=5000)
        self.assertLessEqual(d.wait_ms, PACED_INTERVAL_MS)

    def test_adjust_refunds_and_charges(self) -> None:
        self.client.take("api", self.key, cost=5)
        refund = self.client.adjust("api", self.key, -3)
        self.assertEqual((refund.status, refund.remaining), (200, 8))
        self.assertEqual(self.client.adjust("api", self.key, 4).remaining, 4)
        # Never fuller than full.
        self.assertEqual(self.client.adjust("api", self.key, -100).remaining, API_CAPACITY)
        # A charge beyond what is left is a debt: later takes are refused until it is repaid.
        debt = self.client.adjust("api", self.key, API_CAPACITY + 5)
        self.assertEqual((debt.status, debt.allowed, debt.remaining), (200, False, 0))
        self.assertFalse(self.client.take("api", self.key).allowed)
        self.client.take("llm", self.key, cost={"requests": 1, "tokens": 900})
        d = self.client.adjust("llm", self.key, {"tokens": -600})
        self.assertEqual([l.remaining for l in d.limits], [9, 700])

    def test_peek_consumes_nothing(self) -> None:
        self.client.take("api", self.key, cost=2)
        first = self.client.peek("api", self.key)
        second = self.client.peek("api", self.key)
        self.assertEqual((first.remaining, second.remaining, first.allowed, first.status), (8, 8, True, 200))

    def test_reset_refills(self) -> None:
        self.client.take("api", self.key, cost=API_CAPACITY)
        self.assertIsNone(self.client.reset("api", self.key))
        self.assertEqual(self.client.peek("api", self.key).remaining, API_CAPACITY)

    def test_any_key_is_read_and_reset_at_its_own_path(self) -> None:
        for key in ("a/b", "x%2Fy", "line\nbreak", "é€😀", "a b?c#d&e=f", "..."):
            with self.subTest(key=key):
                full = f"{self.key}{key}"
                self.assertEqual(self.client.take("api", full, cost=3).key, full)
                self.assertEqual(self.client.peek("api", full).remaining, API_CAPACITY - 3)
                self.client.reset("api", full)
                self.assertEqual(self.client.peek("api", full).remaining, API_CAPACITY)

    def test_401_unauthorized(self) -> None:
        client = self.make(token="not-the-token")
        for call in (lambda: client.take("api", self.key), lambda: client.peek("api", self.key), lambda: client.reset("api", self.key)):
            with self.assertRaises(UnauthorizedError) as caught:
                call()
            self.assertEqual((caught.exception.status, caught.exception.code, caught.exception.problem_type), (401, "permit_http_401", "unauthorized"))
            self.assertNotIn("not-the-token", str(caught.exception))

    def test_403_forbidden(self) -> None:
        client = self.make(token=NARROW_TOKEN)
        self.assertTrue(client.take("api", self.key).allowed)
        for call in (lambda: client.reset("api", self.key), lambda: client.adjust("api", self.key, -1)):
            with self.assertRaises(ForbiddenError) as caught:
                call()
            e = caught.exception
            self.assertEqual((e.status, e.code, e.problem_type, e.right, e.policy), (403, "permit_http_403", "forbidden", "admin", None))
            self.assertIn("lacks the `admin` right", str(e))
            self.assertNotIn(NARROW_TOKEN, str(e))
        with self.assertRaises(ForbiddenError) as caught:
            client.take("llm", self.key)
        self.assertEqual((caught.exception.right, caught.exception.policy), (None, "llm"))
        self.assertIn('may not use the policy "llm"', str(caught.exception))
        # Nothing was reset or refunded: the one take stands.
        self.assertEqual(self.client.peek("api", self.key).remaining, API_CAPACITY - 1)

    def test_404_unknown_policy(self) -> None:
        for call in (lambda: self.client.take("nope", self.key), lambda: self.client.peek("nope", self.key), lambda: self.client.adjust("nope", self.key, 1)):
            with self.assertRaises(UnknownPolicyError) as caught:
                call()
            self.assertEqual((caught.exception.status, caught.exception.problem["field"]), (404, "policy"))
            self.assertEqual(str(caught.exception), 'permit API answered 404: no policy named "nope"')

    def test_idempotency_key_repeat_and_reuse(self) -> None:
        first = self.client.take("api", self.key, cost=2, idempotency_key="order-1")
        again = self.client.take("api", self.key, cost=2, idempotency_key="order-1")
        self.assertFalse(first.repeated)
        self.assertTrue(again.repeated)
        self.assertEqual(again.remaining, first.remaining)
        self.assertEqual(self.client.peek("api", self.key).remaining, API_CAPACITY - 2)  # charged once
        with self.assertRaises(IdempotencyKeyReusedError) as caught:
            self.client.take("api", self.key, cost=3, idempotency_key="order-1")
        self.assertEqual((caught.exception.status, caught.exception.problem_type), (422, "idempotency-key-reused"))
        self.assertEqual(self.client.peek("api", self.key).remaining, API_CAPACITY - 2)  # nothing applied
        # The same for adjustments, and acquire sends its key with its one take.
        self.client.adjust("api", self.key, -1, idempotency_key="refund-1")
        self.assertTrue(self.client.adjust("api", self.key, -1, idempotency_key="refund-1").repeated)
        self.assertEqual(self.client.peek("api", self.key).remaining, API_CAPACITY - 1)
        self.client.acquire("api", self.key, idempotency_key="acq-1")
        self.assertTrue(self.client.take("api", self.key, max_wait_ms=30_000, idempotency_key="acq-1").repeated)

    def test_every_take_and_adjust_carries_a_fresh_key_unless_turned_off(self) -> None:
        with ScriptedServer([(200, {}, decision_json())] * 4 + [(204, {}, None)] * 2) as server:
            client = self.make(server.url)
            client.take("p", "k")
            client.adjust("p", "k", 1)
            client.peek("p", "k")
            self.make(server.url, idempotency=False).take("p", "k")
            client.reset("p", "k")
            keys = [r["headers"].get("idempotency-key") for r in server.received]
            self.assertRegex(keys[0], r'^"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"$')
            self.assertNotEqual(keys[0], keys[1])
            self.assertEqual(keys[2:], [None, None, None])
            self.assertEqual([r["headers"]["authorization"] for r in server.received], [f"Bearer {TOKEN}"] * 5)

    def test_503_from_a_policy_that_fails_closed_is_retried_after_retry_after(self) -> None:
        proxy = self.proxy(DOWN_URL)
        client = self.make(proxy.url, retries=2, max_retry_delay_ms=150)
        started = time.monotonic()
        with self.assertRaises(StoreUnavailableError) as caught:
            client.take("closed", self.key)
        elapsed = time.monotonic() - started
        err = caught.exception
        self.assertEqual((err.status, err.problem_type, err.retry_after, err.problem["retryAfterMs"]), (503, "store-unavailable", "1", 1000))
        # The first try and 2 retries, each after Retry-After: 1 s, capped at 150 ms.
        self.assertEqual(proxy.requests, 3)
        self.assertGreaterEqual(elapsed, 0.3)
        self.assertLess(elapsed, 1.5)
        # A policy that fails open admits, and says the store gave no numbers.
        d = client.take("open", self.key)
        self.assertEqual((d.allowed, d.reason, d.remaining, d.reset_after_ms), (True, "store_error", None, None))

    def test_503_then_200_waits_the_servers_retry_after(self) -> None:
        unavailable = (503, {"Content-Type": "application/problem+json", "Retry-After": "1"}, {"type": "urn:edge-limiter:problem:store-unavailable", "status": 503, "retryAfterMs": 1000})
        with ScriptedServer([unavailable, (200, {"Content-Type": "application/json"}, decision_json(remaining=4))]) as server:
            started = time.monotonic()
            d = self.make(server.url).take("p", "k")
            elapsed = time.monotonic() - started
            self.assertEqual(d.remaining, 4)
            self.assertGreaterEqual(elapsed, 1.0)
            self.assertLess(elapsed, 1.6)
            sent = [r["headers"]["idempotency-key"] for r in server.received]
            self.assertEqual(len(sent), 2)
            self.assertEqual(sent[0], sent[1])  # the retry is the same request

    def test_other_errors_are_not_retried(self) -> None:
        with ScriptedServer([(500, {"Content-Type": "application/problem+json"}, {"type": "urn:edge-limiter:problem:internal-error", "detail": "boom"})] * 3) as server:
            with self.assertRaises(PermitError) as caught:
                self.make(server.url).take("p", "k")
            self.assertEqual((caught.exception.status, str(caught.exception), len(server.received)), (500, "permit API answered 500: boom", 1))

    def test_timeouts_bound_each_attempt_and_are_retried_with_the_same_key(self) -> None:
        with ScriptedServer(["hang", "hang", "hang"]) as server:
            client = self.make(server.url, timeout_ms=100, retries=2)
            started = time.monotonic()
            with self.assertRaises(PermitError) as caught:
                client.take("p", "k", max_wait_ms=60_000)  # the server's wait is not the client's
            elapsed = time.monotonic() - started
            self.assertEqual((caught.exception.status, caught.exception.code), (0, "permit_timeout"))
            # Three attempts of 100 ms, 100 and 200 ms apart.
            self.assertEqual(len(server.received), 3)
            self.assertEqual(len({r["headers"]["idempotency-key"] for r in server.received}), 1)
            self.assertGreaterEqual(elapsed, 0.6)
            self.assertLess(elapsed, 1.5)

    def test_https(self) -> None:
        """Over TLS (an https front of the real server): with the caller's trust it works, connections kept
        alive; with the system's trust the certificate is refused, and no request (no token) is sent."""
        front = self.proxy()  # counts what reaches the server in the clear
        tls = Proxy(front.url, tls=tls_server_context())
        self.proxies.append(tls)
        client = self.make(tls.url, ssl_context=tls_client_context())
        self.assertTrue(client.take("api", self.key, cost=2).allowed)
        self.assertEqual(client.peek("api", self.key).remaining, API_CAPACITY - 2)
        self.assertEqual((front.requests, len(tls._sockets)), (2, 2))  # two requests on one connection
        untrusting = self.make(tls.url, retries=0)
        with self.assertRaises(PermitError) as caught:
            untrusting.take("api", self.key)
        self.assertEqual(caught.exception.code, "permit_tls_error")  # its own code: not retried
        self.assertIsInstance(caught.exception.__cause__, ssl.SSLCertVerificationError)
        self.assertEqual(front.requests, 2)

    def test_a_refused_connection_is_a_network_error(self) -> None:
        with ScriptedServer() as server:
            url = server.url
        client = self.make(url, retries=1)
        with self.assertRaises(PermitError) as caught:
            client.take("p", "k")
        self.assertEqual((caught.exception.status, caught.exception.code), (0, "permit_network_error"))
        self.assertIsInstance(caught.exception.__cause__, OSError)


class AsyncContract(Contract):
    kind = "async"


class AsyncOnly(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self) -> None:
        self.client = AsyncPermitClient(URL, TOKEN)
        self.key = unique("async")

    async def asyncTearDown(self) -> None:
        await self.client.aclose()

    async def test_never_blocks_the_event_loop(self) -> None:
        """A ticker (every 5 ms) keeps ticking while 30 takes run at once and while an acquire sleeps out
        its reservation (a blocking sleep would stop it for the whole wait); no thread is started."""
        ticks = 0
        stop = asyncio.Event()

        async def ticker() -> None:
            nonlocal ticks
            while not stop.is_set():
                await asyncio.sleep(0.005)
                ticks += 1

        threads = set(threading.enumerate())
        tick = asyncio.create_task(ticker())
        decisions = await asyncio.gather(*(self.client.take("api", f"{self.key}-{i % 3}") for i in range(30)))
        await self.client.acquire("paced", self.key)
        before = ticks
        waited = await self.client.acquire("paced", self.key)
        during = ticks - before
        stop.set()
        await tick
        self.assertEqual(sum(d.allowed for d in decisions), 30)
        self.assertGreater(waited.wait_ms, PACED_INTERVAL_MS / 2)
        # About wait_ms / 5 ticks; a quarter of them is plenty to tell from none.
        self.assertGreaterEqual(during, waited.wait_ms / 5 / 4)
        self.assertEqual(set(threading.enumerate()) - threads, set())

    async def test_concurrent_acquires_queue_in_order(self) -> None:
        started = time.monotonic()
        done = await asyncio.gather(*(self.client.acquire("paced", self.key) for _ in range(4)))
        elapsed_ms = (time.monotonic() - started) * 1000
        self.assertEqual(sorted(d.wait_ms > 0 for d in done), [False, True, True, True])
        self.assertGreaterEqual(elapsed_ms, 3 * PACED_INTERVAL_MS - 30)
        self.assertLess(elapsed_ms, 3 * PACED_INTERVAL_MS + 300)

    async def test_cancelling_a_call_closes_its_connection_and_the_client_goes_on(self) -> None:
        with ScriptedServer(["hang", (200, {}, decision_json())]) as server:
            client = AsyncPermitClient(server.url, TOKEN)
            task = asyncio.create_task(client.take("p", "k"))
            await asyncio.sleep(0.1)
            task.cancel()
            with self.assertRaises(asyncio.CancelledError):
                await task
            self.assertTrue((await client.take("p", "k")).allowed)
            await client.aclose()

    async def test_keep_alive_connections_are_reused(self) -> None:
        with Proxy(URL) as proxy:
            async with AsyncPermitClient(proxy.url, TOKEN) as client:
                for _ in range(5):
                    await client.peek("api", self.key)
            self.assertEqual(proxy.requests, 5)
            self.assertEqual(len(proxy._sockets), 2)  # one client connection and its upstream


if __name__ == "__main__":
    unittest.main()
