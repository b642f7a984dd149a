"""The same float values rounded to other storage types: the error per value, and what each type would weigh.

`round_block(values, types)` quantizes a block's values with gguf.quants to
every type it can write (F32, F16, BF16, Q8_0, Q5_1, Q5_0, Q4_1, Q4_0, MXFP4,
TQ2_0, TQ1_0 with gguf 0.19; found by asking gguf.quants, not listed here),
plus the k-quants `walkthrough.inspect.kquants` writes as llama.cpp does (Q6_K..Q2_K), and back, and
reports per type the rounded values, the error of each, the RMS
and largest error, and the outlier effect: one value of the block made
`OUTLIER_TIMES` larger, the RMS error of the other values of its block of that
type, which share its scale (in Q4_0 one large value stretches the 16 steps over a wider range, so
every small value lands on a coarser grid). A type whose blocks hold more values than the block
(a k-quant's 256 beside a Q4_1 block's 32) rounds a wider `window` of the tensor's consecutive values
instead, when one is given (`inspect.block.wide_window`); its row says so (`Rounding.window`).

`size_at(f, t, qtype)` and `file_size_at(f, qtype)` say what the tensor and the
whole file would weigh at a type: the file keeps its header, every tensor
llama.cpp's quantizer would convert (2-D or more, name ending in "weight",
not a norm: `tensor_allows_quantization` in src/llama-quant.cpp) takes the
type when its rows split into whole blocks, the others keep theirs, and each
tensor is padded to the file's alignment as GGUF lays data out. With every
tensor at its stored type this gives the file's own size back (a test checks).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np
from gguf import quants
from gguf.constants import GGML_QUANT_SIZES
from gguf.constants import GGMLQuantizationType as Q

from walkthrough.inspect.block import Block, Window, wide_window
from walkthrough.inspect.gguf import GGUFFile, TensorInfo
from walkthrough.inspect.kquants import QK_K, WRITERS

OUTLIER_TIMES = 8.0  # how much larger the planted outlier is than the block's largest value


@dataclass(frozen=True)
class Rounding:
    """One block's values after a round trip through one type."""

    qtype: Q
    bits_per_weight: float
    values: np.ndarray | None  # [n] float32 after quantize + dequantize; None when the type cannot hold the block
    original: np.ndarray  # [n] float32 the values rounded
    reason: str = ""  # why values is None
    outlier_rms: float | None = None  # RMS error of the rest of the outlier's block (this type's) with it planted
    clean_rms: float | None = None  # the same values' RMS error without it (None: types without shared scales)
    window: Window | None = None  # the wider run of the tensor's values rounded instead of the block's

    @property
    def errors(self) -> np.ndarray:
        """[n] rounded - original."""
        return self.values - self.original

    @property
    def rms(self) -> float:
        return float(np.sqrt(np.mean(np.square(self.errors, dtype=np.float64))))

    @property
    def max_error(self) -> float:
        return float(np.max(np.abs(self.errors)))


@cache
def writable_types() -> tuple[Q, ...]:
    """Types gguf.quants can quantize to, most bits per weight first (asked of gguf.quants, one block each)."""
    found = []
    for qtype, (block, _size) in GGML_QUANT_SIZES.items():
        try:
            quants.quantize(np.zeros((1, block), np.float32), qtype)
        except (NotImplementedError, quants.QuantError, ValueError, TypeError):
            continue
        found.append(qtype)
    found += [qtype for qtype in WRITERS if qtype not in found]
    return tuple(sorted(found, key=lambda t: (-bits_of(t), t.name)))


def bits_of(qtype: Q) -> float:
    block, size = GGML_QUANT_SIZES[qtype]
    return size * 8 / block


def round_trip(x: np.ndarray, qtype: Q) -> np.ndarray:
    """[n] float32 -> [n] float32 through `qtype` (n a multiple of its block size)."""
    row = np.ascontiguousarray(x, np.float32).reshape(1, -1)
    if qtype in WRITERS:  # llama.cpp's k-quant rounding (gguf.quants reads these but cannot write them)
        stored = np.frombuffer(WRITERS[qtype](row), np.uint8).reshape(1, -1)
    else:
        stored = quants.quantize(row, qtype)
    return np.asarray(quants.dequantize(stored, qtype), np.float32).reshape(-1)


def with_outlier(x: np.ndarray) -> tuple[np.ndarray, int]:
    """A copy of x whose largest value (by magnitude) is OUTLIER_TIMES larger, and its position."""
    at = int(np.argmax(np.abs(x)))
    out = np.array(x, np.float32)
    out[at] = out[at] * OUTLIER_TIMES if out[at] != 0 else np.float32(OUTLIER_TIMES)
    return out, at


def _rms(a: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(a, dtype=np.float64)))) if a.size else 0.0


def round_block(values: np.ndarray, types: tuple[Q, ...] | None = None, *,
                window: Window | None = None) -> list[Rounding]:
    """The block's values rounded to each type (default: every type gguf.quants can write).

    A type whose blocks do not tile the block's values rounds `window`'s values when they tile those.
    """
    block_values = np.asarray(values, np.float32).reshape(-1)
    out = []
    for qtype in types or writable_types():
        block = GGML_QUANT_SIZES[qtype][0]
        x, wide = block_values, None
        if x.size % block and window is not None and window.values.size % block == 0:
            x, wide = np.asarray(window.values, np.float32), window
        if x.size % block:
            out.append(Rounding(qtype, bits_of(qtype), None, x,
                                reason=f"{qtype.name} blocks hold {block} values; this block has {x.size}"))
            continue
        rounded = round_trip(x, qtype)
        if block == 1:  # each value stands alone: an outlier changes nothing else
            out.append(Rounding(qtype, bits_of(qtype), rounded, x))
            continue
        spiked, at = with_outlier(x)
        first = at // block * block
        others = np.r_[first:at, at + 1:first + block]  # the rest of the outlier's block of this type
        spiked_rounded = round_trip(spiked, qtype)
        out.append(Rounding(qtype, bits_of(qtype), rounded, x,
                            outlier_rms=_rms((spiked_rounded - spiked)[others]),
                            clean_rms=_rms((rounded - x)[others]), window=wide))
    return out


def round_stored_block(f: GGUFFile, block: Block) -> list[Rounding]:
    """A block read from `f` rounded to every writable type; the k-quants round the QK_K (256) consecutive
    values of its tensor from the block on when the block holds fewer (`inspect.block.wide_window`)."""
    window = wide_window(f, block, QK_K) if block.block_size % QK_K else None
    return round_block(block.values, window=window)


# Tensors llama.cpp's quantizer leaves at their stored type though they are 2-D weights
# (`tensor_allows_quantization` in src/llama-quant.cpp): a MoE router and its token-to-expert table, small
# or positional tables, convolution kernels of recurrent layers, MiniMax's indexer projections.
KEPT_AS_STORED = ("ffn_gate_inp.weight", "ffn_gate_tid2eid.weight", "altup", "laurel", "per_layer_model_proj",
                  "ssm_conv1d", "shortconv.conv.weight", "indexer.k_proj.weight", "indexer.q_proj.weight")
KEPT_NAMES = frozenset({"position_embd.weight", "token_types.weight"})


def quantizable(t: TensorInfo) -> bool:
    """Whether llama.cpp's quantizer converts this tensor: 2-D or more, a weight, not a norm, not one it keeps
    (`KEPT_AS_STORED`, `KEPT_NAMES`).

    Example: blk.0.ffn_up_exps.weight -> True; blk.0.ffn_gate_inp.weight (the router) -> False.
    """
    name = t.name
    return (len(t.shape) >= 2 and name.endswith("weight") and "_norm.weight" not in name
            and name not in KEPT_NAMES and not any(part in name for part in KEPT_AS_STORED))


# The type llama.cpp's quantizer uses for a tensor whose rows do not split into the target's 256-value
# blocks (`tensor_type_fallback` in src/llama-quant.cpp); a row that the fallback does not split either
# is stored as F16.
FALLBACK = {Q.Q2_K: Q.Q4_0, Q.Q3_K: Q.Q4_0, Q.TQ1_0: Q.Q4_0, Q.TQ2_0: Q.Q4_0, Q.Q4_K: Q.Q5_0, Q.Q5_K: Q.Q5_1,
            Q.Q6_K: Q.Q8_0, **dict.fromkeys((Q.IQ1_S, Q.IQ1_M, Q.IQ2_XXS, Q.IQ2_XS, Q.IQ2_S, Q.IQ3_XXS, Q.IQ3_S,
                                             Q.IQ4_XS), Q.IQ4_NL)}


def converted_type(t: TensorInfo, qtype: Q) -> Q | None:
    """The type llama.cpp's quantizer gives tensor t when asked for `qtype`: None if it keeps the stored type
    (`quantizable`), the fallback when t's rows do not split into `qtype`'s blocks.

    Example: a [576, 1536] matrix at Q4_K -> Q5_0 (576 is not a multiple of 256); at Q4_0 -> Q4_0.
    """
    if not quantizable(t):
        return None
    cols = t.shape[0]
    if cols % GGML_QUANT_SIZES[qtype][0] == 0:
        return qtype
    fallback = FALLBACK.get(qtype, qtype)
    return fallback if cols % GGML_QUANT_SIZES[fallback][0] == 0 else Q.F16


def size_at(t: TensorInfo, qtype: Q) -> int | None:
    """Stored bytes of tensor t at `qtype`, or None when its rows do not split into whole blocks."""
    block, size = GGML_QUANT_SIZES[qtype]
    if t.shape[0] % block:
        return None
    return t.n_elements // block * size


def _padded(n: int, alignment: int) -> int:
    return -(-n // alignment) * alignment


def file_size_at(f: GGUFFile, qtype: Q | None) -> int:
    """Bytes the whole file would take quantized to `qtype` (None: as stored): each tensor at the type llama.cpp's
    quantizer gives it (`converted_type`: the target, its fallback where rows do not split, or as stored)."""
    total = f.header_bytes
    for t in f.tensors.values():
        to = converted_type(t, qtype) if qtype is not None else None
        total += _padded(t.nbytes if to is None else size_at(t, to) or t.nbytes, f.alignment)
    return total
