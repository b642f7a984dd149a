"""Decode and prefill predictions for a hardware profile from the fitted timing model, with their error band.

A profile takes part when it names its backend family (`backend` in hardware.json);
if it also names a machine of the corpus (`machine`), that machine's own factor
(from its measured runs) scales the family's fit, and its sourced peak compute is
used unless the profile's compute is a spec-sheet peak itself (the kind the model
was fitted with). The bandwidth is always the profile's, the one its ceiling uses. A profile without a backend,
an SRAM profile or a phase its family has no runs for gets None: the caller falls
back to the roofline and says the figure has no band.

The band is the family's leave-one-machine-out error (`timing.Phase.band`), e.g.
"±19%: backend CUDA, 79 runs (12 machines)". `evidence` lists the measured runs
nearest to a request: same family, closest in bytes read per token and bandwidth.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from walkthrough.costs import timing
from walkthrough.costs.corpus import FAMILIES, Run, bundled
from walkthrough.costs.hardware import Profile


@dataclass(frozen=True)
class Band:
    """How far a fitted figure may be off: the family's error on machines it was not fitted on."""

    family: str
    phase: str  # "decode" or "prefill"
    fraction: float | None  # the band, +/-; None: too few runs to give one
    runs: int
    machines: int
    machine_runs: int = 0  # runs of this very machine behind its factor
    basis: str = ""  # what the runs are when they are not a backend family's corpus runs
    outside: str = ""  # why the band does not hold for this request: a model outside the runs behind it

    def describe(self) -> str:
        """E.g. '±19%: backend CUDA, 79 runs (12 machines)'."""
        runs = (f"{self.basis}, {self.runs} runs" if self.basis else
                f"backend {self.family}, {self.runs} {self.phase} runs ({self.machines} machines)")
        own = f"; scaled to this machine's {self.machine_runs} measured runs" if self.machine_runs else ""
        if self.outside:
            return f"no band: {self.outside}"
        if self.fraction is None:
            return f"no band: {runs}, too few to say how far off{own}"
        return f"±{self.fraction * 100:.0f}%: {runs}{own}"


def family(hw: Profile) -> str | None:
    """The profile's backend family if the timing model knows it."""
    return hw.backend if hw.backend in FAMILIES and hw.memory_kind != "sram" else None


def hardware(hw: Profile) -> timing.Hardware:
    """Spec figures to divide by: the profile's bandwidth (the one its ceiling divides by too), and compute at
    the spec-sheet peak the fit was made with: the profile's when it is a peak, else that of the corpus machine
    the profile names (None without one: no prefill prediction). A user profile that names a corpus machine
    but gives another bandwidth is that machine with another memory, not a decode faster than its ceiling."""
    machine = bundled().machines.get(hw.machine) if hw.machine else None
    if hw.compute_basis == "peak":
        return timing.Hardware(hw.bandwidth, hw.compute)
    return timing.Hardware(hw.bandwidth, machine.compute if machine is not None else None)


def _phase(fit: timing.FamilyFit, phase: str) -> timing.Phase:
    return fit.decode if phase == "decode" else fit.prefill


def _factor(fit: timing.FamilyFit, hw: Profile, phase: str) -> tuple[float, int]:
    return _phase(fit, phase).machine_factors.get(hw.machine, (1.0, 0)) if hw.machine else (1.0, 0)


def band(hw: Profile, phase: str) -> Band | None:
    fam = family(hw)
    if fam is None:
        return None
    fit = timing.calibrate()[fam]
    p = _phase(fit, phase)
    return Band(fam, phase, p.band, p.runs, p.machines, _factor(fit, hw, phase)[1])


EXTRAPOLATION = 4.0  # a model reading this many times less or more per token than every run of its family's
# phase is outside what the fit was measured on: its figure is the fit extrapolated, with no band


def within_runs(b: Band, shape: timing.Shape) -> Band:
    """`b`, or `b` without its fraction when the model reads far less or far more per token than every run of
    the family's phase (a 135M model against CPU runs of 3B and up: the fixed costs per layer, fitted on big
    models, are then most of the prediction)."""
    test = "tg" if b.phase == "decode" else "pp"
    reads = [r.bytes_per_token for r in bundled().runs if r.family == b.family and r.test == test]
    if not reads or shape.weight_bytes <= 0:
        return b
    low, high = min(reads), max(reads)
    if low / EXTRAPOLATION <= shape.weight_bytes <= high * EXTRAPOLATION:
        return b
    side, edge = ("less", low) if shape.weight_bytes < low else ("more", high)
    return replace(b, fraction=None, outside=(
        f"extrapolated: this model reads {_mb(shape.weight_bytes)} per token, far {side} than any of the "
        f"{b.runs} {b.phase} runs of backend {b.family} ({_mb(edge)} the {'least' if side == 'less' else 'most'})"))


def _mb(nbytes: float) -> str:
    return f"{nbytes / 1e6:,.0f} MB" if nbytes >= 1e6 else f"{nbytes / 1e3:,.0f} kB"


def decode_rate(shape: timing.Shape, hw: Profile, context: float) -> tuple[float, Band] | None:
    """Fitted tokens/s of one stream at `context` cached positions, or None (see the module docstring)."""
    b = band(hw, "decode")
    if b is None or b.runs == 0:
        return None
    b = within_runs(b, shape)
    fit = timing.calibrate()[b.family]
    factor, _ = _factor(fit, hw, "decode")
    return timing.decode_rate(fit, shape, hardware(hw), context) * factor, b


def prefill_seconds(shape: timing.Shape, hw: Profile, n: int, ubatch: int) -> tuple[float, Band] | None:
    """Fitted seconds to read an n-token prompt from an empty cache, or None."""
    b = band(hw, "prefill")
    spec = hardware(hw)
    if b is None or b.runs == 0 or spec.compute is None or n <= 0:
        return None
    b = within_runs(b, shape)
    fit = timing.calibrate()[b.family]
    factor, _ = _factor(fit, hw, "prefill")
    seconds = timing.prefill_seconds(fit, shape, spec, n, 0, ubatch) / factor
    return (seconds, b) if seconds > 0 else None


def evidence(shape: timing.Shape, hw: Profile, k: int = 5) -> list[Run]:
    """The k measured runs of the profile's family nearest to this request: this very machine first,
    then by distance in log bytes read per token plus log bandwidth (plus 1 when one is MoE and the other
    dense)."""
    fam = family(hw)
    if fam is None:
        return []
    spec = hardware(hw)

    def distance(r: Run) -> tuple[bool, float]:
        near = abs(math.log(r.bytes_per_token / max(shape.weight_bytes, 1.0)))
        near += abs(math.log(r.machine.bandwidth / spec.bandwidth))
        near += 1.0 if bool(r.model.expert_calls) != bool(shape.expert_calls) else 0.0  # MoE beside MoE
        return (r.machine.id != hw.machine, near)

    return sorted(bundled().family_runs(fam), key=distance)[:k]
