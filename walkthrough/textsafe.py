"""Showing text from a file or a user literally: control characters and escapes made visible.

Metadata strings, chat messages and token pieces are data. Before they reach a
terminal, `visible()` replaces every control character (C0, DEL, C1, and the
escape that starts terminal sequences) with a printable escape, so a GGUF whose
`general.name` holds `\\x1b]0;pwned\\x07` shows exactly those characters instead
of retitling the terminal. Wrap the result in `rich.text.Text(...)` (never a
markup string) so `[bold]` in a file stays the six characters `[bold]`.

Example: visible("a\\x1b[31mb\\n") -> "a\\\\x1b[31mb\\\\n"
"""

from __future__ import annotations

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(ch: str) -> str:
    code = ord(ch)
    if ch in _NAMED:
        return _NAMED[ch]
    if code < 0x20 or code == 0x7F or 0x80 <= code < 0xA0:
        return f"\\x{code:02x}"
    if code in (0x2028, 0x2029) or 0x202A <= code <= 0x202E or 0x2066 <= code <= 0x2069:
        return f"\\u{code:04x}"  # line separators and bidirectional overrides
    return ch


def visible(text: str, *, keep_newlines: bool = False) -> str:
    """`text` with control characters replaced by visible escapes.

    Args:
        text: untrusted text.
        keep_newlines: leave "\\n" as a line break (for multi-line views such as a template source).
    """
    if text.isprintable() and not any(c in text for c in "\u2028\u2029"):
        return text
    return "".join("\n" if keep_newlines and c == "\n" else _escape(c) for c in text)


def safe_text(text: str, style: str = "", *, keep_newlines: bool = False):
    """A `rich.text.Text` of `visible(text)`: no markup is ever interpreted."""
    from rich.text import Text

    return Text(visible(text, keep_newlines=keep_newlines), style=style)
