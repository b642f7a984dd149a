"""`walkthrough inspect FILE --block TENSOR[:INDEX] [--json]`: one stored block, decoded, and rounded to other types.

Prints the block's place (tensor, row, columns, file offset), the bits-per-weight
arithmetic of its type, its stored bytes field by field, the decoded fields,
every value with its code (value = step x level + offset), then the same
values rounded to each type gguf.quants can write and to the k-quants (256 consecutive values of the
tensor when the block holds fewer; the caption says which): RMS and largest error, the
outlier effect, and what the tensor and the whole file would weigh at that
type; and the error of every value for a few common types. `--json` prints
the same as one object. Numbers come from `walkthrough.inspect.block` and
`walkthrough.inspect.requant`, tables from `walkthrough.render.block_view`.
"""

from __future__ import annotations

from typing import Any, TextIO

import numpy as np
from rich.console import Console

from walkthrough.inspect.block import Block, parse_block_spec, read_block
from walkthrough.inspect.gguf import GGUFFile
from walkthrough.inspect.requant import (
    OUTLIER_TIMES,
    Rounding,
    file_size_at,
    round_stored_block,
    size_at,
)
from walkthrough.render.block_view import block_heading, block_tables


def run_block(f: GGUFFile, spec: str, *, as_json: bool, out: TextIO) -> int:
    """Read block TENSOR[:INDEX] of an opened file and print it (JSON or tables)."""
    import json

    name, index = parse_block_spec(spec)
    block = read_block(f, name, index)
    rounds = round_stored_block(f, block)
    if as_json:
        out.write(json.dumps(block_json(f, block, rounds), indent=2, allow_nan=False) + "\n")
    else:
        render(f, block, rounds, out=out)
    return 0


def _num(x: float) -> float | None:
    return float(x) if np.isfinite(x) else None


def _floats(a: np.ndarray) -> list[float | None]:
    return [_num(v) for v in np.asarray(a, np.float64).tolist()]


def block_json(f: GGUFFile, block: Block, rounds: list[Rounding]) -> dict[str, Any]:
    """The `--json` object of one block."""
    t = f.tensors[block.tensor]
    d = block.decoded
    return {
        "tensor": block.tensor,
        "type": block.qtype.name,
        "shape": list(t.shape),
        "block": block.index,
        "n_blocks": block.n_blocks,
        "row": block.row,
        "columns": [block.column, block.column + block.block_size],
        "file_offset": block.file_offset,
        "bytes_hex": block.raw.tobytes().hex(),
        "bits_per_weight": {"block_size": block.bits.block_size, "type_size": block.bits.type_size,
                            "by_field": block.bits.by_field, "total": block.bits.total,
                            "explain": block.bits.explain()},
        "fields": {k: (_floats(v) if v.dtype.kind == "f" else np.asarray(v).tolist()) for k, v in d.fields.items()},
        "codes": None if d.codes is None else d.codes.tolist(),
        "levels": None if d.levels is None else d.levels.tolist(),
        "steps": None if d.steps is None else _floats(d.steps),
        "offsets": None if d.offsets is None else _floats(d.offsets),
        "values": _floats(block.values),
        "outlier_times": OUTLIER_TIMES,
        "rounded": [
            {"type": r.qtype.name, "bits_per_weight": r.bits_per_weight, "reason": r.reason or None,
             "values": None if r.values is None else _floats(r.values),
             "errors": None if r.values is None else _floats(r.errors),
             "rms": None if r.values is None else r.rms, "max_error": None if r.values is None else r.max_error,
             "outlier_rest_rms": r.outlier_rms, "clean_rest_rms": r.clean_rms,
             "window": None if r.window is None else {"start": r.window.start, "count": int(r.window.values.size),
                                                      "where": r.window.describe()},
             "tensor_bytes": size_at(t, r.qtype), "file_bytes": file_size_at(f, r.qtype)}
            for r in rounds
        ],
        "tensor_bytes": t.nbytes,
        "file_bytes": f.file_size,
    }


def render(f: GGUFFile, block: Block, rounds: list[Rounding], *, out: TextIO) -> None:
    """The heading and tables of one block (`render.block_view`), fitting 80 columns."""
    console = Console(file=out, markup=False, emoji=False, highlight=False)
    console.print(block_heading(block))
    for table in block_tables(f, block, rounds):
        console.print(table)
