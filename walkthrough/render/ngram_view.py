"""Prompt lookup as the drafter sees it: the n-grams it searched for and the match it drafted from.

Presentation of `engine.serving.drafters.search` for one round: a row per n
(the context's last n tokens, where they occurred earlier, in the prompt or in
the answer), then the match in its place in the context, the drafted tokens
after it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rich.console import Group
from rich.table import Table
from rich.text import Text

from walkthrough.engine.serving.drafters import NgramSearch, search
from walkthrough.engine.steps import Step
from walkthrough.textsafe import token_label
from walkthrough.words import count

PIECE_CHARS = 10  # longest token text in a cell
STARTS_SHOWN = 3  # the latest occurrences listed per n
AROUND = 3  # context tokens shown before the match


def _tokens(ids: Sequence[int], piece: Callable[[int], str], style: str = "") -> Text:
    out = Text()
    for i, token in enumerate(ids):
        if i:
            out.append(" ")
        out.append_text(token_label(piece(token), style, PIECE_CHARS))
    return out


def _where(position: int, prompt_len: int) -> str:
    return f"{position} ({'prompt' if position < prompt_len else 'answer'})"


def ngram_view(found: NgramSearch, context: Sequence[int], prompt_len: int,
               piece: Callable[[int], str]) -> Group:
    """The search of one round (`found`, over `context`, whose first `prompt_len` tokens are the prompt)."""
    table = Table(box=None, padding=(0, 1), show_edge=False, expand=False)
    table.add_column("n", justify="right", no_wrap=True, min_width=1)
    table.add_column("last n tokens", no_wrap=True, overflow="ellipsis", min_width=13)
    table.add_column("seen before at", overflow="fold", ratio=1)  # wraps at 80 columns
    for row in found.rows:
        chosen = row.n == found.n
        if row.starts:
            latest = [_where(j, prompt_len) for j in row.starts[-STARTS_SHOWN:]][::-1]
            more = len(row.starts) - len(latest)
            seen = ", ".join(latest) + (f" +{more} more" if more else "")
        else:
            seen = "nowhere"
        table.add_row(str(row.n), _tokens(row.key, piece, "bold" if chosen else ""),
                      Text(seen + ("  <- match: the latest" if chosen else ""),
                           style="green" if chosen else "dim"))
    title = Text.assemble(("prompt lookup's search ", "bold"),
                          f"(the last round, {count(len(context), 'token')} of context; no weights read)")
    if found.start is None:
        match = Text("no earlier occurrence of even the last token: nothing drafted", style="dim")
        return Group(title, table, match)
    before = list(context[max(0, found.start - AROUND) : found.start])
    key = context[found.start : found.follows]
    line = Text.assemble(("match ", "bold"), f"at {_where(found.start, prompt_len)}: ")
    if found.start > AROUND:
        line.append("… ", style="dim")
    line.append_text(_tokens(before, piece, "dim"))
    line.append(" ")
    line.append_text(_tokens(key, piece, "reverse"))
    line.append(" -> drafts ")
    line.append_text(_tokens(found.draft, piece, "green"))
    return Group(title, table, line)


def round_context(prompt: Sequence[int], answer: Sequence[int], step: Step) -> list[int]:
    """The context a round's drafter saw: the prompt and the answer up to the round's pending token (its
    first input), which ends it."""
    return (list(prompt) + list(answer))[: step.start + 1]


def round_ngrams(prompt: Sequence[int], answer: Sequence[int], step: Step, piece: Callable[[int], str]) -> Group:
    """`ngram_view` of the search prompt lookup ran for this round (for as many drafts as it asked)."""
    context = round_context(prompt, answer, step)
    return ngram_view(search(context, step.draft.k), context, len(prompt), piece)
