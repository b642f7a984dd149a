"""The human output of `walkthrough trace`: one table row per forward pass, then totals.

Presentation only: every figure is a field of the engine's `Step` records.
Whitespace inside token text shows as ␣ ↵ → (`textsafe.token_text`), so " with"
and "with" differ. Token text comes from the file, so it goes through `textsafe`
and the console interprets no markup.

Columns (fitting 80 columns): phase, positions [start:end), what was fed (the token
for a decode pass, the count for a prefill chunk), experts per MoE layer (the
ids chosen for a decode token; for a prefill chunk how many distinct experts
woke out of all, per layer), stored bytes read, KV cache size after the pass,
time, the chosen token, and the three most likely next tokens with their
probabilities (cut first when the terminal is narrow).

Speculative runs (`--speculate`) show one row per verification pass (phase
"verify"): the pending token fed and how many drafts followed it ("in"), the
drafts with the accepted ones before a bar and the rejected after it
("drafts"), the experts woken over the pass's k + 1 rows, and the token the
model chose after the accepted drafts; then a summary of the rounds
(`walkthrough.engine.serving.rounds`): acceptance, tokens per round measured and
expected, weight bytes per token against plain decoding, experts, time.

Hybrid models (linear-attention layers beside full attention) get a strip of
layer kinds under the title, a "state" column beside "KV" (the fixed state,
the same at every pass, while KV grows), and a closing line for each kind.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TextIO

from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

from walkthrough.costs.measured import first_use_line, measured_here
from walkthrough.engine.glassbox.model import Model
from walkthrough.engine.layer_groups import KIND_LETTERS
from walkthrough.engine.serving.rounds import round_stats
from walkthrough.engine.steps import Step
from walkthrough.render.format import human_bytes
from walkthrough.render.ngram_view import round_ngrams
from walkthrough.render.split_text import pass_lines, placement_lines, summary
from walkthrough.textsafe import safe_text, token_label
from walkthrough.units import fmt
from walkthrough.words import count
from walkthrough.words import noun as noun_for

TOP_SHOWN = 3
PIECE_CHARS = 12  # longest token text shown in a cell
PIPE_WIDTH = 120  # columns when the output is a file or a pipe (rich would assume 80)
RIGHT_ALIGNED = ("read", "KV", "state", "ms")
EXPERTS_MIN = len("experts")  # the narrowest the experts column gets: its header
TOP_KEEP = 24  # cells the top candidates keep before the experts column is cut (one candidate and more)


def _piece(piece: Callable[[int], str], i: int) -> Text:
    """A token's text for a cell: whitespace as ␣ ↵ → (a token is often " word"), controls escaped."""
    return token_label(piece(i), limit=PIECE_CHARS)


def _experts(step: Step, n_experts: int) -> str:
    if not step.is_moe:
        return "-"
    if step.phase == "decode" and len(step.input_ids) == 1:
        return " ".join(",".join(str(e) for e in t.experts[0].tolist()) for t in step.layers if t.experts is not None)
    return " ".join(f"{len(t.woken)}/{n_experts}" for t in step.layers if t.experts is not None)


def _top(step: Step, piece: Callable[[int], str]) -> Text:
    out = Text()
    for i, (tid, p) in enumerate(step.top(TOP_SHOWN)):
        if i:
            out.append("  ")
        out.append_text(_piece(piece, tid))
        out.append(f" {p:.2f}", style="dim")
    return out


def rate_line(phase: str, tokens: int, seconds: float, engine: str) -> str:
    """A phase's tokens, time and rate, written as every figure of the project is (`units.fmt`).

    Example: rate_line("prefill", 5, 5.6249, "numpy") ->
        "prefill: 5 tokens in 5.62 s, 0.889 tokens/s (measured here, numpy engine)"
    """
    rate = f", {fmt(tokens / seconds, 'tokens/s')}" if seconds > 0 else ""
    return f"{phase}: {count(tokens, 'token')} in {fmt(seconds, 's')}{rate} ({measured_here(engine)})"


def print_trace(
    model: Model, steps: Iterable[Step], piece: Callable[[int], str], *, out: TextIO, header: bool = True,
    memory: str | None = None,
) -> None:
    """Print each pass as a table row (rows appear when the whole request has run), then totals.

    `header`: start with the model's line (and its layer kinds); False for the later requests of a conversation.
    `memory`: the line saying what the engine will hold (`engine.memory.report`), printed under the header.
    """
    console = Console(file=out, highlight=False, markup=False, emoji=False, soft_wrap=False)
    if not console.is_terminal:
        console.width = max(console.width, PIPE_WIDTH)
    card = model.card
    hybrid = "linear" in model.config.mixers
    if header:
        console.print(safe_text(f"{card.name or model.file.path.name}: {card.architecture}, {count(card.n_layers or 0, 'layer')}, "
                                f"{card.n_experts or 'no'} experts"
                                f"{f' ({card.n_experts_used} used)' if card.n_experts else ''}"))
        if set(model.config.mixers) != {"full"}:
            console.print(_kinds_strip(model.config.mixers))
        if memory:
            console.print(Text(memory, style="dim"))
        if getattr(model, "placement", None) is not None:
            for line in placement_lines(model.placement):
                console.print(safe_text(line))
    steps = list(steps)
    speculative = any(step.draft is not None for step in steps)
    headers = ["phase", "pos", "in", "experts", "read", "KV", *(["state"] if hybrid else []), "ms",
               *(["drafts"] if speculative else []), "chosen", "top"]
    rows: list[tuple[str | Text, ...]] = []
    totals = {"prefill": [0, 0.0], "decode": [0, 0.0], "verify": [0, 0.0]}
    generated: list[int] = []
    step = None
    for step in steps:
        totals[step.phase][0] += len(step.generated) if step.phase == "verify" else step.end - step.start
        totals[step.phase][1] += step.seconds + (step.draft.seconds if step.draft else 0.0)
        fed = Text(count(len(step.input_ids), 'token')) if step.phase == "prefill" else _piece(piece, step.input_ids[0])
        if step.draft is not None:
            fed.append(f" +{len(step.draft.tokens)}", style="dim")
        chosen = Text("") if step.chosen is None else _piece(piece, step.chosen)
        if step.stopped:
            chosen.append(" (end)", style="dim")
        elif step.capped:
            chosen.append(" (token cap)", style="dim")
        generated += step.generated
        state = (human_bytes(step.state_bytes),) if hybrid else ()
        drafts = (_drafts(step, piece),) if speculative else ()
        rows.append((step.phase, f"{step.start}:{step.end}", fed, _experts(step, card.n_experts),
                     human_bytes(step.bytes_read["total"]), human_bytes(step.kv_bytes), *state,
                     f"{step.seconds * 1000:.1f}", *drafts, chosen, _top(step, piece)))
    needed = [max(cell_len(h), *(_cell_width(row[i]) for row in rows)) for i, h in enumerate(headers)]
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, padding=0)
    for name, width in zip(headers, column_widths(headers, needed, console.width)):
        table.add_column(name, justify="right" if name in RIGHT_ALIGNED else "left", no_wrap=True,
                         overflow="ellipsis", width=width)
    for row in rows:
        table.add_row(*row)
    console.print(table)
    for phase, (tokens, seconds) in totals.items():
        if tokens:
            console.print(rate_line(phase, tokens, seconds, steps[0].engine))
    for line in pass_lines(summary(steps)):
        console.print(safe_text(line))
    once = first_use_line(steps)
    if once is not None:
        console.print(once)
    if speculative:
        for line in round_lines(steps, card):
            console.print(line)
        rounds = [s for s in steps if s.draft is not None]
        if rounds[-1].draft.drafter == "lookup":  # the n-grams the last round searched, and its match
            prompt = [t for s in steps if s.phase == "prefill" for t in s.input_ids]
            console.print(round_ngrams(prompt, generated, rounds[-1], piece))
    if hybrid and step is not None:
        for line in _cache_lines(step):
            console.print(line)
    console.print(Text("generated: ").append_text(safe_text("".join(piece(i) for i in generated))))


def _drafts(step: Step, piece: Callable[[int], str]) -> Text:
    """The drafted tokens: accepted ones, a bar, then the rejected ones struck through ("-" for no drafts)."""
    d = step.draft
    if d is None or not d.tokens:
        return Text("-" if d is not None else "")
    out = Text()
    for i, token in enumerate(d.tokens):
        if i == d.accepted:
            out.append("|", style="bold")
        elif i:
            out.append(" ")
        text = _piece(piece, token)
        text.stylize("green" if i < d.accepted else "strike red")
        out.append_text(text)
    if d.accepted == len(d.tokens):
        out.append("|", style="bold")
    return out


def round_lines(steps: list[Step], card) -> list[str]:
    """The rounds summed up: acceptance, tokens per round, weight bytes per token against plain, experts, time."""
    stats = round_stats(steps)
    first = next(s.draft for s in steps if s.draft is not None)
    lines = [
        (f"speculative ({first.drafter}, up to {count(first.k, 'draft')}): {count(stats.rounds, 'round')}, "
        f"{stats.drafted} drafted, "
        f"{stats.accepted} accepted: alpha {stats.alpha:.2f}"),
        (f"tokens per round: {stats.tokens_per_round:.2f} measured, {stats.expected_per_round:.2f} expected at "
        f"alpha {stats.alpha:.2f}"),
    ]
    plain = card.bytes_per_token
    versus = f" against {human_bytes(plain)} for plain decoding ({stats.bytes_per_token / plain:.2f}x)" if plain else ""
    lines.append(f"weight bytes per token: {human_bytes(round(stats.bytes_per_token))}{versus}; "
                 f"drafter {human_bytes(stats.drafter_bytes)}, replays {human_bytes(stats.replay_bytes)} in all")
    if stats.experts_woken is not None:
        lines.append(f"experts woken per MoE layer by a verification pass: {stats.experts_woken:.1f} of "
                     f"{card.n_experts} (one decoded token wakes {card.n_experts_used})")
    lines.append(f"time per round: {stats.seconds_per_round * 1000:.1f} ms (drafting and verification, "
                 f"{measured_here(steps[0].engine)})")
    return lines


def _cell_width(cell: str | Text) -> int:
    return cell.cell_len if isinstance(cell, Text) else cell_len(cell)


def column_widths(headers: list[str], needed: list[int], width: int) -> list[int]:
    """Column widths for a table `width` cells wide (one cell between columns).

    Every column but "experts" and "top" gets what its widest cell needs. The
    two share what is left: the top candidates are cut first, down to
    `TOP_KEEP` cells, then the experts down to `EXPERTS_MIN`, then the top
    candidates again. Example: with 50 cells left for them, experts needing 15
    and top 40 get 15 and 35; experts needing 60 get 26 and top 24.
    """
    experts, top = headers.index("experts"), headers.index("top")
    left = width - (len(headers) - 1) - sum(n for i, n in enumerate(needed) if i not in (experts, top))
    widths = list(needed)
    widths[experts] = min(needed[experts], max(EXPERTS_MIN, left - min(needed[top], TOP_KEEP)))
    widths[top] = max(len("top"), min(needed[top], left - widths[experts]))
    return widths


def _kinds_strip(kinds: tuple[str, ...]) -> str:
    """One letter per layer: l = linear attention (fixed state), s = sliding window, F = full attention."""
    letters = "".join(KIND_LETTERS[kind][0] for kind in kinds)
    legend = "; ".join(f"{letter} = {what}" for kind, (letter, what) in KIND_LETTERS.items() if kind in kinds)
    return f"layers: {letters}  ({legend})"


def _layer_list(indices: list[int], noun: str) -> str:
    """"layer 3", "layers 0, 1, 2", "layers 0, 1, ... 38" (long lists cut in the middle)."""
    shown = ", ".join(map(str, indices)) if len(indices) <= 8 else f"{indices[0]}, {indices[1]}, ... {indices[-1]}"
    return f"{noun_for(len(indices), noun)} {shown}"


def _cache_lines(step: Step) -> list[str]:
    """What each kind of layer keeps after the last pass, from its layer records."""
    full = [t for t in step.layers if t.mixer != "linear"]
    linear = [t for t in step.layers if t.mixer == "linear"]
    kv = f"KV cache: full attention ({_layer_list([t.index for t in full], 'layer')}): {count(step.kv_len, 'row')}"
    state = f"fixed state: linear attention ({_layer_list([t.index for t in linear], 'layer')})"
    return [f"{kv}, {human_bytes(step.kv_bytes)}, a row more per token",
            f"{state}: {human_bytes(step.state_bytes)}, the same every pass"]
