"""One real block of a stored tensor: its bytes, its decoded fields, its values, and its bits per weight.

`read_block(f, "blk.0.attn_q.weight", 3)` reads the 4th block of that tensor
straight from the mapped file: the stored bytes, the fields decoded by
`block_fields` (scale, min, sub-block scales and mins, the code of each
value), the values as gguf.quants dequantizes them (the numbers the engine
multiplies by), and the bits-per-weight arithmetic of the type
(`block_layout`). Float tensors (F32, F16, BF16) store each value alone; for
them a "block" is `FLOAT_BLOCK` consecutive values, the size of the common
quantized blocks, so the same view and the same requantization apply.

`parse_block_spec("output.weight:12")` splits the command line's
TENSOR[:INDEX]; the index defaults to 0.

`wide_window(f, block, 256)` gives 256 consecutive values of the block's tensor for the types
whose blocks are wider than the block read (the k-quants' 256-value super-blocks beside a
32-value Q4_1 block): from the block's first value on, moved back where the tensor ends
sooner. They may run past the end of a row (SmolLM2's rows are 576 wide), which llama.cpp
never quantizes as one block; the view says which values it rounded.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from gguf import quants
from gguf.constants import GGML_QUANT_SIZES
from gguf.constants import GGMLQuantizationType as Q

from walkthrough.errors import WalkthroughError
from walkthrough.inspect.block_fields import Decoded, decode
from walkthrough.inspect.block_layout import LAYOUTS, BitsPerWeight, bits_per_weight, field_offsets
from walkthrough.inspect.gguf import GGUFFile, TensorInfo
from walkthrough.textsafe import visible

MAX_INDEX_DIGITS = 20  # a block index has at most as many digits as 2**64: no file has more blocks
FLOAT_BLOCK = 32  # values shown as one "block" of a float tensor (the size of Q4_0 / Q8_0 blocks)


@dataclass(frozen=True)
class Block:
    """One block of one tensor, as stored and as decoded."""

    tensor: str
    qtype: Q
    index: int  # block number inside the tensor (0-based)
    n_blocks: int  # blocks in the tensor
    row: int  # the tensor row (ggml: along ne1...) the block sits in
    column: int  # its first value's position in that row
    file_offset: int  # absolute byte offset of the block in its shard file
    raw: np.ndarray  # uint8 stored bytes of the block
    values: np.ndarray  # float32 dequantized by gguf.quants
    decoded: Decoded  # fields and per-value codes
    bits: BitsPerWeight  # bits-per-weight arithmetic of the type

    @property
    def block_size(self) -> int:
        return len(self.values)

    def field_bytes(self) -> list[tuple[str, str, bytes]]:
        """(name, meaning, stored bytes) per field, in storage order; floats: one entry per value."""
        if self.qtype in (Q.F32, Q.F16, Q.BF16):
            size = LAYOUTS[self.qtype][0].nbytes
            return [(f"value {i}", LAYOUTS[self.qtype][0].meaning, self.raw[i * size:(i + 1) * size].tobytes())
                    for i in range(self.block_size)]
        spans = field_offsets(self.qtype)
        return [(spec.name, spec.meaning, self.raw[slice(*spans[spec.name])].tobytes()) for spec in LAYOUTS[self.qtype]]


def parse_block_spec(spec: str) -> tuple[str, int]:
    """"TENSOR[:INDEX]" -> (tensor name, block index); the index defaults to 0.

    Whatever follows the last colon must be a block index: ASCII digits, at most `MAX_INDEX_DIGITS` of
    them (more than any tensor has blocks; Python refuses to read 4,300 or more).

    Example: "blk.0.attn_q.weight:3" -> ("blk.0.attn_q.weight", 3); "output.weight" -> ("output.weight", 0);
    "output.weight:-1", "output.weight:x" -> WalkthroughError.

    Raises:
        WalkthroughError: the index is not a whole number from 0, in one line.
    """
    name, sep, index = spec.rpartition(":")
    if not sep:
        return spec, 0
    if not (index.isascii() and index.isdigit() and len(index) <= MAX_INDEX_DIGITS):
        shown = visible(index[:MAX_INDEX_DIGITS]) + ("..." if len(index) > MAX_INDEX_DIGITS else "")
        raise WalkthroughError(f"--block {visible(name)}:{shown}: the block index must be a whole number from 0 "
                               f"with at most {MAX_INDEX_DIGITS} digits, e.g. --block {visible(name)}:3")
    return name, int(index)


def block_shape(t: TensorInfo) -> tuple[int, int, int]:
    """(values per block, stored bytes per block, blocks in the tensor) as this view reads the tensor."""
    block_size, type_size = GGML_QUANT_SIZES[t.ggml_type]
    if t.ggml_type in (Q.F32, Q.F16, Q.BF16):
        block_size, type_size = FLOAT_BLOCK, FLOAT_BLOCK * type_size
        return block_size, type_size, -(-t.n_elements // block_size)
    return block_size, type_size, t.n_elements // block_size


def read_block(f: GGUFFile, name: str, index: int = 0) -> Block:
    """Read and decode block `index` of tensor `name`.

    Raises:
        WalkthroughError: no such tensor, an index outside the tensor, or a type with no known block layout.
    """
    t = f.tensors.get(name)
    if t is None:
        raise WalkthroughError(
            f"no tensor named {name!r} in {f.path.name}; `walkthrough inspect --tensors` lists them"
        )
    if t.ggml_type not in LAYOUTS:
        raise WalkthroughError(f"tensor {name} is stored as {t.type_name}, whose block layout is not known here")
    block_size, type_size, n_blocks = block_shape(t)
    if not 0 <= index < n_blocks:
        raise WalkthroughError(f"block {index} of {name}: the tensor has blocks 0..{n_blocks - 1}; pick one of those")
    data = f.tensor_bytes(name)  # [t.nbytes] uint8
    start = index * type_size
    raw = np.array(data[start:min(start + type_size, t.nbytes)])  # a float tensor's last block may be short
    try:
        values = np.asarray(quants.dequantize(raw, t.ggml_type), np.float32).reshape(-1)
    except NotImplementedError:
        raise WalkthroughError(f"gguf.quants cannot dequantize {t.type_name}; this block cannot be shown") from None
    decoded = decode(t.ggml_type, raw)
    first = index * block_size
    return Block(name, t.ggml_type, index, n_blocks, first // t.shape[0], first % t.shape[0],
                 t.offset + start, raw, values, decoded, bits_per_weight(t.ggml_type))


@dataclass(frozen=True)
class Window:
    """Consecutive values of a tensor, wider than one stored block, as gguf.quants dequantizes them."""

    start: int  # the first value's index in the tensor (flat, row by row)
    values: np.ndarray  # [count] float32
    row_length: int  # values per tensor row

    def describe(self) -> str:
        """ "values 512..767 of the tensor (row 0, column 512 to row 1, column 191)"."""
        end = self.start + self.values.size - 1
        r0, c0 = divmod(self.start, self.row_length)
        r1, c1 = divmod(end, self.row_length)
        where = (f"row {r0:,}, columns {c0:,}..{c1:,}" if r0 == r1
                 else f"row {r0:,}, column {c0:,} to row {r1:,}, column {c1:,}")
        return f"values {self.start:,}..{end:,} of the tensor ({where})"


def wide_window(f: GGUFFile, block: Block, count: int) -> Window | None:
    """`count` consecutive values of the block's tensor from the block's first value (moved back where the
    tensor ends sooner); None when the tensor holds fewer values or its blocks do not tile them."""
    t = f.tensors[block.tensor]
    block_size, type_size, _ = block_shape(t)
    if t.n_elements < count or count % block_size:
        return None
    first = min(block.index * block_size, t.n_elements - count)
    first -= first % block_size  # a whole number of stored blocks (float tensors: any value)
    data = f.tensor_bytes(block.tensor)  # [t.nbytes] uint8
    start = first // block_size * type_size
    raw = np.array(data[start:start + count // block_size * type_size])
    values = np.asarray(quants.dequantize(raw, t.ggml_type), np.float32).reshape(-1)
    return Window(first, values, t.shape[0])
