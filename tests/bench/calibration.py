"""How far the timing model's predictions are from measured runs it was not fitted on.

For each backend family, every machine of the corpus is left out in turn, the model
is fitted on the other machines' runs, and the left-out machine's runs are predicted
(leave-one-machine-out). Prints the median and 90th percentile of |predicted /
measured - 1| for decode (tokens/s of tg runs), prefill (tokens/s of pp runs) and
time to first token (seconds of pp runs of 1,024 tokens or more), per family and
over all; the ten runs predicted worst; the same figures with the decode model's first
four terms only (weights, per layer, per expert call, KV bytes: the model before the
attention-compute and linear-attention terms), fitted in the same run; prefill with each
candidate term the model does not have (a cost per expert tile, per Gated DeltaNet
sub-chunk, ...), fitted and held out the same way, with the laptop's prompts; then the source
article's laptop figures (issue 27), held out the same way, and last with the laptop's
own runs in the fit, as `estimate` predicts for its profile.

    python tests/bench/calibration.py
Goals (issue 27): decode median <= 15%, p90 <= 35%; prefill median <= 25%; laptop within 25%.
"""

from __future__ import annotations

import math

import numpy as np

from walkthrough.costs.corpus import FAMILIES, Run, bundled
from walkthrough.costs.timing import (
    DECODE_TERMS,
    PREFILL_TERMS,
    calibrate,
    decode_rate,
    fit_family,
    prefill_seconds,
    run_hardware,
    run_shape,
)


def _stats(errors: list[float]) -> str:
    if not errors:
        return "   (no runs)"
    e = np.abs(errors) * 100
    return f"median {np.median(e):5.1f}%  p90 {np.percentile(e, 90):5.1f}%  ({len(e)} runs)"


def _errors(fits: dict) -> dict[str, list[tuple[float, Run]]]:
    """Leave-one-machine-out errors by phase, each with its run."""
    out: dict[str, list[tuple[float, Run]]] = {"decode": [], "prefill": [], "ttft": []}
    for fit in fits.values():
        for pairs in fit.held_out.values():
            for run, rate in pairs:
                out["decode" if run.test == "tg" else "prefill"].append((rate / run.tokens_per_s - 1, run))
                if run.test == "pp" and run.n >= 1024:
                    out["ttft"].append(((run.n / rate) / run.seconds - 1, run))
    return out


def worst(fits: dict, k: int = 10) -> None:
    """The k runs whose held-out prediction missed most, decode and prefill."""
    errs = _errors(fits)
    for phase in ("decode", "prefill"):
        print(f"\nworst {k} {phase} runs, held out (predicted / measured - 1):")
        for e, r in sorted(errs[phase], key=lambda x: -abs(x[0]))[:k]:
            what = f"{r.model.id} {r.quant} {r.test} {r.n}" + (f" @ {r.depth}" if r.depth else "")
            print(f"  {e:+5.0%}  {r.machine.id:20s} {r.backend:11s} {what:38s} {r.tokens_per_s:8.1f} tokens/s")


def before_after() -> None:
    """Decode with the first four terms only against all of them, both fitted here, held out alike."""
    print("\ndecode, held out: the four-term model against the full one (fitted in this run)")
    for name, terms in (("four terms (before)", DECODE_TERMS[:4]), ("all terms (now)", DECODE_TERMS)):
        errs = [e for e, _ in _errors(calibrate(bundled(), terms))["decode"]]
        print(f"  {name:20s} {_stats(errs)}")


def _sub_chunks(run: Run) -> int:
    """64-token sub-chunks llama.cpp's chunked Gated DeltaNet walks one after another, over all micro-batches."""
    return sum(math.ceil(min(run.ubatch, run.n - i) / 64) for i in range(0, run.n, run.ubatch))


# Prefill terms tried and left out: seconds-like columns of one run (before their fitted coefficient).
CANDIDATES = {
    "expert tile per micro-batch / compute": lambda r: (
        math.ceil(r.n / r.ubatch) * 2 * (r.model.params - r.model.params_active) / r.machine.compute),
    "linear-attention layers x 64-token sub-chunks": lambda r: r.model.recurrent_layers * _sub_chunks(r),
    "linear-attention layers x tokens": lambda r: r.model.recurrent_layers * r.n,
    "linear-attention layers x width x tokens / compute": lambda r: (
        r.model.recurrent_layers * r.model.n_embd * r.n / r.machine.compute),
    "linear-attention layers x micro-batches": lambda r: r.model.recurrent_layers * math.ceil(r.n / r.ubatch),
}


def prefill_candidates() -> None:
    """Held-out prefill with each candidate term added, every family refitted here: over all families and the
    article's laptop's two prompts."""
    print("\nprefill, held out, with one more term (fitted in this run; none is in the model):")
    for name, extra in {"(none)": None, **CANDIDATES}.items():
        fits = {f: fit_family(bundled(), f, extra_prefill=extra) for f in FAMILIES}
        errs = _errors(fits)["prefill"]
        laptop = ", ".join(f"{e:+.0%}" for e, r in errs if r.machine.id == "laptop-860m")
        print(f"  {name:52s} {_stats([e for e, _ in errs])}; laptop {laptop}")


def main() -> None:
    corpus = bundled()
    fits = calibrate()
    print(f"corpus: {len(corpus.runs)} runs, {len({r.machine.id for r in corpus.runs})} machines, "
          f"{len({r.family for r in corpus.runs})} backend families; leave-one-machine-out errors\n")
    every: dict[str, list[float]] = {"decode": [], "prefill": [], "ttft": []}
    laptop = []
    for family, fit in fits.items():
        errs: dict[str, list[float]] = {"decode": [], "prefill": [], "ttft": []}
        for machine, pairs in fit.held_out.items():
            for run, rate in pairs:
                e = rate / run.tokens_per_s - 1
                errs["decode" if run.test == "tg" else "prefill"].append(e)
                if run.test == "pp" and run.n >= 1024:
                    errs["ttft"].append((run.n / rate) / run.seconds - 1)
                if machine == "laptop-860m":
                    laptop.append((run, rate))
        print(f"{family} ({fit.decode.machines} machines with decode runs, {fit.prefill.machines} with prefill)")
        for phase in ("decode", "prefill", "ttft"):
            print(f"  {phase:8s} {_stats(errs[phase])}")
            every[phase] += errs[phase]
        for name, terms, phase in (("decode", DECODE_TERMS, fit.decode), ("prefill", PREFILL_TERMS, fit.prefill)):
            coefs = ", ".join(f"{t} {c:.3g}" for t, c in zip(terms, phase.coefficients))
            band = f"±{phase.band * 100:.0f}%" if phase.band is not None else "no band (too few runs)"
            print(f"    {name} fit: {coefs}; band {band}")
    print("\nall families")
    for phase in ("decode", "prefill", "ttft"):
        print(f"  {phase:8s} {_stats(every[phase])}")
    print("\nthe article's laptop (Radeon 860M), held out:")
    for run, rate in laptop:
        what = f"{run.model.id} {run.test} {run.n}" + (f" @ depth {run.depth}" if run.depth else "")
        miss = rate / run.tokens_per_s - 1
        line = f"  {what:34s} measured {run.tokens_per_s:7.1f} tokens/s, predicted {rate:7.1f} ({miss:+.0%})"
        if run.test == "pp":
            line += f"; first token {run.seconds:.1f} s vs {run.n / rate:.1f} s"
        print(line)


def in_sample(fits: dict, machine: str = "laptop-860m") -> None:
    """The machine's runs predicted as `estimate` predicts for its profile: its family's fit on every run,
    times the machine's own factor."""
    print(f"\n{machine} with its own runs in the fit (what estimate uses for its profile):")
    for run in bundled().runs:
        if run.machine.id != machine:
            continue
        fit = fits[run.family]
        shape, hw = run_shape(run), run_hardware(run)
        if run.test == "tg":
            factor = fit.decode.machine_factors.get(machine, (1.0, 0))[0]
            rate = decode_rate(fit, shape, hw, run.depth + run.n / 2) * factor
        else:
            factor = fit.prefill.machine_factors.get(machine, (1.0, 0))[0]
            rate = run.n / (prefill_seconds(fit, shape, hw, run.n, run.depth, run.ubatch) / factor)
        what = f"{run.model.id} {run.test} {run.n}"
        print(f"  {what:34s} measured {run.tokens_per_s:7.1f} tokens/s, predicted {rate:7.1f} "
              f"({rate / run.tokens_per_s - 1:+.0%})")


if __name__ == "__main__":
    main()
    worst(calibrate())
    before_after()
    prefill_candidates()
    in_sample(calibrate())
