"""The engine against llama.cpp, bit for bit, on a real Gemma 3 file: Gemma 3 270M base, Q4_K_M.

The file holds Q4_K, Q6_K, Q5_0 and Q8_0 matrices, GELU, soft-caps off, the embedding scale and
alternating sliding-window layers (the window, 512, is longer than the prompt here). .ci/run
downloads it and sets GEMMA3_270M_GGUF; without it, or without llama-cpp-python, these tests skip.
llama.cpp runs here at test time (one thread, F32 KV cache, no flash attention) and the engine with
exact products must give its numbers bit for bit: every op of a 24-token prefill (k-quant products
through llama.cpp's tiled kernel, `kquant_tiled`) and of a 6-token one (the per-row `ggml_vec_dot_*`
kernels, `quantdot`), and the logits of two decode passes after the first (docs/op-diff.md); with an F16
cache, flash attention (per-cell at 24 tokens, tiled at 70) or both, or a Q8_0 or Q4_0 cache, the logits
likewise. The same
file requantized by llama.cpp at test time to pure Q2_K and Q3_K_S (its rows of 640 values fall back to
Q4_0) checks `kquant_low` the same way, and a copy whose sliding window is cut to 8 cells checks the
positions past a window (the whole file's 512 would take minutes of exact passes).
"""

from __future__ import annotations

import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
from llama_support import both_engines, needs_llama, requantize
from real_weights_support import request_ids
from test_base_model import gemma3_270m

from walkthrough.engine import op_diff
from walkthrough.engine.glassbox.model import Model
from walkthrough.inspect.gguf import open_gguf

DECODE = 2  # decode passes after the prefill whose logits are compared
WINDOW_KEY = b"gemma3.attention.sliding_window"


@pytest.mark.app  # llama.cpp runs and exact numpy passes over a 270M model: about a minute each
@needs_llama
@pytest.mark.parametrize("ftype, n_tokens, decode", [(None, 24, DECODE), (None, 6, 0), ("Q2_K", 12, 1),
                                                     ("Q3_K_S", 12, 1)])
def test_exact_products_give_llama_cpps_gemma3_numbers_bit_for_bit(ftype, n_tokens, decode, tmp_path):
    path = gemma3_270m()
    if ftype is not None:
        path = requantize(path, tmp_path / f"gemma3-270m-{ftype}.gguf", ftype)
    ids = request_ids(open_gguf(path))[:n_tokens]
    assert len(ids) == n_tokens
    (ours, ours_logits, n_layers), (theirs, theirs_logits) = both_engines(path, ids, decode)
    for layer in [*range(n_layers), -1]:
        diffs = op_diff.layer_diffs(ours, theirs, layer, np.arange(len(ids)))
        assert len(diffs) >= (14 if layer >= 0 else 2)  # every point was seen on both sides
        first = op_diff.first_difference(diffs)
        assert first is None, f"layer {layer}: {first.describe()}"
    assert len(ours_logits) == len(theirs_logits) == 1 + decode
    for a, b in zip(ours_logits, theirs_logits):
        assert np.array_equal(a, b), f"max logit difference {np.abs(a - b).max():.3g}"


@pytest.mark.app  # llama.cpp and exact numpy passes over a 270M model: under a minute each
@needs_llama
@pytest.mark.parametrize(("kv_type", "flash", "n_tokens"), [("f16", False, 24), ("f32", True, 24), ("f16", True, 70),
                                                           ("q8_0", True, 24), ("q4_0", True, 24)],
                         ids=["f16-cache", "flash-attention", "flash-attention-tiled", "q8_0-cache", "q4_0-cache"])
def test_gemma3_logits_are_llama_cpps_at_its_other_settings(kv_type, flash, n_tokens):
    """The F16 cache and flash attention (its per-cell kernel, and its tiled one from 64 tokens), and quantized
    caches (their Walsh-Hadamard turns of 256-value keys and 64-value values), on the real file: the prefill's
    logits and a decode pass's, bit for bit."""
    path = gemma3_270m()
    ids = request_ids(open_gguf(path))[:n_tokens]
    assert len(ids) == n_tokens
    (_, ours_logits, _), (_, theirs_logits) = both_engines(path, ids, 1, kv_type=kv_type, flash=flash)
    for a, b in zip(ours_logits, theirs_logits, strict=True):
        assert np.array_equal(a, b), f"max logit difference {np.abs(a - b).max():.3g}"


def _with_window(src: Path, dst: Path, window: int) -> Path:
    """A copy of a gemma3 file whose sliding layers see `window` cells: its metadata value (a uint32 after the
    key's length and name, and its type 4) rewritten in place, every other byte as it was."""
    shutil.copyfile(src, dst)
    with open(dst, "r+b") as out:
        head = out.read(1 << 20)
        at = head.find(WINDOW_KEY)
        assert at >= 8 and struct.unpack_from("<QI", head, at - 8)[0] == len(WINDOW_KEY), "no sliding window key"
        assert struct.unpack_from("<I", head, at + len(WINDOW_KEY))[0] == 4  # GGUF uint32
        out.seek(at + len(WINDOW_KEY) + 4)
        out.write(struct.pack("<I", window))
    return dst


@pytest.mark.app  # a 20-token exact pass over a 270M model: about a minute
@needs_llama
def test_sliding_layers_past_their_window_give_llama_cpps_logits_bit_for_bit(tmp_path):
    """Gemma 3 270M with its window cut from 512 to 8 cells: 12 of 20 positions see past it, on both sides."""
    path = _with_window(gemma3_270m(), tmp_path / "gemma3-270m-window8.gguf", 8)
    f = open_gguf(path)
    assert Model(f).config.sliding_window == 8
    ids = request_ids(f)[:20]
    (_, ours_logits, _), (_, theirs_logits) = both_engines(path, ids, 1)
    for a, b in zip(ours_logits, theirs_logits):
        assert np.array_equal(a, b), f"max logit difference {np.abs(a - b).max():.3g}"
    from walkthrough.engine.llama.model import LlamaModel
    from walkthrough.engine.llama.session import LlamaSession

    model = LlamaModel.open(gemma3_270m(), n_threads=1)  # llama.cpp on the 512-cell file: the window mattered
    session = LlamaSession(model, kv_type="f32", flash_attention=False)
    original = session.feed(ids, phase="prefill", all_logits=True).all_logits
    session.close()
    model.close()
    assert not np.array_equal(original, theirs_logits[0])
