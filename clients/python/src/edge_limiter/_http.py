"""HTTP/1.1 as both clients speak it, with no I/O: a request's bytes, an answer's head, how its body is
framed. The sync client reads from a socket, the asyncio client from a stream; both read the same way."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Tuple

from ._core import ProtocolError, Request
from .errors import MalformedAnswerError

#: The largest answer head (status line, header lines and the blank line that ends them) and body read
#: (the server's are a few hundred bytes). The trailer section of a chunked body may have MAX_HEAD too.
MAX_HEAD = 64 * 1024
MAX_BODY = 1024 * 1024
#: The longest chunk-size line of a chunked body (with its extensions and CRLF).
MAX_CHUNK_LINE = 4096

_DIGITS = frozenset("0123456789")
_HEX = frozenset("0123456789abcdefABCDEF")


__all__ = [
    "MAX_BODY",
    "MAX_CHUNK_LINE",
    "MAX_HEAD",
    "Head",
    "ProtocolError",
    "chunk_size",
    "check_body_size",
    "check_line",
    "framing",
    "parse_head",
    "request_bytes",
    "too_long",
]


def request_bytes(request: Request) -> bytes:
    head = f"{request.method} {request.path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in request.headers.items()) + "\r\n"
    return head.encode("latin-1") + (request.body or b"")


@dataclass(frozen=True)
class Head:
    version: str
    status: int
    #: Lower-case names; repeated headers joined with ", ".
    headers: Dict[str, str]

    @property
    def interim(self) -> bool:
        """A 1xx (100 Continue, 103 Early Hints, ...): the final answer follows on the same connection. Not
        101 Switching Protocols: after it the connection speaks another protocol (``framing`` refuses it)."""
        return 100 <= self.status < 200 and self.status != 101

    @property
    def keep_alive(self) -> bool:
        connection = {t.strip() for t in self.headers.get("connection", "").lower().split(",")}
        return self.version == "HTTP/1.1" and "close" not in connection


def parse_head(data: bytes) -> Head:
    """A status line and header lines, up to and with the blank line that ends them."""
    lines = data.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or parts[0] not in ("HTTP/1.0", "HTTP/1.1") or len(parts[1]) != 3 or not set(parts[1]) <= _DIGITS:
        raise ProtocolError(f"not an HTTP/1.1 status line: {lines[0][:80]!r}")
    headers: Dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise ProtocolError(f"not a header line: {line[:80]!r}")
        name, value = name.lower(), value.strip()
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    return Head(parts[0], int(parts[1]), headers)


def framing(head: Head, method: str) -> Tuple[str, int, bool]:
    """How the body of a final answer ends: ``("none", 0)``, ``("chunked", 0)``, ``("length", n)`` or
    ``("close", 0)`` (it runs to the end of the connection); and whether that framing lets the connection
    be reused (``head.keep_alive`` still has its say).

    An answer whose framing cannot be trusted is a MalformedAnswerError (its connection is closed): a
    status outside 100-599, 101 Switching Protocols (a protocol this client does not speak follows), and
    both Content-Length and Transfer-Encoding (RFC 9112 6.3: a request smuggling vector)."""
    if not 100 <= head.status <= 599:
        raise MalformedAnswerError(head.status, f"{head.status} is not an HTTP status (100-599)")
    if head.status == 101:
        raise MalformedAnswerError(head.status, "101 Switching Protocols: the permit API speaks HTTP/1.1 only")
    if "transfer-encoding" in head.headers and "content-length" in head.headers:
        raise MalformedAnswerError(head.status, "both Content-Length and Transfer-Encoding: its framing is ambiguous")
    if method == "HEAD" or head.status in (204, 304):
        # No body, whatever the headers say; but one that announces a body (a buggy server writing it
        # anyway, maybe later) leaves the connection's next bytes in doubt: it is not reused.
        announced = "transfer-encoding" in head.headers or head.headers.get("content-length", "0").strip() not in ("0", "")
        return "none", 0, not (announced and method != "HEAD")
    if "transfer-encoding" in head.headers:
        codings = [t.strip().lower() for t in head.headers["transfer-encoding"].split(",")]
        if codings[-1] != "chunked":
            return "close", 0, False
        return "chunked", 0, True
    if "content-length" in head.headers:
        values = {v.strip() for v in head.headers["content-length"].split(",")}
        if len(values) != 1:
            raise ProtocolError(f"Content-Length {head.headers['content-length'][:40]!r} is not one length")
        value = values.pop()
        if not value or len(value) > 12 or not set(value) <= _DIGITS:
            raise ProtocolError(f"Content-Length {value[:40]!r} is not a length")
        length = int(value)
        if length > MAX_BODY:
            raise ProtocolError(f"Content-Length {length} is above the {MAX_BODY} bytes an answer may have")
        return "length", length, True
    return "close", 0, False


def chunk_size(line: bytes) -> int:
    """A chunk's size from its size line (extensions after ``;`` are ignored)."""
    text = line.split(b";", 1)[0].strip().decode("latin-1")
    if not text or len(text) > 8 or not set(text) <= _HEX:
        raise ProtocolError(f"not a chunk size: {text[:40]!r}")
    return int(text, 16)


def too_long(what: str, limit: int) -> ProtocolError:
    return ProtocolError(f"{what} is above the {limit} bytes it may have")


def check_line(data: bytes, what: str, limit: int) -> bytes:
    """``data`` (a head, a chunk-size line or a trailer line, with its line end) when it has at most
    ``limit`` bytes; else the ProtocolError both clients raise for it."""
    if len(data) > limit:
        raise too_long(what, limit)
    return data


def check_body_size(size: int) -> None:
    if size > MAX_BODY:
        raise ProtocolError(f"the body is above the {MAX_BODY} bytes an answer may have")

