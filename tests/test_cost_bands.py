"""Every modelled figure shows its band or says why it has none: decode, prefill, first token and answer
rows, the users rows, the offload rows, the curves' titles and the race's lanes."""

from __future__ import annotations

import dataclasses

import pytest

from tests.test_costs import qwen36_like, synthetic_card
from walkthrough.costs.curves import decode_curve, ttft_curve, users_curve
from walkthrough.costs.estimate import estimate, rows
from walkthrough.costs.hardware import load_profiles
from walkthrough.costs.race import Lane
from walkthrough.screens.cost_views import curve_table, race_lines

MODELLED = ("prefill", "first token", "answer", "time in system RAM")  # and "decode" (not its ceiling, a bound)


@pytest.fixture(scope="module")
def profiles():
    return load_profiles()


def _modelled_rows(e):
    return [r for r in rows(e) if r.label == "decode" or r.label.startswith(MODELLED) or " user" in r.label]


@pytest.mark.parametrize("hw, context", [("rtx-4090", 131072), ("rtx-4090", 4096), ("laptop-860m", 4096),
                                         ("cpu-here", 4096), ("groq-lpu", 4096)])
def test_every_modelled_row_shows_its_band_or_why_not(profiles, hw, context):
    e = estimate(qwen36_like(), profiles[hw], context, 1024, 128)
    assert e.fits
    for r in _modelled_rows(e):
        if r.value.startswith("does not fit"):
            continue
        assert "±" in r.value or "no band" in r.why, r


def test_users_rows_carry_the_single_user_band(profiles):
    e = estimate(qwen36_like(), profiles["laptop-860m"], 4096, 1024, 128)
    pct = f"±{e.decode.band.fraction * 100:.0f}%"
    users = [r for r in rows(e) if " user" in r.label and "each" in r.value]
    assert len(users) >= 3
    for r in users:
        assert r.value.endswith(pct) and "single-user band" in r.why, r


def test_offload_rows_say_why_they_have_no_band(profiles):
    e = estimate(qwen36_like(), profiles["rtx-4090"], 131072, 1024, 128)
    assert e.decode.slow_share.value > 0 and e.decode.band is None
    by = {r.label.split(" (")[0]: r for r in rows(e)}
    assert "system RAM" in by["decode"].why and "±" in by["decode"].why  # the fast-memory band it starts from
    assert by["time in system RAM"].why.count("no band") == 1
    assert "system RAM" in by["prefill"].why and "no band" in by["prefill"].why
    assert by["answer"].why.startswith("no band")


def test_curves_name_their_band(profiles):
    card, hw = synthetic_card(32, 8e9, 4.85), profiles["rtx-4090"]
    xs = (256, 1024)
    for curve in (decode_curve(card, hw, xs), ttft_curve(card, hw, xs), users_curve(card, hw, 1024)):
        assert "±" in curve.band and "backend CUDA" in curve.band, curve.band
        assert "±" in curve_table(curve).caption
    bare = profiles["cpu-here"]
    for curve in (decode_curve(card, bare, xs), ttft_curve(card, bare, xs), users_curve(card, bare, 1024)):
        assert "no band" in curve.band, curve.band


def test_race_marks_a_modelled_lane_without_band():
    text = race_lines([Lane("a", 0.1, 50.0, 0.2, modelled=True), Lane("b", 0.1, 40.0, None, modelled=True),
                       Lane("you 3/s", 0.0, 3.0)], ["x"] * 4, 0.5, 80).plain.splitlines()
    assert "±20%" in text[2] and "±?" in text[3] and "±" not in text[4]


def test_a_profile_without_a_peak_compute_says_so(profiles):
    hw = profiles["desktop-ddr5"]  # backend CPU, compute measured on a prompt, not a spec-sheet peak
    e = estimate(synthetic_card(32, 8e9, 4.85), hw, 4096, 1024, 128)
    assert e.prefill.band is None and "not the spec-sheet peak" in e.prefill.no_band
    assert "not the spec-sheet peak" in {r.label: r for r in rows(e)}["prefill"].why


def test_a_model_far_outside_the_runs_has_no_band_and_says_it_is_extrapolated(profiles):
    """The band is the error on models like those measured: a model reading far less (or more) per token
    than every run of the family's phase gets the fit extrapolated, without the band."""
    from walkthrough.costs import fitted
    from walkthrough.costs.corpus import bundled
    from walkthrough.costs.estimate import card_shape

    hw = profiles["rtx-4090"]
    big = card_shape(qwen36_like())
    reads = [r.bytes_per_token for r in bundled().runs if r.family == "CUDA" and r.test == "tg"]
    assert min(reads) / fitted.EXTRAPOLATION <= big.weight_bytes <= max(reads) * fitted.EXTRAPOLATION
    _, inside = fitted.decode_rate(big, hw, 200)
    assert inside.fraction is not None and inside.fraction > 0 and not inside.outside
    for scale, side in ((min(reads) / fitted.EXTRAPOLATION / big.weight_bytes / 2, "less"),
                        (max(reads) * fitted.EXTRAPOLATION / big.weight_bytes * 2, "more")):
        shape = dataclasses.replace(big, weight_bytes=big.weight_bytes * scale)
        _, outside = fitted.decode_rate(shape, hw, 200)
        assert outside.fraction is None and f"far {side} than any of the {outside.runs} decode runs" in \
            outside.describe()
