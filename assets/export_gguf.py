"""Write the trained tiny model and its tokenizer as a qwen2moe GGUF that llama.cpp loads.

Matrices are stored as Q8_0; norms, the routers (`ffn_gate_inp`, `ffn_gate_inp_shexp`) and biases
stay F32. Tensor names and metadata keys come from `gguf`'s constants. The embedding is tied in
training and written twice, as `token_embd` and as `output` (llama.cpp's qwen2moe requires both).

Usage: python assets/export_gguf.py [--build-dir DIR] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch
from gguf import (
    MODEL_ARCH,
    MODEL_TENSOR,
    TENSOR_NAMES,
    GGMLQuantizationType,
    GGUFWriter,
    LlamaFileType,
    TokenType,
)
from gguf.constants import MODEL_ARCH_NAMES
from gguf.quants import quantize

sys.path.insert(0, str(Path(__file__).parent))
from corpus import CHAT_TEMPLATE, END_OF_TEXT, IM_END, SPECIAL_TOKENS
from train_tokenizer import PRE_NAME

ASSETS = Path(__file__).parent
DEFAULT_OUT = ASSETS / "tiny-clinical-moe.gguf"
ARCH = MODEL_ARCH.QWEN2MOE
DESCRIPTION = (
    "A tiny qwen2moe mixture-of-experts model for the walkthrough app: {n_layer} layers, "
    "{n_head} query heads sharing {n_head_kv} KV heads, {n_expert} routed experts (2 per token) plus "
    "a shared expert, and a byte-level BPE vocabulary of {n_vocab} tokens, all trained from scratch "
    "with PyTorch on a CPU on synthetic patient records (assets/corpus.py) to name and cite "
    "interacting drugs from a small table of well-known pairs. A teaching toy: not medical advice. "
    "Rebuild with python assets/build_tiny_model.py."
)
# PyTorch parameter name (without the layer prefix) -> GGUF tensor kind and suffix.
LAYER_TENSORS = {
    "attn_norm": (MODEL_TENSOR.ATTN_NORM, "weight"),
    "attn_q.weight": (MODEL_TENSOR.ATTN_Q, "weight"),
    "attn_q.bias": (MODEL_TENSOR.ATTN_Q, "bias"),
    "attn_k.weight": (MODEL_TENSOR.ATTN_K, "weight"),
    "attn_k.bias": (MODEL_TENSOR.ATTN_K, "bias"),
    "attn_v.weight": (MODEL_TENSOR.ATTN_V, "weight"),
    "attn_v.bias": (MODEL_TENSOR.ATTN_V, "bias"),
    "attn_output.weight": (MODEL_TENSOR.ATTN_OUT, "weight"),
    "ffn_norm": (MODEL_TENSOR.FFN_NORM, "weight"),
    "ffn_gate_inp.weight": (MODEL_TENSOR.FFN_GATE_INP, "weight"),
    "ffn_gate_exps": (MODEL_TENSOR.FFN_GATE_EXP, "weight"),
    "ffn_up_exps": (MODEL_TENSOR.FFN_UP_EXP, "weight"),
    "ffn_down_exps": (MODEL_TENSOR.FFN_DOWN_EXP, "weight"),
    "ffn_gate_inp_shexp": (MODEL_TENSOR.FFN_GATE_INP_SHEXP, "weight"),
    "ffn_gate_shexp.weight": (MODEL_TENSOR.FFN_GATE_SHEXP, "weight"),
    "ffn_up_shexp.weight": (MODEL_TENSOR.FFN_UP_SHEXP, "weight"),
    "ffn_down_shexp.weight": (MODEL_TENSOR.FFN_DOWN_SHEXP, "weight"),
}
F32_KINDS = {MODEL_TENSOR.ATTN_NORM, MODEL_TENSOR.FFN_NORM, MODEL_TENSOR.OUTPUT_NORM,
             MODEL_TENSOR.FFN_GATE_INP, MODEL_TENSOR.FFN_GATE_INP_SHEXP}


def tensor_name(kind: MODEL_TENSOR, suffix: str, layer: int | None = None) -> str:
    base = TENSOR_NAMES[kind]
    return f"{base.format(bid=layer) if layer is not None else base}.{suffix}"


def add_tensor(writer: GGUFWriter, name: str, kind: MODEL_TENSOR, suffix: str,
               value: np.ndarray) -> None:
    """Q8_0 for matrices, F32 for norms, routers and biases. value is numpy-ordered [.., in]."""
    value = np.ascontiguousarray(value, dtype=np.float32)
    if suffix == "bias" or kind in F32_KINDS or value.ndim == 1:
        writer.add_tensor(name, value)
    else:
        q = quantize(value, GGMLQuantizationType.Q8_0)
        writer.add_tensor(name, q, raw_dtype=GGMLQuantizationType.Q8_0)


def vocab_from_tokenizer(path: Path) -> tuple[list[str], list[int], list[str]]:
    """Tokens in id order, their GGUF token types, and merges as 'a b' strings."""
    data = json.loads(path.read_text(encoding="utf-8"))
    vocab: dict[str, int] = dict(data["model"]["vocab"])
    for added in data["added_tokens"]:
        vocab[added["content"]] = added["id"]
    tokens = [""] * len(vocab)
    for text, idx in vocab.items():
        tokens[idx] = text
    if "" in tokens:
        raise ValueError(f"{path}: token ids are not contiguous")
    types = [int(TokenType.CONTROL if t in SPECIAL_TOKENS else TokenType.NORMAL) for t in tokens]
    merges = [m if isinstance(m, str) else " ".join(m) for m in data["model"]["merges"]]
    return tokens, types, merges


def export(build_dir: Path, out: Path) -> Path:
    """Write `out` from build_dir/model.pt and build_dir/tokenizer.json; returns out."""
    ckpt = torch.load(build_dir / "model.pt", map_location="cpu", weights_only=False)
    c = ckpt["config"]
    state = {k: v.float().numpy() for k, v in ckpt["state"].items()}
    tokens, types, merges = vocab_from_tokenizer(build_dir / "tokenizer.json")
    if len(tokens) != c["n_vocab"]:
        raise ValueError(f"tokenizer has {len(tokens)} tokens, model {c['n_vocab']}")
    summary = ckpt.get("summary", {})

    w = GGUFWriter(str(out), MODEL_ARCH_NAMES[ARCH])
    w.add_name("tiny-clinical-moe")
    w.add_description(DESCRIPTION.format(**c))
    w.add_license("MIT")
    w.add_author("walkthrough project")
    w.add_size_label(f"{c['n_expert']}x{c['n_ff_exp']}")
    w.add_string("general.training", json.dumps(summary, sort_keys=True))
    w.add_file_type(LlamaFileType.MOSTLY_Q8_0)
    w.add_quantization_version(2)
    w.add_context_length(c["n_ctx"])
    w.add_embedding_length(c["n_embd"])
    w.add_block_count(c["n_layer"])
    w.add_feed_forward_length(c["n_ff_shexp"])
    w.add_head_count(c["n_head"])
    w.add_head_count_kv(c["n_head_kv"])
    w.add_rope_freq_base(c["rope_base"])
    w.add_layer_norm_rms_eps(c["rms_eps"])
    w.add_expert_count(c["n_expert"])
    w.add_expert_used_count(c["n_expert_used"])
    w.add_expert_feed_forward_length(c["n_ff_exp"])
    w.add_expert_shared_feed_forward_length(c["n_ff_shexp"])

    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(PRE_NAME)
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(tokens.index(END_OF_TEXT))
    w.add_eos_token_id(tokens.index(IM_END))
    w.add_pad_token_id(tokens.index(END_OF_TEXT))
    w.add_add_bos_token(False)
    w.add_chat_template(CHAT_TEMPLATE)

    embd = state["token_embd.weight"]  # [n_vocab, n_embd]
    add_tensor(w, tensor_name(MODEL_TENSOR.TOKEN_EMBD, "weight"), MODEL_TENSOR.TOKEN_EMBD,
               "weight", embd)
    for i in range(c["n_layer"]):
        for key, (kind, suffix) in LAYER_TENSORS.items():
            add_tensor(w, tensor_name(kind, suffix, i), kind, suffix, state[f"layers.{i}.{key}"])
    add_tensor(w, tensor_name(MODEL_TENSOR.OUTPUT_NORM, "weight"), MODEL_TENSOR.OUTPUT_NORM,
               "weight", state["output_norm"])
    add_tensor(w, tensor_name(MODEL_TENSOR.OUTPUT, "weight"), MODEL_TENSOR.OUTPUT, "weight", embd)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build-dir", type=Path, default=ASSETS / "build")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args(argv)
    path = export(args.build_dir, args.out)
    print(f"wrote {path} ({path.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
