"""Token ids exactly as llama.cpp cuts them, with a `tokenizers.Tokenizer` built from the GGUF vocabulary.

Our code maps the file's vocabulary onto the `tokenizers` library, which does
all the cutting; what we do ourselves is what llama.cpp does around its BPE
(`llama_vocab::impl::tokenize` in `src/llama-vocab.cpp`):

1. Special-token partition (`tokenizer_st_partition`): special token texts are
   cut out of the text first, longest text (in bytes) first, every occurrence.
   User-defined tokens always; control and unknown tokens only with
   `parse_special=True`. Some tokens eat the whitespace beside them (Phi-3).
2. Each remaining fragment goes to the `tokenizers` model:
   - `gpt2` (byte-level BPE): the pre-tokenizer regexes of `tokenizer.ggml.pre`
     (see `pretokenizers.py`), GPT-2's byte-to-character map, then BPE with the
     file's merges (rank = position), whole-word lookup first where llama.cpp
     sets `ignore_merges` (llama3).
   - `gemma4` (and the gpt2 pre-tokenizer `sarvam-moe`): the same BPE on the
     UTF-8 text itself, spaces written as U+2581, split into runs of newlines
     and runs of other characters; characters outside the vocabulary become
     `<0xNN>` tokens, and (Gemma 4) a run of newlines that is a token is kept whole.
   - `llama` (SentencePiece): llama.cpp's `llm_tokenizer_spm` repeatedly joins
     the adjacent pair whose joined text is the highest-scoring token. That is a
     BPE whose merges are every split `left + right` of every token, ranked by
     the token's score; `byte_fallback` turns characters outside the vocabulary
     into `<0xNN>` tokens. Spaces become U+2581, and a space is put before the
     first fragment and before every fragment that follows a special token.

Example:
    >>> tok = GGUFTokenizer.from_gguf(open_gguf("qwen.gguf"))
    >>> [(t.id, t.piece, t.start, t.end) for t in tok.tokenize("Hi 🦙")]   # Qwen3.5 vocabulary
    [(13048, 'Hi', 0, 2), (11162, ' <0xF0><0x9F>', 2, 4), (99, '<0xA6>', 3, 4), (247, '<0x99>', 3, 4)]

`protect` spans keep control-token text inside them plain even with
`parse_special=True`: the chat template's own markers become special tokens,
text a user typed never does.

Decoding joins the tokens' bytes (special tokens give their text) and, when the
vocabulary adds a space prefix, drops the first token's leading space, as
llama.cpp's `detokenize` does; it skips llama.cpp's optional "clean up spaces"
pass, so decoding gives back the text that was encoded.

Not reproduced: ties between equal-scoring SentencePiece merges are broken by
merge order here and by position in llama.cpp; gpt2 merges whose parts or
result are not tokens are dropped (with a warning) instead of being applied.
"""

from __future__ import annotations

import codecs
import re
from bisect import bisect_left
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import NamedTuple

import numpy as np
from gguf.constants import TokenType
from tokenizers import Tokenizer, models

from walkthrough.errors import WalkthroughError
from walkthrough.inspect.gguf import GGUFFile
from walkthrough.inspect.lost import lost_spans
from walkthrough.inspect.pretokenizers import build_pre_tokenizer
from walkthrough.inspect.vocab import SPECIAL_TYPES, SPM, Vocab, VocabError, read_vocab

SPM_SPACE = "\u2581"  # what SentencePiece vocabularies store for a space
C_SPACE = " \t\n\v\f\r"  # isspace() in the C locale: what lstrip/rstrip remove
_BYTE_TOKEN = re.compile(r"<0x([0-9A-Fa-f]{2})>")
_NO_SPECIAL = -1
SPM_MAX_SPLIT_CHARS = 256  # longest SentencePiece token split into merges (real ones: under 40)
_NEWLINE_RUN = re.compile(r"\n+|[^\n]+")


class Unit(NamedTuple):
    """One piece of the text on its way to ids: a fixed token, or a string for the model."""

    id: int  # the token when fixed (special, or a whole run of newlines), else -1
    special: bool
    start: int  # span in the input text
    end: int
    model_text: str | None  # what the `tokenizers` model gets; None for a fixed token
    shift: int  # characters added in front of the text (SentencePiece's space prefix)


def _hex_bytes(err: UnicodeDecodeError) -> tuple[str, int]:
    """Decode error handler: each undecodable byte becomes `<0xE2>`."""
    bad = err.object[err.start : err.end]
    return "".join(f"<0x{b:02X}>" for b in bad), err.end


codecs.register_error("walkthrough-hex", _hex_bytes)


def gpt2_byte_chars() -> dict[int, str]:
    """GPT-2's byte -> character map: printable Latin-1 bytes stand for themselves, the
    other 68 bytes take the characters from U+0100 on, in byte order (so space is 'Ġ')."""
    printable = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    chars = {b: chr(b) for b in printable}
    extra = 0x100
    for b in range(256):
        if b not in chars:
            chars[b] = chr(extra)
            extra += 1
    return chars


_CHAR_TO_BYTE = {c: b for b, c in gpt2_byte_chars().items()}


class TokenizerError(WalkthroughError):
    """The tokenizer cannot do what was asked (bad id, text it cannot take)."""


@dataclass(frozen=True)
class Token:
    """One token of a tokenized text."""

    id: int
    piece: str  # display text; bytes that are not valid UTF-8 on their own shown as <0xE2>
    special: bool  # a control / user-defined / unknown token cut out as special
    start: int  # span in the input text (character offsets), [start, end)
    end: int


class _SpanGuard:
    """Answers "does [a, b) overlap one of these spans?" in O(log n)."""

    def __init__(self, spans: Sequence[tuple[int, int]]):
        ordered = sorted((int(a), int(b)) for a, b in spans if b > a)
        self.starts = [a for a, _ in ordered]
        self.reach = list(accumulate((b for _, b in ordered), max))  # furthest end so far

    def overlaps(self, a: int, b: int) -> bool:
        i = bisect_left(self.starts, b)  # spans starting before b
        return i > 0 and self.reach[i - 1] > a


def _spm_merges(vocab: Vocab) -> list[tuple[str, str]]:
    """Every split of every token into two tokens, best-scoring result first.

    Tokens longer than `SPM_MAX_SPLIT_CHARS` are not split (a hostile vocabulary
    could otherwise make this quadratic in a huge token); a warning says so.

    Example: tokens "a" "b" "c" "ab" "bc" "abc" with scores 0 0 0 -1 -2 -3
    -> [("a", "b"), ("b", "c"), ("a", "bc"), ("ab", "c")].
    """
    text_to_id = vocab.text_to_id
    scores = vocab.scores.tolist() if vocab.scores is not None else [0.0] * len(vocab.tokens)
    found: list[tuple[float, int, int, str, str]] = []
    too_long = 0
    for text, i in text_to_id.items():
        n = len(text)
        if n > SPM_MAX_SPLIT_CHARS:
            too_long += 1
            continue
        for k in range(1, n):
            left = text[:k]
            if left in text_to_id:
                right = text[k:]
                if right in text_to_id:
                    found.append((-scores[i], i, k, left, right))
    if too_long:
        vocab.warnings.append(
            f"{too_long} token(s) longer than {SPM_MAX_SPLIT_CHARS} characters are never produced by "
            "joining smaller tokens here (llama.cpp would)")
    found.sort()
    return [(left, right) for _, _, _, left, right in found]


def _exact_bpe_merges(vocab: Vocab) -> list[tuple[str, str]]:
    """The gpt2 merges split as llama.cpp does (at the first space after the first
    character), keeping only those whose parts and result are tokens; warns about the rest."""
    text_to_id = vocab.text_to_id
    kept: list[tuple[str, str]] = []
    dropped: list[str] = []
    for merge in vocab.merges:
        cut = merge.find(" ", 1)
        left, right = merge[:cut], merge[cut + 1 :]
        if cut > 0 and left in text_to_id and right in text_to_id and left + right in text_to_id:
            kept.append((left, right))
        else:
            dropped.append(merge)
    if dropped:
        vocab.warnings.append(
            f"{len(dropped)} of {len(vocab.merges)} merges are not 'left right' with both parts and "
            f"their join in the vocabulary (first: {dropped[0]!r}); they are ignored")
    return kept


def _bpe_model(vocab: Vocab) -> models.BPE:
    """The BPE model of a gpt2 / gemma4 vocabulary; UTF-8 (not byte-level) ones fall back to <0xNN>."""
    options = {"ignore_merges": vocab.pre.ignore_merges, "byte_fallback": not vocab.pre.byte_level}
    try:  # fast path: the library checks every merge itself
        pairs = [m.partition(" ")[::2] for m in vocab.merges]
        return models.BPE(vocab=vocab.text_to_id, merges=pairs, **options)
    except Exception:  # noqa: BLE001 - any malformed merge: redo with our own checks and a warning
        return models.BPE(vocab=vocab.text_to_id, merges=_exact_bpe_merges(vocab), **options)


def build_hf_tokenizer(vocab: Vocab) -> Tokenizer:
    """The `tokenizers.Tokenizer` that cuts one fragment (no special tokens) as llama.cpp does."""
    if vocab.model == SPM:
        return Tokenizer(models.BPE(vocab=vocab.text_to_id, merges=_spm_merges(vocab), byte_fallback=True))
    tok = Tokenizer(_bpe_model(vocab))
    tok.pre_tokenizer = build_pre_tokenizer(vocab.pre)
    return tok


class GGUFTokenizer:
    """A GGUF file's tokenizer: llama.cpp's ids, pieces and spans for any text."""

    def __init__(self, vocab: Vocab, hf: Tokenizer):
        self.vocab = vocab
        self.hf = hf
        self.model: str = vocab.model
        self.pre: str | None = vocab.pre.name if vocab.pre else None
        self.vocab_size: int = len(vocab.tokens)
        self.bos_id, self.eos_id = vocab.bos_id, vocab.eos_id
        self.eot_id, self.pad_id, self.unk_id = vocab.eot_id, vocab.pad_id, vocab.unk_id
        self.add_bos, self.add_eos = vocab.add_bos, vocab.add_eos
        self.warnings: list[str] = vocab.warnings
        self.special_ids: frozenset[int] = vocab.special_ids
        types = vocab.types
        # Partition order: longest text in bytes first (llama.cpp sorts cache_special_tokens so).
        order = sorted(np.flatnonzero(np.isin(types, SPECIAL_TYPES)).tolist(),
                       key=lambda i: (-len(vocab.tokens[i].encode()), i))
        self._parsed_always = [i for i in order if types[i] == TokenType.USER_DEFINED]
        self._parsed_special = order
        self._spm = vocab.model == SPM
        self._escaped = self._spm or not vocab.pre.byte_level  # tokens store spaces as U+2581
        self._newline_runs = bool(vocab.pre and vocab.pre.gemma4)
        self._bytes: list[bytes | None] = [None] * self.vocab_size
        self._pieces: list[str | None] = [None] * self.vocab_size

    @classmethod
    def from_gguf(cls, f: GGUFFile) -> GGUFTokenizer:
        """Build the tokenizer of an opened GGUF file.

        Raises:
            VocabError: the vocabulary metadata is missing or unusable.
        """
        vocab = read_vocab(f)
        try:
            hf = build_hf_tokenizer(vocab)
        except Exception as exc:  # noqa: BLE001 - the library's message, as one line
            raise VocabError(f"{f.path.name}: the vocabulary cannot be turned into a tokenizer: {exc}") from None
        return cls(vocab, hf)

    # ---- cutting ------------------------------------------------------------------
    def partition(
        self, text: str, *, parse_special: bool = False, protect: Sequence[tuple[int, int]] = ()
    ) -> list[tuple[int, int, int]]:
        """llama.cpp's special-token partition: `(special_id or -1, start, end)` fragments in order.

        Args:
            text: the text to cut.
            parse_special: also cut control and unknown tokens (user-defined ones always are).
            protect: character spans `[start, end)` inside which control and unknown token
                texts stay plain text even with `parse_special` (message contents in a
                rendered chat), as if `parse_special` were off there.

        Example: "a<|im_end|>b" with parse_special -> [(-1, 0, 1), (151645, 1, 11), (-1, 11, 12)].
        """
        fragments = [(_NO_SPECIAL, 0, len(text))] if text else []
        candidates = self._parsed_special if parse_special else self._parsed_always
        guard = _SpanGuard(protect) if parse_special and protect else None
        for tid in candidates:
            needle = self.vocab.tokens[tid]
            if needle not in text:
                continue
            lstrip, rstrip = tid in self.vocab.lstrip, tid in self.vocab.rstrip
            guarded = guard if guard and self.vocab.types[tid] != TokenType.USER_DEFINED else None
            out: list[tuple[int, int, int]] = []
            for frag in fragments:
                if frag[0] != _NO_SPECIAL:
                    out.append(frag)
                    continue
                _, pos, end = frag
                search = pos
                while (hit := text.find(needle, search, end)) >= 0:
                    if guarded and guarded.overlaps(hit, hit + len(needle)):
                        search = hit + 1
                        continue
                    left_end = hit
                    while lstrip and left_end > pos and text[left_end - 1] in C_SPACE:
                        left_end -= 1
                    if left_end > pos:
                        out.append((_NO_SPECIAL, pos, left_end))
                    out.append((tid, hit, hit + len(needle)))
                    pos = hit + len(needle)
                    while rstrip and pos < end and text[pos] in C_SPACE:
                        pos += 1
                    search = pos
                if pos < end:
                    out.append((_NO_SPECIAL, pos, end))
            fragments = out
        return fragments

    def _units(self, text: str, fragments: list[tuple[int, int, int]]) -> list[Unit]:
        """The fragments as the model sees them: fixed tokens, and strings for the `tokenizers` model
        (spaces escaped and a space put in front where llama.cpp does)."""
        units: list[Unit] = []
        prev_special = True
        for tid, start, end in fragments:
            if tid != _NO_SPECIAL:
                units.append(Unit(tid, True, start, end, None, 0))
                prev_special = True
                continue
            piece = text[start:end]
            if self._spm:
                added = 1 if self.vocab.add_space_prefix and prev_special else 0
                units.append(Unit(-1, False, start, end, (" " * added + piece).replace(" ", SPM_SPACE), added))
            elif self._newline_runs:
                for m in _NEWLINE_RUN.finditer(piece):
                    run, a, b = m.group(), start + m.start(), start + m.end()
                    whole = self.vocab.text_to_id.get(run) if run[0] == "\n" else None
                    units.append(Unit(whole, False, a, b, None, 0) if whole is not None
                                 else Unit(-1, False, a, b, run.replace(" ", SPM_SPACE), 0))
            else:
                units.append(Unit(-1, False, start, end,
                                   piece.replace(" ", SPM_SPACE) if self._escaped else piece, 0))
            prev_special = False
        return units

    def units(self, text: str, *, parse_special: bool = False) -> list[Unit]:
        """`text` as the BPE model receives it: fixed tokens (special ones, Gemma 4's whole newline
        runs) and the strings the `tokenizers` model cuts (`Unit.model_text`, spaces escaped where
        the vocabulary stores them as U+2581). `walkthrough.inspect.bpe_replay` replays the merges
        on these."""
        return self._units(text, self.partition(text, parse_special=parse_special))

    def split_words(self, model_text: str) -> list[str]:
        """The pre-tokenizer's words of one unit's `model_text` (byte-level vocabularies: in GPT-2's
        byte characters), the pieces BPE merges within."""
        if self._spm or self.hf.pre_tokenizer is None:
            return [model_text] if model_text else []
        return [word for word, _ in self.hf.pre_tokenizer.pre_tokenize_str(model_text)]

    def _run(self, units: list[Unit], offsets: bool) -> Iterator:
        strings = [u.model_text for u in units if u.model_text is not None]
        try:
            if not strings:
                return iter(())
            if len(strings) == 1:
                return iter([self.hf.encode(strings[0], add_special_tokens=False)])
            if offsets:
                return iter(self.hf.encode_batch(strings, add_special_tokens=False))
            return iter(self.hf.encode_batch_fast(strings, add_special_tokens=False))
        except (TypeError, ValueError, UnicodeError) as exc:
            raise TokenizerError(f"the text cannot be tokenized: {exc}") from None

    def encode(
        self, text: str, *, parse_special: bool = False, protect: Sequence[tuple[int, int]] = ()
    ) -> list[int]:
        """Token ids of `text`, no BOS/EOS added (llama.cpp's add_special=false); see `partition`."""
        units = self._units(text, self.partition(text, parse_special=parse_special, protect=protect))
        encodings = self._run(units, offsets=False)
        ids: list[int] = []
        for unit in units:
            if unit.model_text is None:
                ids.append(unit.id)
            else:
                ids.extend(next(encodings).ids)
        return ids

    def tokenize(
        self, text: str, *, parse_special: bool = False, protect: Sequence[tuple[int, int]] = ()
    ) -> list[Token]:
        """Tokens of `text` with pieces and character spans, no BOS/EOS added; see `partition`."""
        return self._tokenize(text, parse_special, protect, None)

    def tokenize_accounted(
        self, text: str, *, parse_special: bool = False, protect: Sequence[tuple[int, int]] = ()
    ) -> tuple[list[Token], list[tuple[int, int]]]:
        """`tokenize`, plus the character spans of `text` no token stands for (see `lost.py`):
        text the vocabulary cannot encode, which llama.cpp drops."""
        lost: list[tuple[int, int]] = []
        return self._tokenize(text, parse_special, protect, lost), lost

    def _tokenize(
        self, text: str, parse_special: bool, protect: Sequence[tuple[int, int]],
        lost: list[tuple[int, int]] | None,
    ) -> list[Token]:
        units = self._units(text, self.partition(text, parse_special=parse_special, protect=protect))
        encodings = self._run(units, offsets=True)
        piece = self._piece_cached
        out: list[Token] = []
        for unit in units:
            if unit.model_text is None:
                out.append(Token(unit.id, piece(unit.id), unit.special, unit.start, unit.end))
                continue
            enc, shift, start = next(encodings), unit.shift, unit.start
            if lost is not None:
                data = b"".join(self.token_bytes(i) for i in enc.ids)
                typed = unit.model_text.replace(SPM_SPACE, " ") if self._escaped else unit.model_text
                lost.extend((start + a, start + b) for a, b in lost_spans(typed, data, skip=shift))
            if shift:  # the added space prefix belongs to no character of the text
                spans = [(max(s - shift, 0), max(e - shift, 0)) for s, e in enc.offsets]
            else:
                spans = enc.offsets
            out.extend(Token(i, piece(i), False, start + s, start + e) for i, (s, e) in zip(enc.ids, spans))
        return out

    # ---- pieces and decoding ----------------------------------------------------------
    def _check(self, tid: int) -> int:
        if not 0 <= tid < self.vocab_size:
            raise TokenizerError(f"token id {tid} is outside the vocabulary (0..{self.vocab_size - 1})")
        return int(tid)

    def token_bytes(self, id: int) -> bytes:
        """The bytes a token stands for, as llama.cpp's token_to_piece(special=True) gives them."""
        tid = self._check(id)
        cached = self._bytes[tid]
        if cached is None:
            cached = self._bytes[tid] = self._compute_bytes(tid)
        return cached

    def _compute_bytes(self, tid: int) -> bytes:
        text, kind = self.vocab.tokens[tid], int(self.vocab.types[tid])
        if kind in SPECIAL_TYPES:
            return text.encode()
        if kind == TokenType.BYTE:
            m = _BYTE_TOKEN.fullmatch(text)
            return bytes([int(m.group(1), 16)]) if m else text.encode()
        if kind != TokenType.NORMAL:
            return b""  # unused / undefined: llama.cpp renders nothing
        if self._escaped:
            return text.replace(SPM_SPACE, " ").encode()
        return b"".join(
            bytes([_CHAR_TO_BYTE[c]]) if c in _CHAR_TO_BYTE else c.encode() for c in text)

    def piece(self, id: int) -> str:
        """Display text of a token: its bytes as UTF-8, undecodable bytes as `<0xE2>`;
        tokens that stand for no bytes (unused ones) show their stored text."""
        return self._piece_cached(self._check(id))

    def _piece_cached(self, tid: int) -> str:
        cached = self._pieces[tid]
        if cached is None:
            data = self.token_bytes(tid)
            cached = data.decode("utf-8", errors="walkthrough-hex") if data else self.vocab.tokens[tid]
            self._pieces[tid] = cached
        return cached

    def decode(self, ids: list[int]) -> str:
        """The text of a token sequence (special tokens as their text); invalid UTF-8 as U+FFFD."""
        data = b"".join(self.token_bytes(i) for i in ids)
        if self.vocab.add_space_prefix and ids and self.token_bytes(ids[0]).startswith(b" "):
            data = data[1:]  # llama.cpp's detokenize strips the first token's leading space
        return data.decode("utf-8", errors="replace")

    def special_text(self) -> list[str]:
        """Texts that `parse_special=True` turns into special tokens, longest first."""
        return [self.vocab.tokens[i] for i in self._parsed_special]

    def text_of(self, id: int) -> str:
        """The token's text as stored in the file (`Ġ`, `▁` and `<0x0A>` included)."""
        return self.vocab.tokens[self._check(id)]
