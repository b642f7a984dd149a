"""`walkthrough estimate --hosts N --link NAME`: the model split over N hosts beside one box and the chips view.

The figures are `costs.pipeline`'s (each host's reads in turn, one link hop per boundary, the logits
home; prefill pipelined in chunks and as llama.cpp's RPC runs it, one split after another); one box is
the ordinary estimate on the same profile (with its offload when the model does not fit), and on an
SRAM profile that estimate is already the chips view (a token passes every chip in turn).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from walkthrough.costs.pipeline import Link, Pipeline
from walkthrough.units import binary_bytes, fmt

if TYPE_CHECKING:
    from rich.table import Table

    from walkthrough.costs.estimate import Estimate


def record(p: Pipeline) -> dict[str, Any]:
    """The JSON of one split (`estimate --json` puts it under "hosts")."""
    return {"hosts": p.hosts, "link": p.link.id, "link_latency_basis": p.link.basis,
            "link_sources": p.link.sources, "per_host_bytes": p.per_host_bytes, "usable_bytes": p.usable,
            "fits": p.fits, "hosts_needed": p.hosts_needed, "token_seconds": p.token_seconds,
            "read_seconds": p.read_seconds, "hop_seconds": p.hop_seconds, "boundary_bytes": p.boundary_bytes,
            "graph_seconds": p.graph_seconds, "graph_bytes": list(p.graph_bytes), "graph_basis": p.graph_basis,
            "prefill_pipelined_seconds": p.prefill_pipelined, "prefill_sequential_seconds": p.prefill_sequential,
            "shares": [{"host": s.host, "layers": list(s.layers), "embedding": s.embedding, "head": s.head,
                        "kept_bytes": s.kept_bytes, "read_bytes": s.read_bytes, "read_seconds": seconds}
                       for s, seconds in zip(p.shares, p.host_read_seconds())]}


def table(e: Estimate, p: Pipeline) -> Table:
    """A Rich table: one box (or the chips) beside the split, row by row."""
    from rich.table import Table

    one = f"{int(e.chips.value)} chips in turn" if e.chips is not None else "one box"
    t = Table(title=f"{e.hardware.id}: {one} beside {p.hosts} hosts over {p.link.name}", title_justify="left")
    t.add_column("")
    t.add_column(one, justify="right")
    t.add_column(f"{p.hosts} hosts, {p.link.id}", justify="right")
    box_rate = e.decode.tokens_per_s.value if e.decode is not None else None
    t.add_row("fits", e.memory.verdict, f"{'yes' if p.fits else 'no'} ({binary_bytes(p.per_host_bytes)} per host "
              f"of {binary_bytes(p.usable)}; {needed_text(p.hosts_needed)})")
    t.add_row("decode", "-" if box_rate is None else fmt(box_rate, "tokens/s"), fmt(1 / p.token_seconds, "tokens/s"))
    t.add_row("  reads (all hosts in turn)", "", fmt(p.read_seconds * 1000, "ms"))
    for share, seconds in zip(p.shares, p.host_read_seconds()):
        t.add_row(f"    host {share.host}: {share.describe()}", "",
                  f"{fmt(seconds * 1000, 'ms')}, keeps {binary_bytes(share.kept_bytes)}")
    t.add_row("  link hops per token", "", f"{fmt(p.hop_seconds * 1000, 'ms')} ({p.hosts - 1} x "
              f"{binary_bytes(p.boundary_bytes)} + logits home)" if p.hosts > 1 else "none")
    if p.hosts > 1:
        t.add_row("  graphs per token", "", f"{fmt(p.graph_seconds * 1000, 'ms')} ({binary_bytes(sum(p.graph_bytes))}: "
                  f"llama.cpp's RPC sends each worker its graph every pass; {p.graph_basis})")
    ttft = e.prefill.seconds.value if e.prefill is not None else None
    t.add_row("prompt", "-" if ttft is None else fmt(ttft, "s"),
              f"{fmt(p.prefill_pipelined, 's')} pipelined, {fmt(p.prefill_sequential, 's')} one split at a time")
    return t


def needed_text(n: int | None) -> str:
    """'2 needed', or why no number of hosts holds it."""
    return f"{n} needed" if n is not None else "no number of hosts holds it: a layer is larger than one host"


def link_note(link: Link) -> str:
    """Where the link's figures come from."""
    return (f"{link.name}: {fmt(link.bandwidth / 1e9, 'GB/s')} ({link.sources.get('bandwidth_gbs', '')}); "
            f"{link.latency * 1e6:g} us per hop, {link.basis} ({link.sources.get('latency_us', '')})")
