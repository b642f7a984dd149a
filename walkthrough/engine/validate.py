"""Check, before running, that a file has every tensor the forward pass will use, at the shape it expects.

The metadata of a GGUF is untrusted: a vocabulary-only file has no weights, a
damaged one may claim 8 heads over tensors made for 4. Running such a file
would fail deep inside numpy; checking first turns it into one line naming the
tensor, the shape expected from the metadata, and the shape found, as
llama.cpp's loader does ("tensor has wrong shape").

Shapes are ggml order (ne0 first), as `TensorInfo.shape` stores them.
"""

from __future__ import annotations

from walkthrough.engine.config import Config
from walkthrough.errors import WalkthroughError
from walkthrough.inspect.gguf import GGUFFile


class IncompleteModel(WalkthroughError):
    """The file lacks a tensor the engine needs, or has one of the wrong shape."""


def _check(f: GGUFFile, name: str, shape: tuple[int, ...], *, required: bool = True) -> bool:
    t = f.tensors.get(name)
    if t is None:
        if required:
            what = "it holds no tensors at all: a vocabulary-only file" if not f.tensors else "an incomplete file?"
            raise IncompleteModel(
                f"{f.path.name} has no tensor {name} ({what}); the engine cannot run it (inspect still works)"
            )
        return False
    if tuple(t.shape) != shape:
        raise IncompleteModel(
            f"{f.path.name}: tensor {name} has shape {list(t.shape)} but the metadata implies {list(shape)}; "
            "the engine cannot run it"
        )
    return True


def _ffn_width(f: GGUFFile, gate: str, d: int) -> int:
    t = f.tensors.get(gate)
    return t.shape[1] if t is not None and len(t.shape) >= 2 and t.shape[0] == d else -1


def _check_attention(f: GGUFFile, c: Config, pre: str, h_kv: int) -> None:
    d, h, dk, dv = c.n_embd, c.n_head, c.head_dim_k, c.head_dim_v
    nq = h * dk * (2 if c.spec.attention_gate else 1)  # a gated query carries the gate too
    if pre + "attn_qkv.weight" in f.tensors:
        _check(f, pre + "attn_qkv.weight", (d, nq + h_kv * (dk + dv)))
    else:
        for part, width in (("q", nq), ("k", h_kv * dk), ("v", h_kv * dv)):
            _check(f, pre + f"attn_{part}.weight", (d, width))
            _check(f, pre + f"attn_{part}.bias", (width,), required=False)
    _check(f, pre + "attn_output.weight", (h * dv, d))
    _check(f, pre + "attn_output.bias", (d,), required=False)
    _check(f, pre + "attn_q_norm.weight", (dk,), required=c.spec.attention_gate)  # qwen35moe needs its q/k norms
    _check(f, pre + "attn_k_norm.weight", (dk,), required=c.spec.attention_gate)


def _check_ffn(f: GGUFFile, c: Config, pre: str, kind: str) -> None:
    d = c.n_embd
    if kind == "moe":
        e = c.n_experts
        _check(f, pre + "ffn_gate_inp.weight", (d, e))
        ff = _ffn_width(f, pre + "ffn_gate_exps.weight", d)
        _check(f, pre + "ffn_gate_exps.weight", (d, ff, e))
        _check(f, pre + "ffn_up_exps.weight", (d, ff, e))
        _check(f, pre + "ffn_down_exps.weight", (ff, d, e))
        ff_shared = _ffn_width(f, pre + "ffn_gate_shexp.weight", d)
        if _check(f, pre + "ffn_up_shexp.weight", (d, ff_shared), required=False):
            _check(f, pre + "ffn_gate_shexp.weight", (d, ff_shared))
            _check(f, pre + "ffn_down_shexp.weight", (ff_shared, d))
            _check(f, pre + "ffn_gate_inp_shexp.weight", (d,), required=False)
        return
    ff = _ffn_width(f, pre + "ffn_gate.weight", d)
    for part, shape in (("gate", (d, ff)), ("up", (d, ff)), ("down", (ff, d))):
        _check(f, pre + f"ffn_{part}.weight", shape)
    for part, shape in (("gate", (ff,)), ("up", (ff,)), ("down", (d,))):
        _check(f, pre + f"ffn_{part}.bias", shape, required=False)


def check_tensors(f: GGUFFile, c: Config) -> None:
    """Raise `IncompleteModel` unless every tensor the forward pass reads is there at its shape."""
    if c.n_head % max(min(c.n_head_kv), 1) or min(c.n_head_kv) < 1:
        raise IncompleteModel(f"{f.path.name}: {c.n_head} query heads cannot share {list(set(c.n_head_kv))} KV heads")
    if c.rope_dims % 2 or c.rope_dims > c.head_dim_k:
        raise IncompleteModel(f"{f.path.name}: RoPE over {c.rope_dims} dims does not fit heads of {c.head_dim_k}")
    if c.spec.attention_gate and c.head_dim_k != c.head_dim_v:  # the gate multiplies the output per value
        raise IncompleteModel(f"{f.path.name}: a gated attention head needs keys and values of one size, "
                              f"not {c.head_dim_k} and {c.head_dim_v}")
    if "moe" in c.ffns and not 0 < c.n_experts_used <= c.n_experts:
        raise IncompleteModel(f"{f.path.name}: {c.n_experts_used} experts used out of {c.n_experts}")
    _check(f, "token_embd.weight", (c.n_embd, c.n_vocab))
    _check(f, "output.weight", (c.n_embd, c.n_vocab), required=False)
    _check(f, "output_norm.weight", (c.n_embd,))
    _check(f, "rope_freqs.weight", (c.rope_dims // 2,), required=False)
    for i in range(c.n_layers):
        pre = f"blk.{i}."
        _check(f, pre + "attn_norm.weight", (c.n_embd,))
        if pre + "ffn_norm.weight" not in f.tensors:
            _check(f, pre + "post_attention_norm.weight", (c.n_embd,))
        else:
            _check(f, pre + "ffn_norm.weight", (c.n_embd,))
        if c.mixers[i] == "full":
            _check_attention(f, c, pre, c.n_head_kv[i])
        elif c.mixers[i] == "linear" and c.hybrid is not None:
            for name, shape in c.hybrid.tensor_shapes(c.n_embd).items():
                _check(f, pre + name, shape)
        _check_ffn(f, c, pre, c.ffns[i])
