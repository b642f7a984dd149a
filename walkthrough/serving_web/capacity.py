"""How many visitors `walkthrough serve` admits at once by default: the memory available now, shared out.

Each visitor gets an app process of its own, which holds Python, Textual and numpy (APP_ALLOWANCE) and,
as it runs the model, the weights the numpy engine dequantizes and caches: WEIGHT_BYTES per parameter,
float64 being the widest it keeps (`ops.linear` multiplies large matrices in float64), at most the
engine's cache bound. The default is the memory available at launch divided by that, at least one.
`--max-visitors N` overrides it.

Example: 8 GiB available, a 135 M-parameter model -> 256 MiB + 1.08 GB = 1.25 GiB a visitor -> 6.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from walkthrough.engine.weights import DEFAULT_CACHE_BYTES

# Python + Textual + numpy + a run's activations of a visitor's app, beside its weights. Measured with
# tests/bench/serve_visitor_memory.py (2 cores, this project's machine): bundled tiny model 76 MiB
# resident after the first screen, peak 100 MiB after a prefill chunk and a clamped 100000x100000 resize;
# SmolLM2-135M Q4_1 111 MiB at the first screen, peak 956 MiB after a prefill chunk (that is, 6.5 bytes
# per parameter of cached weights, under WEIGHT_BYTES). The rest is headroom for longer runs.
APP_ALLOWANCE = 256 << 20
WEIGHT_BYTES = 8  # float64, the widest copy of a weight the numpy engine caches


def available_memory(meminfo: str = "/proc/meminfo") -> int | None:
    """Bytes of memory available to new processes now (Linux MemAvailable), or None where unknown."""
    try:
        with open(meminfo, encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024  # the kernel writes kB, meaning KiB
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def visitor_bytes(tensor_elements: Iterable[int]) -> int:
    """Memory one visitor's app may need: APP_ALLOWANCE + its weight cache (bounded)."""
    return APP_ALLOWANCE + min(WEIGHT_BYTES * sum(tensor_elements), DEFAULT_CACHE_BYTES)


def default_max_visitors(available: int | None, per_visitor: int) -> int:
    """`available // per_visitor`, at least 1; 1 where the available memory is unknown."""
    if available is None or per_visitor <= 0:
        return 1
    return max(1, available // per_visitor)
