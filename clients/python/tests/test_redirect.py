"""The bearer token goes to the configured base URL only: the client never follows a redirect, to
another origin or its own, and says so with RedirectError."""
from __future__ import annotations

import re
import unittest

from edge_limiter import AsyncPermitClient, PermitClient, RedirectError

from support import ScriptedServer, SyncFace, decision_json

TOKEN = "redirect-secret-token"


class NoRedirects(unittest.TestCase):
    kind = "sync"

    def client(self, url: str) -> object:
        return PermitClient(url, TOKEN) if self.kind == "sync" else SyncFace(AsyncPermitClient(url, TOKEN))

    def test_a_redirect_to_another_origin_is_not_followed(self) -> None:
        with ScriptedServer([(200, {}, decision_json())] * 5) as elsewhere:
            target = f"{elsewhere.url}/v1/permits"
            for status in (301, 302, 303, 307, 308):
                with self.subTest(status=status), ScriptedServer([(status, {"Location": target}, b"")]) as origin:
                    client = self.client(origin.url + "/limits")
                    with self.assertRaises(RedirectError) as caught:
                        client.take("p", "k")  # type: ignore[attr-defined]
                    client.close()  # type: ignore[attr-defined]
                    err = caught.exception
                    self.assertEqual((err.status, err.location, err.code), (status, target, "permit_redirect"))
                    self.assertIn("redirects are never followed", str(err))
                    self.assertNotIn(TOKEN, str(err))
                    # The configured origin got the request, with its path prefix; the other origin nothing.
                    self.assertEqual([(r["method"], r["path"]) for r in origin.received], [("POST", "/limits/v1/permits")])
                    self.assertEqual(origin.received[0]["headers"]["authorization"], f"Bearer {TOKEN}")
            self.assertEqual(elsewhere.received, [])

    def test_a_redirect_to_the_same_origin_is_not_followed_either(self) -> None:
        with ScriptedServer([(308, {"Location": "/v2/buckets/p/k"}, b""), (200, {}, decision_json())]) as origin:
            client = self.client(origin.url)
            with self.assertRaises(RedirectError) as caught:
                client.peek("p", "k")  # type: ignore[attr-defined]
            client.close()  # type: ignore[attr-defined]
            self.assertEqual(caught.exception.location, "/v2/buckets/p/k")
            self.assertEqual(len(origin.received), 1)

    def test_credentials_in_the_url_are_refused(self) -> None:
        with self.assertRaisesRegex(ValueError, "must not hold credentials"):
            PermitClient("https://user:pass@limits.internal", TOKEN)
        with self.assertRaisesRegex(ValueError, "http:// or https://"):
            AsyncPermitClient("ftp://limits.internal", TOKEN)
        with self.assertRaisesRegex(ValueError, "token is required"):
            PermitClient("https://limits.internal", "two words")
        # Nor does the token show in a repr.
        client = PermitClient("https://limits.internal", TOKEN)
        self.assertNotIn(TOKEN, repr(client) + repr(vars(client)))


    def test_base_urls_that_would_make_malformed_requests_are_refused(self) -> None:
        make = PermitClient if self.kind == "sync" else AsyncPermitClient
        for url, says in (
            ("http://127.0.0.1:8799/a b", "whitespace or control characters"),
            ("http://127.0.0.1:8799/a\tb", "whitespace or control characters"),
            ("http://127.0.0.1:8799/limits\r\nX-Evil: 1", "whitespace or control characters"),
            ("http://127.0.0.1:8799/a\x7fb", "whitespace or control characters"),
            (" http://127.0.0.1:8799", "whitespace or control characters"),
            ("http://127.0.0.1:8799/a\u00a0b", "whitespace or control characters"),
            ("http://127.0.0.1:8799/a\"b", "percent-encode '\"'"),
            ("http://127.0.0.1:8799/a<b>", "percent-encode '<'"),
            ("http://127.0.0.1:8799/a%zz", "not a %XX escape"),
            ("http://127.0.0.1:8799/a%2", "not a %XX escape"),
            ("http://127.0.0.1:0", "port must be from 1 to 65535, got 0"),
            ("https://127.0.0.1:00/", "port must be from 1 to 65535, got 0"),
            ("http://127.0.0.1:65536", "port must be a number from 1 to 65535"),
            ("http://127.0.0.1:http", "port must be a number from 1 to 65535"),
            ("http://limits..internal", "not a host name"),
            ("http://127.0.0.1:8799/?", "query or fragment"),
        ):
            with self.subTest(url=url):
                with self.assertRaisesRegex(ValueError, re.escape(says)):
                    make(url, TOKEN)
        # What a URL may hold: escapes, a path's punctuation, the highest port, an IPv6 literal.
        for url, shown in (
            ("http://127.0.0.1:8799/a%20b/", "http://127.0.0.1:8799/a%20b"),
            ("http://127.0.0.1:65535/a-b_c.d~e!$&'()*+,;=:@", "http://127.0.0.1:65535/a-b_c.d~e!$&'()*+,;=:@"),
            ("https://[::1]:443/limits", "https://[::1]/limits"),
            ("http://limits.internal:80", "http://limits.internal"),
        ):
            with self.subTest(url=url):
                self.assertEqual(make(url, TOKEN).url, shown)


class AsyncNoRedirects(NoRedirects):
    kind = "async"


if __name__ == "__main__":
    unittest.main()
