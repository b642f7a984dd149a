"""`walkthrough abliterate [MODEL] [--prompts F.json] [--layer L] [--out F.gguf] [--store f32|f16]`.

Finds the direction of a behaviour in the residual stream from two prompt sets (the bundled
pair asks the same questions to be answered in French or in English), shows every prompt's
projection on it and how well each layer separates the sets, writes a copy of MODEL with the
direction projected out of every matrix that writes into the stream, then measures the copy:
what its writers and its residual stream still hold along the direction, `compare`'s figures
(KL, top-1, the first token where the greedy answers part) on a held-out prompt, and both
files' greedy answers to the held-out prompts side by side. The numpy engine runs both files.

The copy goes to --out (default: MODEL's name with "-abliterated" in the current folder); an
existing file is never replaced unless this run made it or --overwrite is given, and never the
model itself (`safewrite`). `--json` prints the figures as one object. The computation is
`walkthrough.engine.abliterate`'s; the tables are `walkthrough.render.abliterate_view`'s.
"""

from __future__ import annotations

import argparse
import json
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any


def add_parser(subparsers) -> None:
    """Register `abliterate` and its options."""
    from walkthrough.commands.common import add_model_argument

    p = subparsers.add_parser(
        "abliterate",
        help="find a behaviour's direction from two prompt sets, project it out of the weights, "
        "write the edited GGUF and measure the change",
        description="Difference of means of the residual stream over two prompt sets, projected out of "
        "every matrix writing into the stream; the edited copy is written and compared with the original.",
    )
    add_model_argument(p)
    p.add_argument("--prompts", metavar="F.json",
                   help="the two prompt sets: {behaviour, with: [...], without: [...], held_out: N} "
                   "(default: the bundled French / English pair)")
    p.add_argument("--layer", type=int, metavar="L",
                   help="the layer whose output gives the direction (default: the one separating the sets best)")
    p.add_argument("--out", metavar="F.gguf", help="where to write the edited copy")
    p.add_argument("--store", choices=("f32", "f16"), default="f32",
                   help="type of the edited tensors (default f32; f16 halves them, rounding what is left)")
    p.add_argument("--tokens", type=int, default=24, metavar="N", help="tokens of each greedy answer (default 24)")
    p.add_argument("--overwrite", action="store_true", help="replace --out if it exists")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def _progress(text: str) -> None:
    print(f"walkthrough: {text}...", file=sys.stderr, flush=True)


def result_json(found, edited, piece) -> dict[str, Any]:
    """The `--json` object."""
    w, wo = found.projections()
    c = edited.comparison
    return {
        "behaviour": found.sets.behaviour, "layer": found.layer, "gap": found.direction.gap,
        "separation": [float(x) for x in found.direction.separation],
        "projections": {"with": [float(x) for x in w], "without": [float(x) for x in wo],
                        "with_after": [float(x) for x in edited.after_with],
                        "without_after": [float(x) for x in edited.after_without]},
        "held_out": found.sets.held_out,
        "out": str(edited.path), "tensors": edited.tensors,
        "writers_along": {"before": edited.writers_before, "after": edited.writers_after},
        "stream_along": {"before": edited.stream_before, "after": edited.stream_after},
        "compare": {"prompt": edited.compared_prompt, "kl": c.kl_stats(), "top1_agreement": float(c.top1.mean()),
                    "parted_at": c.parted_at, "answer": "".join(piece(i) for i in c.answer)},
        "answers": [{"prompt": a.prompt, "original": a.before, "edited": a.after} for a in edited.answers],
    }


def run(args: argparse.Namespace) -> int:
    """Find, edit, measure, print."""
    from rich.console import Console

    from walkthrough.commands.common import open_model
    from walkthrough.engine.abliterate import run as abl
    from walkthrough.engine.abliterate.edit import check_editable
    from walkthrough.engine.abliterate.prompts import load_prompt_sets
    from walkthrough.engine.glassbox.model import Model
    from walkthrough.errors import WalkthroughError
    from walkthrough.inspect.tokenizer import GGUFTokenizer
    from walkthrough.render.abliterate_view import abliteration_view
    from walkthrough.safewrite import Writer
    from walkthrough.textsafe import json_visible

    if not 1 <= args.tokens <= 512:
        raise WalkthroughError(f"--tokens {args.tokens}: give a count from 1 to 512")
    sets = load_prompt_sets(args.prompts)
    f = open_model(args.model, runs="abliterate")
    model = Model(f)
    check_editable(model.config)
    out_path = Path(args.out) if args.out else Path(f"{Path(f.path).stem}-abliterated.gguf")
    inputs = [("the model", Path(p)) for p in f.paths] + ([("the --prompts file", Path(args.prompts))]
                                                           if args.prompts else [])
    writer = Writer(inputs, overwrite=args.overwrite)
    writer.check(out_path, "--out")  # refuse before minutes of work

    @contextmanager
    def open_out():
        with writer.stream(out_path, "--out") as stream:
            yield out_path, stream

    found = abl.find(model, sets, args.layer, say=_progress)
    edited = abl.edit(model, found, open_out, store=args.store, tokens=args.tokens, say=_progress)
    tokenizer = GGUFTokenizer.from_gguf(f)
    if args.json:
        print(json_visible(json.dumps(result_json(found, edited, tokenizer.piece), ensure_ascii=False)))
        return 0
    console = Console(file=sys.stdout, markup=False, highlight=False, emoji=False)
    console.print(abliteration_view(found, edited, tokenizer.piece))
    return 0
