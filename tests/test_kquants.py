"""The numpy k-quant rounding against llama.cpp's own (issue 31, item 1): the same bytes as ggml_quantize_chunk,
the quantizer llama_model_quantize calls per tensor (src/llama-quant.cpp), with no importance matrix (so the
`quantize_row_q*_K_ref` rules), on random blocks with zero and outlier sub-blocks and on a real model's rows."""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

import numpy as np
import pytest
from gguf import quants
from gguf.constants import GGML_QUANT_SIZES
from gguf.constants import GGMLQuantizationType as Q

from walkthrough.engine.glassbox.dequant_k import K_FAST
from walkthrough.engine.glassbox.weights import dequantize_rows
from walkthrough.inspect.gguf import open_gguf
from walkthrough.inspect.kquants import WRITERS
from walkthrough.inspect.requant import round_block, writable_types

TINY = Path(__file__).parents[1] / "walkthrough" / "assets" / "tiny-clinical-moe.gguf"


def _ggml_quantize(qtype: Q, x: np.ndarray) -> bytes:
    """llama.cpp's bytes for x (one row), through ggml_quantize_chunk in llama-cpp-python's libggml-base."""
    llama_cpp = pytest.importorskip("llama_cpp")
    lib = ctypes.CDLL(os.path.join(os.path.dirname(llama_cpp.__file__), "lib", "libggml-base.so"))
    fn = lib.ggml_quantize_chunk
    fn.restype = ctypes.c_size_t
    fn.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
                   ctypes.c_void_p]
    x = np.ascontiguousarray(x, np.float32)
    block, size = GGML_QUANT_SIZES[qtype]
    out = np.zeros(x.size // block * size, np.uint8)
    written = fn(int(qtype), x.ctypes.data, out.ctypes.data, 0, 1, x.size, None)
    assert written == out.size
    return out.tobytes()


def _random_row() -> np.ndarray:
    rng = np.random.default_rng(7)
    x = (rng.standard_normal(256 * 64) * 0.02).astype(np.float32)
    x[5] = 0.9  # an outlier
    x[300:316] = 0  # a zero sub-block
    x[512:768] = 0  # a zero super-block
    x[1024:1280] *= 1e-3  # a quiet one
    x[2000] = -3.0
    return x


@pytest.mark.parametrize("qtype", list(WRITERS))
def test_same_bytes_as_llama_cpp_on_random_blocks(qtype):
    x = _random_row()
    assert WRITERS[qtype](x) == _ggml_quantize(qtype, x)


@pytest.mark.parametrize("qtype", list(WRITERS))
def test_same_bytes_as_llama_cpp_on_real_weights(qtype):
    """Real rows: the tiny model's and SmolLM2's first attention matrix, dequantized."""
    paths = [TINY] + [Path(p) for p in [os.environ.get("SMOLLM2_GGUF", "")] if p and Path(p).exists()]
    for path in paths:
        with open_gguf(path) as f:
            t = f.tensors["blk.0.attn_q.weight"]
            values = np.array(quants.dequantize(np.array(f.tensor_bytes(t.name)), t.ggml_type)).reshape(-1)
        values = values[: values.size // 256 * 256].astype(np.float32)
        assert values.size
        assert WRITERS[qtype](values) == _ggml_quantize(qtype, values), path.name


def test_block_view_rounds_to_the_k_quants():
    x = _random_row()[:256]
    rounds = {r.qtype: r for r in round_block(x)}
    for qtype in WRITERS:
        assert qtype in writable_types() and rounds[qtype].values is not None
        expected = quants.dequantize(np.frombuffer(_ggml_quantize(qtype, x), np.uint8), qtype).reshape(-1)
        np.testing.assert_array_equal(rounds[qtype].values, expected)
    assert rounds[Q.Q8_0].rms < rounds[Q.Q6_K].rms < rounds[Q.Q4_K].rms


def _real_rows(path: Path) -> list[np.ndarray]:
    """The first layer's attn_q and the file's largest tensor, dequantized, cut to whole 256-value blocks."""
    rows = []
    with open_gguf(path) as f:
        largest = max(f.tensors, key=lambda n: f.tensors[n].n_elements)
        for name in ("blk.0.attn_q.weight", largest):
            t = f.tensors[name]
            values = np.array(quants.dequantize(np.array(f.tensor_bytes(name)), t.ggml_type)).reshape(-1)
            rows.append(values[: values.size // 256 * 256].astype(np.float32))
    return rows


def _decodes_as_gguf_quants(qtype: Q, rows: list[np.ndarray]) -> None:
    for x in rows:
        raw = np.frombuffer(_ggml_quantize(qtype, x), np.uint8)
        expected = np.asarray(quants.dequantize(raw, qtype), np.float32).reshape(-1)
        got = dequantize_rows(raw.copy(), qtype, 256, "t").reshape(-1)
        assert got.view(np.uint32).tolist() == expected.view(np.uint32).tolist()


@pytest.fixture(scope="module")
def smollm2_rows() -> list[np.ndarray]:
    path = Path(os.environ.get("SMOLLM2_GGUF", ""))
    if not path.is_file():
        pytest.skip("SMOLLM2_GGUF names no file")
    return _real_rows(path)


@pytest.mark.parametrize("qtype", list(K_FAST), ids=lambda t: t.name)
def test_engine_decodes_llama_cpps_blocks_as_gguf_quants(qtype):
    """The engine's k-quant dequantizer (engine/glassbox/dequant_k.py) on blocks ggml_quantize_chunk wrote from
    real rows and from random rows with zero, quiet and outlier sub-blocks: gguf.quants' float32 values, bit for
    bit (random bytes, NaN scales included, are in test_memory_budget)."""
    _decodes_as_gguf_quants(qtype, [_random_row(), *_real_rows(TINY)])


@pytest.mark.app  # slow: a real trained model's largest tensor (SmolLM2's 28M-value embedding) per type
@pytest.mark.parametrize("qtype", list(K_FAST), ids=lambda t: t.name)
def test_engine_decodes_llama_cpps_blocks_of_a_trained_model_as_gguf_quants(qtype, smollm2_rows):
    """As above, on SmolLM2's attn_q and embedding rows (SMOLLM2_GGUF)."""
    _decodes_as_gguf_quants(qtype, smollm2_rows)
