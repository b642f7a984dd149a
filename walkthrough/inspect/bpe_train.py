"""Where merges come from: a small byte-level BPE trained on one paragraph, and a text cut with it.

Training starts from the paragraph's bytes (shown as GPT-2's byte characters, so
a space is `Ġ`), split into words as GPT-2 splits them (a word keeps the space
before it). Each round counts every adjacent pair of symbols over all words,
joins the most frequent pair everywhere (a tie goes to the pair met first in the
text), and records it as the next merge. It stops after `n_merges` rounds or
when no pair occurs twice. Cutting a text replays those merges with the same
loop a real tokenizer runs (`bpe_steps.merge_steps`).

The paragraph ships in `assets/bpe_paragraph.json` (written for this project).

Example: "low lower lowest" -> first merge "l"+"o" (3 times), then "lo"+"w" (3),
then "Ġ"+"low" (2) ...; cutting "lowly" gives ["low", "l", "y"].
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

from walkthrough.inspect.bpe_steps import MergeHistory, Pair, merge_steps
from walkthrough.inspect.tokenizer import gpt2_byte_chars

# GPT-2's word split, with Python's classes: letters [^\W\d_], digits \d
WORDS = re.compile(r"'s|'t|'re|'ve|'m|'ll|'d| ?[^\W\d_]+| ?\d+| ?[^\s\w]+|\s+(?!\S)|\s+")
PARAGRAPH = Path(__file__).resolve().parents[1] / "assets" / "bpe_paragraph.json"
_BYTE_CHAR = gpt2_byte_chars()
_CHAR_BYTE = {c: b for b, c in _BYTE_CHAR.items()}
DEFAULT_MERGES = 120


@dataclass(frozen=True)
class LearnedMerge:
    left: str  # in byte characters
    right: str
    count: int  # how often the pair occurred when it was chosen


@dataclass(frozen=True)
class TrainedBPE:
    """Merges learned from one text."""

    text: str
    merges: list[LearnedMerge]
    base_symbols: int  # distinct bytes of the text: the vocabulary before any merge

    @property
    def vocabulary(self) -> int:
        return self.base_symbols + len(self.merges)

    def ranks(self) -> dict[Pair, int]:
        return {(m.left, m.right): r for r, m in enumerate(self.merges)}


def byte_word(word: str) -> list[str]:
    """A word as GPT-2 byte characters, one per UTF-8 byte."""
    return [_BYTE_CHAR[b] for b in word.encode("utf-8", "surrogatepass")]


def shown(symbols: str) -> str:
    """Byte characters back to text (bytes that are not UTF-8 on their own as U+FFFD)."""
    return bytes(_CHAR_BYTE.get(c, 0x3F) for c in symbols).decode("utf-8", "replace")


def paragraph() -> str:
    """The bundled training paragraph."""
    return json.loads(PARAGRAPH.read_text("utf-8"))["text"]


def train(text: str, n_merges: int = DEFAULT_MERGES) -> TrainedBPE:
    """Learn up to `n_merges` merges from `text` (see the module docstring)."""
    counts = Counter(WORDS.findall(text))
    words = [(byte_word(w), n) for w, n in counts.items()]  # first-seen order (Counter keeps it)
    merges: list[LearnedMerge] = []
    base = len({c for w, _ in words for c in w})
    while len(merges) < n_merges:
        pairs: Counter[Pair] = Counter()
        for symbols, n in words:
            for pair in pairwise(symbols):
                pairs[pair] += n
        if not pairs:
            break
        pair, count = max(pairs.items(), key=lambda kv: kv[1])  # max keeps the first of equals
        if count < 2:
            break
        merges.append(LearnedMerge(pair[0], pair[1], count))
        joined = pair[0] + pair[1]
        for symbols, _ in words:
            i = 0
            while i < len(symbols) - 1:
                if (symbols[i], symbols[i + 1]) == pair:
                    symbols[i : i + 2] = [joined]
                i += 1
    return TrainedBPE(text, merges, base)


def cut(trained: TrainedBPE, text: str) -> tuple[list[str], MergeHistory]:
    """`text` cut with the learned merges: its pieces (as text) and the merge history."""
    words = [byte_word(w) for w in WORDS.findall(text)]
    history = merge_steps(words, trained.ranks())
    done = len(history.steps)
    pieces = [shown(s) for k in range(len(words)) for s in history.symbols_at(k, done)]
    return pieces, history
