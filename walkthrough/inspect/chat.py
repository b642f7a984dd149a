"""From messages to tokens: the rendered chat template, cut into tokens, each knowing which message it came from.

The template's own text is tokenized with special-token text parsed as special
tokens; text that came from a message is not (llama.cpp's parse_special=false),
so a user who types `<|im_end|>` gets ordinary tokens, not the end of their turn.

Where each message's text landed is found by rendering twice:

1. the real render R;
2. a skeleton render S in which every string in the messages (content, text
   parts, reasoning, tool arguments; not `role` or `type`) is replaced by a
   sentinel of private-use characters. S split at the sentinels gives the
   template's own text pieces T0, T1, ... in order. They are matched in R one
   after the other; what lies between two pieces is the output for that
   sentinel's message, whatever the template did to it (`.strip()`, a split on
   `</think>`, ...). When a piece occurs more than once, the gap chosen is the
   longest one that is still a substring of the message's text, so a message
   that contains the template's next piece cannot end its own span early.

If the skeleton does not line up with R (the template branched on the content,
or sliced a sentinel), each message text is searched for in R in order, as is
and stripped. A text that is still not found is reported in `warnings`, and any
special-token text it contains is read as plain text wherever it appears outside
the located messages (safe, and visibly wrong, rather than an injection).

BOS and EOS follow llama.cpp's chat path (`common_chat_templates_apply_jinja` in
`common/chat.cpp`, then tokenizing with add_special=true): `bos_token`/`eos_token`
are the vocabulary's BOS/EOS text; when the vocabulary says add_bos, a BOS text at
the start of R is taken off and the BOS id put first (so there is one BOS, not
two), and the same for add_eos at the end. The BOS token's span covers the text it
replaced, or is empty at 0 when R did not start with it.

Text fragments are cut as llama.cpp cuts a whole prompt: special tokens split the
text, and the plain text between two special tokens is tokenized as one piece even
when it spans template text and message text (the token's `message` is that of
its first character).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from walkthrough.inspect.lost import describe_lost, lost_count, utf8
from walkthrough.inspect.sandbox import DEFAULT_LIMITS, Limits, TemplateError
from walkthrough.inspect.template import PLAIN_SEPARATOR, content_text, plain_text, render
from walkthrough.inspect.vocab import SPM

if TYPE_CHECKING:
    from walkthrough.inspect.tokenizer import GGUFTokenizer

C_SPACE = " \t\n\v\f\r"  # what llama.cpp's lstrip/rstrip special tokens eat
_DATA_KEYS_SKIPPED = frozenset({"role", "type"})  # strings templates branch on, left as they are
_SENTINEL_PAIRS = [("\ue000", "\ue001"), ("\U000f0000", "\U000f0001"), ("\U00100000", "\U00100001")]


@dataclass(frozen=True)
class ChatToken:
    """One token of the prompt."""

    id: int
    piece: str  # display text (bytes that are not UTF-8 on their own as <0xE2>)
    special: bool
    start: int  # span in the rendered text, [start, end)
    end: int
    message: int | None  # index into the messages, None for template text and added BOS/EOS


@dataclass(frozen=True)
class Region:
    """A stretch of the rendered text and where it came from."""

    start: int
    end: int
    message: int | None  # None: the template's own text
    parse_special: bool  # False for message text (and for unlocated special-looking text)


@dataclass(frozen=True)
class TextCounts:
    """How long a text is in characters, UTF-8 bytes and tokens."""

    characters: int
    bytes: int
    tokens: int
    lost: int = 0  # characters the vocabulary cannot encode (dropped; see `lost.py`)

    @property
    def chars_per_token(self) -> float | None:
        return self.characters / self.tokens if self.tokens else None


@dataclass
class ChatTokens:
    """The rendered prompt, its regions and its tokens."""

    text: str
    tokens: list[ChatToken]
    regions: list[Region]
    warnings: list[str] = field(default_factory=list)
    lost: list[tuple[int, int]] = field(default_factory=list)  # character spans no token stands for

    @property
    def ids(self) -> list[int]:
        return [t.id for t in self.tokens]

    def counts(self, message: int | None = None) -> TextCounts:
        """Counts of the whole prompt, or of the text and tokens that came from one message (by index)."""
        if message is None:
            text, n_tokens, lost = self.text, len(self.tokens), lost_count(self.lost)
        else:
            mine = [r for r in self.regions if r.message == message]
            text = "".join(self.text[r.start:r.end] for r in mine)
            n_tokens = sum(1 for t in self.tokens if t.message == message)
            lost = sum(max(0, min(b, r.end) - max(a, r.start)) for r in mine for a, b in self.lost)
        return TextCounts(len(text), len(utf8(text)), n_tokens, lost)

    def lost_message(self, tokenizer: GGUFTokenizer) -> str | None:
        """The warning naming the text the vocabulary cannot encode; None when nothing was lost."""
        if not self.lost:
            return None
        return describe_lost(self.text, self.lost, stops_llama_cpp=getattr(tokenizer, "model", None) == SPM)


# ---- where each message's text landed ----------------------------------------------------
@dataclass(frozen=True)
class _Leaf:
    message: int
    text: str


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _strings(v)


def _pick_sentinels(source: str, messages: list[dict]) -> tuple[str, str]:
    texts = [source, *_strings(messages)]
    for pair in _SENTINEL_PAIRS:
        if not any(c in t for t in texts for c in pair):
            return pair
    raise TemplateError(
        "the messages use every private-use character the locator could mark them with"
    )


def _skeleton(value: Any, message: int, leaves: list[_Leaf], marks: tuple[str, str]) -> Any:
    """`value` with every non-empty string (outside role/type keys) replaced by a numbered sentinel."""
    if isinstance(value, str):
        if not value:
            return value
        leaves.append(_Leaf(message, value))
        return f"{marks[0]}{len(leaves) - 1}{marks[1]}"
    if isinstance(value, dict):
        return {
            k: (v if k in _DATA_KEYS_SKIPPED else _skeleton(v, message, leaves, marks))
            for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [_skeleton(v, message, leaves, marks) for v in value]
    return value


def _longest_prefix_within(text: str, pos: int, limit: int, within: str) -> int:
    """The largest end in [pos, limit] such that text[pos:end] is a substring of `within`."""
    lo, hi = pos, limit
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if text[pos:mid] in within:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _gap_end(rendered: str, pos: int, following: str, original: str) -> int | None:
    """Where a message's output ends: before the next template piece, as long a gap as `original` allows."""
    for variant in (original, original.strip(), original.lstrip(), original.rstrip()):
        end = pos + len(variant)
        if rendered.startswith(variant, pos) and rendered.startswith(following, end):
            return end
    if not following:
        return _longest_prefix_within(rendered, pos, len(rendered), original)
    first = rendered.find(following, pos)
    if first < 0:
        return None
    best, hit = first, first
    while hit >= 0 and rendered[pos:hit] in original:
        best = hit
        hit = rendered.find(following, hit + 1)
    return best


def _align(
    rendered: str, skeleton: str, leaves: list[_Leaf], marks: tuple[str, str]
) -> list[Region] | None:
    """Regions from matching the skeleton's template pieces in the real render, or None if they do not line up."""
    parts = re.split(f"{re.escape(marks[0])}(\\d+){re.escape(marks[1])}", skeleton)
    pieces, slots = parts[0::2], [int(n) for n in parts[1::2]]
    if any(m in p for p in pieces for m in marks) or any(n >= len(leaves) for n in slots):
        return None  # a sentinel was cut or altered by the template
    if not rendered.startswith(pieces[0]):
        return None
    regions: list[Region] = []

    def add(start: int, end: int, message: int | None) -> None:
        if end > start:
            regions.append(Region(start, end, message, message is None))

    add(0, len(pieces[0]), None)
    pos = len(pieces[0])
    for k, slot in enumerate(slots):
        following = pieces[k + 1]
        if k == len(slots) - 1:
            end = len(rendered) - len(following)
            if end < pos or not rendered.endswith(following):
                return None
        else:
            end = _gap_end(rendered, pos, following, leaves[slot].text)
            if end is None:
                return None
        add(pos, end, leaves[slot].message)
        add(end, end + len(following), None)
        pos = end + len(following)
    return regions if pos == len(rendered) else None


def _search(
    rendered: str, leaves: list[_Leaf], special_texts: list[str]
) -> tuple[list[Region], list[str]]:
    """Fallback: find each message text in order; protect special text from texts not found."""
    claimed: list[tuple[int, int, int]] = []
    missing: list[_Leaf] = []
    cursor = 0
    for leaf in leaves:
        for variant in (leaf.text, leaf.text.strip()):
            hit = rendered.find(variant, cursor) if variant else -1
            if hit >= 0:
                claimed.append((hit, hit + len(variant), leaf.message))
                cursor = hit + len(variant)
                break
        else:
            missing.append(leaf)
    warnings = [
        f"message {leaf.message + 1}: its text could not be found in the rendered template"
        for leaf in missing
    ]
    risky = sorted(
        {s for leaf in missing for s in special_texts if s and s in leaf.text},
        key=len,
        reverse=True,
    )
    plain_spans: list[tuple[int, int]] = []
    for s in risky:
        for m in re.finditer(re.escape(s), rendered):
            plain_spans.append((m.start(), m.end()))
    if risky:
        warnings.append(
            "special-token text from those messages is read as plain text everywhere: "
            + ", ".join(repr(s) for s in risky)
        )
    marks = sorted(
        [(a, b, msg, False) for a, b, msg in claimed]
        + [
            (a, b, None, False)
            for a, b in plain_spans
            if not any(x <= a < y for x, y, _ in claimed)
        ]
    )
    regions: list[Region] = []
    pos = 0
    for a, b, msg, _ in marks:
        if a < pos:
            continue
        if a > pos:
            regions.append(Region(pos, a, None, True))
        regions.append(Region(a, b, msg, False))
        pos = b
    if pos < len(rendered):
        regions.append(Region(pos, len(rendered), None, True))
    return regions, warnings


def _locate(
    rendered: str,
    skeleton: str,
    leaves: list[_Leaf],
    marks: tuple[str, str],
    special_texts: list[str],
) -> tuple[list[Region], list[str]]:
    """Split the rendered text into template regions and message regions (see the module docstring)."""
    regions = _align(rendered, skeleton, leaves, marks)
    if regions is not None:
        return regions, []
    regions, warnings = _search(rendered, leaves, special_texts)
    note = (
        "the template's text did not line up with a render of placeholders; "
        "messages were located by searching for their text"
    )
    return regions, [note, *warnings]


# ---- tokens -----------------------------------------------------------------------------------
def _special_texts(tokenizer: GGUFTokenizer) -> list[str]:
    texts = getattr(tokenizer, "special_text", None)
    if callable(texts):
        return list(texts())
    return sorted(
        {tokenizer.token_bytes(i).decode("utf-8", "replace") for i in tokenizer.special_ids},
        key=len,
        reverse=True,
    )


def special_token_text(tokenizer: GGUFTokenizer, tid: int | None) -> str:
    """The text a template gets for a special token (llama.cpp's token_to_piece with special=true);
    "" when the vocabulary has no such token."""
    if tid is None or not 0 <= tid < tokenizer.vocab_size:
        return ""
    return tokenizer.token_bytes(tid).decode("utf-8", "replace")


def _fragments(tokenizer: GGUFTokenizer, text: str, regions: list[Region]) -> list[tuple[int, int, int]]:
    """llama.cpp's partition of the whole text, special tokens allowed only in template regions:
    `(special_id or -1, start, end)` in order, neighbouring plain text merged."""
    cut: list[tuple[int, int, int]] = []
    for r in regions:
        if r.parse_special:
            cut.extend(
                (tid, r.start + a, r.start + b)
                for tid, a, b in tokenizer.partition(text[r.start : r.end], parse_special=True)
            )
        else:
            cut.append((-1, r.start, r.end))
    vocab = getattr(tokenizer, "vocab", None)
    lstrip, rstrip = getattr(vocab, "lstrip", frozenset()), getattr(vocab, "rstrip", frozenset())
    merged: list[list[int]] = []
    for tid, a, b in cut:
        if tid < 0 and merged and merged[-1][0] < 0 and merged[-1][2] == a:
            merged[-1][2] = b
        else:
            merged.append([tid, a, b])
    # Special tokens that eat whitespace do so across region borders too, as in one llama.cpp call.
    for k, (tid, _, _) in enumerate(merged):
        if tid in lstrip and k > 0 and merged[k - 1][0] < 0:
            prev = merged[k - 1]
            while prev[2] > prev[1] and text[prev[2] - 1] in C_SPACE:
                prev[2] -= 1
        if tid in rstrip and k + 1 < len(merged) and merged[k + 1][0] < 0:
            nxt = merged[k + 1]
            while nxt[1] < nxt[2] and text[nxt[1]] in C_SPACE:
                nxt[1] += 1
    return [(tid, a, b) for tid, a, b in merged if b > a or tid >= 0]


def _message_at(regions: list[Region], pos: int) -> int | None:
    for r in regions:
        if r.start <= pos < r.end:
            return r.message
    return None


def tokens_for_regions(
    tokenizer: GGUFTokenizer, text: str, regions: list[Region]
) -> tuple[list[ChatToken], list[tuple[int, int]]]:
    """Tokens of `text`, special tokens parsed only inside regions that allow them, and the
    character spans of `text` that no token stands for (text the vocabulary cannot encode)."""
    out: list[ChatToken] = []
    lost: list[tuple[int, int]] = []
    for tid, a, b in _fragments(tokenizer, text, regions):
        if tid >= 0:
            out.append(ChatToken(tid, tokenizer.piece(tid), True, a, b, _message_at(regions, a)))
            continue
        tokens, missing = tokenizer.tokenize_accounted(text[a:b], parse_special=False)
        lost.extend((a + x, a + y) for x, y in missing)
        for t in tokens:
            start = a + t.start
            out.append(
                ChatToken(t.id, t.piece, t.special, start, a + t.end, _message_at(regions, start))
            )
    return out, lost


def chat_tokens(
    tokenizer: GGUFTokenizer,
    source: str,
    messages: list[dict],
    *,
    add_generation_prompt: bool = True,
    origin: str = "chat template",
    limits: Limits = DEFAULT_LIMITS,
    cancel: threading.Event | None = None,
    **extra: Any,
) -> ChatTokens:
    """Render `messages` with the template `source` and tokenize the result as llama.cpp's chat path does,
    except that message text never becomes special tokens.

    Args:
        tokenizer: a `GGUFTokenizer` (its BOS/EOS text fill `bos_token`/`eos_token`).
        extra: more template variables, passed to both renders.

    Raises:
        TemplateError: the template failed (see `template.render`).
    """
    bos_text = special_token_text(tokenizer, tokenizer.bos_id)
    eos_text = special_token_text(tokenizer, tokenizer.eos_id)
    common = {
        "add_generation_prompt": add_generation_prompt,
        "bos_token": bos_text,
        "eos_token": eos_text,
        "origin": origin,
        "limits": limits,
        "cancel": cancel,
        **extra,
    }
    rendered = render(source, messages, **common)
    marks = _pick_sentinels(source, messages)
    leaves: list[_Leaf] = []
    skeleton_messages = [_skeleton(m, i, leaves, marks) for i, m in enumerate(messages)]
    try:
        skeleton = render(source, skeleton_messages, **common)
    except TemplateError:
        skeleton = ""  # the template refused placeholders: fall back to searching
    regions, warnings = _locate(rendered, skeleton, leaves, marks, _special_texts(tokenizer))

    # llama.cpp's chat path: a leading BOS text is replaced by the BOS the vocabulary adds.
    body_start, body_end = 0, len(rendered)
    head: list[ChatToken] = []
    tail: list[ChatToken] = []
    if tokenizer.add_bos and tokenizer.bos_id is not None:
        width = (
            len(bos_text)
            if bos_text and rendered.startswith(bos_text) and regions[0].message is None
            else 0
        )
        head.append(
            ChatToken(tokenizer.bos_id, tokenizer.piece(tokenizer.bos_id), True, 0, width, None)
        )
        body_start = width
    if tokenizer.add_eos and tokenizer.eos_id is not None:
        ends = bool(eos_text) and rendered.endswith(eos_text) and regions[-1].message is None
        width = len(eos_text) if ends and len(rendered) - len(eos_text) >= body_start else 0
        tail.append(
            ChatToken(
                tokenizer.eos_id,
                tokenizer.piece(tokenizer.eos_id),
                True,
                len(rendered) - width,
                len(rendered),
                None,
            )
        )
        body_end = len(rendered) - width
    body = [
        Region(max(r.start, body_start), min(r.end, body_end), r.message, r.parse_special)
        for r in regions
        if min(r.end, body_end) > max(r.start, body_start)
    ]
    tokens, lost = tokens_for_regions(tokenizer, rendered, body)
    return _with_lost(tokenizer, ChatTokens(rendered, head + tokens + tail, regions, warnings, lost))


def completion_tokens(tokenizer: GGUFTokenizer, messages: list[dict]) -> ChatTokens:
    """The messages' text as one plain prompt (`template.plain_text`), tokenized as llama.cpp's completion
    tokenizes a prompt (llama_tokenize with add_special and parse_special): BOS first when the file says
    `add_bos_token`, EOS last when it says `add_eos_token`, special-token text read as special tokens.
    Each token knows the message its text came from (None for the blank lines between them).

    Example: a file with add_bos_token and messages [{"content": "The capital of France is"}]
    -> [BOS, "The", " capital", " of", " France", " is"]
    """
    text = plain_text(messages)
    regions: list[Region] = []
    pos = 0
    for i, m in enumerate(messages):
        if i:
            regions.append(Region(pos, pos + len(PLAIN_SEPARATOR), None, True))
            pos += len(PLAIN_SEPARATOR)
        end = pos + len(content_text(m.get("content")))
        if end > pos:
            regions.append(Region(pos, end, i, True))
        pos = end
    found, lost = tokenizer.tokenize_accounted(text, parse_special=True)
    tokens = [ChatToken(t.id, t.piece, t.special, t.start, t.end, _message_at(regions, t.start)) for t in found]
    if tokenizer.add_bos and tokenizer.bos_id is not None:
        tokens.insert(0, ChatToken(tokenizer.bos_id, tokenizer.piece(tokenizer.bos_id), True, 0, 0, None))
    if tokenizer.add_eos and tokenizer.eos_id is not None:
        tokens.append(ChatToken(tokenizer.eos_id, tokenizer.piece(tokenizer.eos_id), True, len(text), len(text),
                                None))
    return _with_lost(tokenizer, ChatTokens(text, tokens, regions, lost=lost))


def _with_lost(tokenizer: GGUFTokenizer, chat: ChatTokens) -> ChatTokens:
    """`chat` with the lost-text warning (if any) added to its warnings."""
    line = chat.lost_message(tokenizer)
    if line:
        chat.warnings.append(line)
    return chat


def raw_tokens(tokenizer: GGUFTokenizer, text: str) -> ChatTokens:
    """`text` tokenized alone: no template, no BOS/EOS, special-token text as plain text
    (llama.cpp's add_special=false, parse_special=false)."""
    found, lost = tokenizer.tokenize_accounted(text, parse_special=False)
    tokens = [ChatToken(t.id, t.piece, t.special, t.start, t.end, None) for t in found]
    region = [Region(0, len(text), None, False)] if text else []
    return _with_lost(tokenizer, ChatTokens(text, tokens, region, lost=lost))
