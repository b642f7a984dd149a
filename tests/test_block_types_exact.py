"""Block types the reference files lack, against llama.cpp bit for bit (`quantdot`, `kquant_tiled`): IQ4_NL and
IQ4_XS matrices, and experts of Q4_K and IQ4_XS.

Files with random weights are written at test time and requantized by llama.cpp's quantizer, every matrix to
one type: a two-layer llama 256 values wide for IQ4_XS (whole 256-value blocks), 288 for IQ4_NL (rows of 9
and 17 blocks: an odd last block, which a single token's kernel adds after its two chains), and a one-layer
qwen3moe 256 wide. llama.cpp runs each (one thread, F32 KV cache, no flash attention) beside the engine's
exact products: a pass of 24 tokens (IQ4_NL through tinyBLAS, IQ4_XS through the tiled kernel), one of 6
(IQ4_XS through `ggml_vec_dot_iq4_xs_q8_K`), decode passes (single tokens: IQ4_NL's two interleaved chains
in `ggml_vec_dot_iq4_nl_q8_0`), and for the experts a 40-token pass in which two experts are chosen 5 times
(per-row kernel) and two 30 and 40 times (`mul_mat_id`'s tiled kernel) must give identical intermediates
and logits.
"""

from __future__ import annotations

import numpy as np
import pytest
from llama_support import both_engines, needs_llama, requantize, write_llama, write_qwen3moe
from real_weights_support import request_ids

from walkthrough.engine import op_diff
from walkthrough.inspect.gguf import open_gguf

WIDTHS = {"IQ4_NL": (288, 544), "IQ4_XS": (256, 512)}  # (model width, FFN width)


@needs_llama
@pytest.mark.parametrize("ftype", ["IQ4_NL", "IQ4_XS"])
@pytest.mark.parametrize("n_tokens", [24, 6])
def test_iq4_products_give_llama_cpps_numbers_bit_for_bit(ftype, n_tokens, tmp_path):
    width, ff = WIDTHS[ftype]
    source = write_llama(tmp_path / "llama-f32.gguf", n_embd=width, n_ff=ff)
    path = requantize(source, tmp_path / f"llama-{ftype}.gguf", ftype)
    f = open_gguf(path)
    types = {f.tensors[name].ggml_type.name for name in f.tensors if name.endswith("attn_q.weight")}
    assert types == {ftype}
    ids = request_ids(f)[:n_tokens]
    assert len(ids) == n_tokens
    (ours, ours_logits, n_layers), (theirs, theirs_logits) = both_engines(path, ids, 3)
    for layer in [*range(n_layers), -1]:
        diffs = op_diff.layer_diffs(ours, theirs, layer, np.arange(n_tokens))
        assert len(diffs) >= (14 if layer >= 0 else 2)
        first = op_diff.first_difference(diffs)
        assert first is None, f"layer {layer}: {first.describe()}"
    for a, b in zip(ours_logits, theirs_logits, strict=True):
        assert np.array_equal(a, b), f"max logit difference {np.abs(a - b).max():.3g}"



@needs_llama
@pytest.mark.parametrize("ftype", ["Q4_K_S", "IQ4_XS"])
def test_experts_of_block_types_give_llama_cpps_numbers_in_both_kernels(ftype, tmp_path):
    """A qwen3moe whose experts are Q4_K or IQ4_XS: `mul_mat_id` takes the tiled kernel for an expert 8 or more
    tokens chose and the per-row `vec_dot` for the others; a 40-token pass of 4 experts (2 each) has both."""
    path = requantize(write_qwen3moe(tmp_path / "moe-f32.gguf"), tmp_path / f"moe-{ftype}.gguf", ftype)
    f = open_gguf(path)
    assert f.tensors["blk.0.ffn_up_exps.weight"].ggml_type.name in ("Q4_K", "IQ4_XS")
    ids = (request_ids(f) * 4)[:40]
    (ours, ours_logits, _), (theirs, theirs_logits) = both_engines(path, ids, 2)
    for layer in (0, -1):
        first = op_diff.first_difference(op_diff.layer_diffs(ours, theirs, layer, np.arange(len(ids))))
        assert first is None, f"layer {layer}: {first.describe()}"
    for a, b in zip(ours_logits, theirs_logits, strict=True):
        assert np.array_equal(a, b), f"max logit difference {np.abs(a - b).max():.3g}"
