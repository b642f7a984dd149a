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
from dataclasses import dataclass

import numpy as np
from gguf.constants import TokenType
from tokenizers import Tokenizer, models

from walkthrough.errors import WalkthroughError
from walkthrough.inspect.gguf import GGUFFile
from walkthrough.inspect.pretokenizers import build_pre_tokenizer
from walkthrough.inspect.vocab import BPE, SPECIAL_TYPES, SPM, Vocab, VocabError, read_vocab

SPM_SPACE = "\u2581"  # what SentencePiece vocabularies store for a space
C_SPACE = " \t\n\v\f\r"  # isspace() in the C locale: what lstrip/rstrip remove
_BYTE_TOKEN = re.compile(r"<0x([0-9A-Fa-f]{2})>")
_NO_SPECIAL = -1


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


def _spm_merges(vocab: Vocab) -> list[tuple[str, str]]:
    """Every split of every token into two tokens, best-scoring result first.

    Example: tokens "a" "b" "c" "ab" "bc" "abc" with scores 0 0 0 -1 -2 -3
    -> [("a", "b"), ("b", "c"), ("a", "bc"), ("ab", "c")].
    """
    text_to_id = vocab.text_to_id
    scores = vocab.scores if vocab.scores is not None else np.zeros(len(vocab.tokens), np.float32)
    found: list[tuple[float, int, int, str, str]] = []
    for text, i in text_to_id.items():
        if len(text) < 2:
            continue
        score = -float(scores[i])
        for k in range(1, len(text)):
            left, right = text[:k], text[k:]
            if left in text_to_id and right in text_to_id:
                found.append((score, i, k, left, right))
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
    ignore = vocab.pre.ignore_merges
    try:  # fast path: the library checks every merge itself
        pairs = [m.partition(" ")[::2] for m in vocab.merges]
        return models.BPE(vocab=vocab.text_to_id, merges=pairs, ignore_merges=ignore)
    except Exception:  # noqa: BLE001 - any malformed merge: redo with our own checks and a warning
        return models.BPE(vocab=vocab.text_to_id, merges=_exact_bpe_merges(vocab), ignore_merges=ignore)


def build_hf_tokenizer(vocab: Vocab) -> Tokenizer:
    """The `tokenizers.Tokenizer` that cuts one fragment (no special tokens) as llama.cpp does."""
    if vocab.model == BPE:
        tok = Tokenizer(_bpe_model(vocab))
        tok.pre_tokenizer = build_pre_tokenizer(vocab.pre)
        return tok
    model = models.BPE(vocab=vocab.text_to_id, merges=_spm_merges(vocab), byte_fallback=True)
    return Tokenizer(model)


class GGUFTokenizer:
    """A GGUF file's tokenizer: llama.cpp's ids, pieces and spans for any text."""

    def __init__(self, vocab: Vocab, hf: Tokenizer):
        self.vocab = vocab
        self.hf = hf
        self.model: str = vocab.model
        self.pre: str | None = vocab.pre.name if vocab.pre else None
        self.vocab_size: int = len(vocab.tokens)
        self.bos_id, self.eos_id = vocab.bos_id, vocab.eos_id
        self.eot_id, self.pad_id = vocab.eot_id, vocab.pad_id
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
    def partition(self, text: str, *, parse_special: bool = False) -> list[tuple[int, int, int]]:
        """llama.cpp's special-token partition: `(special_id or -1, start, end)` fragments in order.

        Example: "a<|im_end|>b" with parse_special -> [(-1, 0, 1), (151645, 1, 11), (-1, 11, 12)].
        """
        fragments = [(_NO_SPECIAL, 0, len(text))] if text else []
        candidates = self._parsed_special if parse_special else self._parsed_always
        for tid in candidates:
            needle = self.vocab.tokens[tid]
            if needle not in text:
                continue
            lstrip, rstrip = tid in self.vocab.lstrip, tid in self.vocab.rstrip
            out: list[tuple[int, int, int]] = []
            for frag in fragments:
                if frag[0] != _NO_SPECIAL:
                    out.append(frag)
                    continue
                _, pos, end = frag
                while (hit := text.find(needle, pos, end)) >= 0:
                    left_end = hit
                    while lstrip and left_end > pos and text[left_end - 1] in C_SPACE:
                        left_end -= 1
                    if left_end > pos:
                        out.append((_NO_SPECIAL, pos, left_end))
                    out.append((tid, hit, hit + len(needle)))
                    pos = hit + len(needle)
                    while rstrip and pos < end and text[pos] in C_SPACE:
                        pos += 1
                if pos < end:
                    out.append((_NO_SPECIAL, pos, end))
            fragments = out
        return fragments

    def _model_inputs(self, text: str, fragments) -> list[tuple[str, int]]:
        """Per text fragment: the string the model gets and how many leading characters were added."""
        inputs = []
        prev_special = True
        for tid, start, end in fragments:
            if tid != _NO_SPECIAL:
                prev_special = True
                continue
            piece = text[start:end]
            added = 0
            if self._spm:
                if self.vocab.add_space_prefix and prev_special:
                    piece, added = " " + piece, 1
                piece = piece.replace(" ", SPM_SPACE)
            inputs.append((piece, added))
            prev_special = False
        return inputs

    def _run(self, strings: list[str], offsets: bool):
        try:
            if len(strings) == 1:
                return [self.hf.encode(strings[0], add_special_tokens=False)]
            if offsets:
                return self.hf.encode_batch(strings, add_special_tokens=False)
            return self.hf.encode_batch_fast(strings, add_special_tokens=False)
        except (TypeError, ValueError, UnicodeError) as exc:
            raise TokenizerError(f"the text cannot be tokenized: {exc}") from None

    def encode(self, text: str, *, parse_special: bool = False) -> list[int]:
        """Token ids of `text`, no BOS/EOS added (llama.cpp's add_special=false)."""
        fragments = self.partition(text, parse_special=parse_special)
        inputs = self._model_inputs(text, fragments)
        encodings = iter(self._run([s for s, _ in inputs], offsets=False)) if inputs else iter(())
        ids: list[int] = []
        for tid, _, _ in fragments:
            ids.extend([tid] if tid != _NO_SPECIAL else next(encodings).ids)
        return ids

    def tokenize(self, text: str, *, parse_special: bool = False) -> list[Token]:
        """Tokens of `text` with pieces and character spans, no BOS/EOS added."""
        fragments = self.partition(text, parse_special=parse_special)
        inputs = self._model_inputs(text, fragments)
        encodings = iter(self._run([s for s, _ in inputs], offsets=True)) if inputs else iter(())
        added = iter([a for _, a in inputs])
        out: list[Token] = []
        for tid, start, end in fragments:
            if tid != _NO_SPECIAL:
                out.append(Token(tid, self._piece_cached(tid), True, start, end))
                continue
            enc, shift = next(encodings), next(added)
            piece = self._piece_cached
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
        if self._spm:
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
