"""This machine, measured: the bandwidth and compute one engine reaches here, its fixed cost per layer, as a profile.

`measure(model, prompt, output)` times one request (`measured.time_request`:
spread-out prompt ids, greedy decoding) twice, keeps the faster, and reads from
its Steps the bytes the decode passes read and the FLOPs the prefill passes did:

- bandwidth reached = decode bytes / decode seconds (first-use work left out);
- compute reached = prefill FLOPs / prefill seconds;
- with a second model of another size (`fixed_costs`), the decode seconds per
  token of both solve t = bytes / bandwidth + layers x fixed cost per layer
  (non-negative least squares, `timing.nnls`), separating the two.

`profile_entry` turns a measurement into a hardware profile (the format of
hardware.json) whose every figure names the run it came from; `walkthrough
calibrate` writes it to `calibrated_path()` (the user's config folder), a file of
its own that it creates and may replace, never the user's hardware.json.

Example: 16 decode passes reading 0.25 GB each in 2.0 s -> 2.0 GB/s reached.
"""

from __future__ import annotations

import datetime
import math
import os
from dataclasses import dataclass

import numpy as np

from walkthrough.costs.measured import measure as measure_steps
from walkthrough.costs.measured import spread_ids
from walkthrough.costs.timing import nnls
from walkthrough.engine.protocol import Engine

GIB = 1 << 30
WRITTEN_BY = "walkthrough calibrate"


@dataclass(frozen=True)
class MachineRun:
    """What one engine reached on this machine for one model."""

    model: str  # the file's name
    engine: str
    layers: int
    decode_seconds_per_token: float
    decode_bytes_per_token: float
    prefill_tokens: int
    prefill_seconds: float
    prefill_flops: float

    @property
    def bandwidth(self) -> float:
        """Bytes per second the decode passes reached."""
        return self.decode_bytes_per_token / self.decode_seconds_per_token

    @property
    def compute(self) -> float:
        """FLOPs per second the prefill passes reached."""
        return self.prefill_flops / self.prefill_seconds


def measure(model: Engine, name: str, prompt_tokens: int, output_tokens: int, repeats: int = 2) -> MachineRun:
    """Time one request `repeats` times on a loaded model; the fastest decode and prefill are kept."""
    from walkthrough.engine.engines import new_session
    from walkthrough.engine.sampler import Sampler

    best: MachineRun | None = None
    for _ in range(repeats):
        ids = spread_ids(prompt_tokens, model.config.n_vocab, model.config.end_ids)
        session = new_session(model, n_ctx=prompt_tokens + output_tokens)
        steps = list(session.prefill(ids, chunk=prompt_tokens, sampler=Sampler.greedy()))
        steps += list(session.decode(Sampler.greedy(), output_tokens - 1, stop_ids=[]))
        m = measure_steps(steps)
        prefill = [s for s in steps if s.phase == "prefill"]
        run = MachineRun(name, m.engine, model.config.n_layers, m.seconds_per_token, m.decode_bytes / m.decode_passes,
                         m.prompt_tokens, m.prefill_seconds, float(sum(s.flops for s in prefill)))
        if best is None:
            best = run
        else:
            best = MachineRun(name, m.engine, run.layers,
                              min(best.decode_seconds_per_token, run.decode_seconds_per_token),
                              run.decode_bytes_per_token, run.prefill_tokens,
                              min(best.prefill_seconds, run.prefill_seconds), run.prefill_flops)
    assert best is not None
    return best


def fixed_costs(runs: list[MachineRun]) -> tuple[float, float] | None:
    """(bandwidth B/s, seconds per layer) solving t = bytes / bandwidth + layers x c over the runs (bandwidth
    inf when the fixed costs explain all the time); None with fewer than two runs of different sizes (one run
    cannot tell the two apart)."""
    if len({(r.decode_bytes_per_token, r.layers) for r in runs}) < 2:
        return None
    a = np.array([[r.decode_bytes_per_token / r.decode_seconds_per_token, r.layers / r.decode_seconds_per_token]
                  for r in runs])  # each row: (bytes, layers) / t, so a @ (1/bw, c) = 1
    inv_bw, per_layer = nnls(a, np.ones(len(runs)))
    return (1 / inv_bw if inv_bw > 0 else math.inf), per_layer  # inf: the fixed costs explain all the time


def memory_gib() -> float:
    """This machine's memory (the OS's count of physical pages)."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / GIB


def profile_entry(main: MachineRun, others: list[MachineRun], profile_id: str) -> dict:
    """A hardware profile of this machine from the runs, each figure sourced to its measurement."""
    when = datetime.date.today().isoformat()
    mem = round(memory_gib(), 1)
    split = fixed_costs([main, *others])
    run_text = (f"{main.engine} engine, {main.model}: {main.decode_bytes_per_token / 1e6:,.1f} MB read per decoded "
                f"token in {main.decode_seconds_per_token * 1000:,.1f} ms")
    sources = {
        "memory_gib": "this machine: physical pages x page size (os.sysconf)",
        "reserved_gib": "allowance: a tenth of memory (at least 1 GiB) for the OS and other programs",
        "bandwidth_gbs": f"measured by walkthrough calibrate on {when}: {run_text} = "
                         f"{main.bandwidth / 1e9:.3g} GB/s reached",
        "decode_efficiency": "1.0: bandwidth_gbs is already what decoding reached here, not a peak",
        "compute_tflops": f"measured by walkthrough calibrate on {when}: {main.prefill_flops / 1e9:,.1f} GFLOP of "
                          f"a {main.prefill_tokens}-token prefill in {main.prefill_seconds:.2f} s",
    }
    calibration = {
        "written_by": WRITTEN_BY, "date": when, "engine": main.engine,
        "runs": [{"model": r.model, "layers": r.layers, "decode_bytes_per_token": r.decode_bytes_per_token,
                  "decode_seconds_per_token": r.decode_seconds_per_token, "prefill_tokens": r.prefill_tokens,
                  "prefill_seconds": r.prefill_seconds, "prefill_flops": r.prefill_flops}
                 for r in (main, *others)],
        "bandwidth_without_fixed_costs_gbs": split[0] / 1e9 if split and math.isfinite(split[0]) else None,
        "seconds_per_layer": split[1] if split else None,
    }
    return {
        "id": profile_id,
        "name": f"This machine, measured by walkthrough calibrate ({main.engine} engine, {when})",
        "memory_gib": mem, "memory_kind": "system", "reserved_gib": max(1.0, round(mem / 10, 1)),
        "bandwidth_gbs": main.bandwidth / 1e9, "decode_efficiency": 1.0,
        "compute_tflops": main.compute / 1e12, "compute_precision": f"what the {main.engine} engine multiplies in",
        "compute_basis": "measured", "host": None, "sources": sources, "calibration": calibration,
    }
