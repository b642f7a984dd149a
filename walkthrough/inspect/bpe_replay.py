"""The file's own merges replayed on a prompt, merge by merge, down to the ids the tokenizer gives.

The prompt is cut as the Tokens stage cuts it: special tokens are fixed; each
stretch of ordinary tokens is taken back to its text, split into units and words
by the tokenizer's own code (`GGUFTokenizer.units`, `split_words`: llama.cpp's
pre-tokenizer regexes and, byte-level vocabularies, GPT-2's byte characters),
and every word starts as single characters. Then `tokenizer.ggml.merges` (rank =
position in the list, each "left right" split at the first space after its first
character, as llama.cpp splits it) is applied one rule per step
(`bpe_steps.merge_steps`). A vocabulary that takes a word that is a whole token
as is (llama.cpp's `ignore_merges`, Llama 3) starts such a word whole.

At the end each symbol is looked up in the vocabulary; a symbol that is not a
token is spelled with byte tokens `<0xNN>` (llama.cpp's fallback) or, with none,
dropped. `Replay.final_ids` is then compared with the ids given, and
`Replay.agrees` says whether they are the same: nothing is assumed.

Not handled: SentencePiece vocabularies (`tokenizer.ggml.model` "llama") have no
merges list (they join by token score): `ReplayError` says so.

Example (SmolLM2): "Hello world" -> words ["Hello", "Ġworld"] -> step 1 joins
"Ġ"+"w"... -> after 8 steps the symbols are "Hello" and "Ġworld", ids [19556, 905].
"""

from __future__ import annotations

from dataclasses import dataclass
from weakref import WeakKeyDictionary

from walkthrough.errors import WalkthroughError
from walkthrough.inspect.bpe_steps import MergeHistory, MergeStep, Pair, merge_steps
from walkthrough.inspect.chat import ChatTokens
from walkthrough.inspect.tokenizer import GGUFTokenizer
from walkthrough.inspect.vocab import SPM


class ReplayError(WalkthroughError):
    """The file's merges cannot be replayed (no merges list)."""


@dataclass(frozen=True)
class Segment:
    """One piece of the prompt: a fixed token (special) or a word BPE works on."""

    fixed_id: int | None  # the token for a fixed piece, else None
    word: int  # index into the merge history's words (-1 for a fixed piece)
    whole: bool = False  # a whole-token word taken as is (ignore_merges)


@dataclass
class Replay:
    """The merges of one prompt, step by step."""

    tokenizer: GGUFTokenizer
    segments: list[Segment]
    history: MergeHistory
    expected: list[int]  # the ids the tokenizer gave (the Tokens stage's)
    n_merges: int  # merges in the file

    @property
    def steps(self) -> list[MergeStep]:
        return self.history.steps

    def pieces_at(self, done: int) -> list[tuple[str, bool, bool]]:
        """(text as shown, special, made by step `done`) for every piece after `done` steps."""
        out: list[tuple[str, bool, bool]] = []
        made = self.steps[done - 1].left + self.steps[done - 1].right if done else None
        for seg in self.segments:
            if seg.fixed_id is not None:
                out.append((self.tokenizer.piece(seg.fixed_id), True, False))
                continue
            changed = self.history.changed_at(seg.word, done)
            out += [(self.display(s), False, changed and s == made)
                    for s in self.history.symbols_at(seg.word, done)]
        return out

    @property
    def final_ids(self) -> list[int]:
        """The ids the last step's symbols stand for (byte tokens for a symbol not in the vocabulary)."""
        done = len(self.steps)
        ids: list[int] = []
        for seg in self.segments:
            if seg.fixed_id is not None:
                ids.append(seg.fixed_id)
            else:
                for s in self.history.symbols_at(seg.word, done):
                    ids += symbol_ids(self.tokenizer, s)
        return ids

    @property
    def agrees(self) -> bool:
        """Whether the replay ends at exactly the ids the tokenizer gave."""
        return self.final_ids == self.expected

    def display(self, symbol: str) -> str:
        """A symbol as text a reader sees (GPT-2 byte characters back to their bytes)."""
        tid = self.tokenizer.vocab.text_to_id.get(symbol)
        if tid is not None:
            return self.tokenizer.piece(tid)
        return "".join(self.tokenizer.piece(i) for i in symbol_ids(self.tokenizer, symbol)) or symbol


def symbol_ids(tokenizer: GGUFTokenizer, symbol: str) -> list[int]:
    """The token of a symbol, or the byte tokens spelling it, or [] (dropped) when there are none."""
    tid = tokenizer.vocab.text_to_id.get(symbol)
    if tid is not None:
        return [tid]
    spelled = [tokenizer.vocab.text_to_id.get(f"<0x{b:02X}>") for b in symbol.encode()]
    return [] if None in spelled else spelled


_RANKS: WeakKeyDictionary[GGUFTokenizer, dict[Pair, int]] = WeakKeyDictionary()


def file_ranks(tokenizer: GGUFTokenizer) -> dict[Pair, int]:
    """(left, right) -> rank from `tokenizer.ggml.merges`; the first occurrence of a pair wins.
    Built once per tokenizer (280,147 merges of Llama 3 take about a second).

    Raises:
        ReplayError: the vocabulary has no merges list.
    """
    vocab = tokenizer.vocab
    if vocab.model == SPM or not vocab.merges:
        raise ReplayError(
            f"this vocabulary ({vocab.model}) has no tokenizer.ggml.merges to replay: "
            "SentencePiece joins pieces by token score; open a BPE (gpt2) model")
    ranks = _RANKS.get(tokenizer)
    if ranks is None:
        ranks = {}
        for rank, merge in enumerate(vocab.merges):
            cut = merge.find(" ", 1)
            if cut > 0:
                ranks.setdefault((merge[:cut], merge[cut + 1 :]), rank)
        _RANKS[tokenizer] = ranks
    return ranks


def _runs(chat: ChatTokens) -> list[tuple[int | None, int, int]]:
    """The prompt as (special id, start, end) and (None, start, end) for stretches of ordinary tokens."""
    out: list[tuple[int | None, int, int]] = []
    for t in chat.tokens:
        if t.special:
            out.append((t.id, t.start, t.end))
        elif out and out[-1][0] is None:
            out[-1] = (None, out[-1][1], t.end)
        else:
            out.append((None, t.start, t.end))
    return out


def ordinary_text(chat: ChatTokens) -> tuple[str, int]:
    """The prompt's text outside special tokens, and how many ordinary tokens the tokenizer made of it."""
    text = "".join(chat.text[a:b] for fixed, a, b in _runs(chat) if fixed is None)
    return text, sum(1 for t in chat.tokens if not t.special)


def replay(tokenizer: GGUFTokenizer, chat: ChatTokens, ranks: dict[Pair, int] | None = None) -> Replay:
    """Replay the file's merges on the prompt `chat` (the Tokens stage's, or `raw_tokens`').

    Raises:
        ReplayError: the vocabulary has no merges list.
    """
    ranks = file_ranks(tokenizer) if ranks is None else ranks
    whole_words = bool(tokenizer.vocab.pre and tokenizer.vocab.pre.ignore_merges)
    segments: list[Segment] = []
    words: list[list[str]] = []
    for fixed, start, end in _runs(chat):
        if fixed is not None:
            segments.append(Segment(fixed, -1))
            continue
        for unit in tokenizer.units(chat.text[start:end]):
            if unit.model_text is None:
                segments.append(Segment(unit.id, -1))
                continue
            for word in tokenizer.split_words(unit.model_text):
                whole = whole_words and word in tokenizer.vocab.text_to_id
                segments.append(Segment(None, len(words), whole))
                words.append([word] if whole else list(word))
    history = merge_steps(words, ranks)
    return Replay(tokenizer, segments, history, chat.ids, len(tokenizer.vocab.merges or ()))
