"""Rich renderables built from the engine's Step records: bytes read, KV cache, candidates, token strips.

Shared by the stepping stages and the live panel. Presentation only: every
figure is a field or method of a `Step`/`LayerTrace` (or the model card), or
comes from the cost model (`walkthrough.costs.estimate`).
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Group
from rich.table import Table
from rich.text import Text

from walkthrough.engine.layer_groups import KIND_LETTERS, CacheGroup, cache_groups, ranges_text
from walkthrough.errors import WalkthroughError
from walkthrough.render.format import human_bytes
from walkthrough.textsafe import safe_text, token_label
from walkthrough.units import fmt
from walkthrough.words import count

# Alternating token styles: colours for colour terminals, underline so NO_COLOR still separates tokens.
TOKEN_STYLES = ("on blue", "underline on magenta")
SPECIAL_STYLE = "bold reverse"
KIND_STYLES = {"full": "", "sliding": "cyan", "linear": "magenta"}
LAYER_RUNS_CHARS = 12  # longest run list ("0-4,6-10") shown before a group is written as a count
HOST_CHARS = 15  # a host column's width: "127.0.0.1:50052"


def token_style(index: int, special: bool) -> str:
    return SPECIAL_STYLE if special else TOKEN_STYLES[index % 2]


def bytes_table(step, cumulative: dict[str, int] | None = None) -> Table:
    """Bytes read by group in this pass (and over the run so far, when given)."""
    table = Table(box=None, padding=(0, 1), show_edge=False)
    table.add_column("read")
    table.add_column("this pass", justify="right")
    if cumulative is not None:
        table.add_column("run", justify="right")
    for group, nbytes in step.bytes_read.items():
        if group == "total" or not nbytes:
            continue
        row = [group, human_bytes(nbytes)]
        if cumulative is not None:
            row.append(human_bytes(cumulative.get(group, 0)))
        table.add_row(*row)
    row = [Text("total", style="bold"), human_bytes(step.bytes_read.get("total", 0))]
    if cumulative is not None:
        row.append(human_bytes(cumulative.get("total", 0)))
    table.add_row(*row)
    return table


def kv_table(step) -> Group:
    """What the layers keep after the pass, a row per group of layers keeping the same (`cache_groups`).

    Columns: the layers (as runs, or a count when the runs are long), their kind, the positions each
    keeps and the bytes the group keeps. When the kinds differ (sliding-window or linear layers beside
    full ones), a strip of one letter per layer shows which layer is which, and each row its letter.
    """
    groups = cache_groups(step.layers)
    mixed = len({g.kind for g in groups}) > 1
    table = Table(box=None, padding=(0, 1), show_edge=False)
    split = _host_groups(step)
    if split:  # a run over RPC workers: each host's layers apart, the host named on its first row
        table.add_column("host", no_wrap=True, overflow="ellipsis", max_width=HOST_CHARS)
    table.add_column("layers", no_wrap=True)
    table.add_column("kind", no_wrap=True)
    table.add_column("pos", justify="right")
    table.add_column("bytes", justify="right")
    for host, g in split or [(None, g) for g in groups]:
        runs = ranges_text(g.layers)
        layers = runs if len(runs) <= LAYER_RUNS_CHARS else count(len(g.layers), "layer")
        kind = Text(f"{g.letter} " if mixed else "", style=KIND_STYLES[g.kind]).append(g.kind)
        pos = "fixed" if g.kind == "linear" else str(g.kv_len)
        named = () if not split else (Text(host or "", style="bold"),)
        table.add_row(*named, layers, kind, pos, human_bytes(g.total_bytes))
    if not mixed:
        return Group(table)
    strip = Text("layers ", style="bold")
    for layer in step.layers:
        strip.append(KIND_LETTERS[layer.mixer][0], style=KIND_STYLES[layer.mixer])
    return Group(strip, table)


def kv_table_height(step, width: int) -> int:
    """Lines `kv_table(step)` takes at `width`: its cells are short and do not wrap, its letter strip does."""
    groups = cache_groups(step.layers)
    strip = -(-(len("layers ") + len(step.layers)) // max(width, 1)) if len({g.kind for g in groups}) > 1 else 0
    return strip + 1 + len(_host_groups(step) or groups)


def hosts_text(split: dict) -> Text:
    """A run split over hosts (`Step.split`): each host's layers, then its name ("L0-1 127.0.0.1:50052";
    "input" for a host that only embeds the tokens, "+out" on the host of the output head)."""
    out = Text("hosts", style="bold")
    for host in split["placement"]:
        held = ranges_text(host["layers"]) + ("+out" if host["output"] else "")
        out.append(f"\n{'L' + held if held else 'input'} {host['host']}")
    return out


def _host_groups(step) -> list[tuple[str | None, CacheGroup]]:
    """On a run split over hosts (`Step.split`), the cache groups of each host's layers in pass order, each
    host named on its first group only (None after); [] for a run on one host."""
    if step.split is None:
        return []
    out: list[tuple[str | None, CacheGroup]] = []
    for host in step.split["placement"]:
        held = set(host["layers"])
        for i, g in enumerate(cache_groups([t for t in step.layers if t.index in held])):
            out.append((host["host"] if i == 0 else None, g))
    return out


def candidates_table(state, step, n: int = 5, piece_chars: int | None = None) -> Table:
    """The model's top candidates after the pass (softmax of the raw logits), the chosen one marked.

    `piece_chars` cuts longer token texts (`textsafe.token_text`'s limit), for narrow places."""
    table = Table(box=None, padding=(0, 1), show_edge=False)
    table.add_column("")
    table.add_column("token")
    table.add_column("id", justify="right")
    table.add_column("p", justify="right")
    for token_id, p in step.top(n):
        mark = "▶" if token_id == step.chosen else ""
        table.add_row(mark, token_label(state.piece(token_id), limit=piece_chars), str(token_id), f"{p:.3f}")
    return table


def token_strip(state, ids: Sequence[int], *, specials: frozenset[int] = frozenset(),
                current: tuple[int, int] | None = None, done: int | None = None) -> Text:
    """Token pieces in alternating styles; positions in `current` highlighted, those past `done` dimmed."""
    text = Text()
    for i, token_id in enumerate(ids):
        style = token_style(i, token_id in specials)
        if current is not None and current[0] <= i < current[1]:
            style = "bold reverse yellow"
        elif done is not None and i >= done:
            style = "dim"
        text.append_text(safe_text(state.piece(token_id), style))
    return text


def flops_line(step) -> Text:
    """FLOPs, bytes and their ratio (arithmetic intensity) for one pass."""
    return Text.assemble(
        ("computed ", "bold"), fmt(step.flops, "FLOP"),
        ("  bytes read ", "bold"), human_bytes(step.bytes_read.get("total", 0)),
        ("  intensity ", "bold"), f"{step.intensity:.1f} FLOPs/byte",
    )


def activations_line(step, card) -> Text:
    """The activation arrays the pass's layers produced (largest layer, all layers) beside the cost model's
    compute-buffer estimate for the pass's tokens (`engine.budget.compute_buffer_bytes`); one line at 80."""
    from walkthrough.costs.budget import compute_buffer_bytes

    per_layer = [t.activation_bytes for t in step.layers]
    if not per_layer:
        return Text("")
    top = max(range(len(per_layer)), key=per_layer.__getitem__)
    buffer = compute_buffer_bytes(card, step.end - step.start).value
    return Text.assemble(
        ("activations ", "bold"), f"{human_bytes(per_layer[top])} (layer {top}), {human_bytes(sum(per_layer))} all",
        (f"; cost model's buffer {human_bytes(buffer)}", "dim"),
    )


def balance_line(step, state) -> Text | None:
    """The pass's intensity against the chosen machine's balance point: which limit it would hit there.

    None when the pass read nothing or there is no machine (no profiles, or a broken hardware file).
    """
    from walkthrough.costs.estimate import balance_point, limit
    from walkthrough.costs.measured import modelled_for

    try:
        profile = state.profile
    except WalkthroughError:
        return None
    if profile is None or not step.bytes_read.get("total"):
        return None
    return Text.assemble(
        f"{modelled_for(profile)} (balance point {balance_point(profile):.0f} FLOPs/byte): "
        "this pass is limited by ",
        (limit(step.intensity, profile), "bold"),
        style="dim",
    )
