"""Abliteration as Rich text: how well each layer separates the two prompt sets, each prompt's projection
on the direction (before the edit and, once the edited file is measured, after), what the edit left along
the direction, and the behaviour change (`compare`'s figures and the answers side by side).

Shared by `walkthrough abliterate` and the app's abliteration view. Presentation only: every figure
is a field of `walkthrough.engine.abliterate.run`'s records. Prompts and answers are shown literally.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text

from walkthrough.engine.abliterate.run import Edited, Found
from walkthrough.render.format import bar
from walkthrough.textsafe import safe_text, token_text
from walkthrough.words import count

WITH_STYLE, WITHOUT_STYLE = "magenta", "cyan"
BAR_CELLS = 20
PROMPT_CHARS = 44


def layers_text(found: Found) -> Text:
    """One line per layer: its separation of the two sets as a bar, the chosen layer marked."""
    sep = found.direction.separation
    top = max(float(np.max(np.abs(sep))), 1e-30)
    out = Text.assemble(("How far apart the sets lie along their own direction, per layer ", "bold"),
                        "(gap of the mean projections / pooled spread):")
    for i, s in enumerate(sep):
        mark = " <- the direction's layer" if i == found.layer else ""
        out.append(f"\n {i:>3} {bar(abs(float(s)) / top, BAR_CELLS)} {float(s):7.2f}{mark}",
                   style="bold" if mark else "")
    return out


def projections_table(found: Found, edited: Edited | None = None) -> Table:
    """Each prompt, its set and its projection on the direction at the layer (after the edit too)."""
    before_with, before_without = found.projections()
    held = found.sets.held_out
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False,
                  title=f"Projection on the direction at layer {found.layer}", title_justify="left")
    table.add_column("set")
    table.add_column("prompt", overflow="ellipsis", no_wrap=True, max_width=PROMPT_CHARS)
    table.add_column("before", justify="right")
    if edited is not None:
        table.add_column("after", justify="right")
    rows = [("with", WITH_STYLE, found.sets.with_, before_with, edited.after_with if edited else None),
            ("without", WITHOUT_STYLE, found.sets.without, before_without,
             edited.after_without if edited else None)]
    for name, style, prompts, before, after in rows:
        for k, prompt in enumerate(prompts):
            label = name + (" (held out)" if k >= len(prompts) - held else "")
            cells = [Text(label, style=style), safe_text(prompt), f"{before[k]:.3f}"]
            if after is not None:
                cells.append(f"{after[k]:.2g}")
            table.add_row(*cells)
    return table


def direction_text(found: Found) -> Text:
    d = found.direction
    n_with, n_without = (len(s) for s in found.sets.fitted)
    return Text.assemble(
        ("Direction: ", "bold"),
        f"mean of {count(n_with, 'prompt')} with the behaviour ({found.sets.behaviour}) minus the mean of "
        f"{n_without} without it, at the output of layer {d.layer}; its length {d.gap:.3f}, made 1.")


def edit_text(edited: Edited) -> Text:
    """What was written and what was measured on it."""
    return Text.assemble(
        ("Edited file: ", "bold"), safe_text(str(edited.path)),
        f"\n{count(len(edited.tensors), 'tensor')} that write into the residual stream had the direction "
        f"projected out. The most any of their columns writes along it, per unit length: "
        f"{edited.writers_before:.3g} before, {edited.writers_after:.2g} after (read back from the file).",
        "\nThe residual stream measured at every layer of every prompt, its largest share along the "
        f"direction: {edited.stream_before:.3g} before, {edited.stream_after:.2g} after the edit.")


def comparison_text(edited: Edited, piece: Callable[[int], str]) -> Text:
    """`compare`'s figures on the held-out prompt: original (A) against edited (B)."""
    c = edited.comparison
    kl = c.kl_stats()
    out = Text.assemble(
        ("Behaviour change ", "bold"), "(original A against edited B, on the held-out prompt ",
        safe_text(edited.compared_prompt), f": {count(c.n_prompt, 'token')} of prompt and "
        f"{count(len(c.answer), 'token')} of A's greedy answer):",
        f"\nKL(A||B) per position, nats: mean {kl['mean']:.4f}, p99 {kl['p99']:.4f}, max {kl['max']:.4f}; "
        f"top-1 agreement {float(c.top1.mean()):.1%}; ")
    if c.parted_at is None:
        out.append("the greedy answers do not part.")
    else:
        b_token = int(c.greedy_b[c.n_prompt - 1 + c.parted_at])
        out.append(f"the greedy answers part at answer token {c.parted_at}: A writes ")
        out.append(f"'{token_text(piece(c.answer[c.parted_at]))}'", style="reverse")
        out.append(", B ")
        out.append(f"'{token_text(piece(b_token))}'", style="reverse")
        out.append(".")
    return out


def answers_table(edited: Edited) -> Table:
    """The held-out prompts' greedy answers, original beside edited."""
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, title="Greedy answers",
                  title_justify="left")
    table.add_column("prompt", ratio=1)
    table.add_column("original", ratio=2)
    table.add_column("edited", ratio=2)
    for a in edited.answers:
        table.add_row(safe_text(a.prompt), safe_text(a.before, keep_newlines=True),
                      safe_text(a.after, keep_newlines=True))
    return table


def abliteration_view(found: Found, edited: Edited | None, piece: Callable[[int], str]) -> Group:
    """Everything known so far, top to bottom."""
    parts = [direction_text(found), Text(), projections_table(found, edited), Text(), layers_text(found)]
    if edited is not None:
        parts += [Text(), edit_text(edited), Text(), comparison_text(edited, piece), Text(), answers_table(edited)]
    return Group(*parts)
