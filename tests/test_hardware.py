"""Hardware profiles: the bundled file (every figure sourced), user files, and malformed files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from walkthrough.costs.hardware import HardwareFileError, bundled_path, load_profiles, pick
from walkthrough.errors import WalkthroughError

REQUIRED_KINDS = ("laptop-860m", "desktop-ddr5", "rtx-4090", "rtx-5090", "m4-max", "strix-halo", "dgx-spark",
                  "h100", "h200", "cpu-here")
NUMBERS = ("memory_gib", "reserved_gib", "bandwidth_gbs", "decode_efficiency", "compute_tflops")
GOOD = {"id": "my-box", "name": "My box", "memory_gib": 32, "memory_kind": "system", "reserved_gib": 4,
        "bandwidth_gbs": 60, "decode_efficiency": 0.7, "compute_tflops": 1.0, "host": None}


@pytest.fixture(autouse=True)
def no_user_config(tmp_path, monkeypatch):
    """Tests never read the real user's config directory."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))


def write(path: Path, data) -> Path:
    path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
    return path


def test_bundled_profiles_cover_the_issue_and_cite_every_figure():
    profiles = load_profiles()
    for pid in REQUIRED_KINDS:
        assert pid in profiles
    for p in profiles.values():
        assert p.origin == "bundled"
        for name in NUMBERS:
            assert p.sources.get(name), f"{p.id}: no source for {name}"
        assert p.compute_basis in ("measured", "derived", "peak")


def test_bundled_figures_match_the_published_numbers():
    profiles = load_profiles()
    assert profiles["laptop-860m"].bandwidth_gbs == 8000 * 128 / 8 / 1000
    assert (profiles["rtx-5090"].memory_gib, profiles["rtx-5090"].bandwidth_gbs) == (32, 1792)
    assert profiles["rtx-5090"].bandwidth_gbs == 28 * 512 / 8  # 28 Gbps GDDR7 on 512 bits
    assert profiles["rtx-4090"].bandwidth_gbs == 21 * 384 / 8
    assert profiles["m4-max"].bandwidth_gbs == 546
    assert (profiles["h100"].memory_gib, profiles["h100"].bandwidth_gbs) == (80, 3350)
    assert profiles["strix-halo"].bandwidth_gbs == 8000 * 256 / 8 / 1000
    assert profiles["desktop-ddr5"].bandwidth_gbs == 5600 * 2 * 64 / 8 / 1000


def test_measured_compute_is_the_cited_prefill_rate_times_two_params():
    profiles = load_profiles()
    # tokens/s x 2 x parameters, the arithmetic each source states
    assert profiles["rtx-4090"].compute_tflops == pytest.approx(10358.75 * 2 * 8.03e9 / 1e12, abs=0.05)
    assert profiles["dgx-spark"].compute_tflops == pytest.approx(2250.28 * 2 * 7.62e9 / 1e12, abs=0.05)
    assert profiles["dgx-spark"].decode_efficiency == pytest.approx(29.43 * 7.54 * 2**30 / 273e9, abs=0.005)


def test_discrete_gpus_offload_to_their_host():
    profiles = load_profiles()
    assert profiles["rtx-4090"].host.id == "desktop-ddr5"
    assert profiles["rtx-4090"].host.memory_kind == "system"
    assert profiles["rtx-4090"].host.bandwidth_gbs == profiles["desktop-ddr5"].bandwidth_gbs
    assert profiles["m4-max"].host is None


def test_data_file_ships_in_the_package():
    assert bundled_path().is_file()
    assert bundled_path().parent == Path(__file__).resolve().parents[1] / "walkthrough" / "costs"


def test_user_config_file_adds_and_overrides(tmp_path):
    config = tmp_path / "config" / "walkthrough"
    config.mkdir(parents=True)
    override = {**GOOD, "id": "h100", "name": "My H100", "memory_gib": 94}
    write(config / "hardware.json", {"profiles": [GOOD, override]})
    profiles = load_profiles()
    assert profiles["my-box"].origin == str(config / "hardware.json")
    assert profiles["my-box"].bandwidth == 60e9
    assert profiles["h100"].name == "My H100" and profiles["h100"].memory_gib == 94
    assert "rtx-4090" in profiles


def test_hardware_file_may_be_a_list_and_name_a_bundled_host(tmp_path):
    path = write(tmp_path / "hw.json", [{**GOOD, "id": "my-gpu", "memory_kind": "vram", "host": "desktop-ddr5"}])
    profiles = load_profiles(path)
    assert profiles["my-gpu"].host.id == "desktop-ddr5"
    assert profiles["my-gpu"].usable_bytes == (32 - 4) * 2**30


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"bandwidth_gbs": -1}, "bandwidth_gbs"),
        ({"bandwidth_gbs": "fast"}, "bandwidth_gbs"),
        ({"decode_efficiency": 1.5}, "decode_efficiency"),
        ({"memory_kind": "hbm"}, "memory_kind"),
        ({"reserved_gib": 40}, "reserved_gib"),
        ({"host": "nowhere"}, "host"),
        ({"name": ""}, "name"),
        ({"compute_tflops": True}, "compute_tflops"),
        ({"id": "Bad Id!"}, "id"),
        ({"backend": "OpenCL"}, "backend"),
        ({"machine": 7}, "machine"),
    ],
)
def test_malformed_profile_is_one_clear_line(tmp_path, change, field):
    path = write(tmp_path / "hw.json", {"profiles": [{**GOOD, **change}]})
    with pytest.raises(HardwareFileError) as err:
        load_profiles(path)
    message = str(err.value)
    assert "\n" not in message
    assert str(path) in message
    assert f"'{field}'" in message
    assert "fix the file" in message


def test_missing_field_is_named(tmp_path):
    entry = dict(GOOD)
    del entry["compute_tflops"]
    with pytest.raises(HardwareFileError, match="'compute_tflops' must be a number"):
        load_profiles(write(tmp_path / "hw.json", {"profiles": [entry]}))


@pytest.mark.parametrize("text", ['{"profiles": [', "[1, 2]", '{"profiles": 3}', ""])
def test_not_a_profile_file(tmp_path, text):
    path = write(tmp_path / "hw.json", text)
    with pytest.raises(HardwareFileError) as err:
        load_profiles(path)
    assert "\n" not in str(err.value) and str(path) in str(err.value)


def test_missing_hardware_file(tmp_path):
    with pytest.raises(HardwareFileError, match="not found"):
        load_profiles(tmp_path / "absent.json")


def test_pick_unknown_name_lists_the_known_ones():
    profiles = load_profiles()
    with pytest.raises(WalkthroughError) as err:
        pick(profiles, "rtx-9090")
    message = str(err.value)
    assert "rtx-9090" in message and "rtx-4090" in message and "cpu-here" in message
    assert pick(profiles, "h200") == [profiles["h200"]]
    assert pick(profiles, None) == list(profiles.values())


def test_mac_usable_memory_is_the_default_gpu_wired_limit():
    mac = load_profiles()["m4-max"]
    assert mac.usable_bytes <= 0.78 * mac.memory_bytes + 2**30 * 0.1
    assert "iogpu.wired_limit_mb" in mac.sources["reserved_gib"]
