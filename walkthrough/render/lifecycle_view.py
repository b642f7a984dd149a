"""A model's lifecycle (engine.serving.lifecycle) as lines of plain words and a timeline bar, for the four
calls' overlay and `walkthrough trace --four-calls --measure`."""

from __future__ import annotations

from walkthrough.engine.serving.coldstart import StartTimes
from walkthrough.engine.serving.lifecycle import (
    KEEP_ALIVE,
    KEEP_ALIVE_SOURCE,
    Lifecycle,
    StartCost,
    lifecycle,
)
from walkthrough.units import fmt

LOADED, UNLOADED, ARRIVES = "━", "·", "▲"


def clock(seconds: float) -> str:
    """m:ss (h:mm:ss past an hour): 185.2 -> '3:05'."""
    whole = round(seconds)
    h, rest = divmod(whole, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def _s(seconds: float) -> str:
    return f"{seconds:.2f} s"


def _window(seconds: float) -> str:
    return "0 s (unload at once)" if seconds == 0 else f"{seconds / 60:g} min"


def timeline_bar(life: Lifecycle, width: int) -> str:
    """One character per slice of time up to the last unload: loaded, unloaded, a question's arrival."""
    end = max(life.unloaded_at, 1e-9)
    cells = []
    for i in range(width):
        t = (i + 0.5) * end / width
        loaded = any(q.at <= t <= q.done + life.keep_alive for q in life.questions)
        cells.append(LOADED if loaded else UNLOADED)
    for q in life.questions:
        cells[min(int(q.at / end * width), width - 1)] = ARRIVES
    return "".join(cells)


def lifecycle_lines(life: Lifecycle, file_bytes: int, width: int = 60) -> list[str]:
    """The states and what each costs the next request, then the schedule's questions on a timeline."""
    c = life.cost
    gaps = [b.at - a.at for a, b in zip(life.questions, life.questions[1:])]
    lines = [
        f"a model's lifecycle in a server, keep-alive {_window(life.keep_alive)} "
        + (f"({KEEP_ALIVE_SOURCE})" if life.keep_alive == KEEP_ALIVE else "(chosen with k)") + ":",
        f"  1 pull: once per machine, the file's {fmt(file_bytes, 'B')} (on disk here, so nothing to pay)",
        f"  2 load: {_s(c.load)} (process, imports, opening the file), measured",
        f"  3 first use: {_s(c.first_use)} (the weights' first pass), measured",
        f"  4 serve: first token {_s(c.prompt)} on the loaded model, {_s(c.kept)} with the prompt's KV cache kept",
        f"  5 idle: holds {fmt(life.held_bytes, 'B')} for {_window(life.keep_alive)} after a request",
        f"  6 unload: the next request pays load and first use again: {_s(c.cold)}",
        (f"  the next request costs: not pulled: the download, then {_s(c.cold)}; unloaded: {_s(c.cold)}; "
         f"loaded: {_s(c.prompt)}; same prompt, cache kept: {_s(c.kept)}"),
        f"  {len(life.questions)} questions, " + " then ".join(f"{clock(g)}" for g in gaps)
        + " apart (an example schedule):",
    ]
    for q in life.questions:
        if q.unloaded_at is not None:
            lines.append(f"  {clock(q.unloaded_at):>7} unloaded (keep-alive expired)")
        how = (f"loaded, idle {clock(q.idle)} -> first token in {_s(q.first_token)}" if q.loaded else
               f"not loaded -> first token in {_s(q.first_token)} (load {_s(c.load)} + first use "
               f"{_s(c.first_use)} + prompt {_s(c.prompt)})")
        lines.append(f"  {clock(q.at):>7} question {q.number}: {how}")
    lines.append(f"  {clock(life.unloaded_at):>7} unloaded; the questions waited {_s(life.waiting)} in all")
    lines.append(f"  {timeline_bar(life, width)}")  # the key on a line of its own: beside the bar it wrapped at 80
    lines.append(f"  {ARRIVES} a question, {LOADED} loaded, {UNLOADED} unloaded")
    return lines


def starts_lifecycle_lines(starts: tuple[StartTimes, StartTimes, StartTimes], keep_alive: float, file_bytes: int,
                           held_bytes: int, width: int = 60) -> list[str]:
    """`lifecycle_lines` of the measured cold, warm and kept starts, on the example schedule."""
    life = lifecycle(StartCost.measured(*starts), keep_alive=keep_alive, held_bytes=held_bytes)
    return lifecycle_lines(life, file_bytes, width)
