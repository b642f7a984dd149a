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
    # a second profile under another id keeps the first
    assert main(["calibrate", "--id", "tiny-here", "--prompt-tokens", "8", "--output-tokens", "3"]) == 0
    assert {"cpu-here", "tiny-here"} <= set(load_profiles())
    assert main(["estimate", "--hardware", "cpu-here", "--json"]) == 0
    capsys.readouterr()


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
