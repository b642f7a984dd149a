"""How the Costs stage draws one request over several hosts (the figures are `costs.several_hosts`'s).

`hosts_view` lays out, top to bottom: one decoded token's time host by host with
the link hops between them (each host's layers and the bytes it keeps against
its usable memory), the prompt in chunks (pipelined, and one split at a time as
llama.cpp's RPC runs it), one box of the same machine beside it, and how many
of each machine hold the request (SRAM chips, or hosts of a layer split).
"""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from walkthrough.costs.budget import FITS, NO_FIT, OFFLOAD
from walkthrough.costs.several_hosts import Hosts
from walkthrough.screens.cost_views import rate_text
from walkthrough.textsafe import safe_text
from walkthrough.units import binary_bytes, fmt
from walkthrough.words import count

BAR = 10  # cells of the longest part's bar
BOX_WORD = {FITS: "fits", OFFLOAD: "offloads", NO_FIT: "does not fit"}


def hosts_view(h: Hosts) -> Group:
    """The hosts view: the split, the prompt, one box, every machine's count."""
    return Group(_token_table(h), _token_line(h), _prompt_line(h), _one_box(h), Text(""), _units_table(h))


def _token_table(h: Hosts) -> Table:
    p = h.split
    title = Text.assemble((f"{count(p.hosts, 'host')} of {h.one_box.hardware.id} over {p.link.name}",
                           "bold"), ("  (+/- hosts, i link, h machine, x leaves)", "dim"))
    t = Table(box=None, padding=(0, 1), show_edge=False, title=title, title_justify="left")
    for name, justify in (("a token", "left"), ("holds/sends", "left"), ("keeps", "right"),
                          ("time", "right"), ("", "left")):
        t.add_column(name, justify=justify, no_wrap=True)
    parts = p.segments()
    longest = max((s.seconds for s in parts), default=0.0) or 1.0
    shares = iter(p.shares)
    for part in parts:
        bar = "█" * max(round(BAR * part.seconds / longest), 1 if part.seconds else 0)
        if part.label.startswith("host"):
            s = next(shares)
            fits = "" if s.kept_bytes <= p.usable else " over"
            t.add_row(part.label, s.describe(), f"{binary_bytes(s.kept_bytes)}{fits}", fmt(part.seconds, "s"), bar)
        else:
            t.add_row(Text(part.label, style="dim"), binary_bytes(part.sent), "", fmt(part.seconds, "s"),
                      Text(bar, style="dim"))
    needed = (f"fewest hosts that hold it: {p.hosts_needed}" if p.hosts_needed is not None
              else "no number of hosts holds it (a layer is larger than one host)")
    t.caption = (f"each host can use {binary_bytes(p.usable)} ({'all fit' if p.fits else 'over: does not fit'}); "
                 f"{needed}")
    t.caption_justify = "left"
    return t


def _token_line(h: Hosts) -> Text:
    p = h.split
    return Text.assemble(("per token ", "bold"), f"{fmt(p.token_seconds, 's')} = reads {fmt(p.read_seconds, 's')} "
                         f"+ hops {fmt(p.hop_seconds, 's')} + graphs {fmt(p.graph_seconds, 's')}: "
                         f"{rate_text(1 / p.token_seconds)} tokens/s",
                         (f"  (graph: llama.cpp's RPC sends each worker its part every pass; bytes per layer "
                          f"{p.graph_basis})" if p.hosts > 1 else "", "dim"))


def _prompt_line(h: Hosts) -> Text:
    p = h.split
    return Text.assemble(("prompt ", "bold"), f"in {count(p.chunks, 'chunk')}: {fmt(p.prefill_pipelined, 's')} "
                         f"pipelined (hosts overlap), {fmt(p.prefill_sequential, 's')} one split at a time "
                         "(as llama.cpp's RPC runs it)")


def _one_box(h: Hosts) -> Text:
    e = h.one_box
    m = e.memory
    out = Text.assemble(("one box ", "bold"), f"of {e.hardware.id}: ", BOX_WORD[m.verdict])
    if m.verdict == NO_FIT:
        out.append(f" (short by {binary_bytes(m.shortfall.value)})" if m.shortfall else "")
    elif m.verdict != FITS:
        out.append(f" ({m.placement.describe()})")
    if e.decode is not None and e.prefill is not None:
        out.append(f"; {rate_text(e.decode.tokens_per_s.value)} tokens/s, "
                   f"first token {fmt(e.prefill.seconds.value, 's')}")
    return out


def _units_table(h: Hosts) -> Table:
    link = h.split.link
    t = Table(box=None, padding=(0, 1), show_edge=False, title_justify="left",
              title=Text.assemble(("how many of each machine hold it", "bold"),
                                  (f" (SRAM chips in turn; other machines as hosts over {link.id})", "dim")))
    for name in ("machine", "one unit", "units", "tokens/s"):
        t.add_column(name, justify="left" if name == "machine" else "right", no_wrap=name != "machine",
                     overflow="fold")
    for u in h.units:
        n = "none" if u.count is None else count(u.count, u.kind[:-1])
        rate = "-" if u.tokens_per_s is None else rate_text(u.tokens_per_s)
        t.add_row(safe_text(u.id), binary_bytes(u.unit_bytes), n, rate)
    return t
