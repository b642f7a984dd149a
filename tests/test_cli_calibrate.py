"""`walkthrough calibrate`: this machine measured into a profile that replaces the typed one, in a file of its own."""

from __future__ import annotations

import json

import pytest
from conftest import FIXTURES_DIR

from walkthrough.cli import main
from walkthrough.costs.calibration import MachineRun, fixed_costs
from walkthrough.costs.hardware import calibrated_path, is_calibrated, load_profiles

SECOND = str(FIXTURES_DIR / "reference" / "ref-qwen2-f32.gguf")  # a model of another size than the bundled one


@pytest.fixture(autouse=True)
def config(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))


def test_fixed_costs_separate_bandwidth_from_the_cost_per_layer() -> None:
    bw, per_layer = 5e9, 200e-6
    runs = [MachineRun(str(i), "numpy", layers, b / bw + layers * per_layer, b, 8, 1.0, 1e9)
            for i, (b, layers) in enumerate(((1e6, 4), (1e8, 30), (4e8, 24)))]
    assert fixed_costs(runs) == pytest.approx((bw, per_layer))
    assert fixed_costs(runs[:1]) is None  # one run cannot tell them apart


def test_calibrate_writes_a_profile_that_replaces_the_typed_one(capsys) -> None:
    assert main(["calibrate", SECOND, "--prompt-tokens", "8", "--output-tokens", "3"]) == 0
    out = capsys.readouterr().out
    assert "GB/s reached" in out and "us per layer per token" in out
    here = load_profiles()["cpu-here"]
    assert is_calibrated(here) and here.origin == str(calibrated_path())
    data = json.loads(calibrated_path().read_text())
    runs = data["profiles"][0]["calibration"]["runs"]
    first = runs[0]
    assert here.bandwidth_gbs == pytest.approx(first["decode_bytes_per_token"] / first["decode_seconds_per_token"] / 1e9)
    assert "measured by walkthrough calibrate" in here.sources["bandwidth_gbs"]
    split = data["profiles"][0]["calibration"]
    if split["bandwidth_without_fixed_costs_gbs"] is not None:  # a loaded machine can leave it unmeasurable
        assert here.decode_split == pytest.approx((split["bandwidth_without_fixed_costs_gbs"] * 1e9,
                                                   split["seconds_per_layer"]))
    # a second profile under another id keeps the first
    assert main(["calibrate", "--id", "tiny-here", "--prompt-tokens", "8", "--output-tokens", "3"]) == 0
    assert {"cpu-here", "tiny-here"} <= set(load_profiles())
    assert main(["estimate", "--hardware", "cpu-here", "--json"]) == 0
    capsys.readouterr()


def _calibrated(tmp_path, per_layer, bandwidth_gbs):
    """A profile as calibrate writes it, with the two-size split given."""
    entry = {"id": "here", "name": "Here", "memory_gib": 16, "memory_kind": "system", "reserved_gib": 2,
             "bandwidth_gbs": 4.0, "decode_efficiency": 1.0, "compute_tflops": 0.05, "compute_basis": "measured",
             "host": None, "calibration": {"seconds_per_layer": per_layer,
                                           "bandwidth_without_fixed_costs_gbs": bandwidth_gbs}}
    path = tmp_path / "hw.json"
    path.write_text(json.dumps({"profiles": [entry]}))
    return load_profiles(path)["here"]


def test_estimates_use_the_measured_cost_per_layer(tmp_path) -> None:
    from walkthrough.costs.estimate import decode, estimate, rows
    from walkthrough.inspect.card import build_card
    from walkthrough.inspect.gguf import open_gguf

    card = build_card(open_gguf(SECOND))
    split, plain = _calibrated(tmp_path, 300e-6, 8.0), _calibrated(tmp_path, None, None)
    d = decode(card, split, 64)
    layers = sum(1 for layer in card.layers if not layer.mtp)
    assert d.tokens_per_s.value == pytest.approx(1 / (d.bytes_per_token.value / 8e9 + layers * 300e-6))
    assert decode(card, plain, 64).tokens_per_s.value == pytest.approx(4e9 / d.bytes_per_token.value)
    e = estimate(card, split, 64, 16, 8)
    by = {r.label: r for r in rows(e)}
    assert "fixed cost per layer" in by["decode"].why and "no band" in by["decode"].why
    users = [r for r in rows(e) if r.label.startswith("2 users")]
    assert users and "no band" in users[0].why  # shared as the roofline shares the measured single-user speed


def test_a_malformed_calibration_is_one_line(tmp_path) -> None:
    from walkthrough.costs.hardware import HardwareFileError

    with pytest.raises(HardwareFileError, match="'calibration' must be an object"):
        _calibrated(tmp_path, -1.0, 8.0)


def test_a_file_it_did_not_write_is_never_replaced(tmp_path, capsys) -> None:
    theirs = calibrated_path()
    theirs.parent.mkdir(parents=True)
    theirs.write_text('{"profiles": []}')
    assert main(["calibrate", "--prompt-tokens", "8", "--output-tokens", "3"]) == 2
    err = capsys.readouterr().err
    assert "was not written by walkthrough calibrate" in err and len(err.strip().splitlines()) == 1
    assert theirs.read_text() == '{"profiles": []}'
    own = tmp_path / "hardware.json"
    own.write_text("{}")
    assert main(["calibrate", "--out", str(own)]) == 2
    assert own.read_text() == "{}"
