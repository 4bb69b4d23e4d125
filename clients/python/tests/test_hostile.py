"""What the client must not take on trust from a server (or anything between it and the client) that
misbehaves, and what it must not pay again on every call: malformed and crossed answers, interim 1xx
answers, answers dripped a byte at a time or too large, a wait longer than the one asked for, a slow name
lookup, a fork, the default TLS context. Each case runs for the sync client and, through SyncFace, the
asyncio one."""
from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import ssl
import threading
import time
import unittest
from typing import Any, Callable, List, Optional
from unittest import mock

from edge_limiter import AsyncPermitClient, MalformedAnswerError, PermitClient, PermitError, StoreUnavailableError

from support import (
    TLS_CERT,
    TOKEN,
    URL,
    Proxy,
    RawServer,
    RawServerCase,
    SyncFace,
    decision_json,
    echo_decision,
    http_answer,
    tls_server_context,
    unique,
)

_REAL_DEFAULT_CONTEXT = ssl.create_default_context


def within(seconds: float, call: Callable[[], Any]) -> Any:
    """``call()``'s result (or its error), failing the test if it has not returned after ``seconds``
    (on a daemon thread: a client that sleeps 10 minutes must not hold the suite)."""
    result: List[Any] = []

    def run() -> None:
        try:
            result.append((True, call()))
        except BaseException as e:  # noqa: BLE001 - handed back to the test
            result.append((False, e))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if not result:
        raise AssertionError(f"still running after {seconds} s")
    ok, value = result[0]
    if not ok:
        raise value
    return value


def _seen(result: Any) -> Any:
    """A call's result as the stray-answer cases compare it: (allowed, remaining), "done" for a reset,
    or an error's class and status."""
    if isinstance(result, PermitError):
        return (type(result).__name__, result.status)
    if result is None:
        return "done"
    return (result.allowed, result.remaining)


class StrayCase:
    """A server that answers its first request with a decision (remaining 10) and, 50 ms later, writes
    ``stray`` on that connection unasked (then closes it, with ``close``); it answers request n >= 2 with
    ``answer(n, body)``. The client's calls after its first take, and what each must see."""

    def __init__(self, name: str, stray: bytes, answer: Callable[[int, bytes], bytes], calls: List[Any], expected: List[Any], close: bool = False) -> None:
        self.name, self.stray, self.answer, self.calls, self.expected, self.close = name, stray, answer, calls, expected, close

    def handler(self, conn: socket.socket, head: str, body: bytes, n: int) -> None:
        if n > 1:
            conn.sendall(self.answer(n, body))
            return
        conn.sendall(http_answer(200, echo_decision(body, remaining=10)))

        def later() -> None:
            time.sleep(0.05)
            try:
                conn.sendall(self.stray)
                if self.close:
                    conn.shutdown(socket.SHUT_WR)
            except OSError:
                pass

        threading.Thread(target=later, daemon=True).start()


_STRAY_ALLOWED = http_answer(200, json.dumps(decision_json(policy="p", key="k", remaining=999)).encode())
_STORE_DOWN = b'{"type":"urn:edge-limiter:problem:store-unavailable","status":503,"retryAfterMs":1000}'

STRAY_CASES = [
    StrayCase(
        "a 429 is not read as the stray allowed answer",
        _STRAY_ALLOWED,
        lambda n, body: http_answer(429, echo_decision(body, allowed=False, remaining=0, retryAfterMs=1000), {"Retry-After": "1"}),
        [("take", ("p", "k"))],
        [(False, 0)],
    ),
    StrayCase(
        "a reset answered 503 is not read as the stray 204",
        http_answer(204, headers={"Content-Type": None, "Content-Length": "0"}),
        lambda n, body: http_answer(503, _STORE_DOWN, {"Content-Type": "application/problem+json", "Retry-After": "1"}),
        [("reset", ("p", "k"))],
        [("StoreUnavailableError", 503)],
    ),
    StrayCase(
        "later answers are not shifted by one",
        _STRAY_ALLOWED,
        lambda n, body: http_answer(200, echo_decision(body, remaining=11 - n)),
        [("take", ("p", "k"))] * 4,
        [(True, 9), (True, 8), (True, 7), (True, 6)],
    ),
    StrayCase(
        "a stray answer and then the server's close",
        _STRAY_ALLOWED,
        lambda n, body: http_answer(429, echo_decision(body, allowed=False, remaining=0, retryAfterMs=1000), {"Retry-After": "1"}),
        [("take", ("p", "k"))],
        [(False, 0)],
        close=True,
    ),
]


class Hostile(RawServerCase):
    kind = "sync"

    def malformed(self, call: Callable[[], Any]) -> MalformedAnswerError:
        with self.assertRaises(MalformedAnswerError) as caught:
            within(10, call)
        err = caught.exception
        self.assertIn("malformed answer", str(err))
        self.assertEqual(err.code, "permit_malformed_answer")
        return err

    # Answers that are not what the request can have.

    def test_malformed_decisions_are_typed_errors(self) -> None:
        take = {"policy": "p", "key": "k"}
        cases = [
            ("only `allowed`", b'{"allowed": true}', "`policy` is missing"),
            ("waitMs a string", json.dumps(decision_json(**take, waitMs="1000")).encode(), "`waitMs` is not an integer"),
            ("limit null", json.dumps(decision_json(**take, limit=None)).encode(), "`limit` is not an integer"),
            ("allowed a string", json.dumps(decision_json(**take, allowed="yes")).encode(), "`allowed` is not a boolean"),
            ("negative waitMs", json.dumps(decision_json(**take, waitMs=-5)).encode(), "`waitMs` is below 0"),
            ("limits not a list", json.dumps(decision_json(**take, limits={"a": 1})).encode(), "`limits` is not a list"),
            ("a limit without its numbers", json.dumps(decision_json(**take, limits=[{"name": "a"}])).encode(), "`limits[0].limit` is missing"),
            ("refusedBy of numbers", json.dumps(decision_json(**take, refusedBy=[1])).encode(), "`refusedBy` is not a list of strings"),
            ("HTML", b"<html>upstream error</html>", "not a decision"),
            ("JSON nested too deep to read", b"[" * 100_000, "not a decision"),
            ("not UTF-8", b'{"allowed": true, "policy": "\xff"}', "not a decision"),
            ("no body", b"", "not a decision"),
        ]
        for name, body, what in cases:
            with self.subTest(name):
                server = self.serve(lambda conn, head, req, n, body=body: conn.sendall(http_answer(200, body)))
                err = self.malformed(lambda: self.make(server.url, retries=2).take("p", "k"))
                self.assertIn(what, str(err))
                self.assertEqual(err.status, 200)
                self.assertEqual(len(server.requests), 1)  # not retried

    def test_an_answer_of_the_wrong_kind_is_a_malformed_answer(self) -> None:
        server = self.serve(lambda conn, head, body, n: conn.sendall(http_answer(204) if n == 1 else http_answer(200, json.dumps(decision_json()).encode())))
        client = self.make(server.url)
        self.assertEqual(self.malformed(lambda: client.take("p", "k")).status, 204)  # a take answered as a reset
        self.assertEqual(self.malformed(lambda: client.reset("p", "k")).status, 200)  # a reset answered as a take

    def test_bad_retry_after_values_are_not_read(self) -> None:
        """A 503's Retry-After that is not whole ASCII seconds, and a retryAfterMs of any size, are read as
        what they can be (or a second), never raised as another error."""
        for retry_after, problem_ms in (("\u00b9", 5), ("-5", 5), ("1.5", 5), ("", 10**400), ("", 1e300), ("", "soon"), ("99999999999", 5)):
            with self.subTest(retry_after=retry_after, retry_after_ms=str(problem_ms)[:10]):
                problem = '{"type":"urn:edge-limiter:problem:store-unavailable","status":503,"retryAfterMs":%s}' % json.dumps(problem_ms)
                headers = {"Content-Type": "application/problem+json", **({"Retry-After": retry_after} if retry_after else {})}
                server = self.serve(lambda conn, head, body, n, h=headers, p=problem: conn.sendall(http_answer(503, p.encode(), h)))
                client = self.make(server.url, retries=1, max_retry_delay_ms=20)
                with self.assertRaises(StoreUnavailableError):
                    within(10, lambda: client.take("p", "k"))
                self.assertEqual(len(server.requests), 2)

    def test_an_answer_for_another_policy_or_key_is_an_error_and_its_connection_is_dropped(self) -> None:
        def handler(conn: socket.socket, head: str, body: bytes, n: int) -> None:
            if n == 1:  # the answer to someone else's take
                conn.sendall(http_answer(200, json.dumps(decision_json(policy="p", key="someone-else")).encode()))
            elif n == 2:
                conn.sendall(http_answer(200, json.dumps(decision_json(policy="other", key="k")).encode()))
            elif head.startswith("GET"):
                conn.sendall(http_answer(200, json.dumps(decision_json(policy="p", key="not-k")).encode()))
            else:
                conn.sendall(http_answer(200, echo_decision(body)))

        server = self.serve(handler)
        client = self.make(server.url)
        self.assertIn("key 'someone-else'", str(self.malformed(lambda: client.take("p", "k"))))
        self.assertIn("policy 'other'", str(self.malformed(lambda: client.adjust("p", "k", -1))))
        self.malformed(lambda: client.peek("p", "k"))
        self.assertEqual(client.take("p", "k").key, "k")
        # None of the connections that carried a crossed answer was used again.
        self.assertEqual(server.connections, 4)

    # Bytes that come on an idle keep-alive connection.

    def test_an_answer_that_came_while_the_connection_was_idle_answers_no_call(self) -> None:
        """A server (or anything on the way) writes a stray answer on a pooled connection while it is
        idle: each later call gets the answer to its own request, so that connection carries none."""
        for case in STRAY_CASES:
            with self.subTest(case.name):
                server = self.serve(case.handler)
                client = self.make(server.url, retries=0)
                self.assertEqual(_seen(within(10, lambda: client.take("p", "k"))), (True, 10))
                time.sleep(0.3)  # the stray answer arrives meanwhile
                seen = []
                for method, args in case.calls:
                    try:
                        seen.append(_seen(within(10, lambda: getattr(client, method)(*args))))
                    except PermitError as error:
                        seen.append(_seen(error))
                self.assertEqual(seen, case.expected)
                self.assertEqual(server.connections, 2)  # the one that got the stray answer was not used again

    def test_acquire_does_not_sleep_on_a_wait_longer_than_it_asked_for(self) -> None:
        for wait in (600_000, 10**12):
            with self.subTest(wait_ms=wait):
                server = self.serve(lambda conn, head, body, n, w=wait: conn.sendall(http_answer(200, echo_decision(body, waitMs=w))))
                client = self.make(server.url)
                err = self.malformed(lambda: client.acquire("p", "k", timeout_ms=10))
                self.assertIn(f"a wait of {wait} ms, where the request allowed at most 10 ms", str(err))
                self.assertEqual(json.loads(server.requests[0][1])["maxWaitMs"], 10)
                self.malformed(lambda: client.take("p", "k", max_wait_ms=100))
        # A refusal's retryAfterMs is no wait: any size is a refusal.
        server = self.serve(lambda conn, head, body, n: conn.sendall(http_answer(429, echo_decision(body, allowed=False, retryAfterMs=10**12))))
        self.assertEqual(self.make(server.url).take("p", "k").retry_after_ms, 10**12)

    # The HTTP itself.

    def test_interim_answers_are_read_past(self) -> None:
        def handler(conn: socket.socket, head: str, body: bytes, n: int) -> None:
            conn.sendall(b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n")
            time.sleep(0.02)
            conn.sendall(b"HTTP/1.1 102 Processing\r\n\r\n" + http_answer(200, echo_decision(body)))

        server = self.serve(handler)
        client = self.make(server.url, retries=0)
        for key in ("first", "second", "third"):
            d = within(10, lambda: client.take("p", key))
            self.assertEqual((d.status, d.key), (200, key))
        self.assertEqual(server.connections, 1)  # kept alive, and in step

    def test_an_answer_dripped_a_byte_at_a_time_is_bounded_by_the_attempts_deadline(self) -> None:
        """timeout_ms bounds the whole attempt, not each read: ~160 bytes 20 ms apart would take 3 s."""

        def drip_head(conn: socket.socket, head: str, body: bytes, n: int) -> None:
            for b in http_answer(200, echo_decision(body)):
                conn.sendall(bytes([b]))
                time.sleep(0.02)

        def drip_body(conn: socket.socket, head: str, body: bytes, n: int) -> None:
            data = http_answer(200, echo_decision(body))
            at = data.index(b"\r\n\r\n") + 4
            conn.sendall(data[:at])
            for b in data[at:]:
                conn.sendall(bytes([b]))
                time.sleep(0.03)

        for name, handler in (("head and body", drip_head), ("body", drip_body)):
            with self.subTest(name):
                server = self.serve(handler)
                client = self.make(server.url, timeout_ms=400, retries=0)
                started = time.monotonic()
                with self.assertRaises(PermitError) as caught:
                    within(20, lambda: client.take("p", "k"))
                elapsed = time.monotonic() - started
                self.assertEqual((caught.exception.status, caught.exception.code), (0, "permit_timeout"))
                self.assertGreaterEqual(elapsed, 0.35)
                self.assertLess(elapsed, 1.5)

    def test_a_slow_name_lookup_is_bounded_by_the_attempts_deadline(self) -> None:
        real = socket.getaddrinfo

        def lookup(host: Any, *args: Any, **kwargs: Any) -> Any:
            if host != "slow-lookup.invalid":
                return real(host, *args, **kwargs)
            flags = kwargs.get("flags", args[4] if len(args) > 4 else 0)
            if flags & socket.AI_NUMERICHOST:
                raise socket.gaierror(socket.EAI_NONAME, "not an address")
            time.sleep(3)
            raise socket.gaierror(socket.EAI_NONAME, "no such name")

        client = self.make("http://slow-lookup.invalid:1", timeout_ms=300, retries=0)
        with mock.patch("socket.getaddrinfo", lookup):
            started = time.monotonic()
            with self.assertRaises(PermitError) as caught:
                within(10, lambda: client.take("p", "k"))
            elapsed = time.monotonic() - started
        self.assertEqual((caught.exception.status, caught.exception.code), (0, "permit_timeout"))
        self.assertLess(elapsed, 2.0)  # the lookup alone takes 3 s

    def test_an_answer_above_1_mb_is_not_read(self) -> None:
        """A decision padded past 1 MB, however its length is told (the asyncio client's cap, for both)."""
        big = 1024 * 1024 + 1024

        def padded(body: bytes) -> bytes:
            decision = echo_decision(body)
            return decision + b" " * (big - len(decision))

        def by_length(conn: socket.socket, head: str, body: bytes, n: int) -> None:
            conn.sendall(http_answer(200, padded(body)))

        def chunked(conn: socket.socket, head: str, body: bytes, n: int) -> None:
            data = padded(body)
            conn.sendall(http_answer(200, b"", {"Content-Length": None, "Transfer-Encoding": "chunked"}))
            for i in range(0, len(data), 65536):
                part = data[i : i + 65536]
                conn.sendall(b"%x\r\n%s\r\n" % (len(part), part))
            conn.sendall(b"0\r\n\r\n")

        def to_the_end(conn: socket.socket, head: str, body: bytes, n: int) -> str:
            conn.sendall(http_answer(200, padded(body), {"Content-Length": None, "Connection": "close"}))
            return "close"

        for name, handler in (("Content-Length", by_length), ("chunked", chunked), ("to the connection's end", to_the_end)):
            with self.subTest(name):
                server = self.serve(handler)
                with self.assertRaises(PermitError) as caught:
                    within(20, lambda: self.make(server.url, retries=0).take("p", "k"))
                self.assertEqual((caught.exception.status, caught.exception.code), (0, "permit_network_error"))
                self.assertIn("1048576 bytes", str(caught.exception))
        # Just under the cap is read.
        server = self.serve(lambda conn, head, body, n: conn.sendall(http_answer(200, echo_decision(body) + b" " * (1024 * 1024 - 500))))
        self.assertTrue(self.make(server.url).take("p", "k").allowed)

    # What a process must not share, nor pay per connection.

    def test_a_client_used_before_fork_shares_no_connection_with_the_children(self) -> None:
        """Celery prefork, gunicorn --preload: a client that holds a keep-alive connection is forked. Each
        child opens its own connection, every answer is its own request's, and the parent's connection is
        still its own after the children are done (an asyncio child that so much as aborted it on its copy
        of the parent's event loop would unregister it from the epoll instance they share)."""
        # No retries: a call that lost its answer (or whose connection a child broke) is not hidden by one.
        client = self.make(URL, retries=0, timeout_ms=3000)
        key = unique(f"fork-{self.kind}")
        client.peek("api", key)  # one idle keep-alive connection in the pool
        children = []
        for w in range(3):
            pid = os.fork()
            if pid == 0:  # the child: exit 0 when all its answers were its own
                code = 1
                try:
                    if self.kind == "async":
                        loop = asyncio.new_event_loop()  # the parent's loop is the parent's
                        call: Callable[[str], Any] = lambda k: loop.run_until_complete(client.client.peek("api", k))
                    else:
                        call = lambda k: client.peek("api", k)
                    wrong = sum(call(f"{key}-{w}-{i}").key != f"{key}-{w}-{i}" for i in range(40))
                    code = 0 if wrong == 0 else 2
                except BaseException:  # noqa: BLE001 - a child never returns into the test runner
                    code = 3
                finally:
                    os._exit(code)
            children.append(pid)
        codes = []
        deadline = time.monotonic() + 30
        for pid in children:
            while True:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    codes.append(os.waitstatus_to_exitcode(status))
                    break
                if time.monotonic() > deadline:
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                    codes.append("hung")
                    break
                time.sleep(0.02)
        self.assertEqual(codes, [0, 0, 0])
        for i in range(5):
            self.assertEqual(within(10, lambda: client.peek("api", f"{key}-parent-{i}")).key, f"{key}-parent-{i}")


class AsyncHostile(Hostile):
    kind = "async"

    def test_an_answer_read_by_a_running_loop_while_the_connection_was_idle_answers_no_call(self) -> None:
        """As above, on one loop that keeps running between the calls: the stray answer is read off the
        socket into the connection's stream while it sits in the pool (through SyncFace, the loop stops
        between calls and it waits in the kernel)."""
        for case in STRAY_CASES:
            with self.subTest(case.name):
                server = self.serve(case.handler)

                async def main() -> List[Any]:
                    client = AsyncPermitClient(server.url, TOKEN, retries=0)
                    seen: List[Any] = []
                    try:
                        seen.append(_seen(await asyncio.wait_for(client.take("p", "k"), 10)))
                        await asyncio.sleep(0.3)
                        for method, args in case.calls:
                            try:
                                seen.append(_seen(await asyncio.wait_for(getattr(client, method)(*args), 10)))
                            except PermitError as error:
                                seen.append(_seen(error))
                    finally:
                        await client.aclose()
                    return seen

                self.assertEqual(asyncio.run(main()), [(True, 10), *case.expected])
                self.assertEqual(server.connections, 2)


class DefaultTLSContext(unittest.TestCase):
    """Building the system's default TLS context loads the CA bundle (tens of ms): once per client, and
    never on a running event loop; not once per connection."""

    def setUp(self) -> None:
        self.front = Proxy(URL)
        self.tls = Proxy(self.front.url, tls=tls_server_context())
        self.builds: List[Optional[int]] = []  # the thread each build ran on
        self.key = unique("tls")

    def tearDown(self) -> None:
        self.tls.close()
        self.front.close()

    def counting(self, *args: Any, **kwargs: Any) -> ssl.SSLContext:
        # The system's default context, but trusting the test certificate: what a default build is, here.
        self.builds.append(threading.get_ident())
        return _REAL_DEFAULT_CONTEXT(cafile=str(TLS_CERT))

    def connections(self) -> int:
        return len(self.tls._sockets) // 2

    def test_sync_client(self) -> None:
        with mock.patch("ssl.create_default_context", self.counting):
            client = PermitClient(self.tls.url, TOKEN)
            self.assertEqual(self.builds, [])  # lazily: an https client that is never used builds nothing
            for _ in range(3):
                self.assertTrue(client.take("api", self.key).allowed)
                client.close()  # the next take opens a new connection
            client.close()
        self.assertEqual(self.connections(), 3)
        self.assertEqual(len(self.builds), 1)

    def test_async_client_made_outside_the_loop(self) -> None:
        with mock.patch("ssl.create_default_context", self.counting):
            face = SyncFace(AsyncPermitClient(self.tls.url, TOKEN))
            self.assertEqual(len(self.builds), 1)  # in the constructor: no loop runs there

            async def five() -> List[Any]:
                return await asyncio.gather(*(face.client.take("api", self.key) for _ in range(5)))

            decisions = face.loop.run_until_complete(five())
            face.close()
        self.assertEqual([d.allowed for d in decisions], [True] * 5)
        self.assertEqual(self.connections(), 5)
        self.assertEqual(len(self.builds), 1)

    def test_async_client_made_on_a_running_loop(self) -> None:
        async def main() -> List[Any]:
            client = AsyncPermitClient(self.tls.url, TOKEN)
            self.assertEqual(self.builds, [])  # not on the loop
            try:
                return await asyncio.gather(*(client.take("api", self.key) for _ in range(5)))
            finally:
                await client.aclose()

        loop = asyncio.new_event_loop()
        loop_thread = threading.get_ident()
        with mock.patch("ssl.create_default_context", self.counting):
            try:
                decisions = loop.run_until_complete(main())
            finally:
                loop.close()
        self.assertEqual([d.allowed for d in decisions], [True] * 5)
        self.assertEqual(self.connections(), 5)
        self.assertEqual(len(self.builds), 1)
        self.assertNotEqual(self.builds[0], loop_thread)  # on the loop's default executor


if __name__ == "__main__":
    unittest.main()
