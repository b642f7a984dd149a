"""The type llama.cpp's quantizer gives a tensor whose rows do not split into the target's blocks
(`inspect.requant.converted_type`), held to `llama_model_quantize` itself: a one-layer llama F32 file with
96-value rows (a multiple of 32, not of 256) quantized to each 256-block type, every tensor's type read back.
Skips when llama-cpp-python is absent.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from gguf.constants import GGMLQuantizationType as Q
from llama_support import write_one_layer_llama

from walkthrough.inspect.gguf import open_gguf
from walkthrough.inspect.requant import converted_type, file_size_at

D, FF, N_VOCAB = 96, 160, 32  # rows of 96 and 160 values: no 256-value blocks; 160 has no 64 either
FTYPES = {Q.Q2_K: "Q2_K", Q.Q3_K: "Q3_K_S", Q.Q4_K: "Q4_K_S", Q.Q5_K: "Q5_K_S", Q.Q6_K: "Q6_K",
          Q.TQ1_0: "TQ1_0", Q.TQ2_0: "TQ2_0"}


def _write(path: Path) -> None:
    rng = np.random.default_rng(0)
    shapes = {"token_embd.weight": (N_VOCAB, D), "output.weight": (N_VOCAB, D), "blk.0.attn_q.weight": (D, D),
              "blk.0.attn_k.weight": (D, D), "blk.0.attn_v.weight": (D, D), "blk.0.attn_output.weight": (D, D),
              "blk.0.ffn_gate.weight": (FF, D), "blk.0.ffn_up.weight": (FF, D), "blk.0.ffn_down.weight": (D, FF)}
    write_one_layer_llama(path, {name: (rng.standard_normal(shape) * 0.02).astype(np.float32)
                                 for name, shape in shapes.items()})


@pytest.mark.parametrize("qtype", FTYPES, ids=lambda q: q.name)
def test_the_fallback_type_is_llama_cpps(qtype, tmp_path):
    llama_c = pytest.importorskip("llama_cpp.llama_cpp")
    src, dst = tmp_path / "f32.gguf", tmp_path / f"{qtype.name}.gguf"
    _write(src)
    params = llama_c.llama_model_quantize_default_params()
    params.ftype = getattr(llama_c, f"LLAMA_FTYPE_MOSTLY_{FTYPES[qtype]}")
    params.pure = True  # the type itself for every matrix: only the shape fallback changes it
    params.nthread = 1
    assert llama_c.llama_model_quantize(str(src).encode(), str(dst).encode(), params) == 0
    with open_gguf(src) as before, open_gguf(dst) as after:
        for name, t in before.tensors.items():
            expected = converted_type(t, qtype)
            got = after.tensors[name].ggml_type
            assert got == (t.ggml_type if expected is None else expected), (name, t.shape, got)
        # the tensors' bytes (header apart: the quantizer writes its own keys) are what the block view counts
        assert after.file_size - after.header_bytes == file_size_at(before, qtype) - before.header_bytes
