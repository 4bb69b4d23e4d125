"""The bearer token goes to the configured base URL only: the client never follows a redirect, to
another origin or its own, and says so with RedirectError."""
from __future__ import annotations

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


class AsyncNoRedirects(NoRedirects):
    kind = "async"


if __name__ == "__main__":
    unittest.main()
