"""Our rounding against llama.cpp's quantizer on a whole file: an F32 llama-shaped model (rows of 256 and 512
values, random heavy-tailed rows with a zero row, a row near zero and an outlier, and the tiny model's real
values) quantized by `llama_model_quantize` (llama-cpp-python, `pure`: every matrix at the type, no importance
matrix), read back block by block and compared byte for byte with what `inspect.kquants` (Q6_K..Q2_K) and
gguf.quants (the other types) write for the same F32 values.

Without an importance matrix llama.cpp's `quantize_q*` call the `quantize_row_*_ref` rules this project
follows; with one they call `quantize_row_*_impl` (imatrix-weighted searches), which nothing here models.
Measured here: all 15 types below are bit-identical on every block.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from gguf import quants
from gguf.constants import GGML_QUANT_SIZES
from gguf.constants import GGMLQuantizationType as Q
from llama_support import write_one_layer_llama

from walkthrough.inspect.gguf import open_gguf
from walkthrough.inspect.kquants import WRITERS

TINY = Path(__file__).resolve().parents[1] / "walkthrough" / "assets" / "tiny-clinical-moe.gguf"
D, FF, N_VOCAB = 256, 512, 32
FTYPES = {  # the type -> the llama_ftype whose default (pure) type it is (src/llama-quant.cpp)
    "Q6_K": "Q6_K", "Q5_K": "Q5_K_S", "Q4_K": "Q4_K_S", "Q3_K": "Q3_K_S", "Q2_K": "Q2_K",
    "Q8_0": "Q8_0", "Q5_1": "Q5_1", "Q5_0": "Q5_0", "Q4_1": "Q4_1", "Q4_0": "Q4_0",
    "MXFP4": "MXFP4_MOE", "TQ2_0": "TQ2_0", "TQ1_0": "TQ1_0", "F16": "F16", "BF16": "BF16",
}


def _real_values(n: int) -> np.ndarray:
    """n real weights: the tiny model's token embeddings, dequantized, in file order."""
    with open_gguf(TINY) as f:
        t = f.tensors["token_embd.weight"]
        values = np.asarray(quants.dequantize(np.array(f.tensor_bytes(t.name)), t.ggml_type), np.float32)
    return values.reshape(-1)[:n]


def write_f32_model(path: Path, seed: int = 0) -> dict[str, np.ndarray]:
    """A one-layer llama F32 file llama.cpp can quantize (no tokenizer: the quantizer reads none); its matrices."""
    rng = np.random.default_rng(seed)

    def mat(rows: int, cols: int) -> np.ndarray:  # [rows, cols] heavy-tailed, with rows that test the edges
        m = (rng.standard_t(3, (rows, cols)) * 0.02).astype(np.float32)
        m[0] = 0  # all zero
        m[1] *= np.float32(1e-6)  # near zero
        m[2, 5] = 3.0  # one outlier
        m[3, ::2] = 0  # half zeros
        return m

    matrices = {"token_embd.weight": mat(N_VOCAB, D), "output.weight": mat(N_VOCAB, D),
                "blk.0.attn_q.weight": _real_values(D * D).reshape(D, D), "blk.0.attn_k.weight": mat(D, D),
                "blk.0.attn_v.weight": mat(D, D), "blk.0.attn_output.weight": mat(D, D),
                "blk.0.ffn_gate.weight": mat(FF, D), "blk.0.ffn_up.weight": mat(FF, D),
                "blk.0.ffn_down.weight": mat(D, FF)}
    write_one_layer_llama(path, matrices)
    return matrices


@pytest.fixture(scope="module")
def f32_model(tmp_path_factory) -> tuple[Path, dict[str, np.ndarray]]:
    path = tmp_path_factory.mktemp("quantize") / "f32.gguf"
    return path, write_f32_model(path)


def _llama_quantize(src: Path, dst: Path, ftype_name: str) -> None:
    llama_c = pytest.importorskip("llama_cpp.llama_cpp")
    params = llama_c.llama_model_quantize_default_params()
    params.ftype = getattr(llama_c, f"LLAMA_FTYPE_MOSTLY_{ftype_name}")
    params.pure = True  # every matrix at the type (no mixes, no per-tensor rules)
    params.nthread = 1
    assert llama_c.llama_model_quantize(str(src).encode(), str(dst).encode(), params) == 0


def _ours(qtype: Q, x: np.ndarray) -> np.ndarray:
    """[rows, n] float32 -> our bytes [rows * blocks, block bytes]."""
    raw = WRITERS[qtype](x) if qtype in WRITERS else quants.quantize(x, qtype).tobytes()
    return np.frombuffer(raw, np.uint8).reshape(-1, GGML_QUANT_SIZES[qtype][1])


@pytest.mark.app  # slow: llama.cpp quantizes a model to every type
@pytest.mark.parametrize("type_name", FTYPES)
def test_every_block_is_llama_cpps(type_name, f32_model, tmp_path):
    src, matrices = f32_model
    qtype = Q[type_name]
    dst = tmp_path / f"{type_name}.gguf"
    _llama_quantize(src, dst, FTYPES[type_name])
    compared = 0
    with open_gguf(dst) as f:
        for name, x in matrices.items():
            t = f.tensors[name]
            assert t.ggml_type == qtype, f"{name} is {t.type_name}"  # pure: nothing fell back to another type
            theirs = np.array(f.tensor_bytes(name)).reshape(-1, GGML_QUANT_SIZES[qtype][1])
            ours = _ours(qtype, x)
            differ = np.flatnonzero(~np.all(ours == theirs, axis=1))
            assert differ.size == 0, f"{name}: {differ.size} of {len(ours)} {type_name} blocks differ, first {differ[0]}"
            compared += len(ours)
    assert compared == sum(x.size for x in matrices.values()) // GGML_QUANT_SIZES[qtype][0]
