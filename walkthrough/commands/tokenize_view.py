"""The human output of `walkthrough tokenize`: the text cut into coloured pieces, then one row per token.

Presentation only: every figure comes from the `ChatTokens` record. Pieces and
message text come from files, so they pass through `textsafe.visible` and are
printed as `rich.text.Text` (no markup is interpreted). Whitespace is made
visible: a space shows as `␣`, a newline as `↵` (followed by a real line break in
the running text), a tab as `→`. Special tokens show between `⟦ ⟧` and in bold,
so they stand out without colour too.
"""

from __future__ import annotations

from typing import TextIO

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from walkthrough.inspect.chat import ChatTokens
from walkthrough.textsafe import token_text, visible
from walkthrough.words import count

PIECE_STYLES = ("cyan", "yellow")  # alternate, so neighbouring pieces can be told apart
SPECIAL_STYLE = "bold magenta"
def _running_text(result: ChatTokens) -> Text:
    out = Text()
    for k, token in enumerate(result.tokens):
        if token.special:
            out.append(f"⟦{token_text(token.piece)}⟧", style=SPECIAL_STYLE)
        else:
            out.append(token_text(token.piece), style=PIECE_STYLES[k % 2])
        if token.piece.endswith("\n"):
            out.append("\n")
    return out


def _origin(message: int | None, messages: list[dict] | None) -> Text:
    if message is None:
        return Text("template", style="dim")
    role = messages[message].get("role", "?") if messages and message < len(messages) else "?"
    return Text(f"message {message + 1} ({visible(str(role))})")


def print_tokens(
    result: ChatTokens, *, messages: list[dict] | None, title: str, out: TextIO
) -> None:
    """Print the running text and the token table.

    Args:
        messages: the messages the template rendered (None for raw text: no "from" column).
        title: what was tokenized with what (file name and template), shown literally.
    """
    console = Console(file=out, markup=False, highlight=False, emoji=False)
    counts = result.counts()
    lost = f" ({counts.lost} lost: no token for them)" if counts.lost else ""
    head = Text(
        f"{count(counts.tokens, 'token')}, {count(counts.characters, 'character')}{lost}, "
        f"{count(counts.bytes, 'byte')}: ",
        style="bold",
    )
    head.append(visible(title), style="")
    console.print(head)
    console.print(_running_text(result))
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False)
    table.add_column("#", justify="right", style="dim")
    table.add_column("id", justify="right")
    table.add_column("piece")
    table.add_column("special")
    if messages is not None:
        table.add_column("from")
    for k, token in enumerate(result.tokens):
        style = SPECIAL_STYLE if token.special else PIECE_STYLES[k % 2]
        row = [
            str(k),
            Text(str(token.id), style=style),
            Text(token_text(token.piece), style=style),
            "special" if token.special else "",
        ]
        if messages is not None:
            row.append(_origin(token.message, messages))
        table.add_row(*row)
    console.print(table)
