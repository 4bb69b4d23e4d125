"""What the client reads off the wire, and when a connection may carry the next request: answers whose
framing makes reuse unsafe (a 204 that announces a body, Content-Length with Transfer-Encoding, 101,
a status outside 100-599), the size limits of a head, a chunk-size line and the trailers (the same in
both clients, and the same error), a 3xx without a Location, a TLS certificate that cannot be verified;
and the sync client's name lookups (shared, bounded, and typed when no thread can be started). Each
answer case runs for the sync client and, through SyncFace, the asyncio one."""
from __future__ import annotations

import socket
import ssl
import threading
import time
import unittest
from typing import Any, Callable, List, Optional
from unittest import mock

from edge_limiter import MalformedAnswerError, PermitClient, PermitError, RedirectError
from edge_limiter import client as sync_client

from support import TOKEN, RawServer, RawServerCase, echo_decision, http_answer, tls_server_context
from test_hostile import within

_DECISION = b'{"allowed":true,"policy":"p","key":"k","limit":1,"remaining":0,"retryAfterMs":0,"resetAfterMs":1000,"waitMs":0}'


class Wire(RawServerCase):
    kind = "sync"

    def first_then_fine(self, first: Callable[[socket.socket, bytes], None]) -> RawServer:
        """A server whose first answer is ``first``'s bytes, and every later one a good decision."""

        def handler(conn: socket.socket, head: str, body: bytes, n: int) -> None:
            if n == 1:
                first(conn, body)
            else:
                conn.sendall(http_answer(200, echo_decision(body)))

        return self.serve(handler)

    # Framing that makes a connection's next bytes doubtful: never pooled.

    def test_a_204_that_announces_a_body_does_not_leave_its_connection_in_the_pool(self) -> None:
        """A reset answered 204 with a Content-Length whose body is written later (a buggy framework):
        on a reused connection those bytes would be read as the next request's answer."""

        def handler(conn: socket.socket, head: str, body: bytes, n: int) -> None:
            if head.startswith("DELETE"):
                conn.sendall(b"HTTP/1.1 204 No Content\r\nContent-Length: %d\r\n\r\n" % len(_DECISION))
                time.sleep(0.05)
                conn.sendall(_DECISION.replace(b'"key":"k"', b'"key":"other"'))
            else:
                conn.sendall(http_answer(200, echo_decision(body)))

        server = self.serve(handler)
        client = self.make(server.url, retries=0)
        for i in range(3):
            self.assertIsNone(within(10, lambda: client.reset("p", "k")))
            self.assertEqual(within(10, lambda: client.take("p", f"k{i}")).key, f"k{i}")
        # Each reset's connection is closed after it; each take's is reused by the next reset.
        self.assertEqual(server.connections, 4)

    def test_a_204_with_content_length_0_keeps_its_connection(self) -> None:
        server = self.serve(lambda conn, head, body, n: conn.sendall(b"HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n"))
        client = self.make(server.url, retries=0)
        for _ in range(3):
            self.assertIsNone(within(10, lambda: client.reset("p", "k")))
        self.assertEqual(server.connections, 1)

    def test_answers_whose_framing_cannot_be_trusted_are_malformed_and_close_their_connection(self) -> None:
        cases = {
            # RFC 9112 6.3: Content-Length with Transfer-Encoding is an error (a smuggling vector).
            "Content-Length and Transfer-Encoding": (
                lambda body: http_answer(200, b"%x\r\n%s\r\n0\r\n\r\n" % (len(echo_decision(body)), echo_decision(body)), {"Transfer-Encoding": "chunked"}),
                "both Content-Length and Transfer-Encoding",
                200,
            ),
            "101 Switching Protocols": (
                lambda body: b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n" + http_answer(200, echo_decision(body)),
                "101 Switching Protocols",
                101,
            ),
            "status 600": (lambda body: http_answer(600, echo_decision(body)), "600 is not an HTTP status", 600),
            "status 099": (lambda body: http_answer(99, echo_decision(body)).replace(b"HTTP/1.1 99 ", b"HTTP/1.1 099 "), "99 is not an HTTP status", 99),
        }
        for name, (answer, says, status) in cases.items():
            with self.subTest(name):
                server = self.first_then_fine(lambda conn, body, answer=answer: conn.sendall(answer(body)))  # type: ignore[misc]
                client = self.make(server.url)  # retries on: a malformed answer is still not retried
                with self.assertRaises(MalformedAnswerError) as caught:
                    within(10, lambda: client.take("p", "k"))
                self.assertIn(says, str(caught.exception))
                self.assertEqual((caught.exception.status, caught.exception.code), (status, "permit_malformed_answer"))
                self.assertEqual(len(server.requests), 1)
                self.assertEqual(within(10, lambda: client.take("p", "k2")).key, "k2")
                self.assertEqual(server.connections, 2)

    def test_a_3xx_without_a_location_is_a_malformed_answer_not_a_redirect(self) -> None:
        server = self.first_then_fine(lambda conn, body: conn.sendall(b"HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n"))
        client = self.make(server.url)
        with self.assertRaises(MalformedAnswerError) as caught:
            within(10, lambda: client.take("p", "k"))
        self.assertNotIsInstance(caught.exception, RedirectError)
        self.assertIn("without a Location", str(caught.exception))
        self.assertEqual(caught.exception.status, 304)
        self.assertEqual(within(10, lambda: client.take("p", "k2")).key, "k2")
        self.assertEqual(server.connections, 2)

    # Size limits: what _http.py documents, the same in both clients.

    def unreadable(self, server: RawServer, says: str) -> None:
        client = self.make(server.url, retries=0)
        with self.assertRaises(PermitError) as caught:
            within(20, lambda: client.take("p", "k"))
        err = caught.exception
        self.assertEqual((err.status, err.code), (0, "permit_network_error"))
        self.assertIn("permit API's answer could not be read: " + says, str(err))

    def test_a_head_above_64_kb_is_not_read_however_it_arrives(self) -> None:
        for size in (70_000, 200_000):
            with self.subTest(size=size):
                server = self.serve(lambda conn, head, body, n: conn.sendall(http_answer(200, echo_decision(body), {"X-Pad": "a" * size})))
                self.unreadable(server, "the answer's head is above the 65536 bytes it may have")
        # Just under it is read.
        server = self.serve(lambda conn, head, body, n: conn.sendall(http_answer(200, echo_decision(body), {"X-Pad": "a" * 60_000})))
        self.assertTrue(within(10, lambda: self.make(server.url).take("p", "k")).allowed)

    def chunked(self, size_line_extra: bytes = b"", trailer: bytes = b"") -> RawServer:
        def handler(conn: socket.socket, head: str, body: bytes, n: int) -> None:
            data = echo_decision(body)
            conn.sendall(
                http_answer(200, b"", {"Content-Length": None, "Transfer-Encoding": "chunked"})
                + b"%x%s\r\n%s\r\n0\r\n%s\r\n" % (len(data), size_line_extra, data, trailer)
            )

        return self.serve(handler)

    def test_a_chunk_size_line_above_4096_bytes_is_not_read(self) -> None:
        self.unreadable(self.chunked(b";ext=" + b"x" * 5000), "a chunk-size line is above the 4096 bytes it may have")
        self.unreadable(self.chunked(b";ext=" + b"x" * 60_000), "a chunk-size line is above the 4096 bytes it may have")
        self.assertTrue(within(10, lambda: self.make(self.chunked(b";ext=" + b"x" * 4000).url).take("p", "k")).allowed)

    def test_trailers_above_64_kb_are_not_read(self) -> None:
        self.unreadable(self.chunked(trailer=b"X-Trailer: " + b"t" * 100_000 + b"\r\n"), "the trailer section is above")
        many = b"".join(b"X-T%d: %s\r\n" % (i, b"t" * 1000) for i in range(80))
        self.unreadable(self.chunked(trailer=many), "the trailer section is above")
        self.assertTrue(within(10, lambda: self.make(self.chunked(trailer=b"X-Trailer: ok\r\n").url).take("p", "k")).allowed)

    # TLS.

    def test_a_certificate_that_cannot_be_verified_is_its_own_error_and_not_retried(self) -> None:
        context = tls_server_context()
        listener = socket.create_server(("127.0.0.1", 0))
        self.servers.append(listener)
        accepted: List[int] = []

        def accept() -> None:
            while True:
                try:
                    conn, _ = listener.accept()
                except OSError:
                    return
                accepted.append(1)
                try:
                    conn.settimeout(5)
                    context.wrap_socket(conn, server_side=True).close()
                except OSError:
                    conn.close()

        threading.Thread(target=accept, daemon=True).start()
        # The system's trust store does not hold the tests' self-signed certificate.
        client = self.make(f"https://127.0.0.1:{listener.getsockname()[1]}", retries=2, idempotency=True, ssl_context=ssl.create_default_context())
        with self.assertRaises(PermitError) as caught:
            within(20, lambda: client.take("p", "k"))
        err = caught.exception
        self.assertEqual((err.status, err.code), (0, "permit_tls_error"))
        self.assertIn("TLS certificate could not be verified", str(err))
        self.assertIsInstance(err.__cause__, ssl.SSLCertVerificationError)
        self.assertEqual(len(accepted), 1)  # not retried: a retry meets the same certificate


class AsyncWire(Wire):
    kind = "async"


class NameLookups(unittest.TestCase):
    """The sync client looks a host name up on a daemon thread (getaddrinfo cannot be interrupted). While
    a resolver hangs, calls must not pile up one thread each."""

    def setUp(self) -> None:
        self.release = threading.Event()
        self.calls: List[str] = []
        real = socket.getaddrinfo

        def lookup(host: Any, *args: Any, **kwargs: Any) -> Any:
            if not str(host).endswith(".hang.invalid"):
                return real(host, *args, **kwargs)
            flags = kwargs.get("flags", args[4] if len(args) > 4 else 0)
            if flags & socket.AI_NUMERICHOST:
                raise socket.gaierror(socket.EAI_NONAME, "not an address")
            self.calls.append(host)
            self.release.wait(30)
            raise socket.gaierror(socket.EAI_NONAME, "no such name")

        patcher = mock.patch("socket.getaddrinfo", lookup)
        patcher.start()
        self.addCleanup(patcher.stop)
        self.addCleanup(self.finish_lookups)

    def finish_lookups(self) -> None:
        self.release.set()
        deadline = time.monotonic() + 10
        while lookup_threads() and time.monotonic() < deadline:
            time.sleep(0.01)

    def test_concurrent_calls_share_one_lookup_of_their_host(self) -> None:
        client = PermitClient("http://one.hang.invalid:1", TOKEN, timeout_ms=200, retries=0)
        errors: List[BaseException] = []

        def worker() -> None:
            for _ in range(3):
                try:
                    client.take("p", "k")
                except PermitError as e:
                    errors.append(e)

        workers = [threading.Thread(target=worker) for _ in range(10)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(20)
        self.assertEqual(len(errors), 30)
        self.assertTrue(all(getattr(e, "code", None) == "permit_timeout" for e in errors), errors[:3])
        self.assertEqual(self.calls, ["one.hang.invalid"])
        self.assertLessEqual(lookup_threads(), 1)

    def test_lookup_threads_are_bounded(self) -> None:
        bound = sync_client.MAX_LOOKUP_THREADS
        errors: List[PermitError] = []
        for i in range(bound + 4):
            client = PermitClient(f"http://h{i}.hang.invalid:1", TOKEN, timeout_ms=100, retries=0)
            with self.assertRaises(PermitError) as caught:
                client.take("p", "k")
            errors.append(caught.exception)
        self.assertEqual(len(self.calls), bound)
        self.assertLessEqual(lookup_threads(), bound)
        self.assertEqual([e.code for e in errors], ["permit_timeout"] * bound + ["permit_network_error"] * 4)
        self.assertIn("name lookups are in flight already", str(errors[-1]))

    def test_a_lookup_thread_that_cannot_start_is_a_network_error_retried_as_one(self) -> None:
        real_start = threading.Thread.start
        starts: List[str] = []

        def start(thread: threading.Thread) -> None:
            if thread.name == "edge-limiter-resolve":
                starts.append(thread.name)
                raise RuntimeError("can't start new thread")
            real_start(thread)

        client = PermitClient("http://localhost:1", TOKEN, retries=2)
        with mock.patch.object(threading.Thread, "start", start):
            with self.assertRaises(PermitError) as caught:
                client.take("p", "k")
        err = caught.exception
        self.assertEqual((err.status, err.code), (0, "permit_network_error"))
        self.assertIn("cannot start a thread to look up 'localhost'", str(err))
        self.assertEqual(len(starts), 3)  # retried as any network error
        self.assertEqual(sync_client._lookups, {})


def lookup_threads() -> int:
    return sum(t.name == "edge-limiter-resolve" for t in threading.enumerate())


if __name__ == "__main__":
    unittest.main()
