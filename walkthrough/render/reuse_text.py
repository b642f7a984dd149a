"""What a request of a conversation reused and cost, and cold against warm starts, as lines of plain words.

Shared by `walkthrough trace` (commands/trace_turns.py) and the app's Chat stage. Every figure is a field of
the engine's records (`engine.turns.Turn`, `Summary`, `engine.coldstart.StartTimes`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from walkthrough.costs.measured import measured_here
from walkthrough.render.format import human_bytes
from walkthrough.textsafe import token_text
from walkthrough.words import count

if TYPE_CHECKING:  # the engine loads when a run starts, not when the app draws its first screen
    from walkthrough.engine.serving.coldstart import StartTimes
    from walkthrough.engine.serving.turns import Summary, Turn
    from walkthrough.engine.steps import Step
    from walkthrough.request.state import FirstToken


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


def _token(piece: Callable[[int], str], token_id: int) -> str:
    """A token's text in quotes, whitespace as signs (`textsafe.token_text`)."""
    return f'"{token_text(piece(token_id))}"'


def reuse_lines(steps: Sequence[Step], piece: Callable[[int], str]) -> list[str]:
    """What the current run took from the cache and why reuse stopped there, from its first pass (two lines)."""
    first = steps[0] if steps else None
    if first is None or first.reuse is None:
        return ["reuse: shown once the request's first pass has run"]
    r = first.reuse
    line = f"reused {r.reused} of {r.prompt} prompt tokens, computed {r.computed}"
    if r.checkpoint is not None:
        line += f" (recurrent state from the checkpoint at {r.checkpoint})"
    if r.differs_at is None:
        return [f"{line}: {r.reason}"]
    why = first.cause.words if first.cause is not None else r.reason
    held, new = _token(piece, r.held_id), _token(piece, r.new_id)
    return [f"{line}; token {r.differs_at} differs: held {held}, new {new}: {why}"]


def first_token_lines(runs: Sequence[FirstToken], shown: int = 3) -> list[str]:
    """The last runs' first tokens: cold (a model just made) or warm, how much of the prompt was reused, and
    which engine measured them (once, or per run when the runs shown had different engines).

    Example: "first token (measured here, numpy engine): #1 412 ms (292 tokens, cold model) (u unloads)"
    """
    if not runs:
        return []
    last = list(enumerate(runs, start=1))[-shown:]
    one_engine = len({run.engine for _, run in last}) == 1
    cells = []
    for n, run in last:
        kind = "cold model" if run.cold else f"{run.reused} reused"
        engine = "" if one_engine or not run.engine else f", {run.engine}"
        cells.append(f"#{n} {_ms(run.seconds)} ({count(run.prompt, 'token')}, {kind}{engine})")
    label = f" ({measured_here(last[0][1].engine)})" if one_engine and last[0][1].engine else ""
    return [f"first token{label}: " + "; ".join(cells) + " (u unloads)"]


def turn_lines(turn: Turn, piece: Callable[[int], str]) -> list[str]:
    """What one request reused, where and why reuse stopped, and what it cost (with and without reuse)."""
    r = turn.reuse
    lines = [(f"{turn.label}: {r.reused} of {r.prompt} prompt tokens reused, {r.computed} computed; "
             f"reuse stopped: {r.reason}")]
    if turn.cause is not None:
        c = turn.cause
        lines.append(f"  first differing token at {c.position}: held {_token(piece, c.held_id)} ({c.held_origin}), "
                     f"new {_token(piece, c.new_id)} ({c.new_origin}): {c.words}")
    if r.checkpoint is not None or turn.checkpoints:
        used = f"restored the checkpoint at {r.checkpoint}; " if r.checkpoint is not None else ""
        lines.append(f"  recurrent state: {used}{count(turn.checkpoints, 'checkpoint')} kept, "
                     f"{human_bytes(turn.checkpoint_bytes)}")
    cost = turn.cost
    line = (f"  first token in {_ms(cost.seconds)}: {cost.flops / 1e6:,.0f} MFLOP, "
            f"{human_bytes(cost.weight_bytes)} of weights read")
    if turn.fresh is not None:
        fresh = turn.fresh
        line += (f"; without reuse {_ms(fresh.seconds)}, {fresh.flops / 1e6:,.0f} MFLOP, "
                 f"{human_bytes(fresh.weight_bytes)}: saved {turn.flops_saved / 1e6:,.0f} MFLOP and "
                 f"{human_bytes(turn.weight_bytes_saved)} of weights")
    lines.append(line)
    return lines


def summary_lines(s: Summary) -> list[str]:
    line = (f"{count(s.turns, 'request')}: {count(s.prompt_tokens, 'prompt token')}, {s.reused} reused, {s.computed} computed; "
            f"first tokens in {_ms(s.seconds)} in all")
    if s.seconds_without_reuse is not None:
        line += (f" ({_ms(s.seconds_without_reuse)} without reuse; "
                 f"{s.flops / 1e6:,.0f} of {s.flops_without_reuse / 1e6:,.0f} MFLOP computed)")
    return [line]


def start_lines(n: int, cold: StartTimes, warm: StartTimes, kept: StartTimes) -> list[str]:
    other = cold.first_token - cold.imports - cold.open - cold.passes
    return [
        f"first token of the first request ({count(n, 'token')}):",
        (f"  cold, a fresh process: {_ms(cold.first_token)} (Python start {_ms(other)}, imports {_ms(cold.imports)}, "
        f"opening the file {_ms(cold.open)}, passes with first-use dequantization {_ms(cold.passes)})"),
        f"  warm, this process, empty KV cache: {_ms(warm.first_token)}",
        f"  warm, this process, the prompt's KV cache kept: {_ms(kept.first_token)}",
        f"  a server's keep-alive saves {_ms(cold.first_token - warm.first_token)} per request after the first",
    ]
