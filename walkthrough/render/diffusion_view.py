"""A diffusion LM's cost beside autoregression's (`costs.diffusion.Comparison`), as a Rich table and a few lines.

Shared by the Costs stage's diffusion view and `walkthrough estimate --diffusion-steps`. Presentation only.
"""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from walkthrough.costs.diffusion import DIFFUSION_ARCHITECTURES, LLAMA_CPP_DEFAULT_STEPS, Comparison
from walkthrough.textsafe import safe_text
from walkthrough.units import fmt


def _n(x: float) -> str:
    return f"{x:,.0f}" if x >= 1 else f"{x:.2g}"


def diffusion_view(c: Comparison, architecture: str | None, machine: str) -> Group:
    """The two ways side by side, then what makes them differ."""
    ar, dl = c.autoregressive, c.diffusion
    table = Table(box=None, padding=(0, 1), show_edge=False,
                  title=f"The same weights writing a {c.answer:,}-token answer to a {c.prompt:,}-token prompt "
                        f"on {machine} (roofline, pass by pass)", title_justify="left")
    table.add_column("")
    table.add_column("autoregressive", justify="right", no_wrap=True)
    table.add_column(f"diffusion, {c.steps:,} steps" + (" x 2 (guidance)" if c.cfg else ""), justify="right",
                     no_wrap=True)
    table.add_row("passes over the model", _n(ar.passes), _n(dl.passes))
    table.add_row("positions computed", _n(ar.positions), _n(dl.positions))
    table.add_row("answer tokens per pass", "1", f"{dl.tokens_per_pass:.3g}")
    table.add_row("FLOPs", fmt(ar.flops, "FLOP"), fmt(dl.flops, "FLOP"))
    table.add_row("bytes read (weights, KV cache)", fmt(ar.bytes_read, "B"), fmt(dl.bytes_read, "B"))
    table.add_row("time", fmt(ar.seconds, "s"), fmt(dl.seconds, "s"))
    ratio = dl.seconds / ar.seconds if ar.seconds else float("inf")
    lines = Text()
    lines.append(f"Each diffusion step runs the whole canvas of {c.canvas:,} positions (prompt + answer) with "
                 f"attention both ways and keeps no KV cache, so it computes the prompt again every step; it "
                 f"keeps the logits of every position ({fmt(c.logits_bytes, 'B')} a step). Autoregression "
                 f"computes each position once and reads the weights once per token.\n")
    lines.append(f"Here diffusion takes {ratio:,.2g} x the time; fewer steps (more tokens fixed per step) cut it "
                 f"in proportion. llama.cpp's diffusion example defaults to {LLAMA_CPP_DEFAULT_STEPS} steps.\n",
                 style="bold")
    if architecture in DIFFUSION_ARCHITECTURES:
        lines.append_text(safe_text(f"This file is a diffusion model ({architecture}): the autoregressive column "
                                    "is what the same weights would cost written token by token."))
    else:
        lines.append_text(safe_text(f"This file is autoregressive ({architecture or 'unknown architecture'}): the "
                                    "diffusion column is these weights run the way llama.cpp runs diffusion "
                                    f"models ({', '.join(DIFFUSION_ARCHITECTURES)})."))
    return Group(table, lines)
