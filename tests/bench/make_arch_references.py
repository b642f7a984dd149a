"""Write the small random-weight reference models of the newer architectures and llama.cpp's logits for them.

For each architecture (gemma3, phi3, mistral3, qwen35, ...) this writes, with `gguf.GGUFWriter`, a
seeded random-weight GGUF (a few layers, width 64, the 268-token byte BPE vocabulary of the shared
reference fixtures, copied from `ref-llama-f32.gguf`) stored as F32 and as one quantized type, then
runs llama.cpp (llama-cpp-python 0.3.36, CPU, F32 KV cache, no flash attention, loaded without extra
buffer types: ggml's AMX repacking crashes in this sandbox) and stores, in the shared fixtures'
format (`../shared/fixtures/README.md`), its logits at every prompt position and after each of 16
greedy tokens: `ref-ARCH-TYPE.logits.json` beside `ref-ARCH-TYPE.gguf` in tests/fixtures/arch/.

Usage (a script run by hand; llama-cpp-python is not a project dependency):

    python tests/bench/make_arch_references.py [ARCH ...] [--out tests/fixtures/arch]

Weights: matrices N(0, 1/fan_in), norms 1 + N(0, 0.1^2), embeddings N(0, 1) (N(0, 1/width) where the
architecture scales them by sqrt(width)); quantized files store
every matrix whose rows are whole 32-value blocks in the quantized type and keep vectors in F32.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from gguf import GGUFWriter, quants
from gguf.constants import GGMLQuantizationType as Q
from gguf.constants import RopeScalingType

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "fixtures" / "reference"
VOCAB_FROM = SHARED / "ref-llama-f32.gguf"
OUT = ROOT / "tests" / "fixtures" / "arch"
N_GREEDY = 16
SEED = 12


@dataclass(frozen=True)
class Dims:
    """Sizes of one random model."""

    n_layers: int = 4
    d: int = 64
    n_head: int = 4
    n_kv: int = 2
    head: int = 16
    ff: int = 96
    vocab: int = 268
    n_experts: int = 4
    n_used: int = 2


class Weights:
    """Seeded random tensors by name (numpy order: [n_out, n_in])."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.tensors: dict[str, np.ndarray] = {}

    def mat(self, name: str, n_out: int, n_in: int, *stack: int) -> None:
        shape = (*stack, n_out, n_in)
        self.tensors[name] = (self.rng.standard_normal(shape) / np.sqrt(n_in)).astype(np.float32)

    def vec(self, name: str, n: int, mean: float = 1.0, std: float = 0.1, *stack: int) -> None:
        """A vector (or a stack of them: biases of stacked experts), N(mean, std^2)."""
        self.tensors[name] = (mean + std * self.rng.standard_normal((*stack, n))).astype(np.float32)


def _head(w: Weights, dims: Dims, *, tied: bool = False, embed_std: float = 1.0) -> None:
    w.tensors["token_embd.weight"] = (embed_std * w.rng.standard_normal((dims.vocab, dims.d))).astype(np.float32)
    w.vec("output_norm.weight", dims.d)
    if not tied:
        w.mat("output.weight", dims.vocab, dims.d)


def _attention(w: Weights, b: str, dims: Dims, *, q_mult: int = 1, qk_norm: bool = False, fused: bool = False,
               out_bias: bool = False) -> None:
    q, kv = dims.n_head * dims.head, dims.n_kv * dims.head
    if fused:
        w.mat(b + "attn_qkv.weight", q * q_mult + 2 * kv, dims.d)
    else:
        w.mat(b + "attn_q.weight", q * q_mult, dims.d)
        w.mat(b + "attn_k.weight", kv, dims.d)
        w.mat(b + "attn_v.weight", kv, dims.d)
    w.mat(b + "attn_output.weight", dims.d, q)
    if qk_norm:
        w.vec(b + "attn_q_norm.weight", dims.head)
        w.vec(b + "attn_k_norm.weight", dims.head)
    if out_bias:
        w.vec(b + "attn_output.bias", dims.d, 0.0)


def _norms(w: Weights, b: str, dims: Dims, *names: str) -> None:
    for name in names or ("attn_norm", "ffn_norm"):
        w.vec(f"{b}{name}.weight", dims.d)


def _qkv_biases(w: Weights, b: str, dims: Dims) -> None:
    for part, n in (("q", dims.n_head), ("k", dims.n_kv), ("v", dims.n_kv)):
        w.vec(f"{b}attn_{part}.bias", n * dims.head, 0.0)


def _dense(w: Weights, b: str, dims: Dims, *, fused_up: bool = False) -> None:
    if fused_up:
        w.mat(b + "ffn_up.weight", 2 * dims.ff, dims.d)
    else:
        w.mat(b + "ffn_gate.weight", dims.ff, dims.d)
        w.mat(b + "ffn_up.weight", dims.ff, dims.d)
    w.mat(b + "ffn_down.weight", dims.d, dims.ff)


def _common(gw: GGUFWriter, dims: Dims, *, rope_base: float = 10000.0) -> None:
    gw.add_block_count(dims.n_layers)
    gw.add_context_length(256)
    gw.add_embedding_length(dims.d)
    gw.add_feed_forward_length(dims.ff)
    gw.add_head_count(dims.n_head)
    gw.add_head_count_kv(dims.n_kv)
    gw.add_key_length(dims.head)
    gw.add_value_length(dims.head)
    gw.add_rope_dimension_count(dims.head)
    gw.add_layer_norm_rms_eps(1e-6)
    gw.add_rope_freq_base(rope_base)


# ---- architectures: each writes its metadata and returns its tensors ---------------------------------------


def gemma3(gw: GGUFWriter, w: Weights) -> None:
    """Six layers: five sliding-window (window 6, RoPE base 10000) then one global (base 1e6); logits capped at 4."""
    dims = Dims(n_layers=6, ff=64)
    _common(gw, dims, rope_base=1e6)
    gw.add_sliding_window(6)
    gw.add_float32("gemma3.rope.freq_base_swa", 10000.0)
    gw.add_float32("gemma3.final_logit_softcapping", 4.0)
    _head(w, dims, tied=True, embed_std=dims.d ** -0.5)  # the sqrt(d) embedding scale brings rows to N(0, 1)
    for i in range(dims.n_layers):
        b = f"blk.{i}."
        _norms(w, b, dims, "attn_norm", "post_attention_norm", "ffn_norm", "post_ffw_norm")
        _attention(w, b, dims, qk_norm=True)
        _dense(w, b, dims)


def gemma4(gw: GGUFWriter, w: Weights) -> None:
    """Five layers, sliding (head 16, base 1e4) except layers 2 and 4 (head 32, base 1e6, proportional RoPE:
    `rope_freqs` stops the upper half of the pairs); layer 4 has no attn_v (values from the keys)."""
    dims, head_swa = Dims(n_layers=5, head=32, ff=64), 16
    pattern = [True, True, False, True, False]
    _common(gw, dims, rope_base=1e6)
    gw.add_sliding_window(6)
    gw.add_array("gemma4.attention.sliding_window_pattern", pattern)
    gw.add_uint32("gemma4.attention.key_length_swa", head_swa)
    gw.add_uint32("gemma4.attention.value_length_swa", head_swa)
    gw.add_uint32("gemma4.rope.dimension_count_swa", head_swa)
    gw.add_uint32("gemma4.embedding_length_per_layer_input", 0)
    gw.add_float32("gemma4.rope.freq_base_swa", 10000.0)
    gw.add_float32("gemma4.final_logit_softcapping", 4.0)
    _head(w, dims, tied=True, embed_std=dims.d ** -0.5)
    w.tensors["rope_freqs.weight"] = np.array([1.0] * 8 + [1e30] * 8, np.float32)
    for i, sliding in enumerate(pattern):
        b, layer = f"blk.{i}.", Dims(n_layers=5, head=head_swa if sliding else dims.head, ff=64)
        _norms(w, b, dims, "attn_norm", "post_attention_norm", "ffn_norm", "post_ffw_norm")
        _attention(w, b, layer, qk_norm=True)
        if i == 4:
            del w.tensors[b + "attn_v.weight"]
        w.vec(b + "layer_output_scale.weight", 1, 1.0, 0.3)
        _dense(w, b, dims)


def phi3(gw: GGUFWriter, w: Weights) -> None:
    """Fused q/k/v and gate/up projections; a declared sliding window that llama.cpp does not apply."""
    dims = Dims()
    _common(gw, dims)
    gw.add_sliding_window(8)
    _head(w, dims)
    for i in range(dims.n_layers):
        b = f"blk.{i}."
        _norms(w, b, dims)
        _attention(w, b, dims, fused=True)
        _dense(w, b, dims, fused_up=True)


def mistral3(gw: GGUFWriter, w: Weights) -> None:
    """llama's block with adjacent-pair RoPE and an attention output bias; YaRN x16 (own betas, log multiplier)."""
    dims = Dims()
    _common(gw, dims, rope_base=1e6)
    gw.add_rope_scaling_type(RopeScalingType.YARN)
    gw.add_rope_scaling_factor(16.0)
    gw.add_rope_scaling_orig_ctx_len(2048)
    gw.add_float32("mistral3.rope.scaling.yarn_beta_fast", 16.0)
    gw.add_float32("mistral3.rope.scaling.yarn_beta_slow", 2.0)
    gw.add_float32("mistral3.rope.scaling.yarn_log_multiplier", 0.5)
    _head(w, dims)
    for i in range(dims.n_layers):
        b = f"blk.{i}."
        _norms(w, b, dims)
        _attention(w, b, dims, out_bias=True)
        _dense(w, b, dims)


def glm4moe(gw: GGUFWriter, w: Weights) -> None:
    """One dense layer then two MoE layers: 8 experts in 4 groups (2 groups, 2 experts used), sigmoid gating
    with a selection bias, weights renormalised and scaled by 2.5, one shared expert; q/k norms, q/k/v
    biases, rotary over half of each head."""
    dims, e, ff_exp = Dims(n_layers=3, n_experts=8), 8, 32
    _common(gw, dims)
    gw.add_rope_dimension_count(dims.head // 2)
    gw.add_uint32("glm4moe.leading_dense_block_count", 1)
    gw.add_expert_count(e)
    gw.add_expert_used_count(dims.n_used)
    gw.add_expert_feed_forward_length(ff_exp)
    gw.add_uint32("glm4moe.expert_shared_count", 1)
    gw.add_uint32("glm4moe.expert_group_count", 4)
    gw.add_uint32("glm4moe.expert_group_used_count", 2)
    gw.add_bool("glm4moe.expert_weights_norm", True)
    gw.add_float32("glm4moe.expert_weights_scale", 2.5)
    gw.add_uint32("glm4moe.expert_gating_func", 2)
    _head(w, dims)
    for i in range(dims.n_layers):
        b = f"blk.{i}."
        _norms(w, b, dims, "attn_norm", "post_attention_norm")
        _attention(w, b, dims, qk_norm=True)
        _qkv_biases(w, b, dims)
        if i == 0:
            _dense(w, b, dims)
            continue
        w.mat(b + "ffn_gate_inp.weight", e, dims.d)
        w.vec(b + "exp_probs_b.bias", e, 0.0, 0.3)
        w.mat(b + "ffn_gate_exps.weight", ff_exp, dims.d, e)
        w.mat(b + "ffn_up_exps.weight", ff_exp, dims.d, e)
        w.mat(b + "ffn_down_exps.weight", dims.d, ff_exp, e)
        w.mat(b + "ffn_gate_shexp.weight", ff_exp, dims.d)
        w.mat(b + "ffn_up_shexp.weight", ff_exp, dims.d)
        w.mat(b + "ffn_down_shexp.weight", dims.d, ff_exp)


def lfm2(gw: GGUFWriter, w: Weights) -> None:
    """Four layers: short convolutions (kernel 3) except layer 2, attention with q/k norms (KV heads 0 mark
    the convolutions); the final norm is `token_embd_norm`."""
    dims, kv_heads = Dims(), [0, 0, 2, 0]
    _common(gw, dims, rope_base=1e6)
    gw.add_head_count_kv(kv_heads)
    gw.add_uint32("lfm2.shortconv.l_cache", 3)
    w.tensors["token_embd.weight"] = (dims.d ** -0.5 * w.rng.standard_normal((dims.vocab, dims.d))).astype(np.float32)
    w.vec("token_embd_norm.weight", dims.d)  # tied head: small rows, so it does not echo the input
    for i, heads in enumerate(kv_heads):
        b = f"blk.{i}."
        _norms(w, b, dims)
        if heads:
            _attention(w, b, dims, qk_norm=True)
        else:
            w.vec(b + "shortconv.conv.weight", 3, 0.0, 0.5, dims.d)
            w.mat(b + "shortconv.in_proj.weight", 3 * dims.d, dims.d)
            w.mat(b + "shortconv.out_proj.weight", dims.d, dims.d)
        _dense(w, b, dims)


def smollm3(gw: GGUFWriter, w: Weights) -> None:
    """llama's block, four layers, the fourth without RoPE."""
    dims = Dims()
    _common(gw, dims, rope_base=5e6)
    _head(w, dims, tied=True, embed_std=dims.d ** -0.5)  # small rows, so a tied head does not echo the input
    for i in range(dims.n_layers):
        b = f"blk.{i}."
        _norms(w, b, dims)
        _attention(w, b, dims)
        _dense(w, b, dims)


def qwen35(gw: GGUFWriter, w: Weights) -> None:
    """Three Gated DeltaNet layers then one gated full-attention layer, dense FFNs (partial rotary: 8 of 16)."""
    dims = Dims(ff=64)
    n_k, n_v, head_k, conv = 2, 4, 16, 4
    _common(gw, dims, rope_base=1e7)
    gw.add_rope_dimension_count(8)
    gw.add_rope_dimension_sections([2, 1, 1, 0])
    gw.add_uint32("qwen35.full_attention_interval", 4)
    gw.add_ssm_conv_kernel(conv)
    gw.add_ssm_inner_size(n_v * head_k)
    gw.add_ssm_state_size(head_k)
    gw.add_ssm_time_step_rank(n_v)
    gw.add_ssm_group_count(n_k)
    _head(w, dims)
    channels, value_dim = 2 * n_k * head_k + n_v * head_k, n_v * head_k
    for i in range(dims.n_layers):
        b = f"blk.{i}."
        _norms(w, b, dims, "attn_norm", "post_attention_norm")
        if (i + 1) % 4:
            w.mat(b + "attn_qkv.weight", channels, dims.d)
            w.mat(b + "attn_gate.weight", value_dim, dims.d)
            w.vec(b + "ssm_conv1d.weight", conv, 0.0, 0.5, channels)
            w.vec(b + "ssm_dt.bias", n_v, 0.0, 0.3)
            w.tensors[b + "ssm_a"] = (-np.exp(0.3 * w.rng.standard_normal(n_v))).astype(np.float32)
            w.mat(b + "ssm_beta.weight", n_v, dims.d)
            w.mat(b + "ssm_alpha.weight", n_v, dims.d)
            w.vec(b + "ssm_norm.weight", head_k)
            w.mat(b + "ssm_out.weight", dims.d, value_dim)
        else:
            _attention(w, b, dims, q_mult=2, qk_norm=True)
        _dense(w, b, dims)


def gpt_oss(gw: GGUFWriter, w: Weights) -> None:
    """Four layers alternating sliding window (6) and full attention, sinks, biases, 4 experts (2 used);
    YaRN x32 over an original context of 4096, as published gpt-oss files have it."""
    dims = Dims(ff=32)
    _common(gw, dims, rope_base=150000.0)
    gw.add_rope_scaling_type(RopeScalingType.YARN)
    gw.add_rope_scaling_factor(32.0)
    gw.add_rope_scaling_orig_ctx_len(4096)
    gw.add_sliding_window(6)
    gw.add_expert_count(dims.n_experts)
    gw.add_expert_used_count(dims.n_used)
    gw.add_expert_feed_forward_length(dims.ff)
    _head(w, dims)
    e, ff = dims.n_experts, dims.ff
    for i in range(dims.n_layers):
        b = f"blk.{i}."
        _norms(w, b, dims, "attn_norm", "post_attention_norm")
        _attention(w, b, dims, out_bias=True)
        _qkv_biases(w, b, dims)
        w.vec(b + "attn_sinks.weight", dims.n_head, 0.0, 1.0)
        w.mat(b + "ffn_gate_inp.weight", e, dims.d)
        w.vec(b + "ffn_gate_inp.bias", e, 0.0)
        w.mat(b + "ffn_gate_exps.weight", ff, dims.d, e)
        w.mat(b + "ffn_up_exps.weight", ff, dims.d, e)
        w.mat(b + "ffn_down_exps.weight", dims.d, ff, e)
        w.vec(b + "ffn_gate_exps.bias", ff, 0.0, 0.1, e)
        w.vec(b + "ffn_up_exps.bias", ff, 0.0, 0.1, e)
        w.vec(b + "ffn_down_exps.bias", dims.d, 0.0, 0.1, e)


BUILDERS: dict[str, tuple[Callable[[GGUFWriter, Weights], None], Q | None]] = {
    "gemma3": (gemma3, Q.Q8_0),
    "phi3": (phi3, Q.Q4_0),
    "mistral3": (mistral3, Q.Q8_0),
    "qwen35": (qwen35, Q.Q8_0),
    "gemma4": (gemma4, Q.Q8_0),
    "gpt-oss": (gpt_oss, Q.MXFP4),
    "smollm3": (smollm3, Q.Q8_0),
    # F32 only for now: on a Q8_0 file llama.cpp and the engine part by about 0.03 on every row after the
    # first (1.1 on two), only when `exp_probs_b` is non-zero; not understood yet.
    "glm4moe": (glm4moe, None),
    "lfm2": (lfm2, Q.Q8_0),  # experts only, as published files store them; the rest stays F32
}


# ---- writing ----------------------------------------------------------------------------------------------


def _copy_tokenizer(gw: GGUFWriter) -> None:
    from gguf import GGUFReader

    ref = GGUFReader(VOCAB_FROM)
    for key, field in ref.fields.items():
        if key.startswith("tokenizer."):
            value = field.contents()
            sub = field.types[1] if len(field.types) > 1 else None
            gw.add_key_value(key, value, field.types[0], sub_type=sub)


def _stored(name: str, array: np.ndarray, qtype: Q) -> tuple[np.ndarray, Q | None]:
    quantizable = (array.ndim >= 2 and array.shape[-1] % 32 == 0 and "conv1d" not in name and "norm" not in name
                   and "ffn_gate_inp" not in name)  # routers stay F32, as llama-quantize leaves them
    if qtype == Q.MXFP4:
        quantizable = quantizable and name.endswith("_exps.weight")
    if qtype == Q.F32 or not quantizable:
        return array, None
    return quants.quantize(array, qtype), qtype


def write_model(arch: str, qtype: Q, path: Path) -> Path:
    build, _ = BUILDERS[arch]
    gw = GGUFWriter(str(path), arch)
    gw.add_name("random-weight reference")  # not "phi3": llama.cpp would then look up Phi-3's special tokens
    w = Weights(SEED)
    build(gw, w)
    gw.add_file_type(0 if qtype == Q.F32 else int(qtype))
    _copy_tokenizer(gw)
    for name, array in w.tensors.items():
        data, raw = _stored(name, array, qtype)
        gw.add_tensor(name, data, raw_dtype=raw)
    gw.write_header_to_file()
    gw.write_kv_data_to_file()
    gw.write_tensors_to_file()
    gw.close()
    return path


# ---- llama.cpp's logits ---------------------------------------------------------------------------------------


def _load(path: Path):
    import llama_cpp
    import llama_cpp.llama_cpp as llama_c

    default_params = llama_c.llama_model_default_params

    def params():
        p = default_params()
        p.use_extra_bufts = False  # AMX repacking dies with SIGILL here
        return p

    llama_c.llama_model_default_params = params
    try:
        # type 0: F32 KV cache. YaRN settings -1: "not set", so llama.cpp takes the file's (as its own tools do);
        # llama-cpp-python's defaults (beta_fast 32, beta_slow 1, attn_factor 1) would override them.
        return llama_cpp.Llama(model_path=str(path), n_ctx=256, n_batch=256, logits_all=True, verbose=False,
                               type_k=0, type_v=0, flash_attn=False, n_threads=2,
                               yarn_beta_fast=-1.0, yarn_beta_slow=-1.0, yarn_attn_factor=-1.0)
    finally:
        llama_c.llama_model_default_params = default_params


def reference(path: Path, prompt: list[int]) -> dict:
    """llama.cpp's logits for `prompt` (one prefill) and 16 greedy tokens, in the fixtures' format."""
    llm = _load(path)
    llm.reset()
    llm.eval(prompt)
    prefill = np.array(llm.scores[: len(prompt)], dtype=np.float32)
    greedy, decode = [int(np.argmax(prefill[-1]))], []
    for _ in range(N_GREEDY):
        llm.eval([greedy[-1]])
        row = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
        decode.append(row)
        greedy.append(int(np.argmax(row)))
    return {
        "model": path.name,
        "prompt_ids": prompt,
        "greedy_ids": greedy[:N_GREEDY],
        "prefill_logits": np.round(prefill.astype(np.float64), 6).tolist(),
        "decode_logits": np.round(np.array(decode, dtype=np.float64), 6).tolist(),
        "note": "llama.cpp (llama-cpp-python 0.3.36), CPU, F32 KV cache, no flash attention; "
                "written by tests/bench/make_arch_references.py",
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("arches", nargs="*", default=list(BUILDERS))
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    prompt = json.loads((SHARED / "ref-llama-f32.logits.json").read_text())["prompt_ids"]
    for arch in args.arches:
        for qtype in (Q.F32, BUILDERS[arch][1]) if BUILDERS[arch][1] else (Q.F32,):
            path = write_model(arch, qtype, args.out / f"ref-{arch}-{qtype.name.lower()}.gguf")
            ref = reference(path, prompt)
            path.with_suffix(".logits.json").write_text(json.dumps(ref))
            print(f"{path.name}: {path.stat().st_size:,} bytes, greedy {ref['greedy_ids']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
