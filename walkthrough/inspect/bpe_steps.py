"""Byte-pair merging one merge at a time: the loop every BPE tokenizer runs, recorded step by step.

A word starts as single symbols (characters, or GPT-2's byte characters) and the
adjacent pair with the best rank (lowest number) is joined, again and again,
until no adjacent pair has a rank. Here one *step* is one merge rule: the best
rank present anywhere in the text, joined in every word whose best pair it is.

Within a word this is exactly llama.cpp's order (`llm_tokenizer_bpe_session` in
`src/llama-vocab.cpp`, and `tokenizers`' BPE): always the best-ranked pair,
the leftmost one on a tie. A word keeps joining the step's pair while it is
still its best; if a join makes a better-ranked pair, that one waits for the
next step, as it would in llama.cpp.

Example: words [["l","o","w"], ["l","o","t"]], ranks {("l","o"): 0, ("lo","w"): 1}
-> step 0 joins "l"+"o" in both words, step 1 joins "lo"+"w": [["low"], ["lo","t"]].
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass

Pair = tuple[str, str]
NO_RANK = 1 << 62


@dataclass(frozen=True)
class MergeStep:
    """One merge rule applied across the text."""

    left: str
    right: str
    rank: int  # its position in the merges list (0 = the first merge learned)
    joins: int  # how many times it was applied in this step
    words: int  # in how many words


@dataclass
class MergeHistory:
    """Every word's symbols after each step that changed it, and the steps themselves."""

    steps: list[MergeStep]
    # per word: (steps done, symbols) snapshots, the first at 0 steps
    snapshots: list[list[tuple[int, tuple[str, ...]]]]

    def symbols_at(self, word: int, done: int) -> tuple[str, ...]:
        """The word's symbols after `done` steps."""
        shots = self.snapshots[word]
        k = bisect_right([n for n, _ in shots], done) - 1
        return shots[max(k, 0)][1]

    def changed_at(self, word: int, done: int) -> bool:
        """Whether step number `done` (1-based: the last one applied after `done` steps) joined in this word."""
        return done > 0 and any(n == done for n, _ in self.snapshots[word])


def _best(symbols: list[str], ranks: dict[Pair, int]) -> tuple[int, int]:
    """(best rank, leftmost position) of the adjacent pairs; NO_RANK when none has a rank."""
    best, where = NO_RANK, -1
    for i in range(len(symbols) - 1):
        r = ranks.get((symbols[i], symbols[i + 1]), NO_RANK)
        if r < best:
            best, where = r, i
    return best, where


def merge_steps(words: list[list[str]], ranks: dict[Pair, int], *, max_steps: int = 100_000) -> MergeHistory:
    """Run BPE on every word at once, one merge rule per step (see the module docstring).

    Args:
        words: each word's starting symbols; a word of one symbol never changes.
        ranks: (left, right) -> rank; lower merges first.
        max_steps: a bound on the steps (each step joins at least one pair, so a text of n
            symbols takes fewer than n steps).
    """
    current = [list(w) for w in words]
    snapshots = [[(0, tuple(w))] for w in current]
    best = [_best(w, ranks) for w in current]
    steps: list[MergeStep] = []
    while len(steps) < max_steps:
        rank = min((b for b, _ in best), default=NO_RANK)
        if rank == NO_RANK:
            break
        joins = n_words = 0
        pair: Pair = ("", "")
        for k, symbols in enumerate(current):
            if best[k][0] != rank:
                continue
            n_words += 1
            while best[k][0] == rank:
                i = best[k][1]
                pair = (symbols[i], symbols[i + 1])
                symbols[i : i + 2] = [pair[0] + pair[1]]  # [n] -> [n - 1]
                joins += 1
                best[k] = _best(symbols, ranks)
            snapshots[k].append((len(steps) + 1, tuple(symbols)))
        steps.append(MergeStep(pair[0], pair[1], rank, joins, n_words))
    return MergeHistory(steps, snapshots)
