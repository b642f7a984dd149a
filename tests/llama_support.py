"""For the llama.cpp engine's tests: the skip marker, and a small model of an architecture only llama.cpp runs.

`needs_llama` skips a test only where llama-cpp-python is genuinely absent
(CI installs the `[llama]` extra, so there they run). `write_olmoe` writes an
OLMoE file (llama.cpp's src/models/olmoe.cpp: full-width q/k RMSNorm, routed
experts whose weights are not renormalised) with seeded random F32 weights and
the reference fixtures' tokenizer and chat template, small enough to run every
stage in a test. `write_one_layer_llama` writes a one-layer llama file of given
F32 matrices (no tokenizer) for llama.cpp's quantizer. `both_engines` runs one
prefill and a few decode passes through llama.cpp and the numpy engine's exact
products, for the bit-for-bit tests; `write_llama`, `write_qwen3moe` and `write_gemma3` a llama, an
MoE or a gemma3 of any width with the fixtures' vocabulary, and `requantize` has llama.cpp's quantizer turn a file into
another type.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from conftest import FIXTURES_DIR
from gguf import GGUFWriter

from walkthrough.engine import op_diff
from walkthrough.engine.glassbox.model import Model
from walkthrough.engine.glassbox.session import Session
from walkthrough.engine.llama.model import INSTALL_HINT, llama_available
from walkthrough.inspect.gguf import open_gguf

needs_llama = pytest.mark.skipif(
    not llama_available(), reason=f"llama-cpp-python is not installed here ({INSTALL_HINT})"
)

TOKENIZER_SOURCE = FIXTURES_DIR / "reference" / "ref-qwen3moe-q8_0.gguf"
OLMOE = {"n_layers": 2, "n_embd": 64, "n_head": 4, "n_head_kv": 4, "n_ff": 32, "n_experts": 8, "n_used": 2}


LLAMA_MATRICES = ("token_embd", "output", "blk.0.attn_q", "blk.0.attn_k", "blk.0.attn_v", "blk.0.attn_output",
                  "blk.0.ffn_gate", "blk.0.ffn_up", "blk.0.ffn_down")


def write_one_layer_llama(path: Path, matrices: dict[str, np.ndarray]) -> None:
    """A one-layer llama F32 file of `matrices` (numpy order, every name of LLAMA_MATRICES + ".weight"), its norms
    ones, 4 heads and no tokenizer: what llama.cpp's quantizer reads."""
    d, ff = matrices["token_embd.weight"].shape[1], matrices["blk.0.ffn_gate.weight"].shape[0]
    w = GGUFWriter(str(path), "llama")
    for add, value in ((w.add_block_count, 1), (w.add_context_length, 256), (w.add_embedding_length, d),
                       (w.add_feed_forward_length, ff), (w.add_head_count, 4), (w.add_head_count_kv, 4),
                       (w.add_layer_norm_rms_eps, 1e-5), (w.add_rope_freq_base, 10000.0), (w.add_file_type, 0)):
        add(value)
    for name in LLAMA_MATRICES:
        w.add_tensor(name + ".weight", matrices[name + ".weight"])
    for name in ("output_norm.weight", "blk.0.attn_norm.weight", "blk.0.ffn_norm.weight"):
        w.add_tensor(name, np.ones(d, np.float32))
    _finish(w)


def add_tokenizer(w: GGUFWriter, src, chat_template: bool = True) -> None:
    """A file's vocabulary (the reference fixtures': 268 tokens) and its chat template, copied from `src`."""
    w.add_tokenizer_model(src.get("tokenizer.ggml.model"))
    w.add_tokenizer_pre(src.get("tokenizer.ggml.pre"))
    w.add_token_list(src.get("tokenizer.ggml.tokens"))
    w.add_token_types([int(t) for t in src.get("tokenizer.ggml.token_type")])
    w.add_token_merges(src.get("tokenizer.ggml.merges"))
    w.add_bos_token_id(src.get("tokenizer.ggml.bos_token_id"))
    w.add_eos_token_id(src.get("tokenizer.ggml.eos_token_id"))
    if chat_template:
        w.add_chat_template(src.get("tokenizer.chat_template"))


def _random_model(path: Path, arch: str, n_embd: int, metadata: tuple, seed: int):
    """A writer for a random-weight `arch` file: its metadata ((GGUFWriter.add_..., value) pairs), the fixtures'
    vocabulary and template, and random embedding and output matrices with their norm. Returns the writer and
    `weights(*shape)`, random float32 of that numpy shape scaled by 1/sqrt(its last size), and the generator."""
    src = open_gguf(TOKENIZER_SOURCE)
    vocab = len(src.get("tokenizer.ggml.tokens"))
    rng = np.random.default_rng(seed)

    def weights(*shape: int) -> np.ndarray:  # numpy order (ggml's reversed)
        return (rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32)

    w = GGUFWriter(str(path), arch)
    w.add_name(f"test-{arch}")
    for add, value in metadata:
        add(w, value)
    add_tokenizer(w, src)
    src.close()
    w.add_tensor("token_embd.weight", weights(vocab, n_embd))
    w.add_tensor("output_norm.weight", np.ones(n_embd, np.float32))
    w.add_tensor("output.weight", weights(vocab, n_embd))
    return w, weights, rng


def _finish(w: GGUFWriter) -> None:
    """Write the header, metadata and tensors, and close the file."""
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _llama_metadata(d: int, n_ff: int, n_layers: int) -> tuple:
    """A random llama's metadata for `_random_model`: 4 heads, 2 KV heads, F32."""
    G = GGUFWriter
    return ((G.add_block_count, n_layers), (G.add_context_length, 256), (G.add_embedding_length, d),
            (G.add_feed_forward_length, n_ff), (G.add_head_count, 4), (G.add_head_count_kv, 2),
            (G.add_layer_norm_rms_eps, 1e-5), (G.add_rope_freq_base, 10000.0), (G.add_file_type, 0))


def _llama_matrices(d: int, n_ff: int) -> tuple:
    """(name, numpy shape) of each matrix of a random llama's layer."""
    kv = d // 2
    return (("attn_q", (d, d)), ("attn_k", (kv, d)), ("attn_v", (kv, d)), ("attn_output", (d, d)),
            ("ffn_gate", (n_ff, d)), ("ffn_up", (n_ff, d)), ("ffn_down", (d, n_ff)))


def write_llama(path: Path, n_embd: int = 256, n_ff: int = 512, n_layers: int = 2, seed: int = 0) -> Path:
    """A llama F32 file with random weights of any width (4 heads, 2 KV heads) and the fixtures' vocabulary:
    a source for llama.cpp's quantizer whose rows suit 256-value blocks."""
    w, weights, rng = _random_model(path, "llama", n_embd, _llama_metadata(n_embd, n_ff, n_layers), seed)
    for i in range(n_layers):
        for name, shape in _llama_matrices(n_embd, n_ff):
            w.add_tensor(f"blk.{i}.{name}.weight", weights(*shape))
        for name in ("attn_norm", "ffn_norm"):
            w.add_tensor(f"blk.{i}.{name}.weight", (1 + 0.1 * rng.standard_normal(n_embd)).astype(np.float32))
    _finish(w)
    return path


def write_qwen3moe(path: Path, n_embd: int = 256, n_ff_exp: int = 256, n_experts: int = 4, n_used: int = 2,
                   seed: int = 0) -> Path:
    """A one-layer qwen3moe F32 file with random weights (4 heads of 64, 2 KV heads, q/k norms, experts whose
    weights are renormalised) and the fixtures' vocabulary: rows of whole 256-value blocks for k-quant experts."""
    d, head, kv = n_embd, 64, 2 * 64
    G = GGUFWriter
    w, weights, rng = _random_model(path, "qwen3moe", d, (
        (G.add_block_count, 1), (G.add_context_length, 256), (G.add_embedding_length, d),
        (G.add_feed_forward_length, n_ff_exp), (G.add_expert_feed_forward_length, n_ff_exp),
        (G.add_head_count, 4), (G.add_head_count_kv, 2), (G.add_key_length, head), (G.add_value_length, head),
        (G.add_layer_norm_rms_eps, 1e-6), (G.add_rope_freq_base, 10000.0), (G.add_expert_count, n_experts),
        (G.add_expert_used_count, n_used), (G.add_file_type, 0)), seed)
    for name, shape in (("attn_q", (4 * head, d)), ("attn_k", (kv, d)), ("attn_v", (kv, d)),
                        ("attn_output", (d, 4 * head)), ("ffn_gate_inp", (n_experts, d)),
                        ("ffn_gate_exps", (n_experts, n_ff_exp, d)), ("ffn_up_exps", (n_experts, n_ff_exp, d)),
                        ("ffn_down_exps", (n_experts, d, n_ff_exp))):
        w.add_tensor(f"blk.0.{name}.weight", weights(*shape))
    for name, size in (("attn_norm", d), ("ffn_norm", d), ("attn_q_norm", head), ("attn_k_norm", head)):
        w.add_tensor(f"blk.0.{name}.weight", (1 + 0.1 * rng.standard_normal(size)).astype(np.float32))
    _finish(w)
    return path


def put_block_scales(raw: np.ndarray, qtype, scales: np.ndarray) -> None:
    """Write fp16 block scales [n_out, nb] into stored blocks [n_out, nb, bytes] of a type whose d is their first two
    bytes, their last two (TQ1_0, TQ2_0), or of IQ1_M, which keeps d's 16 bits as the top nibbles of its four uint16
    scale words (ggml-common.h)."""
    from gguf.constants import GGMLQuantizationType

    if qtype != GGMLQuantizationType.IQ1_M:
        at = raw.shape[-1] - 2 if qtype in (GGMLQuantizationType.TQ1_0, GGMLQuantizationType.TQ2_0) else 0
        raw[..., at : at + 2] = scales.view(np.uint8).reshape(*raw.shape[:2], 2)
        return
    bits = scales.view(np.uint16)
    words = np.ascontiguousarray(raw[..., 48:56]).view(np.uint16)  # [n_out, nb, 4]
    for i in range(4):
        words[..., i] = (words[..., i] & 0x0FFF) | (((bits >> (4 * i)) & 15) << 12)
    raw[..., 48:56] = words.view(np.uint8).reshape(*raw.shape[:2], 8)


def write_llama_blocks(path: Path, qtype, n_embd: int = 256, n_ff: int = 512, n_layers: int = 2, seed: int = 0) -> Path:
    """A llama file whose layer matrices are random stored blocks of `qtype` (a grid, one-bit or other 256-value type
    no quantizer is needed for: any bytes are valid codes; each block's fp16 d is set small so the values stay near
    the F32 matrices' size), its embedding and output matrices F32, and the fixtures' vocabulary."""
    from gguf.constants import GGML_QUANT_SIZES

    w, _, rng = _random_model(path, "llama", n_embd, _llama_metadata(n_embd, n_ff, n_layers), seed)
    block, size = GGML_QUANT_SIZES[qtype]
    for i in range(n_layers):
        for name, (n_out, n_in) in _llama_matrices(n_embd, n_ff):
            raw = rng.integers(0, 256, size=(n_out, n_in // block, size), dtype=np.uint8)
            put_block_scales(raw, qtype, rng.uniform(2e-4, 1e-3, size=raw.shape[:2]).astype(np.float16))
            w.add_tensor(f"blk.{i}.{name}.weight", raw.reshape(n_out, -1), raw_dtype=qtype)
        for name in ("attn_norm", "ffn_norm"):
            w.add_tensor(f"blk.{i}.{name}.weight", (1 + 0.1 * rng.standard_normal(n_embd)).astype(np.float32))
    _finish(w)
    return path


def write_gemma3(path: Path, n_layers: int, n_embd: int = 64, n_head: int = 2, head: int = 16, seed: int = 0) -> Path:
    """A gemma3 F32 file with random weights (one KV head, q/k norms, post-norms, five sliding layers of window 6
    per global one) and the fixtures' vocabulary; n_embd / n_head need not be the head size (gemma3 27B's is not)."""
    d, ff = n_embd, 64
    G = GGUFWriter
    w, weights, rng = _random_model(path, "gemma3", d, (
        (G.add_block_count, n_layers), (G.add_context_length, 256), (G.add_embedding_length, d),
        (G.add_feed_forward_length, ff), (G.add_head_count, n_head), (G.add_head_count_kv, 1),
        (G.add_key_length, head), (G.add_value_length, head), (G.add_layer_norm_rms_eps, 1e-6),
        (G.add_rope_freq_base, 1e6), (G.add_sliding_window, 6), (G.add_file_type, 0)), seed)
    w.add_float32("gemma3.rope.freq_base_swa", 10000.0)
    for i in range(n_layers):
        for name, shape in (("attn_q", (n_head * head, d)), ("attn_k", (head, d)), ("attn_v", (head, d)),
                            ("attn_output", (d, n_head * head)), ("ffn_gate", (ff, d)), ("ffn_up", (ff, d)),
                            ("ffn_down", (d, ff))):
            w.add_tensor(f"blk.{i}.{name}.weight", weights(*shape))
        for name, size in (("attn_norm", d), ("post_attention_norm", d), ("ffn_norm", d), ("post_ffw_norm", d),
                           ("attn_q_norm", head), ("attn_k_norm", head)):
            w.add_tensor(f"blk.{i}.{name}.weight", (1 + 0.1 * rng.standard_normal(size)).astype(np.float32))
    _finish(w)
    return path


def write_olmoe(path: Path, seed: int = 0) -> Path:
    """A 2-layer OLMoE with 8 experts (2 used) and random weights; numpy's engine refuses the architecture.

    OLMoE normalises the whole q and k rows (n_embd wide), so its KV heads equal its query heads here."""
    src = open_gguf(TOKENIZER_SOURCE)
    tokens = src.get("tokenizer.ggml.tokens")
    h = OLMOE
    d, head = h["n_embd"], h["n_embd"] // h["n_head"]
    rng = np.random.default_rng(seed)

    def weights(*shape: int) -> np.ndarray:  # numpy order (ggml's reversed)
        return (rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32)

    w = GGUFWriter(str(path), "olmoe")
    w.add_name("test-olmoe")
    w.add_block_count(h["n_layers"])
    w.add_context_length(256)
    w.add_embedding_length(d)
    w.add_feed_forward_length(h["n_ff"])
    w.add_head_count(h["n_head"])
    w.add_head_count_kv(h["n_head_kv"])
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(10000.0)
    w.add_expert_count(h["n_experts"])
    w.add_expert_used_count(h["n_used"])
    add_tokenizer(w, src)
    src.close()
    kv = h["n_head_kv"] * head
    w.add_tensor("token_embd.weight", weights(len(tokens), d))
    w.add_tensor("output_norm.weight", np.ones(d, np.float32))
    w.add_tensor("output.weight", weights(len(tokens), d))
    for i in range(h["n_layers"]):
        b = f"blk.{i}."
        for name, shape in (("attn_q", (d, d)), ("attn_k", (kv, d)), ("attn_v", (kv, d)), ("attn_output", (d, d)),
                            ("ffn_gate_inp", (h["n_experts"], d)),
                            ("ffn_gate_exps", (h["n_experts"], h["n_ff"], d)),
                            ("ffn_up_exps", (h["n_experts"], h["n_ff"], d)),
                            ("ffn_down_exps", (h["n_experts"], d, h["n_ff"]))):
            w.add_tensor(b + name + ".weight", weights(*shape))
        for name, size in (("attn_norm", d), ("attn_q_norm", d), ("attn_k_norm", d), ("ffn_norm", d)):
            w.add_tensor(b + name + ".weight", (1 + 0.1 * rng.standard_normal(size)).astype(np.float32))
    _finish(w)
    return path


def load_llama(path: Path, **options):
    """llama-cpp-python's own `Llama` on a file, with ggml's AMX weight repacking off (it dies in this
    sandbox: `use_extra_bufts = False`); `options` go to `Llama`."""
    import llama_cpp
    import llama_cpp.llama_cpp as llama_c

    default_params = llama_c.llama_model_default_params

    def params():
        p = default_params()
        p.use_extra_bufts = False
        return p

    llama_c.llama_model_default_params = params
    try:
        return llama_cpp.Llama(model_path=str(path), **options)
    finally:
        llama_c.llama_model_default_params = default_params


def llama_cpp_completion(path: Path, text: str, n: int, *, f32_cache: bool = False) -> tuple[list[int], list[int]]:
    """llama.cpp's own completion of `text`: its tokens for the text (BOS as the file says, special-token
    text read as special: llama-cli's completion), then `n` greedy tokens, evaluated one at a time.

    llama-cpp-python's `Llama`, not this project's llama.cpp engine, so nothing of ours is in the reference:
    CPU, no flash attention, the KV cache F16 (the numpy engine's default) or F32, AMX repacking off.
    """
    kv = {"type_k": 0, "type_v": 0} if f32_cache else {}
    llm = load_llama(path, n_ctx=256, n_batch=256, logits_all=True, verbose=False, flash_attn=False,
                     n_threads=1, yarn_beta_fast=-1.0, yarn_beta_slow=-1.0, yarn_attn_factor=-1.0, **kv)
    try:
        prompt = llm.tokenize(text.encode(), add_bos=True, special=True)  # add_bos: only if the file says so
        llm.eval(prompt)
        greedy: list[int] = []
        for _ in range(n):
            greedy.append(int(np.argmax(np.asarray(llm.scores[llm.n_tokens - 1]))))
            llm.eval(greedy[-1:])
        return prompt, greedy
    finally:
        llm.close()


def both_engines(path: Path, ids: list[int], decode: int, *, kv_type: str = "f32", flash: bool = False):
    """(ours, theirs): each the named intermediates of one prefill over ids and the logits of that prefill
    then of `decode` greedy decode passes (llama.cpp's greedy tokens fed to both); ours with exact
    products, llama.cpp on one thread; both with a `kv_type` KV cache and flash attention as `flash` says (an
    F32 cache without flash attention by default). Ours also carries the model's layer count."""
    from walkthrough.engine.llama.model import LlamaModel
    from walkthrough.engine.llama.session import LlamaSession

    llama_model = LlamaModel.open(path, n_threads=1)
    llama = LlamaSession(llama_model, kv_type=kv_type, flash_attention=flash, named=op_diff.NAMES,
                         n_ctx=max(256, len(ids) + decode))
    theirs_logits = [llama.feed(ids, phase="prefill", all_logits=True).all_logits]
    theirs = llama.capture.tensors
    model = Model(open_gguf(path), exact_products=True)
    ours: op_diff.Tensors = {}
    model.probe = lambda name, a: ours.setdefault(name, []).append(np.array(a))
    session = Session(model, kv_type=kv_type, flash_attention=flash)
    ours_logits = [session.feed(ids, phase="prefill", all_logits=True).all_logits]
    model.probe = None
    for _ in range(decode):
        token = [int(np.argmax(theirs_logits[-1][-1]))]
        theirs_logits.append(llama.feed(token, phase="decode").logits[None])
        ours_logits.append(session.feed(token, phase="decode").logits[None])
    llama.close()
    llama_model.close()
    return (ours, ours_logits, model.config.n_layers), (theirs, theirs_logits)


def requantize(src: Path, dst: Path, ftype: str) -> Path:
    """src requantized by llama.cpp's llama_model_quantize to the pure file type `ftype` (one thread)."""
    import llama_cpp.llama_cpp as llama_c

    params = llama_c.llama_model_quantize_default_params()
    params.ftype = getattr(llama_c, f"LLAMA_FTYPE_MOSTLY_{ftype}")
    params.allow_requantize = True
    params.pure = True  # every matrix the type can hold at it (the others at llama.cpp's fallback)
    params.nthread = 1
    saved = os.dup(2)
    with open(os.devnull, "w") as quiet:  # llama.cpp logs every tensor on fd 2
        os.dup2(quiet.fileno(), 2)
        try:
            assert llama_c.llama_model_quantize(str(src).encode(), str(dst).encode(), params) == 0
        finally:
            os.dup2(saved, 2)
            os.close(saved)
    return dst
