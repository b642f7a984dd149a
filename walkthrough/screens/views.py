"""Rich renderables built from the engine's Step records: expert grids, bytes read, KV cache, candidates, token strips.

Shared by the stepping stages and the live panel. Presentation only: every
figure is a field or method of a `Step`/`LayerTrace` (or the model card), or
comes from the cost model (`walkthrough.engine.costs`).
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table
from rich.text import Text

from walkthrough.errors import WalkthroughError
from walkthrough.screens.format import human_bytes, human_count
from walkthrough.textsafe import safe_text, token_label, visible

# Alternating token styles: colours for colour terminals, underline so NO_COLOR still separates tokens.
TOKEN_STYLES = ("on blue", "underline on magenta")
SPECIAL_STYLE = "bold reverse"
LIT, DIM = "█", "·"


def token_style(index: int, special: bool) -> str:
    return SPECIAL_STYLE if special else TOKEN_STYLES[index % 2]


def experts_grid(step, n_experts: int, *, last_token_only: bool, counts: bool = True) -> Table:
    """A layer x expert grid: lit cells for experts chosen (digits: how many tokens, when more than one)."""
    show_counts = counts
    table = Table.grid(padding=(0, 1))
    table.add_column(justify="right", style="bold")
    table.add_column(no_wrap=True)
    if show_counts:
        table.add_column(justify="right")
    for layer in step.layers:
        counts = layer.tokens_per_expert(n_experts, last_token_only=last_token_only)
        if counts is None:
            table.add_row(f"L{layer.index}", Text("dense", style="dim"), *([""] if show_counts else []))
            continue
        cells = Text(no_wrap=True)
        for n in counts:
            if n == 0:
                cells.append(DIM, style="dim")
            elif last_token_only or n == 1:
                cells.append(LIT, style="bold green")
            else:
                cells.append(str(n) if n < 10 else "+", style="bold reverse green")
        used = [f"{int((counts > 0).sum())}/{n_experts}"] if show_counts else []
        table.add_row(f"L{layer.index}", cells, *used)
    return table


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


def kv_table(step) -> Table:
    """KV cache positions and bytes per attention layer after the pass."""
    table = Table(box=None, padding=(0, 1), show_edge=False)
    table.add_column("layer")
    table.add_column("kind")
    table.add_column("positions", justify="right")
    table.add_column("bytes", justify="right")
    for layer in step.layers:
        if layer.mixer in ("full", "sliding"):
            kind = "attention" if layer.mixer == "full" else "sliding window"
            table.add_row(f"L{layer.index}", kind, str(layer.kv_len), human_bytes(layer.kv_bytes))
        else:
            table.add_row(f"L{layer.index}", layer.mixer, "fixed", human_bytes(layer.state_bytes))
    return table


def candidates_table(state, step, n: int = 5) -> Table:
    """The model's top candidates after the pass (softmax of the raw logits), the chosen one marked."""
    table = Table(box=None, padding=(0, 1), show_edge=False)
    table.add_column("")
    table.add_column("token")
    table.add_column("id", justify="right")
    table.add_column("p", justify="right")
    for token_id, p in step.top(n):
        mark = "▶" if token_id == step.chosen else ""
        table.add_row(mark, token_label(state.piece(token_id)), str(token_id), f"{p:.3f}")
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
        ("FLOPs ", "bold"), human_count(step.flops),
        ("  bytes read ", "bold"), human_bytes(step.bytes_read.get("total", 0)),
        ("  intensity ", "bold"), f"{step.intensity:.1f} FLOPs/byte",
    )


def activations_line(step, card) -> Text:
    """The activation arrays the pass's layers produced (largest layer, all layers) beside the cost model's
    compute-buffer estimate for the pass's tokens (`engine.budget.compute_buffer_bytes`); one line at 80."""
    from walkthrough.engine.budget import compute_buffer_bytes

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
    from walkthrough.engine.costs import balance_point, limit

    try:
        profile = state.profile
    except WalkthroughError:
        return None
    if profile is None or not step.bytes_read.get("total"):
        return None
    return Text.assemble(
        f"on {visible(profile.name)} (balance point {balance_point(profile):.0f} FLOPs/byte) "
        "this pass is limited by ",
        (limit(step.intensity, profile), "bold"),
        style="dim",
    )
