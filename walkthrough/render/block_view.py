"""One stored block as Rich tables, shared by `walkthrough inspect --block` and the File stage's block view.

Presentation only: the block is `walkthrough.inspect.block`'s, the rounding
`walkthrough.inspect.requant`'s. `block_tables` returns, in order: the stored
bytes field by field, the decoded fields, every value with its code (value =
step x level + offset), the same values at every type the block can be rounded to
(RMS and largest error, the outlier effect), the tensor's and the whole file's
size at each type, and the error of each value for a few common types. Each
fits 74 columns (80 less the app's box around it).
"""

from __future__ import annotations

import numpy as np
from gguf.constants import GGML_QUANT_SIZES
from gguf.constants import GGMLQuantizationType as Q
from rich import box
from rich.table import Table
from rich.text import Text

from walkthrough.inspect.block import Block
from walkthrough.inspect.gguf import GGUFFile
from walkthrough.inspect.requant import OUTLIER_TIMES, Rounding, file_size_at, size_at
from walkthrough.render.format import human_bytes
from walkthrough.textsafe import safe_text

FLOATS = (Q.F32, Q.F16, Q.BF16)
ERROR_COLUMNS = (Q.F16, Q.Q8_0, Q.Q5_1, Q.Q4_1, Q.Q4_0)  # per-value errors shown
HEX_PER_LINE = 16


def block_heading(block: Block) -> Text:
    """Where the block sits, and the bits-per-weight arithmetic of its type."""
    end = block.column + block.block_size
    return Text.assemble(
        ("Block ", "bold"), (f"{block.index:,}", "bold"), " of ", safe_text(block.tensor),
        f" ({block.qtype.name}, {block.n_blocks:,} blocks): row {block.row:,}, values {block.column:,}..{end - 1:,}, "
        f"bytes at {block.file_offset:,}\n{block.qtype.name}: {block.bits.explain()}")


def block_tables(f: GGUFFile, block: Block, rounds: list[Rounding]) -> list:
    """The block's tables, in reading order."""
    t = f.tensors[block.tensor]
    out = [_bytes_table(block)]
    if block.decoded.fields and block.qtype not in FLOATS:
        out.append(_fields_table(block))
    out += [_values_table(block), _rounding_table(block, rounds), _sizes_table(f, t, block, rounds),
            _errors_table(block, rounds)]
    return out


def _g(x: float | None, digits: int = 4) -> str:
    return "-" if x is None else f"{x:.{digits}g}"


def _bytes_table(block: Block) -> Table:
    table = Table(title="Stored bytes", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for col in ("field", "bytes", "hex"):
        table.add_column(col)
    fields = block.field_bytes()
    if len(fields) > 4 and fields[0][0].startswith("value"):  # floats: one line for all values
        fields = [("values", fields[0][1], b"".join(b for _, _, b in fields))]
    for name, _meaning, raw in fields:
        hexes = raw.hex(" ")
        lines = [hexes[i:i + 3 * HEX_PER_LINE - 1] for i in range(0, len(hexes), 3 * HEX_PER_LINE)]
        table.add_row(name, str(len(raw)), "\n".join(lines))
    return table


def _fields_table(block: Block) -> Table:
    table = Table(title="Decoded fields", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("field")
    table.add_column("values", overflow="fold")
    for name, values in block.decoded.fields.items():
        shown = ", ".join(_g(v) if isinstance(v, float) else str(v) for v in np.asarray(values).tolist())
        table.add_row(name, shown)
    return table


def _values_table(block: Block) -> Table:
    d = block.decoded
    table = Table(title="Values (value = step x level + offset)" if d.codes is not None else "Values",
                  title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    columns = ("i", "code", "level", "step", "offset", "value") if d.codes is not None else ("i", "value")
    if block.qtype in FLOATS:
        columns = ("i", "sign", "exponent", "mantissa", "value")
    for col in columns:
        table.add_column(col, justify="right")
    for i, value in enumerate(block.values.tolist()):
        if block.qtype in FLOATS:
            table.add_row(str(i), *(str(d.fields[k][i]) for k in ("sign", "exponent", "mantissa")), _g(value, 6))
        elif d.codes is not None:
            table.add_row(str(i), str(d.codes[i]), str(d.levels[i]), _g(float(d.steps[i])),
                          _g(float(d.offsets[i])), _g(value, 6))
        else:
            table.add_row(str(i), _g(value, 6))
    return table


def _e(x: float | None) -> str:
    return "-" if x is None else ("0" if x == 0 else f"{x:.2e}")


def _rounding_table(block: Block, rounds: list[Rounding]) -> Table:
    table = Table(title=f"The same values at other types (now {block.qtype.name}). rest: RMS error of the "
                  f"other values of the largest one's block, without and with that value x {OUTLIER_TIMES:g}",
                  title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1))
    for col in ("type", "bits", "RMS err", "max err", "rest", "+outlier"):
        table.add_column(col, justify="left" if col == "type" else "right", no_wrap=True)
    reasons = []
    for r in rounds:
        if r.values is None:
            table.add_row(r.qtype.name, f"{r.bits_per_weight:.4g}", "-", "-", "-", "-")
            reasons.append(r.reason)
            continue
        table.add_row(r.qtype.name, f"{r.bits_per_weight:.4g}", _e(r.rms), _e(r.max_error),
                      _e(r.clean_rms), _e(r.outlier_rms))
    widened = [r for r in rounds if r.window is not None and r.values is not None]
    if widened:
        window = widened[0].window
        block_values = GGML_QUANT_SIZES[widened[0].qtype][0]
        reasons.append(f"{', '.join(r.qtype.name for r in widened)}: their blocks hold {block_values} values, so "
                       f"these rows round {window.describe()}")
        if window.row_length % block_values:
            reasons.append(f"(rows of {window.row_length} values do not split into {block_values}-value blocks: "
                           f"llama.cpp would store this tensor in another type)")
    table.caption = "\n".join(reasons) or None
    table.caption_justify = "left"
    return table


def _sizes_table(f: GGUFFile, t, block: Block, rounds: list[Rounding]) -> Table:
    table = Table(title=f"Sizes at each type (now {block.qtype.name}: this tensor {human_bytes(t.nbytes)}, "
                  f"whole file {human_bytes(f.file_size)})",
                  title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1),
                  caption="whole file: every tensor llama.cpp's quantizer converts (2-D weights, not norms) "
                  "at that type, or at llama.cpp's fallback type where its rows do not split into that type's "
                  "blocks; the others and the header as they are; this tensor - : its rows do not split into "
                  "them", caption_justify="left")
    for col in ("type", "bits", "this tensor", "whole file"):
        table.add_column(col, justify="left" if col == "type" else "right", no_wrap=True)
    for r in rounds:
        tensor = size_at(t, r.qtype)
        table.add_row(r.qtype.name, f"{r.bits_per_weight:.4g}", "-" if tensor is None else human_bytes(tensor),
                      human_bytes(file_size_at(f, r.qtype)))
    return table


def _errors_table(block: Block, rounds: list[Rounding]) -> Table:
    shown = [r for r in rounds if r.qtype in ERROR_COLUMNS and r.values is not None]
    table = Table(title="Error of each value (rounded - stored)", title_justify="left",
                  box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("i", justify="right")
    table.add_column("value", justify="right")
    for r in shown:
        table.add_column(r.qtype.name, justify="right")
    for i, value in enumerate(block.values.tolist()):
        table.add_row(str(i), _g(value, 5), *(_e(float(r.errors[i])) for r in shown))
    return table
