"""`walkthrough trace` over several requests in one session: turns, the four calls, reuse, cold and warm starts.

Every figure printed here is a field of the engine's records (`engine.turns.Turn`, `Summary`,
`coldstart.StartTimes`, `lifecycle.Lifecycle`); this module only runs the requests in order and words the lines.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from walkthrough.commands.common import warn
from walkthrough.engine.context_fit import check_fits
from walkthrough.engine.engines import new_session
from walkthrough.engine.glassbox.model import Model
from walkthrough.engine.sampler import SamplerSettings
from walkthrough.engine.serving.coldstart import cold_start, kept_start, warm_start
from walkthrough.engine.serving.lifecycle import StartCost, lifecycle
from walkthrough.engine.serving.turns import Conversation, FourCalls, summarize
from walkthrough.errors import WalkthroughError
from walkthrough.inspect.template import load_messages
from walkthrough.render.lifecycle_view import lifecycle_lines
from walkthrough.render.reuse_text import start_lines, summary_lines, turn_lines
from walkthrough.textsafe import visible
from walkthrough.words import count


def play(f, model: Model, tok, settings: SamplerSettings, args: argparse.Namespace, source: str, *,
         as_json: bool, printer: Callable, piece: Callable[[int], str]) -> int:
    """Run the request (or its turns, or the four calls) through the chat template `source`, printing each
    request's passes then its reuse."""
    messages = load_messages(args.messages) if args.messages else [{"role": "user", "content": args.prompt}]
    several = args.four_calls or sum(m.get("role") == "user" for m in messages) > 1
    if several and args.arrows is not None:
        raise WalkthroughError("--arrows draws one request's attention; these messages make several turns")
    session = new_session(model, kv_type=args.kv_type, auto_checkpoints=several, measure_surprisal=as_json,
                          attention_rows=args.arrows is not None)
    talk = Conversation(session, tok, source, settings=settings, max_tokens=args.steps, chunk=args.chunk,
                        origin=f"chat template of {f.path.name}", measure_fresh=args.measure)
    if args.four_calls:
        script = FourCalls.for_request(messages)
        if not FourCalls.is_default(messages):
            warn(f"--four-calls on your own request: {script.describe()}")
        requests = script.requests(talk, messages)
    else:
        requests = talk.requests(messages)
    for turn_count, (label, request) in enumerate(requests):
        chat = talk.render(request)
        for warning in chat.warnings:
            warn(warning)
        if not chat.ids:
            raise WalkthroughError("the rendered prompt has no tokens")
        model.check_ids(chat.ids)
        check_fits(model.card.context_length, len(chat.ids), args.steps, "--steps")  # turns grow the prompt
        if several and not as_json:
            print(f"== {label}: {count(len(request), 'message')}, {count(len(chat.ids), 'prompt token')}")
        steps = talk.ask(request, label)
        printer(steps, model, piece, as_json=as_json, logits=args.logits, header=turn_count == 0)
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
        kept = kept_start(model, first, chunk=args.chunk, kv_type=args.kv_type)
        record = {"start": {"prompt_tokens": len(first), "cold": cold.to_json(), "warm": warm.to_json(),
                            "warm_cache_kept": kept.to_json()}}
        _emit(record if as_json else None, start_lines(len(first), cold, warm, kept), as_json)
        life = lifecycle(StartCost.measured(cold, warm, kept), held_bytes=f.data_bytes)
        _emit({"lifecycle": life.to_json()} if as_json else None, lifecycle_lines(life, f.file_size), as_json)
    return 0


def _emit(record: dict[str, Any] | None, lines: list[str], as_json: bool) -> None:
    if as_json:
        sys.stdout.write(json.dumps(record, allow_nan=False) + "\n")
    else:
        for line in lines:
            print(visible(line) if line else line)
    sys.stdout.flush()
