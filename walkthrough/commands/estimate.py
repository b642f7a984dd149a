"""`walkthrough estimate [MODEL]`: will a model fit, how soon is the first word, how fast does it write.

The model is found as `walkthrough inspect` finds it (`inspect.locate`, or the
bundled tiny model). One table per hardware profile (all of them unless
`--hardware` names one), or with `--json` a list with one object per profile. Every number comes from the
model card and the profile through `walkthrough.costs.estimate`; the "why" column
shows the formula. Defaults follow the model: context = min(4096, trained
context), prompt = half of it, output = an eighth.

`--measure` also runs that request on this machine (`--engine numpy` or
`llama.cpp`, as `walkthrough bench` does) and adds a measured column beside
each profile's ceiling and realistic figures.

Example:
    walkthrough estimate model.gguf --hardware rtx-4090 --prompt-tokens 6500 --output-tokens 500
    walkthrough estimate model.gguf --hardware cpu-here --prompt-tokens 64 --output-tokens 16 --measure
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from walkthrough.commands.common import (
    add_engine_argument,
    add_model_argument,
    add_rpc_arguments,
    open_model,
)
from walkthrough.errors import WalkthroughError

if TYPE_CHECKING:
    from rich.console import Console

    from walkthrough.costs.corpus import Run
    from walkthrough.costs.estimate import Estimate
    from walkthrough.costs.fitted import Band
    from walkthrough.costs.measured import Measured
    from walkthrough.costs.pipeline import Pipeline
    from walkthrough.inspect.card import ModelCard

DEFAULT_CONTEXT = 4096  # llama.cpp's long-standing default -c
KV_TYPES = ("f16", "q8_0", "q4_0")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register `estimate` and its options."""
    p = subparsers.add_parser(
        "estimate",
        help="memory, time to first token and speed on hardware profiles",
        description="Will the model fit, how soon is the first word, how fast does it write: one table "
        "per hardware profile, each figure with the formula behind it.",
    )
    add_model_argument(p)
    p.add_argument("--hardware", metavar="NAME",
                   help="one profile id (default: every profile; a wrong NAME lists them)")
    p.add_argument("--context", type=int, metavar="N", help="context window in tokens (KV cache size)")
    p.add_argument("--prompt-tokens", type=int, metavar="N", help="prompt length in tokens")
    p.add_argument("--output-tokens", type=int, metavar="N", help="answer length in tokens")
    p.add_argument("--kv-type", choices=KV_TYPES, default="f16", help="KV cache type (default f16)")
    p.add_argument("--users", type=int, default=1, metavar="N", help="sequences decoded at once (default 1)")
    p.add_argument("--json", action="store_true", help="print a JSON list, one object per profile")
    p.add_argument("--hardware-file", metavar="F", help="extra hardware profiles (JSON, same format)")
    p.add_argument("--images", metavar="N[xWxH]",
                   help="add N images (default 1024x768 each), or vF a video of F frames (vFxWxH), to the prompt, "
                   "counted by --mmproj's projector")
    p.add_argument("--mmproj", metavar="F", help="the model's multimodal projector file (mmproj-*.gguf)")
    p.add_argument("--diffusion-steps", type=int, metavar="N",
                   help="also set the request beside a diffusion LM writing the same answer in N steps, each a "
                   "pass over the whole prompt + answer (llama.cpp's diffusion example; docs/demos.md)")
    p.add_argument("--evidence", action="store_true",
                   help="list the measured runs nearest to this request behind each profile's fitted figures, "
                   "with their sources")
    p.add_argument("--measure", action="store_true",
                   help="also run the request here and show what it measured beside each estimate")
    add_engine_argument(p)
    add_rpc_arguments(p)
    p.add_argument("--hosts", type=int, metavar="N",
                   help="also model the model split over N hosts of the profile (llama.cpp's RPC layer split)")
    p.add_argument("--link", default="10gbe", metavar="NAME",
                   help="the link between --hosts: 1gbe, 10gbe (default), 25gbe, thunderbolt, nvlink, pcie4")


def run(args: argparse.Namespace) -> int:
    from walkthrough.costs.estimate import estimate
    from walkthrough.costs.hardware import load_profiles, pick
    from walkthrough.inspect.card import build_card

    if (args.rpc or args.split) and not args.measure:
        raise WalkthroughError("--rpc and --split place the layers of the run --measure makes: add --measure")
    profiles = pick(load_profiles(args.hardware_file), args.hardware)
    with open_model(args.model) as f:
        path, card = f.path, build_card(f)
    context, prompt, output = request_sizes(card.context_length, args.context, args.prompt_tokens,
                                            args.output_tokens)
    images = image_prompt(args.images, args.mmproj)
    if images is not None:
        context, prompt, output = request_sizes(card.context_length, args.context, prompt + images["tokens"],
                                                output)
    if args.users < 1:
        raise WalkthroughError(f"--users {args.users}: must be at least 1")
    results = [estimate(card, hw, context, prompt, output, args.kv_type, args.users) for hw in profiles]
    measured = _measure(args, card, prompt, output) if args.measure else None
    diffusions = _diffusions(args.diffusion_steps, card, profiles, prompt, output, args.kv_type)
    splits = _splits(args, card, results, context, prompt)
    if args.json:
        records = [dict(as_json(path, card, e), images=images) for e in results]
        for r, c in zip(records, diffusions):
            r["diffusion"] = {"steps": c.steps, "canvas": c.canvas, "logits_bytes": c.logits_bytes,
                              **{w.name: vars(w) for w in (c.autoregressive, c.diffusion)}}
        if splits:
            from walkthrough.commands.estimate_hosts import record

            for r, split in zip(records, splits):
                r["hosts"] = record(split)
        if args.evidence:
            for record, e in zip(records, results):
                record["evidence"] = [_run_json(r) for r in evidence_runs(card, e)]
        if measured is not None:
            from walkthrough.costs.measured import compare

            for record, e in zip(records, results):
                record["measured"] = {**measured.to_json(), "rows": [r._asdict() for r in compare(e, measured)]}
        json.dump(_finite(records), sys.stdout, indent=2, allow_nan=False)
        sys.stdout.write("\n")
        return 0
    if images is not None:
        print(f"{'video' if images['kind'] == 'video' else 'images'}: {images['explain']} prompt tokens "
              f"({images['formula']})")
    print_tables(path, card, results, measured, evidence=args.evidence)
    if diffusions:
        from rich.console import Console

        from walkthrough.render.diffusion_view import diffusion_view

        for c, hw in zip(diffusions, profiles):
            Console(markup=False, emoji=False, highlight=False).print(diffusion_view(c, card.architecture, hw.name))
    if splits:
        from rich.console import Console

        from walkthrough.commands.estimate_hosts import link_note, table

        console = Console()
        for e, split in zip(results, splits):
            console.print(table(e, split))
        console.print(link_note(splits[0].link), markup=False, highlight=False)
    if measured is not None and measured.split:
        from walkthrough.render.split_text import pass_lines

        for line in pass_lines(measured.split):
            print(line)
    return 0


def _diffusions(steps: int | None, card: Any, profiles: list[Any], prompt: int, output: int,
                kv_type: str) -> list[Any]:
    """`costs.diffusion.compare` per profile for --diffusion-steps (none without it)."""
    if steps is None:
        return []
    if steps < 1:
        raise WalkthroughError(f"--diffusion-steps {steps}: must be at least 1 (a step fixes answer positions)")
    from walkthrough.costs.diffusion import compare

    try:
        return [compare(card, hw, max(prompt, 1), max(output, 1), steps, cache_type=kv_type) for hw in profiles]
    except ValueError as exc:
        raise WalkthroughError(f"--diffusion-steps: {exc}") from None


def evidence_runs(card: ModelCard, e: Estimate, k: int = 5) -> list[Run]:
    """The measured runs nearest to this request on the estimate's profile (its family's corpus runs)."""
    from walkthrough.costs import fitted
    from walkthrough.costs.estimate import card_shape

    return fitted.evidence(card_shape(card, e.cache_type), e.hardware, k) if e.fits else []


def _finite(value: Any) -> Any:
    """`value` with every float that is not finite as None (null): strict JSON. A degenerate file (no layers: nothing
    read per token) or an SRAM machine's zero-time pass gives an infinite rate, which JSON cannot hold."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _run_json(r: Run) -> dict[str, Any]:
    return {"machine": r.machine.id, "backend": r.backend, "model": r.model.id, "quant": r.quant,
            "test": r.test, "n": r.n, "depth": r.depth, "tokens_per_s": r.tokens_per_s,
            "bytes_per_token": r.bytes_per_token, "source": r.source, "date": r.date}


def _band_json(band: Band | None, e: Estimate, reason: str = "") -> dict[str, Any]:
    from walkthrough.costs.estimate import no_band_reason

    if band is None:
        return {"fraction": None, "text": reason or no_band_reason(e)}
    return {"fraction": band.fraction, "family": band.family, "runs": band.runs, "machines": band.machines,
            "machine_runs": band.machine_runs, "text": band.describe()}


def image_prompt(spec: str | None, mmproj: str | None) -> dict[str, Any] | None:
    """The prompt tokens `--images` adds, counted by the projector in `--mmproj`; None without --images."""
    if spec is None:
        if mmproj is not None:
            raise WalkthroughError("--mmproj counts image tokens only with --images N[xWxH]")
        return None
    if mmproj is None:
        raise WalkthroughError("--images needs the model's projector: add --mmproj mmproj-....gguf")
    from walkthrough.inspect.projector import media_tokens, open_projector, parse_media

    projector = open_projector(mmproj)
    return media_tokens(projector, parse_media(spec)).to_json(projector)


def _splits(args: argparse.Namespace, card: ModelCard, results: list[Estimate], context: int,
            prompt: int) -> list[Pipeline]:
    """The pipeline split over --hosts for each profile (`costs.pipeline`), or [] without --hosts."""
    from walkthrough.costs.pipeline import box_of, model, pick_link

    if args.hosts is None:
        return []
    link = pick_link(args.link)
    return [model(card, e.hardware, link, args.hosts, context, prompt, args.kv_type, box=box_of(e)) for e in results]


def _measure(args: argparse.Namespace, card: ModelCard, prompt: int, output: int) -> Measured:
    """The request run on this machine with the chosen engine (`engine.measured.time_request`)."""
    from walkthrough.costs.measured import time_request
    from walkthrough.engine.engines import load_model

    f = open_model(args.model, runs="estimate --measure")
    try:
        return time_request(load_model(args.engine, f, card, rpc=args.rpc, split=args.split), prompt, output)
    finally:
        if args.engine == "numpy":
            f.close()


def request_sizes(trained: int | None, context: int | None, prompt: int | None,
                  output: int | None) -> tuple[int, int, int]:
    """Context, prompt and output tokens, defaulted from the model and checked against each other."""
    for name, value in (("--context", context), ("--prompt-tokens", prompt), ("--output-tokens", output)):
        if value is not None and value < 1:
            raise WalkthroughError(f"{name} {value}: must be at least 1")
    if context is None:
        context = min(DEFAULT_CONTEXT, trained) if trained else DEFAULT_CONTEXT
        context = max(context, (prompt or 0) + (output or 0))
    if trained and context > trained:
        raise WalkthroughError(f"--context {context}: the model was trained for {trained} tokens; "
                               f"choose at most {trained}")
    prompt = prompt if prompt is not None else max(context // 2, 1)
    output = output if output is not None else max(context // 8, 1)
    if prompt + output > context:
        raise WalkthroughError(f"prompt ({prompt}) plus output ({output}) tokens exceed the context ({context}); "
                               "raise --context or shorten them")
    return context, prompt, output


def as_json(path: Path, card: ModelCard, e: Estimate) -> dict[str, Any]:
    """One profile's estimate as plain JSON values (null where the model does not fit)."""
    hw = e.hardware
    fig = {"memory_needed": e.memory.needed, "memory_usable": e.memory.usable, "max_users": e.max_users}
    if e.chips is not None:
        fig["chips"] = e.chips
    if e.fits:
        fig.update(bytes_per_token=e.decode.bytes_per_token, decode_ceiling=e.decode.ceiling,
                   decode=e.decode.tokens_per_s, prefill=e.prefill.tokens_per_s, ttft=e.prefill.seconds,
                   answer=e.answer)
    placement = e.memory.placement
    return {
        "model": {"path": str(path), "name": card.name, "architecture": card.architecture},
        "hardware": {
            "id": hw.id, "name": hw.name, "memory_gb": hw.memory_bytes / 1e9, "memory_gib": hw.memory_gib,
            "memory_kind": hw.memory_kind, "bandwidth_gbs": hw.bandwidth_gbs, "compute_tflops": hw.compute_tflops,
            "compute_basis": hw.compute_basis, "decode_efficiency": hw.decode_efficiency,
            "host": hw.host.id if hw.host else None, "sources": hw.sources,
        },
        "context": e.context, "prompt_tokens": e.prompt_tokens, "output_tokens": e.output_tokens,
        "kv_type": e.cache_type, "users": e.users,
        "bytes_per_token": e.decode.bytes_per_token.value if e.fits else None,
        "decode_tokens_per_s_ceiling": e.decode.ceiling.value if e.fits else None,
        "decode_tokens_per_s": e.decode.tokens_per_s.value if e.fits else None,
        "decode_slow_share": e.decode.slow_share.value if e.fits else None,
        "decode_band": _band_json(e.decode.band, e, e.decode.no_band) if e.fits else None,
        "prefill_band": _band_json(e.prefill.band, e, e.prefill.no_band) if e.fits else None,
        "prefill_tokens_per_s": e.prefill.tokens_per_s.value if e.fits else None,
        "prefill_bound": e.prefill.bound if e.fits else None,
        "ttft_s": e.prefill.seconds.value if e.fits else None,
        "answer_s": e.answer.value if e.fits else None,
        "memory_needed_gb": e.memory.needed.value / 1e9,
        "memory_usable_gb": e.memory.usable.value / 1e9,
        "fits": e.fits,
        "verdict": e.memory.verdict,
        "chips": int(e.chips.value) if e.chips is not None else None,
        "offload": {
            "expert_layers": list(placement.expert_layers), "layers": list(placement.whole_layers),
            "description": placement.describe(),
            "host_needed_gb": e.memory.host_needed.value / 1e9 if e.memory.host_needed else None,
            "host_usable_gb": e.memory.host_usable.value / 1e9 if e.memory.host_usable else None,
        },
        "shortfall_gb": e.memory.shortfall.value / 1e9 if e.memory.shortfall else None,
        "max_users": int(e.max_users.value),
        "users_table": [{"users": r.users, "per_user_tokens_per_s": r.per_user.value,
                         "total_tokens_per_s": r.total.value, "limit": r.limit,
                         "band": _band_json(r.band, e, r.no_band)} for r in e.users_rows],
        "figures": {name: f.to_dict() for name, f in fig.items()},
    }


# --- the tables ------------------------------------------------------------------------------


def print_tables(path: Path, card: ModelCard, results: list[Estimate], measured: Measured | None = None,
                 evidence: bool = False) -> None:
    """One Rich table per profile; file and profile text is shown literally (never as markup)."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from walkthrough.costs.estimate import rows
    from walkthrough.costs.memory_bar import memory_bar
    from walkthrough.render.memory_bar_view import memory_bar_view
    from walkthrough.textsafe import safe_text

    console = Console()
    title = Text("estimate for ") + safe_text(card.name or path.name, "bold")
    console.print(title + safe_text(f"  ({card.architecture}, {path.name})"))
    for e in results:
        hw = e.hardware
        table = Table(title=safe_text(f"{hw.name} [{hw.id}]", "bold"), title_justify="left", expand=False)
        table.add_column("", no_wrap=True)
        table.add_column("value", justify="right", no_wrap=True)
        table.add_column("why")
        for label, value, why in rows(e):
            table.add_row(Text(label), Text(value), Text(why, style="dim"))
        console.print(table)
        console.print(memory_bar_view(memory_bar(e.memory, hw), min(console.width, 100) - 1, f" ({hw.id})"))
        if measured is not None:
            _print_measured(console, e, measured)
        if hw.compute_basis == "peak" and e.fits and e.prefill.band is None:
            console.print(Text("  compute is a peak figure: prefill times are a lower bound", style="dim"))
        if evidence:
            _print_evidence(console, card, e)


def _print_evidence(console: Console, card: ModelCard, e: Estimate) -> None:
    from rich.text import Text

    runs = evidence_runs(card, e)
    if not runs:
        console.print(Text("  no measured runs behind this profile's figures (no backend family, or it does not fit)",
                           style="dim"))
        return
    console.print(Text(f"  nearest measured runs ({runs[0].family}):"))
    for r in runs:
        depth = f" @ depth {r.depth:,}" if r.depth else ""
        console.print(Text(f"    {r.machine.id}, {r.model.id} {r.quant}, {r.test} {r.n}{depth}: "
                           f"{r.tokens_per_s:,.1f} tokens/s ({r.bytes_per_token / 1e9:.2f} GB read per token)"))
        console.print(Text(f"      {r.source}, {r.date}", style="dim"))


def _print_measured(console: Console, e: Estimate, measured: Measured) -> None:
    from walkthrough.commands.bench import comparison_table
    from walkthrough.costs.measured import compare, comparison_title

    console.print(comparison_table(comparison_title(e.hardware, measured),
                                   compare(e, measured)))
