"""Block types the reference files lack, against llama.cpp bit for bit (`quantdot`, `kquant_tiled`): IQ4_NL and
IQ4_XS matrices, experts of Q4_K and IQ4_XS, the grid types (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S) and the
one-bit and ternary types (IQ1_S, IQ1_M, TQ1_0, TQ2_0), and BF16 matrices.

Files with random weights are written at test time and requantized by llama.cpp's quantizer, every matrix to
one type: a two-layer llama 256 values wide for IQ4_XS (whole 256-value blocks), 288 for IQ4_NL (rows of 9
and 17 blocks: an odd last block, which a single token's kernel adds after its two chains), and a one-layer
qwen3moe 256 wide. llama.cpp runs each (one thread, F32 KV cache, no flash attention) beside the engine's
exact products: a pass of 24 tokens (IQ4_NL through tinyBLAS, IQ4_XS through the tiled kernel), one of 6
(IQ4_XS through `ggml_vec_dot_iq4_xs_q8_K`), decode passes (single tokens: IQ4_NL's two interleaved chains
in `ggml_vec_dot_iq4_nl_q8_0`), and for the experts a 40-token pass in which two experts are chosen 5 times
(per-row kernel) and two 30 and 40 times (`mul_mat_id`'s tiled kernel) must give identical intermediates
and logits. The grid, one-bit and ternary types need no quantizer (llama.cpp's wants an importance matrix for some): their
matrices are random stored blocks (`write_llama_blocks`), run for 12 tokens (the tiled kernel) and 3 (the
per-row `ggml_vec_dot_*_q8_K`), each with a decode pass.
"""

from __future__ import annotations

import numpy as np
import pytest
from llama_support import (
    both_engines,
    needs_llama,
    requantize,
    write_llama,
    write_llama_blocks,
    write_qwen3moe,
)
from real_weights_support import request_ids

from walkthrough.engine import op_diff
from walkthrough.engine.glassbox import quantdot
from walkthrough.inspect.gguf import open_gguf

WIDTHS = {"IQ4_NL": (288, 544), "IQ4_XS": (256, 512)}  # (model width, FFN width)


def assert_llama_cpps_numbers(path, n_tokens: int, decode: int) -> None:
    """A prefill of tokens 5 .. 5 + n_tokens - 1 and `decode` decode passes: every op of every layer and all the
    logits identical to llama.cpp's (`both_engines`: exact products, one thread, F32 KV cache)."""
    (ours, ours_logits, n_layers), (theirs, theirs_logits) = both_engines(path, list(range(5, 5 + n_tokens)), decode)
    for layer in [*range(n_layers), -1]:
        first = op_diff.first_difference(op_diff.layer_diffs(ours, theirs, layer, np.arange(n_tokens)))
        assert first is None, f"layer {layer}: {first.describe()}"
    for a, b in zip(ours_logits, theirs_logits, strict=True):
        assert np.array_equal(a, b), f"max logit difference {np.abs(a - b).max():.3g}"


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


LOW_BIT = sorted({*quantdot.GRID_TYPES, *quantdot.ONE_BIT, *quantdot.TERNARY}, key=lambda t: t.value)


@needs_llama
@pytest.mark.parametrize("qtype", LOW_BIT, ids=lambda t: t.name)
@pytest.mark.parametrize("n_tokens", [12, 3])
def test_low_bit_types_give_llama_cpps_numbers_bit_for_bit(qtype, n_tokens, tmp_path):
    path = write_llama_blocks(tmp_path / f"llama-{qtype.name}.gguf", qtype)
    assert {t.ggml_type for n, t in open_gguf(path).tensors.items() if n.startswith("blk.")} >= {qtype}
    assert_llama_cpps_numbers(path, n_tokens, 1)


@needs_llama
@pytest.mark.parametrize("n_tokens", [12, 1])
def test_bf16_weights_give_llama_cpps_numbers_bit_for_bit(n_tokens, tmp_path):
    """A llama whose matrices llama.cpp requantized to BF16, rows 272 and 528 values long (16 left over after
    whole steps of 32): the input rounded to BF16, tinyBLAS for 2+ tokens and `ggml_vec_dot_bf16` for one."""
    from gguf.constants import GGMLQuantizationType as Q

    path = requantize(write_llama(tmp_path / "llama.gguf", n_embd=272, n_ff=528), tmp_path / "llama-bf16.gguf", "BF16")
    assert {t.ggml_type for n, t in open_gguf(path).tensors.items() if n.startswith("blk.")} >= {Q.BF16}
    assert_llama_cpps_numbers(path, n_tokens, 2)
