"""settle: reserve an estimate, run the work, settle by the actual cost in one adjustment (src/settle.ts)."""
from __future__ import annotations

import unittest
from typing import List

from edge_limiter import AcquireTimeoutError, AsyncPermitClient, ChargeSettledError, InvalidInputError, PermitClient, Settlement, UnknownChargeError, asettle, cost_difference, settle

from support import DOWN_URL, TOKEN, URL, Proxy, unique


class Boom(Exception):
    pass


def remaining(client: PermitClient, key: str) -> List[int]:
    return [l.remaining for l in client.peek("llm", key).limits or ()]


class Settle(unittest.TestCase):
    def setUp(self) -> None:
        self.client = PermitClient(URL, TOKEN)
        self.key = unique("settle")

    def tearDown(self) -> None:
        self.client.close()

    def test_work_that_cost_less_is_refunded(self) -> None:
        with self.client.settle("llm", self.key, {"requests": 1, "tokens": 500}) as s:
            self.assertEqual(remaining(self.client, self.key), [9, 500])  # the estimate is reserved during the work
            s.actual = {"requests": 1, "tokens": 200}
        self.assertEqual(remaining(self.client, self.key), [9, 800])
        self.assertIsNotNone(s.adjustment)
        self.assertEqual(s.difference(), {"tokens": -300})

    def test_settle_charge_refunds_at_most_the_charge_once(self) -> None:
        taken = self.client.take("api", self.key, cost=4, idempotency_key="job-1")
        self.assertEqual((taken.charge, taken.remaining), ("job-1", 6))
        self.assertEqual(self.client.settle_charge("api", self.key, charge="job-1", cost=1).remaining, 9)
        again = self.client.settle_charge("api", self.key, charge="job-1", cost=1)
        self.assertEqual((again.repeated, again.remaining), (True, 9))
        with self.assertRaises(ChargeSettledError):
            self.client.settle_charge("api", self.key, charge="job-1", cost=0)
        with self.assertRaises(UnknownChargeError):
            self.client.settle_charge("api", self.key, charge="never-taken", cost=0)
        with self.assertRaises(InvalidInputError):
            self.client.settle_charge("api", self.key, charge="job-1", cost=-1)
        self.assertEqual(self.client.peek("api", self.key).remaining, 9)

    def test_a_settlement_whose_answer_is_lost_keeps_the_outcome_and_is_applied_once(self) -> None:
        failed: List[Settlement] = []
        with Proxy(URL) as proxy:
            client = PermitClient(proxy.url, TOKEN, retries=0)
            with client.settle("api", self.key, 5, on_settle_error=failed.append) as s:
                s.actual = 2
                proxy.drop_next(1)  # the settlement reaches the server; its answer never comes back
            client.close()
        self.assertEqual(len(failed), 1)
        self.assertIs(failed[0], s)
        self.assertIsNotNone(s.error)
        self.assertIsNone(s.adjustment)
        self.assertEqual(self.client.peek("api", self.key).remaining, 8)
        again = self.client.settle_charge("api", self.key, charge=s.charge, cost=2)  # sent again: applied once
        self.assertEqual((again.repeated, again.remaining), (True, 8))

    def test_work_that_cost_more_is_charged(self) -> None:
        with settle(self.client, "llm", self.key, {"requests": 1, "tokens": 100}) as s:
            s.actual = {"requests": 1, "tokens": 350}
        self.assertEqual(remaining(self.client, self.key), [9, 650])

    def test_work_that_raises_is_refunded_in_full(self) -> None:
        with self.assertRaises(Boom):
            with self.client.settle("llm", self.key, {"requests": 1, "tokens": 500}):
                raise Boom()
        self.assertEqual(remaining(self.client, self.key), [10, 1000])

    def test_without_actual_the_estimate_stands(self) -> None:
        with Proxy(URL) as proxy:
            client = PermitClient(proxy.url, TOKEN)
            with client.settle("api", self.key, 3) as s:
                pass
            client.close()
            self.assertIsNone(s.adjustment)
            self.assertEqual(proxy.requests, 1)
        self.assertEqual(self.client.peek("api", self.key).remaining, 7)

    def test_no_permit_in_time_runs_no_work(self) -> None:
        self.client.take("api", self.key, cost=10)
        ran = []
        with self.assertRaises(AcquireTimeoutError):
            with self.client.settle("api", self.key, 1, timeout_ms=10):
                ran.append(True)
        self.assertEqual(ran, [])

    def test_a_permit_the_store_did_not_charge_is_not_settled(self) -> None:
        with Proxy(DOWN_URL) as proxy:
            client = PermitClient(proxy.url, TOKEN)
            with client.settle("open", self.key, 5) as s:
                s.actual = 1
            client.close()
            self.assertEqual((s.permit.reason, s.charged, s.adjustment, proxy.requests), ("store_error", False, None, 1))

    def test_an_actual_of_another_form_than_the_estimate_refunds_the_estimate(self) -> None:
        """settle.ts throws a TypeError for a number against an object (and leaves the estimate charged);
        here nothing can be settled either, so the estimate is refunded, as when the block fails, and the
        error is an InvalidInputError naming `actual`."""
        cases = [
            ("number estimate, object actual", 2, {"requests": 1, "tokens": 5}),
            ("object estimate, number actual", {"requests": 1, "tokens": 300}, 5),
            ("an actual that is no cost", {"requests": 1, "tokens": 300}, "lots"),
            ("a negative actual", 3, -1),
            ("an actual limit's part that is no integer", {"requests": 1, "tokens": 300}, {"tokens": 2.5}),
        ]
        for name, estimate, actual in cases:
            with self.subTest(name):
                key = unique("settle-form")
                with self.assertRaises(InvalidInputError) as caught:
                    with self.client.settle("llm", key, estimate) as s:
                        self.assertLess(remaining(self.client, key), [10, 1000])  # the estimate is charged
                        s.actual = actual
                self.assertTrue(caught.exception.field.startswith("actual"), caught.exception.field)
                self.assertIn(f"`{caught.exception.field}`", str(caught.exception))
                self.assertEqual(remaining(self.client, key), [10, 1000])  # and refunded
                self.assertIsNone(s.adjustment)

    def test_integral_actuals_of_other_types_are_settled(self) -> None:
        with self.client.settle("llm", self.key, {"requests": 1, "tokens": 500}) as s:
            s.actual = {"requests": 1.0, "tokens": 120.0}  # type: ignore[dict-item]
        self.assertEqual(remaining(self.client, self.key), [9, 880])

    def test_cost_difference(self) -> None:
        self.assertEqual(cost_difference(5, 3), 2)
        self.assertIsNone(cost_difference(3, 3))
        self.assertEqual(cost_difference({"tokens": 10}, {"requests": 1, "tokens": 20}), {"tokens": -10, "requests": -1})
        self.assertIsNone(cost_difference({"a": 1}, {"a": 1, "b": 0}))
        with self.assertRaises(TypeError):
            cost_difference(1, {"a": 1})


class AsyncSettle(unittest.IsolatedAsyncioTestCase):
    async def asyncSetUp(self) -> None:
        self.client = AsyncPermitClient(URL, TOKEN)
        self.key = unique("asettle")

    async def asyncTearDown(self) -> None:
        await self.client.aclose()

    async def limits(self) -> List[int]:
        return [l.remaining for l in (await self.client.peek("llm", self.key)).limits or ()]

    async def test_refund_and_charge(self) -> None:
        async with self.client.settle("llm", self.key, {"requests": 1, "tokens": 500}) as s:
            s.actual = {"requests": 1, "tokens": 50}
        self.assertEqual(await self.limits(), [9, 950])
        async with asettle(self.client, "llm", self.key, {"requests": 1, "tokens": 10}) as s:
            s.actual = {"requests": 2, "tokens": 60}
        self.assertEqual(await self.limits(), [7, 890])

    async def test_work_that_raises_is_refunded_in_full(self) -> None:
        with self.assertRaises(Boom):
            async with self.client.settle("llm", self.key, {"requests": 1, "tokens": 500}):
                raise Boom()
        self.assertEqual(await self.limits(), [10, 1000])

    async def test_an_actual_of_another_form_than_the_estimate_refunds_the_estimate(self) -> None:
        with self.assertRaises(InvalidInputError) as caught:
            async with asettle(self.client, "llm", self.key, 2) as s:
                s.actual = {"requests": 1, "tokens": 5}
        self.assertEqual(caught.exception.field, "actual")
        self.assertEqual(await self.limits(), [10, 1000])


if __name__ == "__main__":
    unittest.main()
