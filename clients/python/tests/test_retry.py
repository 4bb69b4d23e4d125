"""Exactly once across a lost answer: a proxy in front of the real server cuts the connection as the
server's answer to an applied take (or adjustment) arrives; the client retries with the same
Idempotency-Key, gets the first answer, and the bucket was charged once (test/load/idempotent-retry.test.ts
does the same for the TypeScript client)."""
from __future__ import annotations

import unittest
from typing import Any

from edge_limiter import PermitError

from support import POLICIES, URL, Proxy, make_client, unique

API_CAPACITY = POLICIES["api"]["capacity"]


class LostAnswer(unittest.TestCase):
    kind = "sync"

    def setUp(self) -> None:
        self.proxy = Proxy(URL)
        self.direct: Any = make_client("sync")
        self.key = unique(f"lost-{self.kind}")

    def tearDown(self) -> None:
        self.direct.close()
        self.proxy.close()

    def test_a_take_whose_answer_is_cut_off_is_retried_and_charged_once(self) -> None:
        client = make_client(self.kind, self.proxy.url, retries=3)
        try:
            self.proxy.drop_next(2)
            d = client.take("api", self.key, cost=4)
            self.assertEqual(self.proxy.dropped, 2)
            self.assertEqual(self.proxy.requests, 3)
            self.assertEqual((d.allowed, d.remaining, d.repeated), (True, API_CAPACITY - 4, True))
            self.assertEqual(self.direct.peek("api", self.key).remaining, API_CAPACITY - 4)
        finally:
            client.close()

    def test_without_an_idempotency_key_the_loss_is_not_retried(self) -> None:
        bare = make_client(self.kind, self.proxy.url, retries=3, idempotency=False)
        try:
            self.proxy.drop_next(1)
            with self.assertRaises(PermitError) as caught:
                bare.take("api", self.key)
            self.assertEqual((caught.exception.status, caught.exception.code), (0, "permit_network_error"))
            self.assertEqual(self.proxy.requests, 1)
            # That take was applied all the same: the server answered, the answer was lost.
            self.assertEqual(self.direct.peek("api", self.key).remaining, API_CAPACITY - 1)
        finally:
            bare.close()

    def test_an_adjustment_of_several_limits_whose_answer_is_cut_off_is_applied_once(self) -> None:
        client = make_client(self.kind, self.proxy.url, retries=2)
        try:
            self.direct.take("llm", self.key, cost={"requests": 1, "tokens": 900})
            self.proxy.drop_next(1)
            d = client.adjust("llm", self.key, {"tokens": -600})
            self.assertTrue(d.repeated)
            self.assertEqual([l.remaining for l in self.direct.peek("llm", self.key).limits], [9, 700])
        finally:
            client.close()

    def test_an_acquire_whose_answer_is_cut_off_keeps_its_reservation(self) -> None:
        client = make_client(self.kind, self.proxy.url, retries=2)
        try:
            client.acquire("paced", self.key)
            self.proxy.drop_next(1)
            d = client.acquire("paced", self.key)
            self.assertTrue(d.repeated)
            self.assertGreater(d.wait_ms, 0)
            # One reservation, not two: the next one is queued right behind it.
            nxt = self.direct.take("paced", self.key, max_wait_ms=10_000)
            self.assertLess(nxt.wait_ms, 2 * 1000 / POLICIES["paced"]["refillPerSecond"] + 50)
        finally:
            client.close()


class AsyncLostAnswer(LostAnswer):
    kind = "async"


if __name__ == "__main__":
    unittest.main()
