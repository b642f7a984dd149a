"""`walkthrough estimate` on every reference fixture: JSON fields, tables, and one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from gguf.constants import GGUFValueType
from hostile_support import with_metadata

from walkthrough.cli import main
from walkthrough.costs.hardware import load_profiles
from walkthrough.inspect.card import build_card
from walkthrough.inspect.gguf import open_gguf
from walkthrough.inspect.locate import BUNDLED_MODEL

REQUIRED = ("hardware", "bytes_per_token", "decode_tokens_per_s_ceiling", "decode_tokens_per_s",
            "prefill_tokens_per_s", "ttft_s", "answer_s", "memory_needed_gb", "fits")


@pytest.fixture(autouse=True)
def no_user_config(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))


def fixtures(fixtures_dir: Path) -> list[Path]:
    paths = sorted((fixtures_dir / "reference").glob("*.gguf"))
    assert paths
    return paths


def run_json(capsys, *argv: str) -> list[dict]:
    assert main(["estimate", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_json_on_every_fixture(fixtures_dir, capsys):
    n_profiles = len(load_profiles())
    for path in fixtures(fixtures_dir):
        card = build_card(open_gguf(path))
        out = run_json(capsys, str(path), "--context", "200", "--prompt-tokens", "100", "--output-tokens", "50")
        assert len(out) == n_profiles
        for row in out:
            for key in REQUIRED:
                assert key in row, key
            assert set(row["hardware"]) >= {"name", "memory_gb", "bandwidth_gbs", "compute_tflops"}
            assert row["fits"] is True
            # decode is measured at the answer's middle: prompt + output / 2 positions
            middle = 100 + 50 // 2
            assert row["bytes_per_token"] == card.bytes_per_token + card.kv_bytes(middle) + 2 * card.state_bytes
            ceiling = row["hardware"]["bandwidth_gbs"] * 1e9 / row["bytes_per_token"]
            assert row["decode_tokens_per_s_ceiling"] == pytest.approx(ceiling)
            assert row["decode_tokens_per_s"] < row["decode_tokens_per_s_ceiling"] or \
                row["hardware"]["decode_efficiency"] == 1
            assert row["ttft_s"] == pytest.approx(100 / row["prefill_tokens_per_s"])
            assert row["answer_s"] > row["ttft_s"]
            expected = (sum(card.bytes_by_type.values()) + card.kv_bytes(200) + card.state_bytes) / 1e9
            assert row["memory_needed_gb"] > expected  # plus the compute buffers
            assert row["figures"]["decode_ceiling"]["formula"] == "bandwidth / bytes per token"


def test_kv_type_and_context_change_the_memory(fixtures_dir, capsys):
    path = str(fixtures(fixtures_dir)[0])
    base = run_json(capsys, path, "--hardware", "h100", "--context", "128")[0]
    longer = run_json(capsys, path, "--hardware", "h100", "--context", "256")[0]
    q8 = run_json(capsys, path, "--hardware", "h100", "--context", "256", "--kv-type", "q8_0")[0]
    card = build_card(open_gguf(path))
    assert longer["memory_needed_gb"] - base["memory_needed_gb"] == pytest.approx(card.kv_bytes(128) / 1e9)
    assert q8["memory_needed_gb"] < longer["memory_needed_gb"]
    assert (base["context"], q8["kv_type"]) == (128, "q8_0")


def test_users_rows(fixtures_dir, capsys):
    path = str(fixtures(fixtures_dir)[0])
    row = run_json(capsys, path, "--hardware", "dgx-spark", "--users", "3")[0]
    counts = [r["users"] for r in row["users_table"]]
    assert 3 in counts and counts == sorted(counts)
    first, last = row["users_table"][0], row["users_table"][-1]
    assert last["total_tokens_per_s"] > first["total_tokens_per_s"]
    assert last["per_user_tokens_per_s"] < first["per_user_tokens_per_s"]


def test_table_names_each_profile(fixtures_dir, capsys):
    path = str(fixtures(fixtures_dir)[-1])
    assert main(["estimate", path]) == 0
    out = capsys.readouterr().out
    for profile in load_profiles().values():
        assert f"[{profile.id}]" in out
    assert "decode ceiling" in out and "first token" in out


def test_unknown_hardware_lists_the_names(fixtures_dir, capsys):
    assert main(["estimate", str(fixtures(fixtures_dir)[0]), "--hardware", "nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert "'nope'" in err and "rtx-4090" in err and "laptop-860m" in err


def test_malformed_hardware_file_is_one_line(fixtures_dir, tmp_path, capsys):
    bad = tmp_path / "hw.json"
    bad.write_text('{"profiles": [{"id": "x"}]}')
    assert main(["estimate", str(fixtures(fixtures_dir)[0]), "--hardware-file", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and str(bad) in err


def test_hardware_file_profile_is_estimated(fixtures_dir, tmp_path, capsys):
    mine = tmp_path / "hw.json"
    mine.write_text(json.dumps([{"id": "mine", "name": "Mine", "memory_gib": 8, "memory_kind": "system",
                                 "reserved_gib": 1, "bandwidth_gbs": 10, "decode_efficiency": 0.5,
                                 "compute_tflops": 0.1, "host": None}]))
    out = run_json(capsys, str(fixtures(fixtures_dir)[0]), "--hardware-file", str(mine), "--hardware", "mine")
    assert out[0]["hardware"]["id"] == "mine"
    assert out[0]["decode_tokens_per_s"] == pytest.approx(out[0]["decode_tokens_per_s_ceiling"] * 0.5)


@pytest.mark.parametrize(
    "argv",
    [
        ["--context", "100000"],  # beyond the fixtures' trained 256 tokens
        ["--prompt-tokens", "200", "--output-tokens", "100"],
        ["--users", "0"],
        ["--context", "-5"],
    ],
)
def test_bad_sizes_are_one_line_errors(fixtures_dir, capsys, argv):
    assert main(["estimate", str(fixtures(fixtures_dir)[0]), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("walkthrough: error:") and err.count("\n") == 0


def test_missing_model_file(tmp_path, capsys):
    assert main(["estimate", str(tmp_path / "absent.gguf")]) == 2
    assert "absent.gguf" in capsys.readouterr().err


def test_default_model_is_the_bundled_one(capsys):
    code = main(["estimate", "--hardware", "cpu-here", "--json"])
    captured = capsys.readouterr()
    if BUNDLED_MODEL.is_file():
        assert code == 0
        assert json.loads(captured.out)[0]["model"]["path"] == str(BUNDLED_MODEL)
    else:
        assert code == 2
        assert "bundled model" in captured.err and captured.err.strip().count("\n") == 0


def test_every_speed_carries_its_band_or_says_why_not(fixtures_dir, capsys):
    path = fixtures(fixtures_dir)[0]
    for row in run_json(capsys, str(path), "--context", "200", "--prompt-tokens", "100", "--output-tokens", "50"):
        hw = row["hardware"]["id"]
        users = [(f"users {u['users']}", u["band"]) for u in row["users_table"] if u["limit"] != "memory"]
        assert users, hw
        for key, band in [("decode_band", row["decode_band"]), ("prefill_band", row["prefill_band"]), *users]:
            assert band["text"], (hw, key)
            if band["fraction"] is None:
                assert band["text"].startswith("no band:"), (hw, key)
            else:
                assert band["text"].startswith((f"±{band['fraction'] * 100:.0f}%: backend {band['family']}",
                                                f"±{band['fraction'] * 100:.0f}%: {hw} published single-user speeds"))
    bands = {r["hardware"]["id"]: r["decode_band"] for r in run_json(capsys, str(path))}
    assert bands["rtx-4090"]["family"] == "CUDA" and bands["rtx-4090"]["machine_runs"] >= 2
    assert bands["cpu-here"]["fraction"] is None and "names no backend" in bands["cpu-here"]["text"]


def test_evidence_lists_nearest_measured_runs_with_sources(fixtures_dir, capsys):
    path = str(fixtures(fixtures_dir)[0])
    out = run_json(capsys, path, "--hardware", "laptop-860m", "--evidence")
    runs = out[0]["evidence"]
    assert len(runs) == 5
    assert runs[0]["machine"] == "laptop-860m"  # this very machine's runs first
    assert all(r["source"].startswith(("https://", "seed:")) for r in runs)
    assert main(["estimate", path, "--hardware", "laptop-860m", "--evidence"]) == 0
    text = capsys.readouterr().out
    assert "nearest measured runs (ROCm/Vulkan)" in text and "seed:002" in text


def _refuse_constant(name: str) -> None:
    raise AssertionError(f"not strict JSON: {name}")


def test_json_is_strict_even_when_a_rate_is_infinite(tmp_path, capsys):
    """A file with no layers reads almost nothing per token: its rates are infinite on some machines, and JSON holds
    them as null (never Infinity, which strict parsers refuse)."""
    path = with_metadata(tmp_path, "no-layers.gguf", {"llama.block_count": (GGUFValueType.UINT32, 0)})
    assert main(["estimate", str(path), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out, parse_constant=_refuse_constant)
    assert any(row["decode_tokens_per_s"] is None for row in rows)
