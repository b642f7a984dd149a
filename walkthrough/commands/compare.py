"""`walkthrough compare [A] B [--messages F | --prompt TEXT | --ids 1,2,3] [--steps N] [--json]`: two files, same tokens.

A and B are two files of the same model (e.g. two quantizations); each is a
MODEL as every command takes it. Without A, A is the bundled tiny model (and
with neither, the bundled model is compared with itself: KL 0). The request
(the default request unless given, rendered with A's chat template) is
answered greedily by A; then both files read request + answer teacher-forced,
and the output says how far B's next-token distributions are from A's: KL
divergence per position (mean, 99th percentile, max), top-1 and top-5
agreement, the perplexity of each on the request and on the answer, and the
first answer token where B's greedy answer would have parted from A's. The
measures are `walkthrough.engine.compare`'s; this module only prints them.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from walkthrough.words import count

DEFAULT_STEPS = 32


def add_parser(subparsers) -> None:
    """Register `compare` and its options."""
    from walkthrough.commands.common import MODEL_HELP
    from walkthrough.commands.trace import add_request_arguments

    p = subparsers.add_parser(
        "compare",
        help="two files of the same model on the same tokens: KL divergence, top-1/top-5 agreement, perplexity",
        description="Run A's greedy answer to a request, then read request + answer with both files "
        "(teacher-forced) and measure how far B's next-token distributions are from A's.",
    )
    p.add_argument("models", nargs="*", metavar="[A] B",
                   help="the reference file (e.g. the larger quantization; default the bundled tiny model) and "
                   "the file compared with it (same vocabulary); " + MODEL_HELP)
    add_request_arguments(p, required=False, default=" (default: the default request; A's chat template)")
    p.add_argument("--steps", type=int, default=DEFAULT_STEPS, metavar="N",
                   help=f"tokens of A's greedy answer (default {DEFAULT_STEPS}; fewer if it ends its turn)")
    p.add_argument("--json", action="store_true", help="print one JSON object, with the per-position figures")


def run(args: argparse.Namespace) -> int:
    """Open both files, build the request, compare, print."""
    from walkthrough.commands.common import open_model
    from walkthrough.commands.trace import prompt_ids, token_pieces, tokenizer
    from walkthrough.engine.compare import compare_models
    from walkthrough.engine.context_fit import check_fits
    from walkthrough.engine.glassbox.model import Model
    from walkthrough.errors import WalkthroughError
    from walkthrough.inspect.locate import DEFAULT_REQUEST

    if args.steps < 1:
        raise WalkthroughError(f"--steps {args.steps}: give at least 1 token for A to answer")
    if len(args.models) > 2:
        raise WalkthroughError(f"compare takes two files, A and B; got {len(args.models)}")
    spec_a, spec_b = ([None, None] + list(args.models))[-2:]
    fa, fb = open_model(spec_a, runs="compare"), open_model(spec_b, runs="compare")
    a, b = Model(fa), Model(fb)
    tok = tokenizer(fa, required=args.ids is None)
    if args.ids is None and args.prompt is None and args.messages is None:
        args.messages = str(DEFAULT_REQUEST)
    ids = prompt_ids(fa, tok, args)
    a.check_ids(ids)
    check_fits(a.card.context_length, len(ids), args.steps, "--steps")
    result = compare_models(a, b, ids, args.steps)
    record = comparison_json(result, str(fa.path), str(fb.path), token_pieces(fa, tok))
    if args.json:
        print(json.dumps(record, allow_nan=False))
    else:
        print_comparison(record, out=sys.stdout)
    return 0


def comparison_json(result, path_a: str, path_b: str, piece) -> dict[str, Any]:
    """The `--json` object: summary figures, then per-position KL, agreement and surprisal."""
    parted = result.parted_at
    return {
        "a": path_a,
        "b": path_b,
        "tokens": len(result.tokens),
        "prompt_tokens": result.n_prompt,
        "answer": result.answer,
        "answer_text": "".join(piece(i) for i in result.answer),
        "kl": result.kl_stats(),
        "top1_agreement": float(result.top1.mean()),
        "top5_agreement": float(result.top5.mean()),
        "perplexity": result.perplexities(),
        "parted_at": parted,
        "parted": None if parted is None else {
            "a_token": result.answer[parted], "a_piece": piece(result.answer[parted]),
            "b_token": int(result.greedy_b[result.n_prompt - 1 + parted]),
            "b_piece": piece(int(result.greedy_b[result.n_prompt - 1 + parted])),
        },
        "per_position": {
            "kl": [round(float(x), 6) for x in result.kl],
            "top1": result.top1.astype(int).tolist(),
            "top5": [float(x) for x in result.top5],
            "surprisal_a": [round(float(x), 6) for x in result.surprisal_a],
            "surprisal_b": [round(float(x), 6) for x in result.surprisal_b],
        },
    }


def print_comparison(r: dict[str, Any], *, out) -> None:
    """A few lines of text (fits 80 columns); file names and token text shown literally."""
    from walkthrough.textsafe import token_text, visible

    def ppl(x: dict) -> str:
        return "-" if x["perplexity"] is None else f"{x['perplexity']:.3f} ({count(x['tokens'], 'token')})"

    kl = r["kl"]
    lines = [
        f"A: {visible(r['a'])}",
        f"B: {visible(r['b'])}",
        (f"tokens: {r['tokens']} ({r['prompt_tokens']} request + {len(r['answer'])} of A's greedy answer), "
        "read by both teacher-forced"),
        f"A's answer: {visible(r['answer_text'])}",
        f"KL(A||B) per position, nats: mean {kl['mean']:.6f}, p99 {kl['p99']:.6f}, max {kl['max']:.6f}",
        f"top-1 agreement: {r['top1_agreement']:.1%}   top-5 agreement: {r['top5_agreement']:.1%}",
        f"perplexity of the request: A {ppl(r['perplexity']['a']['request'])}, B {ppl(r['perplexity']['b']['request'])}",
        f"perplexity of the answer:  A {ppl(r['perplexity']['a']['answer'])}, B {ppl(r['perplexity']['b']['answer'])}",
    ]
    if r["parted"] is None:
        lines.append("greedy answers: B would have written the same tokens")
    else:
        p = r["parted"]
        lines.append(f"greedy answers part at answer token {r['parted_at']}: A {token_text(p['a_piece'])}, "
                     f"B {token_text(p['b_piece'])}")
    out.write("\n".join(lines) + "\n")
