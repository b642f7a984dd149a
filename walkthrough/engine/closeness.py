"""How closely the numpy engine's numbers follow llama.cpp's, as measured on real trained files.

`python tests/bench/real_weights.py FILE --record` compares the engine with llama.cpp on the default
request (see that script) and stores its figures in `walkthrough/assets/closeness.json`, one entry
per file. The File stage shows the entry of the opened file (same name and size), or else the entry
of a measured file that stores its weights in the same types, named, so what is shown is always a
measurement and says of which file. Nothing here runs llama.cpp.

Example: for SmolLM2-135M-Instruct.Q4_1.gguf (Q4_1, Q8_0, F32), `note(...)` reads "The numpy engine
against llama.cpp 0.3.36, measured on this file: top-1 agreement 97.3% over 365 positions, ...".
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

RECORDS = Path(__file__).resolve().parents[1] / "assets" / "closeness.json"


@dataclass(frozen=True)
class Measured:
    """One file's figures from tests/bench/real_weights.py."""

    model: str  # file name
    size: int  # bytes
    types: tuple[str, ...]  # stored weight types, sorted
    positions: int
    top1: float
    kl_mean: float
    kl_max: float
    logit_gap: float
    greedy_agree: int
    greedy_of: int
    chunk_gap: float  # largest logit difference between prefill passes of 512 and of 7 tokens
    llama_cpp: str


def load(path: Path = RECORDS) -> list[Measured]:
    """Every stored measurement (none if the file is absent)."""
    if not path.exists():
        return []
    return [Measured(**{**e, "types": tuple(e["types"])}) for e in json.loads(path.read_text(encoding="utf-8"))]


def record(m: Measured, path: Path = RECORDS) -> None:
    """Store a measurement, replacing an older one of the same file."""
    kept = [e for e in load(path) if (e.model, e.size) != (m.model, m.size)]
    entries = [asdict(e) for e in sorted(kept + [m], key=lambda e: e.model)]
    path.write_text(json.dumps(entries, indent=1) + "\n", encoding="utf-8")


def find(name: str, size: int, types: set[str], path: Path = RECORDS) -> tuple[Measured, bool] | None:
    """The measurement of this file (True), else of one with the same weight types (False), else None."""
    entries = load(path)
    for e in entries:
        if (e.model, e.size) == (name, size):
            return e, True
    for e in entries:
        if set(e.types) == types:
            return e, False
    return None


def note(name: str, size: int, types: set[str], path: Path = RECORDS) -> str | None:
    """One sentence for the File stage, or None when nothing comparable was measured."""
    found = find(name, size, types, path)
    if found is None:
        return None
    e, same = found
    where = "this file" if same else f"{e.model}, which stores the same weight types"
    chunk = "independent of the chunk size" if e.chunk_gap == 0 else f"within {e.chunk_gap:.2g} across chunk sizes"
    return (
        f"The numpy engine against llama.cpp {e.llama_cpp}, measured on {where}: top-1 agreement {e.top1:.1%} over {e.positions} "
        f"positions, mean KL {e.kl_mean:.1e} (max {e.kl_max:.1e}), largest logit gap {e.logit_gap:.2g}, "
        f"greedy reply identical for {e.greedy_agree} of {e.greedy_of} tokens, logits {chunk} "
        "(tests/bench/real_weights.py)."
    )
