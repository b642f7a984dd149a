"""`walkthrough bench [MODEL] [--engine E] [--prompt-tokens N] [--output-tokens N] [--json]`: one request, timed.

Loads the model with the chosen engine (numpy by default, or llama.cpp), runs
one request (`engine.measured.time_request`: a prompt of spread-out token ids
prefilled in passes of 512, then greedy decoding of exactly `--output-tokens`
tokens), and prints what it measured (load time, time to first token, prefill
and decode rates, achieved bandwidth) beside the roofline estimate of the same
request on a hardware profile (`--hardware`, `cpu-here` by default): ceiling,
realistic and measured, side by side. docs/bench.md says how to turn the
measurement into a profile of your own machine.

Example:
    walkthrough bench model.gguf --engine llama.cpp --prompt-tokens 256 --output-tokens 32
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from walkthrough.commands.common import (
    add_engine_argument,
    add_memory_argument,
    add_model_argument,
    add_rpc_arguments,
    memory_report,
    open_model,
)
from walkthrough.errors import WalkthroughError

DEFAULT_PROMPT = 64
DEFAULT_OUTPUT = 16
DEFAULT_PROFILE = "cpu-here"


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register `bench` and its options."""
    p = subparsers.add_parser(
        "bench",
        help="time one request on this machine, beside the estimate for a hardware profile",
        description="Time one request (load, first token, prefill and decode rates, bandwidth achieved) "
        "and print it beside the roofline estimate for a hardware profile.",
    )
    add_model_argument(p)
    add_engine_argument(p)
    add_rpc_arguments(p)
    add_memory_argument(p)
    p.add_argument("--prompt-tokens", type=int, default=DEFAULT_PROMPT, metavar="N",
                   help=f"prompt length in tokens (default {DEFAULT_PROMPT})")
    p.add_argument("--output-tokens", type=int, default=DEFAULT_OUTPUT, metavar="N",
                   help=f"tokens to generate (default {DEFAULT_OUTPUT}; never stops early)")
    p.add_argument("--hardware", default=DEFAULT_PROFILE, metavar="NAME",
                   help=f"profile to compare with (default {DEFAULT_PROFILE})")
    p.add_argument("--hardware-file", metavar="F", help="extra hardware profiles (JSON, same format)")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def run(args: argparse.Namespace) -> int:
    from walkthrough.costs.estimate import estimate
    from walkthrough.costs.hardware import load_profiles, pick
    from walkthrough.costs.measured import compare, comparison_title, first_use_work, time_request
    from walkthrough.engine.context_fit import check_fits
    from walkthrough.engine.engines import load_model
    from walkthrough.inspect.card import build_card

    for name, value in (("--prompt-tokens", args.prompt_tokens), ("--output-tokens", args.output_tokens)):
        if value < 1:
            raise WalkthroughError(f"{name} {value}: must be at least 1")
    hw = pick(load_profiles(args.hardware_file), args.hardware)[0]
    f = open_model(args.model, runs="bench")
    card = build_card(f)
    check_fits(card.context_length, args.prompt_tokens, args.output_tokens, "--output-tokens",
               "lower --prompt-tokens")
    began = time.perf_counter()
    model = load_model(args.engine, f, card, args.max_memory, rpc=args.rpc, split=args.split)
    load_seconds = time.perf_counter() - began
    memory = memory_report(model, args.prompt_tokens + args.output_tokens, args.prompt_tokens, args.prompt_tokens)
    measured = time_request(model, args.prompt_tokens, args.output_tokens)
    context = args.prompt_tokens + args.output_tokens
    e = estimate(card, hw, context, args.prompt_tokens, args.output_tokens)
    rows = compare(e, measured)
    if args.json:
        record = {"model": {"path": str(f.path), "name": card.name, "architecture": card.architecture},
                  "engine": measured.engine, "load_s": load_seconds, "hardware": hw.id, "memory": memory,
                  "measured": measured.to_json(),
                  "rows": [row._asdict() for row in rows]}
        json.dump(record, sys.stdout, indent=2, allow_nan=False)
        sys.stdout.write("\n")
        return 0
    print_comparison(f"{card.name or f.path.name} on the {measured.engine} engine: loaded in {load_seconds:.1f} s; "
                     f"{args.prompt_tokens} prompt tokens, {args.output_tokens} generated",
                     comparison_title(hw, measured), rows, memory)
    print_split(model, measured)
    if measured.first_use_bytes or measured.first_use_checks:
        print(f"first use: {first_use_work(measured.first_use_bytes, measured.first_use_checks)} in "
              f"{measured.first_use_seconds:.1f} s, once (not in the prefill and decode figures above)")
    return 0


def print_split(model, measured) -> None:
    """Where llama.cpp put the layers and what each host and boundary took (with --rpc; else nothing)."""
    from walkthrough.render.split_text import pass_lines, placement_lines

    placement = getattr(model, "placement", None)
    if placement is not None:
        for line in placement_lines(placement) + pass_lines(measured.split):
            print(line)


def print_comparison(title: str, table_title: str, rows, memory: str | None = None) -> None:
    """The title line and the modelled-beside-measured table (file and profile text shown literally)."""
    from rich.console import Console

    from walkthrough.textsafe import safe_text

    console = Console()
    console.print(safe_text(title))
    if memory:
        console.print(safe_text(memory))
    console.print(comparison_table(table_title, rows))


def comparison_table(title: str, rows):
    """A Rich table of `engine.measured.Comparison` rows: ceiling, realistic, measured."""
    from rich.table import Table
    from rich.text import Text

    from walkthrough.textsafe import safe_text

    table = Table(title=safe_text(title), title_justify="left", expand=False)
    table.add_column("")
    for name in ("ceiling", "realistic", "measured"):
        table.add_column(name, justify="right", no_wrap=True)
    for row in rows:
        table.add_row(Text(row.label), Text(row.ceiling), Text(row.realistic), Text(row.measured))
    return table
