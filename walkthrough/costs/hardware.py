"""Hardware profiles: the bundled data file plus the user's own, validated into plain records.

The bundled profiles live in `hardware.json` beside this module, each figure with
its source. Users add or override profiles (same format, matched by `id`) in
`$XDG_CONFIG_HOME/walkthrough/hardware.json` (default `~/.config/...`) or in a
file named with `--hardware-file`. A user profile may leave out `sources`; every
other field is checked, and a malformed file raises a `HardwareFileError` naming
the file, the profile and the field. `backend` (CUDA, Metal, ROCm/Vulkan or CPU)
lets the timing model fitted on measured runs predict for the profile
(`walkthrough.costs.fitted`); `machine` names the corpus machine it is, if any.

Example of a user file:
    {"profiles": [{"id": "my-box", "name": "My box", "memory_gib": 32,
      "memory_kind": "system", "reserved_gib": 4, "bandwidth_gbs": 60,
      "decode_efficiency": 0.7, "compute_tflops": 1.0, "host": null}]}
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from walkthrough.costs.corpus import FAMILIES
from walkthrough.errors import WalkthroughError

GIB = 1 << 30
MEMORY_KINDS = ("vram", "unified", "system", "sram")  # sram: figures of one chip (engine.sram)
COMPUTE_BASES = ("measured", "derived", "peak")
_ID = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
_NUMBERS = ("memory_gib", "reserved_gib", "bandwidth_gbs", "decode_efficiency", "compute_tflops")
_SPLIT = ("seconds_per_layer", "bandwidth_without_fixed_costs_gbs")  # what calibrate measured with two sizes


class HardwareFileError(WalkthroughError):
    """A hardware profile file that cannot be used; the message says which file, profile and field."""


@dataclass(frozen=True)
class Profile:
    """One machine: its memory, how fast it reads it, and how much useful compute it has."""

    id: str
    name: str
    memory_gib: float  # capacity as sold (binary units)
    memory_kind: str  # "vram", "unified", "system" or "sram" (then memory and bandwidth are one chip's)
    reserved_gib: float  # stated allowance for the OS, the driver and other programs
    bandwidth_gbs: float  # theoretical peak, 1e9 bytes/s
    decode_efficiency: float  # share of bandwidth that token generation reaches
    compute_tflops: float  # useful compute for prefill
    compute_precision: str = ""
    compute_basis: str = "measured"
    host: Profile | None = None  # where offloaded layers/experts live (discrete GPUs)
    sources: dict[str, str] = field(default_factory=dict)
    origin: str = "bundled"  # "bundled" or the user file it came from
    backend: str = ""  # backend family for the fitted timing model ("" : none, the roofline alone)
    published: tuple[dict[str, Any], ...] = ()  # SRAM machines: published single-user speeds (engine.sram)
    machine: str = ""  # the corpus machine this profile is (its measured runs scale the fit)
    layer_seconds: float | None = None  # fixed cost per layer per decoded token, measured (walkthrough calibrate)
    fixed_bandwidth_gbs: float | None = None  # the bandwidth measured beside it, without that fixed cost

    @property
    def decode_split(self) -> tuple[float, float] | None:
        """(bandwidth B/s without fixed costs, seconds per layer) when both were measured, else None."""
        if self.layer_seconds is None or not self.fixed_bandwidth_gbs:
            return None
        return self.fixed_bandwidth_gbs * 1e9, self.layer_seconds

    @property
    def memory_bytes(self) -> int:
        return round(self.memory_gib * GIB)

    @property
    def usable_bytes(self) -> int:
        """Memory left for the model after the stated allowance."""
        return max(round((self.memory_gib - self.reserved_gib) * GIB), 0)

    @property
    def bandwidth(self) -> float:
        """Bytes per second."""
        return self.bandwidth_gbs * 1e9

    @property
    def compute(self) -> float:
        """FLOPs per second."""
        return self.compute_tflops * 1e12


def bundled_path() -> Path:
    """The data file shipped in the package."""
    return Path(str(resources.files("walkthrough.costs").joinpath("hardware.json")))


def user_config_path() -> Path:
    """`$XDG_CONFIG_HOME/walkthrough/hardware.json`, or `~/.config/walkthrough/hardware.json`."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "walkthrough" / "hardware.json"


def calibrated_path() -> Path:
    """`$XDG_CONFIG_HOME/walkthrough/calibrated.json`: the profile `walkthrough calibrate` measured and wrote."""
    return user_config_path().with_name("calibrated.json")


def is_calibrated(hw: Profile) -> bool:
    """Whether the profile is this machine as `walkthrough calibrate` measured it."""
    return hw.origin == str(calibrated_path())


def load_profiles(extra_file: str | Path | None = None) -> dict[str, Profile]:
    """Bundled profiles, then `walkthrough calibrate`'s, then the user's config file if present, then
    `extra_file`; later ids win (a calibrated `cpu-here` replaces the bundled one).

    Raises:
        HardwareFileError: a file is unreadable, not JSON, or has a malformed profile.
    """
    raw: dict[str, tuple[dict[str, Any], str]] = {}
    sources = [(bundled_path(), "bundled")]
    calibrated = calibrated_path()
    if calibrated.is_file():
        sources.append((calibrated, str(calibrated)))
    user = user_config_path()
    if user.is_file():
        sources.append((user, str(user)))
    if extra_file is not None:
        sources.append((Path(extra_file), str(extra_file)))
    for path, origin in sources:
        for entry in _read_entries(path, origin):
            raw[entry["id"]] = (entry, origin)
    return _resolve(raw)


def _read_entries(path: Path, origin: str) -> list[dict[str, Any]]:
    where = "the bundled hardware file" if origin == "bundled" else f"hardware file {origin}"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise HardwareFileError(f"{where}: not found; check the path") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise HardwareFileError(f"{where}: cannot be read ({exc}); check the file") from None
    except json.JSONDecodeError as exc:
        raise HardwareFileError(
            f"{where}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}); fix the file"
        ) from None
    except RecursionError:
        raise HardwareFileError(f"{where}: JSON nested too deeply; a profile is one flat object") from None
    entries = data.get("profiles") if isinstance(data, dict) else data
    if not isinstance(entries, list):
        raise HardwareFileError(f'{where}: expected {{"profiles": [...]}} or a list of profiles; fix the file')
    for i, entry in enumerate(entries, 1):
        _check_entry(entry, f"{where}: profile {i}", bundled=origin == "bundled")
    return entries


def check_profile(entry: Any, where: str) -> None:
    """Check one user profile entry (the hardware-file format), or raise a one-line `HardwareFileError`."""
    _check_entry(entry, where, bundled=False)


def _check_entry(entry: Any, where: str, *, bundled: bool) -> None:
    if not isinstance(entry, dict):
        raise HardwareFileError(f"{where}: must be a JSON object; fix the file")
    pid = entry.get("id")
    if not isinstance(pid, str) or not _ID.match(pid):
        raise HardwareFileError(f"{where}: 'id' must be a short lowercase name like \"my-gpu\"; fix the file")
    where = f"{where} ({pid})"

    def fail(name: str, what: str) -> None:
        raise HardwareFileError(f"{where}: '{name}' {what}; fix the file")

    if not isinstance(entry.get("name"), str) or not entry["name"].strip():
        fail("name", "must be a non-empty string")
    for name in _NUMBERS:
        value = entry.get(name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
            fail(name, "must be a number")
        if not math.isfinite(value):
            fail(name, "must be finite (JSON as Python reads it takes Infinity and 1e999)")
    for name in ("memory_gib", "bandwidth_gbs", "compute_tflops"):
        if entry[name] <= 0:
            fail(name, "must be greater than 0")
    if not 0 <= entry["reserved_gib"] < entry["memory_gib"]:
        fail("reserved_gib", "must be at least 0 and less than memory_gib")
    if not 0 < entry["decode_efficiency"] <= 1:
        fail("decode_efficiency", "must be a fraction in (0, 1]")
    if entry.get("memory_kind") not in MEMORY_KINDS:
        fail("memory_kind", f"must be one of {', '.join(MEMORY_KINDS)}")
    if entry.get("compute_basis", "measured") not in COMPUTE_BASES:
        fail("compute_basis", f"must be one of {', '.join(COMPUTE_BASES)}")
    if not isinstance(entry.get("compute_precision", ""), str):
        fail("compute_precision", "must be a string")
    if entry.get("backend", "") not in ("", *FAMILIES):
        fail("backend", f"must be one of {', '.join(FAMILIES)} (or left out)")
    published = entry.get("published", [])
    keys = ("layers", "expert_calls", "bytes_per_token", "tokens_per_s")
    if not isinstance(published, list) or not all(
        isinstance(run, dict) and isinstance(run.get("source"), str)
        and all(isinstance(run.get(k), (int, float)) and not isinstance(run.get(k), bool) and run[k] >= 0 for k in keys)
        and run["tokens_per_s"] > 0 and run["bytes_per_token"] > 0 for run in published
    ):
        fail("published", f"must be a list of runs, each with {', '.join(keys)} (numbers) and a source")
    if not isinstance(entry.get("machine", ""), str):
        fail("machine", "must be the id of a machine of the measured-runs corpus, or left out")
    calibration = entry.get("calibration", {})
    if not isinstance(calibration, dict) or not all(
        calibration.get(k) is None or (isinstance(calibration[k], (int, float)) and not isinstance(calibration[k], bool)
                                       and math.isfinite(calibration[k]) and calibration[k] >= 0)
        for k in _SPLIT
    ):
        fail("calibration", f"must be an object whose {', '.join(_SPLIT)} are numbers >= 0 or null")
    host = entry.get("host")
    if host is not None and not isinstance(host, str):
        fail("host", "must be the id of another profile or null")
    sources = entry.get("sources", {})
    if not isinstance(sources, dict) or not all(isinstance(v, str) for v in sources.values()):
        fail("sources", "must map field names to strings")
    if bundled:
        missing = [n for n in _NUMBERS if not sources.get(n)]
        if missing:
            fail("sources", f"lacks a source for {', '.join(missing)}")


def _resolve(raw: dict[str, tuple[dict[str, Any], str]]) -> dict[str, Profile]:
    """Build Profile records, linking each `host` id to its profile (one level: a host has no host)."""
    plain = {pid: _profile(entry, origin, None) for pid, (entry, origin) in raw.items()}
    profiles = {}
    for pid, (entry, origin) in raw.items():
        host_id = entry.get("host")
        host = None
        if host_id is not None:
            where = "the bundled hardware file" if origin == "bundled" else f"hardware file {origin}"
            if host_id not in plain:
                raise HardwareFileError(f"{where}: profile {pid}: 'host' names unknown profile {host_id!r}; fix the file")
            if host_id == pid:
                raise HardwareFileError(f"{where}: profile {pid}: 'host' cannot be the profile itself; fix the file")
            host = plain[host_id]
        profiles[pid] = _profile(entry, origin, host)
    return profiles


def _profile(entry: dict[str, Any], origin: str, host: Profile | None) -> Profile:
    return Profile(
        id=entry["id"],
        name=entry["name"],
        memory_gib=float(entry["memory_gib"]),
        memory_kind=entry["memory_kind"],
        reserved_gib=float(entry["reserved_gib"]),
        bandwidth_gbs=float(entry["bandwidth_gbs"]),
        decode_efficiency=float(entry["decode_efficiency"]),
        compute_tflops=float(entry["compute_tflops"]),
        compute_precision=entry.get("compute_precision", ""),
        compute_basis=entry.get("compute_basis", "measured"),
        host=host,
        sources=dict(entry.get("sources", {})),
        origin=origin,
        backend=entry.get("backend", ""),
        published=tuple(entry.get("published", ())),
        machine=entry.get("machine", ""),
        layer_seconds=_maybe(entry.get("calibration", {}).get("seconds_per_layer")),
        fixed_bandwidth_gbs=_maybe(entry.get("calibration", {}).get("bandwidth_without_fixed_costs_gbs")),
    )


def _maybe(value: float | None) -> float | None:
    return None if value is None else float(value)


def pick(profiles: dict[str, Profile], name: str | None) -> list[Profile]:
    """All profiles (name None) or the one named; an unknown name lists the known ones.

    Raises:
        WalkthroughError: no profile has that id.
    """
    if name is None:
        return list(profiles.values())
    if name not in profiles:
        raise WalkthroughError(f"unknown hardware {name!r}; choose one of: {', '.join(profiles)}")
    return [profiles[name]]
