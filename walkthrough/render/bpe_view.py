"""BPE as Rich text: the file's merges replayed on the prompt one step at a time, and a BPE trained on a paragraph.

Shared by the Tokens stage's merges view and `walkthrough tokenize --merges` /
`--learn-merges`. Presentation only: the steps, pieces and ids are
`walkthrough.inspect.bpe_replay`'s and `bpe_train`'s.
"""

from __future__ import annotations

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from walkthrough.inspect.bpe_replay import Replay
from walkthrough.inspect.bpe_train import TrainedBPE, shown
from walkthrough.render.views import SPECIAL_STYLE, TOKEN_STYLES
from walkthrough.textsafe import token_label
from walkthrough.words import count

JOINED_STYLE = "bold reverse yellow"  # pieces the last merge made
TRAINED_ROWS = 12  # learned merges listed


def merge_line(replay: Replay, done: int) -> Text:
    """What step `done` joined ("merge 3 of 27: 'Ġ' + 't' -> 'Ġt' ..."), or where the replay starts."""
    steps = replay.steps
    if done == 0:
        return Text.assemble(("start: ", "bold"), f"every word as single characters; {count(len(steps), 'merge')} "
                             f"of the file's {replay.n_merges:,} apply to this text")
    step = steps[done - 1]
    out = Text.assemble(("merge ", "bold"), f"{done} of {len(steps)}: ")
    out.append_text(token_label(replay.display(step.left), "reverse"))
    out.append(" + ")
    out.append_text(token_label(replay.display(step.right), "reverse"))
    out.append(" -> ")
    out.append_text(token_label(replay.display(step.left + step.right), JOINED_STYLE))
    out.append(f"  (rank {step.rank:,} in the file's merges; joined {count(step.joins, 'time')} "
               f"in {count(step.words, 'word')})")
    return out


def replay_strip(replay: Replay, done: int) -> Text:
    """The prompt's pieces after `done` steps: alternating styles, special tokens reversed, the pieces
    the last merge made highlighted."""
    text = Text()
    for k, (piece, special, made) in enumerate(replay.pieces_at(done)):
        style = SPECIAL_STYLE if special else JOINED_STYLE if made else TOKEN_STYLES[k % 2]
        text.append_text(token_label(piece, style))
        if piece.endswith("\n"):
            text.append("\n")
    return text


def replay_counts(replay: Replay, done: int) -> Text:
    """Pieces now, pieces at the start and tokens at the end, and whether the end is the tokenizer's ids."""
    now = len(replay.pieces_at(done))
    start = len(replay.pieces_at(0))
    end = len(replay.expected)
    out = Text(f"{count(now, 'piece')} now; {start:,} at the start, {end:,} tokens at the end.  ")
    if done == len(replay.steps):
        if replay.agrees:
            out.append("The ids are the tokenizer's, one for one.", style="green")
        else:
            out.append("The replay's ids differ from the tokenizer's.", style="bold yellow")
    return out


def replay_view(replay: Replay, done: int) -> Group:
    """The whole step: what was joined, the counts, the pieces."""
    return Group(merge_line(replay, done), replay_counts(replay, done), Text(), replay_strip(replay, done))


def steps_table(replay: Replay) -> Table:
    """Every step in one table (the CLI's `--merges`)."""
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    for name, justify in (("step", "right"), ("left", "left"), ("right", "left"), ("joined", "left"),
                          ("rank", "right"), ("times", "right")):
        table.add_column(name, justify=justify)
    for n, step in enumerate(replay.steps, 1):
        table.add_row(str(n), token_label(replay.display(step.left)), token_label(replay.display(step.right)),
                      token_label(replay.display(step.left + step.right)), f"{step.rank:,}", str(step.joins))
    return table


def trained_view(trained: TrainedBPE, pieces: list[str], file_tokens: int | None) -> Group:
    """The training paragraph's first merges and a text cut with them, beside the file's own count."""
    head = Text.assemble(
        ("A BPE trained on one paragraph: ", "bold"),
        f"{count(len(trained.text.encode()), 'byte')}, {trained.base_symbols} distinct, "
        f"{count(len(trained.merges), 'merge')} learned (pairs seen at least twice), "
        f"a vocabulary of {trained.vocabulary}.")
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, title_justify="left")
    for name, justify in (("rank", "right"), ("left", "left"), ("right", "left"), ("joined", "left"),
                          ("seen", "right")):
        table.add_column(name, justify=justify)
    for rank, m in enumerate(trained.merges[:TRAINED_ROWS]):
        table.add_row(str(rank), token_label(shown(m.left)), token_label(shown(m.right)),
                      token_label(shown(m.left + m.right)), str(m.count))
    cut = Text()
    for k, piece in enumerate(pieces):
        cut.append_text(token_label(piece, TOKEN_STYLES[k % 2]))
    chars = len("".join(pieces))
    said = Text(f"Your text cut with these merges: {count(len(pieces), 'piece')} for {count(chars, 'character')}")
    if file_tokens is not None:
        said.append(f"; the file's vocabulary, trained on far more text, needs {count(file_tokens, 'token')}")
    said.append(".")
    return Group(head, Text(f"The first {min(TRAINED_ROWS, len(trained.merges))} merges, most frequent pair first:"),
                 table, said, cut)
