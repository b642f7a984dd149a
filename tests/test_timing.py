"""The timing model: its fit recovers known costs, keeps them >= 0, and leaves each machine out for its errors."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest

from walkthrough.costs import corpus, timing


def test_nnls_recovers_non_negative_coefficients_and_clips_the_rest() -> None:
    rng = np.random.default_rng(0)
    a = rng.uniform(0.1, 1.0, size=(40, 3))
    truth = np.array([2.0, 0.0, 0.5])
    assert timing.nnls(a, a @ truth) == pytest.approx(truth, abs=1e-9)
    # a target only a negative coefficient would fit: that coefficient is held at 0
    x = timing.nnls(a, a @ np.array([1.0, -1.0, 0.0]))
    assert np.all(x >= 0) and x[1] == 0


def _synthetic(true_decode: np.ndarray) -> corpus.Corpus:
    """The bundled corpus with every decode run's speed replaced by what `true_decode` predicts."""
    c = corpus.load()
    runs = []
    for r in c.runs:
        if r.test == "tg":
            seconds = timing.decode_terms(timing.run_shape(r), timing.run_hardware(r), r.depth + r.n / 2) @ true_decode
            r = dataclasses.replace(r, tokens_per_s=1 / seconds)
        runs.append(r)
    return corpus.Corpus(c.machines, c.models, runs)


def test_the_fit_finds_the_costs_that_produced_the_runs() -> None:
    truth = np.array([1.3, 40e-6, 15e-6, 2.0, 0.0, 0.0])
    fit = timing.fit_family(_synthetic(truth), "CUDA")
    assert fit.decode.coefficients == pytest.approx(tuple(truth), rel=1e-6, abs=1e-9)
    assert max(abs(e) for e in fit.decode.errors) < 1e-6  # machines left out are predicted exactly too


def test_the_fit_finds_terms_divided_by_compute_despite_their_scale() -> None:
    # a linear-attention cost of 5e6 FLOP-equivalents per layer and channel: its term (layers x width /
    # FLOP/s) is ~1e-8 where the per-layer term is ~30; unscaled least squares took it for rounding noise
    truth = np.array([1.2, 20e-6, 10e-6, 0.0, 90.0, 5e6])
    fit = timing.fit_family(_synthetic(truth), "ROCm/Vulkan")
    assert fit.decode.coefficients == pytest.approx(tuple(truth), rel=1e-6, abs=1e-9)


def test_a_fit_on_some_terms_holds_the_others_at_zero() -> None:
    fit = timing.fit_family(corpus.bundled(), "CUDA", timing.DECODE_TERMS[:2])
    assert all(c == 0 for c in fit.decode.coefficients[2:]) and fit.decode.coefficients[0] > 0


def test_held_out_decode_error_meets_the_issues_goal() -> None:
    # issue 27: leave-one-machine-out |error| over every family's decode runs, median <= 15%, p90 <= 35%
    errors = [e for fit in timing.calibrate().values() for e in fit.decode.errors]
    assert np.median(np.abs(errors)) <= 0.15
    assert np.percentile(np.abs(errors), 90) <= 0.35


def test_a_linear_attention_layer_costs_more_on_a_smaller_gpu() -> None:
    fit = timing.calibrate()["ROCm/Vulkan"]
    run = next(r for r in corpus.bundled().runs if r.model.recurrent_layers and r.test == "tg")
    shape = timing.run_shape(run)
    plain = dataclasses.replace(shape, recurrent_layers=0)
    big, small = timing.Hardware(256e9, 30e12), timing.Hardware(256e9, 6e12)
    lost_big = 1 / timing.decode_rate(fit, shape, big, 0) - 1 / timing.decode_rate(fit, plain, big, 0)
    lost_small = 1 / timing.decode_rate(fit, shape, small, 0) - 1 / timing.decode_rate(fit, plain, small, 0)
    assert lost_big > 0 and lost_small == pytest.approx(5 * lost_big)


def test_errors_come_from_machines_left_out() -> None:
    c = corpus.load()
    fit = timing.fit_family(c, "Metal")
    machine = "m2-ultra-76gpu"
    rest = corpus.Corpus(c.machines, c.models, [r for r in c.runs if r.machine.id != machine])
    without = timing.fit_family(rest, "Metal")
    run, rate = next((r, v) for r, v in fit.held_out[machine] if r.test == "tg")
    expected = timing.decode_rate(without, timing.run_shape(run), timing.run_hardware(run), run.depth + run.n / 2)
    assert rate == pytest.approx(expected)
    assert rate != pytest.approx(timing.decode_rate(fit, timing.run_shape(run), timing.run_hardware(run),
                                                    run.depth + run.n / 2))


def test_a_phase_without_enough_runs_has_no_band() -> None:
    c = corpus.bundled()
    # the CPU prompt runs less one machine's: a fit, but fewer runs or machines than a band needs
    fewer = corpus.Corpus(c.machines, c.models, [r for r in c.runs if r.machine.id != "strix-halo-cpu"])
    cpu = timing.fit_family(fewer, "CPU").prefill
    assert 0 < cpu.runs and (cpu.runs < timing.MIN_RUNS or cpu.machines < timing.MIN_MACHINES)
    assert cpu.band is None and any(c > 0 for c in cpu.coefficients)
    fits = timing.calibrate()
    assert fits["CUDA"].decode.band is not None and fits["CUDA"].decode.band > 0
    full = fits["CPU"].prefill  # 8 published CPU prompt runs on 3 machines: enough for a band
    assert full.runs >= timing.MIN_RUNS and full.machines >= timing.MIN_MACHINES and full.band is not None
    for fit in fits.values():
        assert all(c >= 0 for c in fit.decode.coefficients + fit.prefill.coefficients)


def test_machine_factor_is_the_machines_mean_miss() -> None:
    fit = timing.calibrate()["ROCm/Vulkan"]
    factor, runs = fit.decode.machine_factors["laptop-860m"]
    laptop = [r for r in corpus.bundled().runs if r.machine.id == "laptop-860m" and r.test == "tg"]
    ratios = [r.tokens_per_s / timing.decode_rate(fit, timing.run_shape(r), timing.run_hardware(r), r.depth + r.n / 2)
              for r in laptop]
    assert runs == len(laptop)
    assert factor == pytest.approx(float(np.exp(np.mean(np.log(ratios)))))


def test_the_readme_gives_the_calibration_bench_figures_of_this_corpus() -> None:
    # issue 27: the bench's figures are in the README with the command; they must be this corpus's
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    text = " ".join(readme.split())
    assert "python tests/bench/calibration.py" in text
    c = corpus.bundled()
    errors: dict[str, list[float]] = {"decode": [], "prefill": [], "first token": []}
    for fit in timing.calibrate().values():
        for pairs in fit.held_out.values():
            for run, rate in pairs:
                errors["decode" if run.test == "tg" else "prefill"].append(abs(rate / run.tokens_per_s - 1))
                if run.test == "pp" and run.n >= 1024:
                    errors["first token"].append(abs((run.n / rate) / run.seconds - 1))
    assert f"{len(c.runs)} published runs ({len({r.machine.id for r in c.runs})} machines)" in text
    shown = dict(re.findall(r"(decode|prefill|first token) median (\d+\.\d)%", text))
    assert set(shown) == set(errors)
    for phase, errs in errors.items():
        assert shown[phase] == f"{np.median(errs) * 100:.1f}", phase
    p90 = re.search(r"decode median [\d.]+%, p90 (\d+\.\d)%", text)
    assert p90 and p90.group(1) == f"{np.percentile(errors['decode'], 90) * 100:.1f}"


def test_a_candidate_prefill_term_is_fitted_beside_the_others() -> None:
    # the calibration bench tries terms the model lacks: prompt times made with a known extra cost per
    # linear-attention layer and token are fitted back to it, and the other coefficients with it
    truth, extra_cost = np.array([1.5, 0.0, 3.0, 0.0, 8.0, 0.0]), 2e-4

    def extra(r: corpus.Run) -> float:
        return r.model.recurrent_layers * r.n

    c = corpus.load()
    runs = []
    for r in c.runs:
        if r.test == "pp" and r.machine.compute is not None:
            x = timing.prefill_terms(timing.run_shape(r), timing.run_hardware(r), r.n, r.depth, r.ubatch)
            r = dataclasses.replace(r, tokens_per_s=r.n / (x @ truth + extra_cost * extra(r)))
        runs.append(r)
    fit = timing.fit_family(corpus.Corpus(c.machines, c.models, runs), "ROCm/Vulkan", extra_prefill=extra)
    assert fit.prefill.coefficients == pytest.approx((*truth, extra_cost), rel=1e-6, abs=1e-9)
    without = timing.fit_family(corpus.Corpus(c.machines, c.models, runs), "ROCm/Vulkan")
    assert len(without.prefill.coefficients) == len(timing.PREFILL_TERMS)
