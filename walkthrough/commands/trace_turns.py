"""`walkthrough trace` over several requests in one session: turns, the four calls, reuse, cold and warm starts.

Every figure printed here is a field of the engine's records (`engine.turns.Turn`, `Summary`,
`coldstart.StartTimes`); this module only runs the requests in order and words the lines.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from typing import Any

from walkthrough.commands.common import warn
from walkthrough.engine.coldstart import StartTimes, cold_start, warm_start
from walkthrough.engine.model import Model
from walkthrough.engine.sampler import Sampler, SamplerSettings
from walkthrough.engine.session import Session
from walkthrough.engine.turns import Conversation, FourCalls, Summary, Turn, summarize
from walkthrough.errors import WalkthroughError
from walkthrough.inspect.template import load_messages, select_template
from walkthrough.screens.format import human_bytes
from walkthrough.textsafe import visible


def play(f, model: Model, tok, settings: SamplerSettings, args: argparse.Namespace, *, as_json: bool,
         printer: Callable, piece: Callable[[int], str]) -> int:
    """Run the request (or its turns, or the four calls), printing each request's passes then its reuse."""
    messages = load_messages(args.messages) if args.messages else [{"role": "user", "content": args.prompt}]
    source = select_template(f, where=f.path.name)
    several = args.four_calls or sum(m.get("role") == "user" for m in messages) > 1
    session = Session(model, kv_type=args.kv_type, auto_checkpoints=several)
    talk = Conversation(session, tok, source, settings=settings, max_tokens=args.steps, chunk=args.chunk,
                        origin=f"chat template of {f.path.name}", measure_fresh=args.measure)
    requests = FourCalls.load().requests(talk, messages) if args.four_calls else talk.requests(messages)
    turn_count = 0
    for label, request in requests:
        chat = talk.render(request)
        for warning in chat.warnings:
            warn(warning)
        if not chat.ids:
            raise WalkthroughError("the rendered prompt has no tokens")
        model.check_ids(chat.ids)
        if several and not as_json:
            print(f"== {label}: {len(request)} messages, {len(chat.ids)} prompt tokens")
        steps = talk.ask(request, label)
        printer(steps, model, piece, as_json=as_json, logits=args.logits, header=turn_count == 0)
        turn_count += 1
        turn = talk.turns[-1]
        if several or args.measure:
            _emit({"turn": label, **turn.to_json()} if as_json else None, turn_lines(turn, piece), as_json)
    if several:
        summary = summarize(talk.turns)
        _emit({"summary": summary.to_json()} if as_json else None, summary_lines(summary), as_json)
    if args.measure:
        first = talk.turns[0].chat.ids
        cold = cold_start(f.path, first, chunk=args.chunk, kv_type=args.kv_type)
        warm = warm_start(model, first, chunk=args.chunk, kv_type=args.kv_type)
        kept = _same_prompt_again(model, first, args)
        record = {"start": {"prompt_tokens": len(first), "cold": cold.to_json(), "warm": warm.to_json(),
                            "warm_cache_kept": kept.to_json()}}
        _emit(record if as_json else None, start_lines(len(first), cold, warm, kept), as_json)
    return 0


def _same_prompt_again(model: Model, ids: list[int], args: argparse.Namespace) -> StartTimes:
    """First token of `ids` sent again to a session that holds them (a server that kept its cache)."""
    session = Session(model, kv_type=args.kv_type, auto_checkpoints=True)
    for _ in session.request(ids, chunk=args.chunk, sampler=Sampler.greedy()):
        pass
    began = time.perf_counter()
    for _ in session.request(ids, chunk=args.chunk, sampler=Sampler.greedy()):
        pass
    seconds = time.perf_counter() - began
    return StartTimes(first_token=seconds, passes=seconds)


def _emit(record: dict[str, Any] | None, lines: list[str], as_json: bool) -> None:
    if as_json:
        sys.stdout.write(json.dumps(record, allow_nan=False) + "\n")
    else:
        for line in lines:
            print(visible(line) if line else line)
    sys.stdout.flush()


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


def turn_lines(turn: Turn, piece: Callable[[int], str]) -> list[str]:
    """What one request reused, where and why reuse stopped, and what it cost (with and without reuse)."""
    r = turn.reuse
    lines = [f"{turn.label}: {r.reused} of {r.prompt} prompt tokens reused, {r.computed} computed; "
             f"reuse stopped: {r.reason}"]
    if turn.cause is not None:
        c = turn.cause
        lines.append(f"  first differing token at {c.position}: held {piece(c.held_id)!r} ({c.held_origin}), "
                     f"new {piece(c.new_id)!r} ({c.new_origin}): {c.words}")
    if r.checkpoint is not None or turn.checkpoints:
        used = f"restored the checkpoint at {r.checkpoint}; " if r.checkpoint is not None else ""
        lines.append(f"  recurrent state: {used}{turn.checkpoints} checkpoints kept, "
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
    line = (f"{s.turns} requests: {s.prompt_tokens} prompt tokens, {s.reused} reused, {s.computed} computed; "
            f"first tokens in {_ms(s.seconds)} in all")
    if s.seconds_without_reuse is not None:
        line += (f" ({_ms(s.seconds_without_reuse)} without reuse; "
                 f"{s.flops / 1e6:,.0f} of {s.flops_without_reuse / 1e6:,.0f} MFLOP computed)")
    return [line]


def start_lines(n: int, cold: StartTimes, warm: StartTimes, kept: StartTimes) -> list[str]:
    other = cold.first_token - cold.imports - cold.open - cold.passes
    return [
        f"first token of the first request ({n} tokens):",
        f"  cold, a fresh process: {_ms(cold.first_token)} (Python start {_ms(other)}, imports {_ms(cold.imports)}, "
        f"opening the file {_ms(cold.open)}, passes with first-use dequantization {_ms(cold.passes)})",
        f"  warm, this process, empty KV cache: {_ms(warm.first_token)}",
        f"  warm, this process, the prompt's KV cache kept: {_ms(kept.first_token)}",
        f"  a server's keep-alive saves {_ms(cold.first_token - warm.first_token)} per request after the first",
    ]
