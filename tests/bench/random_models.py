"""Random-weight GGUF models of a chosen architecture and shape, for benchmarks and engine comparisons.

`random_model(path, arch, ...)` writes an F32 file that llama.cpp and the
engine both load: the tensors each architecture's llama.cpp loader expects
(q/k/v biases for qwen2 and qwen2moe, q/k norms for the qwen3 family, routed
experts for the *moe ones plus a shared expert with its gate for qwen2moe),
tied embeddings (no `output.weight`) on request, and optionally llama 3's
`rope_freqs.weight`. With `vocab_from`, the tokenizer metadata of another GGUF
is copied (and fixes the vocabulary size) so llama.cpp can load the file.

Command line (writes one model per architecture into FOLDER):

    python tests/bench/random_models.py FOLDER [--width 256] [--vocab-from ref-qwen2-f32.gguf]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from gguf.constants import GGMLQuantizationType as Q
from gguf.constants import GGUFValueType as V

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from gguf_builder import Tensor, write_gguf

from walkthrough.inspect.gguf import open_gguf

ARCHES = ("llama", "qwen2", "qwen3", "qwen2moe", "qwen3moe")


def _tokenizer_metadata(path: Path) -> tuple[dict, int]:
    """The `tokenizer.*` keys of a GGUF in gguf_builder's form, and its vocabulary size."""
    out = {}
    with open_gguf(path) as f:
        for key, field in f.fields.items():
            if not key.startswith("tokenizer."):
                continue
            value = f.get(key)
            if field.is_array:
                out[key] = (
                    V.ARRAY,
                    field.element_type,
                    value if isinstance(value, list) else value.tolist(),
                )
            else:
                out[key] = (field.type, value)
        n_vocab = len(f.get("tokenizer.ggml.tokens"))
    return out, n_vocab


def random_model(
    path: Path,
    arch: str = "qwen2moe",
    *,
    width: int = 128,
    n_layer: int = 4,
    n_head: int = 4,
    n_kv: int = 2,
    n_vocab: int = 3000,
    ff: int = 256,
    n_exp: int = 8,
    k: int = 2,
    ff_exp: int = 64,
    ff_shared: int = 128,
    tied: bool = True,
    rope_freqs: bool = False,
    vocab_from: Path | None = None,
    seed: int = 0,
) -> Path:
    """Write a random-weight F32 model (ggml shapes, weights ~ N(0, 0.05), norms 1) and return its path."""
    rng = np.random.default_rng(seed)
    meta_tok, n_vocab = _tokenizer_metadata(vocab_from) if vocab_from else ({}, n_vocab)
    hd = width // n_head
    moe, biases, qk_norm = (
        arch.endswith("moe"),
        arch in ("qwen2", "qwen2moe"),
        arch.startswith("qwen3"),
    )

    def t(name: str, *shape: int, scale: float = 0.05) -> Tensor:  # shape in ggml order
        return Tensor(
            name, shape, Q.F32, rng.normal(0, scale, shape[::-1]).astype(np.float32).tobytes()
        )

    def ones(name: str, n: int) -> Tensor:
        return Tensor(name, (n,), Q.F32, (1 + rng.normal(0, 0.1, n)).astype(np.float32).tobytes())

    tensors = [t("token_embd.weight", width, n_vocab, scale=0.5), ones("output_norm.weight", width)]
    if not tied:
        tensors.append(t("output.weight", width, n_vocab))
    if rope_freqs:
        tensors.append(
            Tensor(
                "rope_freqs.weight",
                (hd // 2,),
                Q.F32,
                np.linspace(1, 8, hd // 2).astype(np.float32).tobytes(),
            )
        )
    for i in range(n_layer):
        p = f"blk.{i}."
        tensors += [
            ones(p + "attn_norm.weight", width),
            t(p + "attn_q.weight", width, n_head * hd),
            t(p + "attn_k.weight", width, n_kv * hd),
            t(p + "attn_v.weight", width, n_kv * hd),
            t(p + "attn_output.weight", n_head * hd, width),
            ones(p + "ffn_norm.weight", width),
        ]
        if biases:
            tensors += [
                t(p + "attn_q.bias", n_head * hd),
                t(p + "attn_k.bias", n_kv * hd),
                t(p + "attn_v.bias", n_kv * hd),
            ]
        if qk_norm:
            tensors += [ones(p + "attn_q_norm.weight", hd), ones(p + "attn_k_norm.weight", hd)]
        if not moe:
            tensors += [
                t(p + "ffn_gate.weight", width, ff),
                t(p + "ffn_up.weight", width, ff),
                t(p + "ffn_down.weight", ff, width),
            ]
            continue
        tensors += [
            t(p + "ffn_gate_inp.weight", width, n_exp, scale=0.3),
            t(p + "ffn_gate_exps.weight", width, ff_exp, n_exp),
            t(p + "ffn_up_exps.weight", width, ff_exp, n_exp),
            t(p + "ffn_down_exps.weight", ff_exp, width, n_exp),
        ]
        if arch == "qwen2moe":
            tensors += [
                t(p + "ffn_gate_inp_shexp.weight", width),
                t(p + "ffn_gate_shexp.weight", width, ff_shared),
                t(p + "ffn_up_shexp.weight", width, ff_shared),
                t(p + "ffn_down_shexp.weight", ff_shared, width),
            ]
    a = arch
    meta = {
        "general.architecture": (V.STRING, a),
        "general.name": (V.STRING, f"random {a}"),
        f"{a}.block_count": (V.UINT32, n_layer),
        f"{a}.context_length": (V.UINT32, 2048),
        f"{a}.embedding_length": (V.UINT32, width),
        f"{a}.feed_forward_length": (V.UINT32, ff),
        f"{a}.attention.head_count": (V.UINT32, n_head),
        f"{a}.attention.head_count_kv": (V.UINT32, n_kv),
        f"{a}.attention.layer_norm_rms_epsilon": (V.FLOAT32, 1e-6),
        f"{a}.rope.freq_base": (V.FLOAT32, 10000.0),
        f"{a}.vocab_size": (V.UINT32, n_vocab),
    }
    if moe:
        meta |= {
            f"{a}.expert_count": (V.UINT32, n_exp),
            f"{a}.expert_used_count": (V.UINT32, k),
            f"{a}.expert_feed_forward_length": (V.UINT32, ff_exp),
        }
        if arch == "qwen2moe":
            meta[f"{a}.expert_shared_feed_forward_length"] = (V.UINT32, ff_shared)
    return write_gguf(path, meta | meta_tok, tensors)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument(
        "--width", type=int, default=256, help="model width (k-quants need multiples of 256)"
    )
    parser.add_argument(
        "--vocab-from", type=Path, help="copy the tokenizer of this GGUF (llama.cpp needs one)"
    )
    args = parser.parse_args(argv)
    args.folder.mkdir(parents=True, exist_ok=True)
    w = args.width
    for arch in ARCHES:
        path = random_model(
            args.folder / f"random-{arch}-f32.gguf",
            arch,
            width=w,
            ff=w,
            ff_exp=w,
            ff_shared=w,
            tied=arch in ("llama", "qwen3moe"),
            rope_freqs=arch == "llama",
            vocab_from=args.vocab_from,
        )
        print(path)


if __name__ == "__main__":
    main()
