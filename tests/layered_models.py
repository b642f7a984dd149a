"""Small random-weight models with many layers or many experts, for the app's layout tests.

`write_model` writes a qwen2moe (routed experts only), a qwen2 (dense) or a
gemma3 (sliding-window layers, five per full one, llama.cpp's default period)
file with seeded random F32 weights in tiny widths, and the bundled tiny
model's tokenizer and chat template (copied key by key), so the app runs every
stage on it. Only the numbers of layers and experts matter to these tests; the
text such a model writes is noise.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter

TINY = Path(__file__).resolve().parents[1] / "assets" / "tiny-clinical-moe.gguf"
N_EMBD, N_HEAD, N_HEAD_KV, N_FF = 32, 2, 1, 16


def _copy_tokenizer(writer: GGUFWriter) -> int:
    """The tiny model's tokenizer.* keys into `writer`; its vocabulary size."""
    reader = GGUFReader(TINY)
    for name, field in reader.fields.items():
        if name.startswith("tokenizer."):
            sub = field.types[1] if field.types[0] == GGUFValueType.ARRAY and len(field.types) > 1 else None
            writer.add_key_value(name, field.contents(), field.types[0], sub_type=sub)
    return len(reader.fields["tokenizer.ggml.tokens"].contents())


def write_model(path: Path, n_layers: int, *, arch: str = "qwen2moe", n_experts: int = 8, n_used: int = 2,
                sliding_window: int = 4, seed: int = 0) -> Path:
    """Write a random `arch` model of `n_layers` layers (`n_experts`, `n_used` for qwen2moe); returns path."""
    rng = np.random.default_rng(seed)
    d, head = N_EMBD, N_EMBD // N_HEAD
    kv = N_HEAD_KV * head

    def mat(*shape: int) -> np.ndarray:  # numpy order: [.., n_out, n_in]
        return (rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32)

    def norm(n: int) -> np.ndarray:
        return (1 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    w = GGUFWriter(str(path), arch)
    w.add_name(f"test-{arch}-{n_layers}x{n_experts if arch == 'qwen2moe' else 0}")
    w.add_block_count(n_layers)
    w.add_context_length(512)
    w.add_embedding_length(d)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD_KV)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_rope_freq_base(10000.0)
    if arch == "qwen2moe":
        w.add_expert_count(n_experts)
        w.add_expert_used_count(n_used)
        w.add_expert_feed_forward_length(N_FF)
    if arch == "gemma3":
        w.add_sliding_window(sliding_window)
    n_vocab = _copy_tokenizer(w)
    w.add_tensor("token_embd.weight", mat(n_vocab, d))
    w.add_tensor("output_norm.weight", norm(d))
    w.add_tensor("output.weight", mat(n_vocab, d))
    for i in range(n_layers):
        b = f"blk.{i}."
        tensors = {"attn_norm": norm(d), "attn_q": mat(d, d), "attn_k": mat(kv, d), "attn_v": mat(kv, d),
                   "attn_output": mat(d, d), "ffn_norm": norm(d)}
        if arch == "qwen2moe":
            tensors |= {"ffn_gate_inp": mat(n_experts, d), "ffn_gate_exps": mat(n_experts, N_FF, d),
                        "ffn_up_exps": mat(n_experts, N_FF, d), "ffn_down_exps": mat(n_experts, d, N_FF)}
        else:
            tensors |= {"ffn_gate": mat(N_FF, d), "ffn_up": mat(N_FF, d), "ffn_down": mat(d, N_FF)}
        if arch == "gemma3":
            tensors |= {"attn_q_norm": norm(head), "attn_k_norm": norm(head), "post_attention_norm": norm(d),
                        "post_ffw_norm": norm(d)}
        for name, value in tensors.items():
            w.add_tensor(f"{b}{name}.weight", value)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
