"""SRAM machines: the chips a request needs and the decode ceiling that follows, in the engine and `estimate`.

Expected values are recomputed here from the profile's own figures and the
memory plan's total (not typed in), on the Qwen3.6-35B-A3B-shaped card of the
cost tests and on the bundled tiny model.
"""

from __future__ import annotations

import json
import math

import pytest
from test_cli_errors import run_cli
from test_costs import qwen36_like

from walkthrough.costs.budget import FITS, memory_plan
from walkthrough.costs.estimate import estimate, rows
from walkthrough.costs.hardware import GIB, load_profiles
from walkthrough.costs.sram import as_machine, chips_needed, is_sram, pipeline_fit, pipeline_rate

SRAM_IDS = ("groq-lpu", "cerebras-wse3")


@pytest.fixture(scope="module")
def profiles():
    return load_profiles()


@pytest.mark.parametrize("hw_id", SRAM_IDS)
def test_chips_hold_everything_the_request_needs(hw_id, profiles):
    hw, card = profiles[hw_id], qwen36_like()
    assert is_sram(hw) and all(s in hw.sources for s in ("memory_gib", "bandwidth_gbs", "decode_efficiency"))
    needed = memory_plan(card, hw, 16384).needed.value
    per_chip = (hw.memory_gib - hw.reserved_gib) * GIB
    chips = chips_needed(card, hw, 16384)
    assert chips.value == math.ceil(needed / per_chip)
    assert (chips.value - 1) * per_chip < needed <= chips.value * per_chip  # one chip fewer would not hold it


@pytest.mark.parametrize("hw_id", SRAM_IDS)
def test_the_estimate_runs_on_that_many_chips_at_one_chips_bandwidth(hw_id, profiles):
    hw, card = profiles[hw_id], qwen36_like()
    e = estimate(card, hw, 16384, 8192, 1024)
    assert e.chips is not None and e.memory.verdict == FITS
    assert e.hardware.memory_gib == pytest.approx(hw.memory_gib * e.chips.value)
    assert e.decode.ceiling.value == pytest.approx(hw.bandwidth_gbs * 1e9 / e.decode.bytes_per_token.value)
    # the pipeline fitted on the vendor's published single-user speeds, with its band
    fit = pipeline_fit(e.hardware)
    layers = sum(1 for layer in card.layers if not layer.mtp)
    assert e.decode.tokens_per_s.value == pytest.approx(pipeline_rate(fit, e.hardware, e.decode.bytes_per_token.value,
                                                                      layers))
    assert e.decode.band.runs == len(hw.published) >= 3 and e.decode.band.fraction == pytest.approx(fit.band)
    labels = [r.label for r in rows(e)]
    assert labels[0] == "chips (SRAM)" and "decode ceiling" in labels


def test_other_machines_have_no_chip_count(profiles):
    e = estimate(qwen36_like(), profiles["rtx-4090"], 4096, 2048, 256)
    assert e.chips is None and "chips (SRAM)" not in [r.label for r in rows(e)]


def test_as_machine_adds_up_the_chips_memory(profiles):
    hw = profiles["groq-lpu"]
    assert as_machine(hw, 1).memory_gib == hw.memory_gib
    assert as_machine(hw, 95).memory_gib == pytest.approx(95 * hw.memory_gib)
    assert as_machine(hw, 95).bandwidth_gbs == hw.bandwidth_gbs


def test_estimate_command_prints_the_chips(capsys):
    code, out, err = run_cli(capsys, ["estimate", "--hardware", "groq-lpu", "--json"])
    assert code == 0, err
    [result] = json.loads(out)
    assert result["chips"] >= 1 and result["figures"]["chips"]["formula"] == "ceil(memory needed / SRAM per chip)"
    code, out, err = run_cli(capsys, ["estimate", "--hardware", "cerebras-wse3"])
    assert code == 0 and "chips (SRAM)" in out


@pytest.mark.parametrize("hw_id", SRAM_IDS)
def test_the_pipeline_reproduces_the_published_speeds_it_was_fitted_on(hw_id, profiles):
    hw = profiles[hw_id]
    fit = pipeline_fit(hw)
    assert all(c >= 0 for c in fit.coefficients) and fit.coefficients[1] > 0  # a fixed cost per layer
    for run in hw.published:
        rate = pipeline_rate(fit, hw, run["bytes_per_token"], run["layers"])
        assert abs(rate / run["tokens_per_s"] - 1) <= fit.band  # no run further off than a run left out
        assert run["source"].startswith("https://")


def test_a_small_moe_is_not_hundreds_of_times_faster_than_a_dense_70b(profiles):
    card = qwen36_like()
    for hw_id in SRAM_IDS:
        e = estimate(card, profiles[hw_id], 8192, 2900, 300)
        fastest = max(run["tokens_per_s"] for run in profiles[hw_id].published)
        assert e.decode.tokens_per_s.value < 5 * fastest, hw_id
