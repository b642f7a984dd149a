"""The engine against llama.cpp, bit for bit, on a real Gemma 3 file: Gemma 3 270M base, Q4_K_M.

The file holds Q4_K, Q6_K, Q5_0 and Q8_0 matrices, GELU, soft-caps off, the embedding scale and
alternating sliding-window layers (the window, 512, is longer than the prompt here). .ci/run
downloads it and sets GEMMA3_270M_GGUF; without it, or without llama-cpp-python, these tests skip.
llama.cpp runs here at test time (one thread, F32 KV cache, no flash attention) and the engine with
exact products must give its numbers bit for bit: every op of a 24-token prefill (k-quant products
through llama.cpp's tiled kernel, `kquant_tiled`) and of a 6-token one (the per-row `ggml_vec_dot_*`
kernels, `quantdot`), and the logits of two decode passes after the first (docs/op-diff.md).
"""

from __future__ import annotations

import numpy as np
import pytest
from llama_support import needs_llama
from real_weights_support import request_ids
from test_base_model import gemma3_270m

from walkthrough.engine import op_diff
from walkthrough.engine.glassbox.model import Model
from walkthrough.engine.glassbox.session import Session
from walkthrough.inspect.gguf import open_gguf

DECODE = 2  # decode passes after the prefill whose logits are compared


def _both(path, ids: list[int], decode: int):
    """(ours, theirs): each the named intermediates of one prefill over ids and the logits of that prefill
    then of `decode` greedy decode passes (llama.cpp's greedy tokens fed to both)."""
    from walkthrough.engine.llama.model import LlamaModel
    from walkthrough.engine.llama.session import LlamaSession

    llama_model = LlamaModel.open(path, n_threads=1)
    llama = LlamaSession(llama_model, kv_type="f32", flash_attention=False, named=op_diff.NAMES)
    theirs_logits = [llama.feed(ids, phase="prefill", all_logits=True).all_logits]
    theirs = llama.capture.tensors
    model = Model(open_gguf(path), exact_products=True)
    ours: op_diff.Tensors = {}
    model.probe = lambda name, a: ours.setdefault(name, []).append(np.array(a))
    session = Session(model, kv_type="f32")
    ours_logits = [session.feed(ids, phase="prefill", all_logits=True).all_logits]
    model.probe = None
    for _ in range(decode):
        token = [int(np.argmax(theirs_logits[-1][-1]))]
        theirs_logits.append(llama.feed(token, phase="decode").logits[None])
        ours_logits.append(session.feed(token, phase="decode").logits[None])
    llama.close()
    llama_model.close()
    return (ours, ours_logits, model.config.n_layers), (theirs, theirs_logits)


@pytest.mark.app  # two llama.cpp runs and two exact numpy passes over a 270M model: about a minute
@needs_llama
@pytest.mark.parametrize("n_tokens, decode", [(24, DECODE), (6, 0)])
def test_exact_products_give_llama_cpps_gemma3_numbers_bit_for_bit(n_tokens, decode):
    path = gemma3_270m()
    ids = request_ids(open_gguf(path))[:n_tokens]
    assert len(ids) == n_tokens
    (ours, ours_logits, n_layers), (theirs, theirs_logits) = _both(path, ids, decode)
    for layer in [*range(n_layers), -1]:
        diffs = op_diff.layer_diffs(ours, theirs, layer, np.arange(len(ids)))
        assert len(diffs) >= (14 if layer >= 0 else 2)  # every point was seen on both sides
        first = op_diff.first_difference(diffs)
        assert first is None, f"layer {layer}: {first.describe()}"
    assert len(ours_logits) == len(theirs_logits) == 1 + decode
    for a, b in zip(ours_logits, theirs_logits):
        assert np.array_equal(a, b), f"max logit difference {np.abs(a - b).max():.3g}"
