"""`walkthrough calibrate [MODEL] [--engine E]`: measure this machine and keep it as a hardware profile.

Times a request on MODEL (and on the bundled tiny model, so that two sizes
separate the bandwidth from the fixed cost per layer), prints what was reached,
and writes the profile (`engine.calibration.profile_entry`, id `cpu-here` unless
`--id`) to `$XDG_CONFIG_HOME/walkthrough/calibrated.json`, which `estimate`,
`bench` and the app then load over the bundled profile of the same id. That
file is one this command creates: an existing file it did not write is never
replaced (a one-line error says so); `--out F` writes elsewhere, under the same rule.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from walkthrough.commands.common import add_engine_argument, add_model_argument, open_model
from walkthrough.errors import WalkthroughError

DEFAULT_PROMPT = 64
DEFAULT_OUTPUT = 16


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register `calibrate` and its options."""
    p = subparsers.add_parser(
        "calibrate",
        help="measure this machine (bandwidth, compute, fixed costs) and save it as a hardware profile",
        description="Measure the bandwidth and compute an engine reaches on this machine and the fixed cost per "
        "layer, and write them as a hardware profile to your config folder (calibrated.json).",
    )
    add_model_argument(p)
    add_engine_argument(p)
    p.add_argument("--prompt-tokens", type=int, default=DEFAULT_PROMPT, metavar="N",
                   help=f"prompt length in tokens (default {DEFAULT_PROMPT})")
    p.add_argument("--output-tokens", type=int, default=DEFAULT_OUTPUT, metavar="N",
                   help=f"tokens generated (default {DEFAULT_OUTPUT})")
    p.add_argument("--id", default="cpu-here", metavar="NAME", help="the profile's id (default cpu-here)")
    p.add_argument("--out", metavar="F", help="write the profile here instead of the config folder")


def run(args: argparse.Namespace) -> int:
    from walkthrough.costs import calibration
    from walkthrough.costs.hardware import calibrated_path, check_profile
    from walkthrough.engine.engines import load_model
    from walkthrough.inspect.card import build_card

    for name, value in (("--prompt-tokens", args.prompt_tokens), ("--output-tokens", args.output_tokens)):
        if value < 2:
            raise WalkthroughError(f"{name} {value}: must be at least 2")
    out = Path(args.out) if args.out else calibrated_path()
    _ours(out)  # refused before anything runs if the file is not ours
    runs = []
    for spec in [args.model] + ([None] if args.model is not None else []):
        f = open_model(spec, runs="calibrate")
        model = load_model(args.engine, f, build_card(f))
        runs.append(calibration.measure(model, Path(f.path).name, args.prompt_tokens, args.output_tokens))
    entry = calibration.profile_entry(runs[0], runs[1:], args.id)
    check_profile(entry, f"the profile measured for {out}")
    for r in runs:
        print(f"{r.model} ({r.engine} engine, {r.layers} layers): decode {r.decode_bytes_per_token / 1e6:,.1f} MB "
              f"per token in {r.decode_seconds_per_token * 1000:,.1f} ms = {r.bandwidth / 1e9:.3g} GB/s reached; "
              f"prefill {r.prefill_flops / 1e9:,.1f} GFLOP in {r.prefill_seconds:.2f} s = "
              f"{r.compute / 1e12:.3g} TFLOPS reached")
    c = entry["calibration"]
    if c["seconds_per_layer"] is not None:
        without = c["bandwidth_without_fixed_costs_gbs"]
        print(f"fixed cost: {c['seconds_per_layer'] * 1e6:,.0f} us per layer per token; bandwidth without it "
              + (f"{without:.3g} GB/s" if without is not None else "not measurable (the fixed cost explains the time)"))
    else:
        print("fixed cost per layer: needs two models of different sizes (name a MODEL besides the bundled one)")
    out.parent.mkdir(parents=True, exist_ok=True)
    kept = [p for p in _ours(out).get("profiles", []) if isinstance(p, dict) and p.get("id") != args.id]
    document = {"written_by": calibration.WRITTEN_BY, "profiles": [*kept, entry]}  # other ids measured before stay
    from walkthrough.safewrite import Writer

    Writer(overwrite=True).write(out, (json.dumps(document, indent=2) + "\n").encode(), "calibrate")
    print(f"profile {args.id} written to {out} (walkthrough estimate --hardware {args.id} uses it)")
    return 0


def _ours(path: Path) -> dict:
    """The file as this command wrote it ({} if there is none); a file it did not write is refused, one line."""
    from walkthrough.costs.calibration import WRITTEN_BY

    if not path.exists() and not path.is_symlink():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        data = None
    if path.is_symlink() or not isinstance(data, dict) or data.get("written_by") != WRITTEN_BY:
        raise WalkthroughError(f"calibrate: {path} exists and was not written by walkthrough calibrate; "
                               "move it away or name another file with --out")
    return data
