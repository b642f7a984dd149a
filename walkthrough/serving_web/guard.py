"""The checks `walkthrough serve` applies to every request and packet, as pure functions (no aiohttp).

- Address: a request's `Host` must name the served address (for a loopback bind: localhost, 127.0.0.1,
  ::1 or the bound name, with the port), and an `Origin`, when a browser sends one, must be that same
  host and port: a page from another site cannot open the websocket (browsers apply no same-origin rule
  to websockets), and a DNS name rebound to 127.0.0.1 fails the `Host` check. A bind to another address
  cannot know the names visitors use, so there the per-launch token stands in for the `Host` check.
- Token: compared in constant time (`hmac.compare_digest`).
- Terminal size: a visitor's numbers clamped to [MIN_SIZE, MAX_SIZE] before the app lays out; anything
  that is not a finite number is ignored.
- Packets: the browser's JSON envelopes, parsed into `Packet`s or None; never an exception.

Example:
    >>> clamp_size(100000, 0)
    (500, 5)
    >>> parse_packet('["resize", {"width": NaN, "height": 30}]') is None
    True
"""

from __future__ import annotations

import hmac
import json
import math
from dataclasses import dataclass
from ipaddress import ip_address
from urllib.parse import urlsplit

MIN_SIZE = (10, 5)  # columns, rows: below this Textual has nothing to lay out (0 crashed its compositor)
MAX_SIZE = (500, 200)  # columns, rows: more than a 4K screen shows at the page's smallest font
DEFAULT_SIZE = (80, 24)
LOOPBACK_ALIASES = ("localhost", "127.0.0.1", "::1")
DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}


def _host_port(netloc: str, default_port: int) -> tuple[str, int] | None:
    """(lower-case host without brackets, port) of "host[:port]", or None if it is malformed."""
    try:
        parts = urlsplit("//" + netloc)
        port = parts.port
    except ValueError:
        return None
    if not parts.hostname or parts.username is not None or parts.path or parts.query:
        return None
    return parts.hostname.lower(), default_port if port is None else port


def _canonical(host: str) -> str:
    """An IP address in its one spelling ("0:0::1" -> "::1"); names lower-cased."""
    host = host.strip("[]").lower()
    try:
        return str(ip_address(host))
    except ValueError:
        return host


@dataclass(frozen=True)
class ServedAddress:
    """What `serve` listens on, and whether `Host` headers can be checked against it."""

    host: str
    port: int
    loopback: bool

    def names(self) -> frozenset[str]:
        """Host names a visitor's browser may put in `Host` (loopback binds only)."""
        names = {_canonical(self.host)}
        if self.loopback:
            names.update(LOOPBACK_ALIASES)
        return frozenset(names)

    def host_refusal(self, host_header: str | None) -> str | None:
        """Why a request with this `Host` header is refused, or None to accept it."""
        if host_header is None:
            return "no Host header"
        parsed = _host_port(host_header, 80)
        if parsed is None:
            return f"malformed Host {host_header!r}"
        if not self.loopback:
            return None  # any name may reach a public bind; the token guards it
        host, port = parsed
        if _canonical(host) not in self.names() or port != self.port:
            return f"Host {host_header!r} is not this server ({self.host}:{self.port})"
        return None


def origin_refusal(origin: str | None, host_header: str | None) -> str | None:
    """Why a request whose `Origin` is not the page's own host and port is refused, or None.

    A missing `Origin` is accepted: browsers send one on every websocket and cross-site request, so a
    request without it does not come from another site's page (top-level page loads, curl, tests).
    """
    if origin is None:
        return None
    parts = urlsplit(origin)
    if parts.scheme not in ("http", "https") or host_header is None:
        return f"Origin {origin!r} is not this server"
    try:
        port = parts.port
    except ValueError:
        return f"malformed Origin {origin!r}"
    seen = (_canonical(parts.hostname or ""), DEFAULT_PORTS[parts.scheme] if port is None else port)
    expected = _host_port(host_header, DEFAULT_PORTS[parts.scheme])
    if expected is None or seen != (_canonical(expected[0]), expected[1]):
        return f"Origin {origin!r} is not this server ({host_header})"
    return None


def token_matches(given: str | None, token: str) -> bool:
    """True when `given` is the launch token (constant-time comparison of the UTF-8 bytes)."""
    if given is None:
        return False
    return hmac.compare_digest(given.encode("utf-8", "surrogatepass"), token.encode("utf-8"))


def clamp_size(width: int, height: int) -> tuple[int, int]:
    """A terminal size inside [MIN_SIZE, MAX_SIZE]."""
    return (min(max(width, MIN_SIZE[0]), MAX_SIZE[0]), min(max(height, MIN_SIZE[1]), MAX_SIZE[1]))


def _cells(value: object) -> int | None:
    """A count of cells from a JSON number, or None if it is not a finite number (bools are not)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return round(value)
    return None


def _query_cells(text: str | None) -> int | None:
    """A count of cells from a query-string value, or None if it is not a finite number."""
    try:
        return _cells(float(text)) if text is not None else None
    except ValueError:
        return None


def size_from_query(width: str | None, height: str | None) -> tuple[int, int]:
    """The connect size from `?width=&height=`: clamped; DEFAULT_SIZE where a value is not a number."""
    w, h = _query_cells(width), _query_cells(height)
    return clamp_size(DEFAULT_SIZE[0] if w is None else w, DEFAULT_SIZE[1] if h is None else h)


@dataclass(frozen=True)
class Packet:
    """One message from the page: kind "stdin" (text), "resize" (size), "ping" (echoed), "focus", "blur"."""

    kind: str
    text: str = ""
    size: tuple[int, int] = DEFAULT_SIZE
    echo: object = None


def parse_packet(message: str) -> Packet | None:
    """The packet in a websocket text message, or None for anything malformed (never raises)."""
    try:
        envelope = json.loads(message)
    except (ValueError, RecursionError):
        return None
    if not isinstance(envelope, list) or not envelope or not isinstance(envelope[0], str):
        return None
    kind, body = envelope[0], envelope[1] if len(envelope) > 1 else None
    if kind == "stdin":
        return Packet("stdin", text=body) if isinstance(body, str) else None
    if kind == "resize":
        if not isinstance(body, dict):
            return None
        width, height = _cells(body.get("width")), _cells(body.get("height"))
        if width is None or height is None:
            return None
        return Packet("resize", size=clamp_size(width, height))
    if kind == "ping":
        return Packet("ping", echo=body)
    if kind in ("focus", "blur"):
        return Packet(kind)
    return None
