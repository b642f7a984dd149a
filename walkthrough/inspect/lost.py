"""Text the vocabulary cannot encode: which characters of a text no token stands for, and a line saying so.

llama.cpp does not refuse text its vocabulary cannot spell; it loses it
(`src/llama-vocab.cpp`, llama-cpp-python 0.3.36 vendor tree):

- byte-level BPE (`gpt2`): a piece that is not a token is spelt byte by byte,
  and a byte with no token of its own is skipped (`llm_tokenizer_bpe_session`);
- UTF-8 BPE (`gemma4`): the same, with `<0xNN>` byte tokens;
- SentencePiece (`llama`): a character that is not a token becomes `<0xNN>` byte
  tokens; when one is missing, llama.cpp's `byte_to_token` throws and the
  program stops (tried with llama-cpp-python 0.3.36), while our tokenizer drops
  the character.

None of these emits `<unk>` for such text, so "lost" here means dropped, in
whole or in part (a character some of whose bytes have no token). The tokenizer
cannot tell us where: `tokenizers` reports no offsets for what it skipped. So
each cut piece of text is compared with the bytes its tokens stand for. The
tokens' bytes are the piece's bytes with some taken out, in order; each
character whose bytes are not all found next, in order, is lost.

Example: "abc xé ab" with a vocabulary of a, b, c, ab, abc and the space only
-> tokens "abc", " ", " ", "ab"; lost_spans("abc xé ab", b"abc  ab") -> [(4, 6)].
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from walkthrough.textsafe import visible

EXAMPLE_CHARACTERS = 5  # distinct lost characters named in the warning
SNIPPET_CHARACTERS = 24  # how much of the first lost stretch is quoted


def utf8(text: str) -> bytes:
    """UTF-8 bytes of `text`; a lone surrogate (hostile input) is kept as its three bytes."""
    return text.encode("utf-8", "surrogatepass")


def lost_spans(text: str, data: bytes, skip: int = 0) -> list[tuple[int, int]]:
    """Character spans `[start, end)` of `text` that `data` (its tokens' bytes) does not hold.

    Args:
        text: the piece of text that was cut into tokens.
        data: the bytes those tokens stand for, joined in order.
        skip: characters at the front of `text` that were added, not typed (SentencePiece's
            space prefix); spans are given without them.

    Example: lost_spans("xa", b"a") -> [(0, 1)]; lost_spans("é", b"\\xc3") -> [(0, 1)].
    """
    if utf8(text) == data:
        return []
    spans: list[tuple[int, int]] = []
    pos = 0
    for i, ch in enumerate(text):
        want = utf8(ch)
        if data.startswith(want, pos):
            pos += len(want)
            continue
        for byte in want:  # a character kept in part: its surviving bytes are used up
            if pos < len(data) and data[pos] == byte:
                pos += 1
        at = i - skip
        if at < 0:
            continue
        if spans and spans[-1][1] == at:
            spans[-1] = (spans[-1][0], at + 1)
        else:
            spans.append((at, at + 1))
    return spans


def lost_count(spans: Sequence[tuple[int, int]]) -> int:
    """How many characters the spans cover."""
    return sum(b - a for a, b in spans)


def _quoted(text: str) -> str:
    return "'" + visible(text) + "'"


def describe_lost(text: str, spans: Sequence[tuple[int, int]], *, stops_llama_cpp: bool = False) -> str:
    """One line naming what was lost: how many characters, the commonest ones, the first stretch.

    Args:
        text: the whole text the spans index.
        spans: lost character spans, in order (`lost_spans`).
        stops_llama_cpp: say that llama.cpp itself cannot tokenize this text (SentencePiece).

    Example: "2 of 9 characters have no token in this vocabulary and were dropped:
    'x'×1, 'é'×1; first at character 5: 'xé'".
    """
    n = lost_count(spans)
    counts = Counter(ch for a, b in spans for ch in text[a:b])
    named = ", ".join(f"{_quoted(ch)}×{k:,}" for ch, k in counts.most_common(EXAMPLE_CHARACTERS))
    more = len(counts) - EXAMPLE_CHARACTERS
    if more > 0:
        named += f" and {more:,} more kind{'s' if more > 1 else ''}"
    a, b = spans[0]
    first = text[a : min(b, a + SNIPPET_CHARACTERS)] + ("…" if b - a > SNIPPET_CHARACTERS else "")
    line = (f"{n:,} of {len(text):,} character{'s' if len(text) != 1 else ''} "
            f"{'has' if n == 1 else 'have'} no token in this vocabulary and "
            f"{'was' if n == 1 else 'were'} dropped: {named}; first at character {a + 1:,}: {_quoted(first)}")
    if stops_llama_cpp:
        line += " (llama.cpp stops on such text: its byte fallback finds no <0xNN> token)"
    return line
