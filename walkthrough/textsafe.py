"""Showing text from a file or a user literally: control characters and escapes made visible.

Metadata strings, chat messages and token pieces are data. Before they reach a
terminal, `visible()` replaces every control character (C0, DEL, C1, and the
escape that starts terminal sequences) with a printable escape, so a GGUF whose
`general.name` holds `\\x1b]0;pwned\\x07` shows exactly those characters instead
of retitling the terminal. Characters a reader cannot see are escaped too: Unicode
format characters (bidirectional overrides and isolates, zero-width space and
joiners, word joiner, byte-order mark, soft hyphen, tag characters U+E0000-E007F),
line and paragraph separators, and lone surrogates. `json_visible()` does the same
for JSON text written with `ensure_ascii=False`. Wrap the result in `rich.text.Text(...)` (never a
markup string) so `[bold]` in a file stays the six characters `[bold]`.
`token_text()` is how one token's text is shown everywhere (app and CLI): its
whitespace as signs (␣ ↵ →), then `visible()`.

Example: visible("a\\x1b[31mb\\n") -> "a\\\\x1b[31mb\\\\n"
"""

from __future__ import annotations

import unicodedata

_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_HIDDEN_CATEGORIES = frozenset({"Cf", "Cs", "Zl", "Zp"})  # format, lone surrogate, line/paragraph separator


def hidden(ch: str) -> bool:
    """True for a character that would act on a terminal or that a reader cannot see."""
    code = ord(ch)
    return code < 0x20 or 0x7F <= code < 0xA0 or unicodedata.category(ch) in _HIDDEN_CATEGORIES


def _escape(ch: str) -> str:
    code = ord(ch)
    if ch in _NAMED:
        return _NAMED[ch]
    if code < 0x20 or 0x7F <= code < 0xA0:
        return f"\\x{code:02x}"
    if unicodedata.category(ch) in _HIDDEN_CATEGORIES:
        return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"
    return ch


def visible(text: str, *, keep_newlines: bool = False) -> str:
    """`text` with control characters replaced by visible escapes.

    Args:
        text: untrusted text.
        keep_newlines: leave "\\n" as a line break (for multi-line views such as a template source).
    """
    if text.isprintable():  # (Python counts Cc, Cf, Cs, Zl and Zp as not printable)
        return text
    return "".join("\n" if keep_newlines and c == "\n" else _escape(c) for c in text)


def safe_text(text: str, style: str = "", *, keep_newlines: bool = False):
    """A `rich.text.Text` of `visible(text)`: no markup is ever interpreted."""
    from rich.text import Text

    return Text(visible(text, keep_newlines=keep_newlines), style=style)


WHITESPACE_SIGNS = {" ": "\u2423", "\n": "\u21b5", "\t": "\u2192"}  # ␣ ↵ →: how a token's whitespace is shown
_WHITESPACE = str.maketrans(WHITESPACE_SIGNS)


def token_text(piece: str, limit: int | None = None) -> str:
    """A token's text as a reader can see it: space `␣`, newline `↵`, tab `→`, then `visible()`.

    A token is often " word" or a lone "\\n", which would print as nothing. The signs
    replace the whitespace before `visible()` escapes what is left, so a hostile
    piece stays escaped. `limit` cuts longer texts to that many characters, the
    last one `…` (before escaping: an escape is never cut in half).

    Example: token_text(" hi\\n") -> "␣hi↵"; token_text("\\x1b") -> "\\\\x1b"
    """
    text = piece.translate(_WHITESPACE)
    if limit is not None and len(text) > limit:
        text = text[: limit - 1] + "\u2026"
    return visible(text)


def token_label(piece: str, style: str = "", limit: int | None = None):
    """A `rich.text.Text` of `token_text(piece, limit)`: one token's text wherever the app or the CLI shows it."""
    from rich.text import Text

    return Text(token_text(piece, limit), style=style)


def json_visible(text: str) -> str:
    """JSON text (from `json.dumps(..., ensure_ascii=False)`) with hidden characters as `\\uXXXX` escapes.

    They can only occur inside JSON strings, where the escape means the same character,
    so the document is unchanged for a JSON reader. Lone surrogates become escapes too,
    so the text can be written as UTF-8.

    Example: json.dumps("a\\u202eb", ensure_ascii=False) holds the override itself;
    json_visible of it holds the six characters \\u202e instead.
    """
    if text.isprintable():
        return text
    return "".join(_json_escape(c) if hidden(c) and c not in "\n\r\t" else c for c in text)


def _json_escape(ch: str) -> str:
    code = ord(ch)
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"
