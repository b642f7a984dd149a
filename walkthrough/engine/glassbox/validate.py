"""Check, before running, that a file holds exactly the tensors its architecture's declaration lists, at their shapes.

The metadata of a GGUF is untrusted: a vocabulary-only file has no weights, a
damaged one may claim 8 heads over tensors made for 4. Running such a file
would fail deep inside numpy; checking first turns it into one line naming the
tensor, the shape expected from the metadata, and the shape found, as
llama.cpp's loader does ("tensor has wrong shape").

The other way round, a tensor the declaration (`walkthrough.architectures.declarations`) does
not list for its layer is refused too: the recipe would skip it, and skipping a
weight gives wrong logits without a word. Blocks past the trunk
(multi-token-prediction layers, which the card lists and decoding does not run)
are not checked.

Shapes are ggml order (ne0 first), as `TensorInfo.shape` stores them.
"""

from __future__ import annotations

from walkthrough.architectures.declarations import Tensors
from walkthrough.architectures.layer_kinds import LAYER_KINDS, resolve
from walkthrough.engine.glassbox.config import Config
from walkthrough.errors import WalkthroughError
from walkthrough.inspect.gguf import GGUFFile
from walkthrough.inspect.tensors import tensor_layer

Shapes = dict[str, tuple[int, ...]]


class IncompleteModel(WalkthroughError):
    """The file lacks a tensor the engine needs, or has one of the wrong shape."""


class UnexpectedTensor(IncompleteModel):
    """The file holds a tensor its architecture's recipe would not use."""


def _check(f: GGUFFile, name: str, shape: tuple[int, ...] | None, *, required: bool = True) -> bool:
    t = f.tensors.get(name)
    if t is None:
        if required:
            what = "it holds no tensors at all: a vocabulary-only file" if not f.tensors else "an incomplete file?"
            raise IncompleteModel(
                f"{f.path.name} has no tensor {name} ({what}); the engine cannot run it (inspect still works)"
            )
        return False
    if shape is not None and tuple(t.shape) != shape:
        raise IncompleteModel(
            f"{f.path.name}: tensor {name} has shape {list(t.shape)} but the metadata implies {list(shape)}; "
            "the engine cannot run it"
        )
    return True


def _width(f: GGUFFile, pre: str, kind: str, d: int, up_outputs: int = 1) -> int:
    """An FFN's width from whichever of its projections the file holds (down: ggml [ff, d, ...],
    gate / up: [d, ff, ...]); -1 when none is there at width d, so any shape check fails on it."""
    down, gate, up = (f.tensors.get(f"{pre}ffn_{p}{kind}.weight") for p in ("down", "gate", "up"))
    if down is not None and len(down.shape) >= 2 and down.shape[1] == d:
        return down.shape[0]
    for t, share in ((gate, 1), (up, up_outputs)):
        if t is not None and len(t.shape) >= 2 and t.shape[0] == d:
            return t.shape[1] // share
    return -1


def _layer_shapes(f: GGUFFile, c: Config, i: int) -> Shapes:
    """Every tensor a layer of `c` may hold (name after `blk.N.`) and its shape implied by the metadata."""
    pre, d, h, dk, dv, h_kv = f"blk.{i}.", c.n_embd, c.n_head, c.head_k(i), c.head_v(i), c.n_head_kv[i]
    nq = h * dk * (2 if c.spec.attention_gate else 1)  # a gated query carries the gate too
    ff, e = _width(f, pre, "", d, 2 if c.spec.fused_up else 1), c.n_experts
    ff_exp, ff_sh = _width(f, pre, "_exps", d), _width(f, pre, "_shexp", d)
    shapes: Shapes = {
        "attn_q.weight": (d, nq), "attn_k.weight": (d, h_kv * dk), "attn_v.weight": (d, h_kv * dv),
        "attn_q.bias": (nq,), "attn_k.bias": (h_kv * dk,), "attn_v.bias": (h_kv * dv,),
        "attn_qkv.weight": (d, nq + h_kv * (dk + dv)), "attn_qkv.bias": (nq + h_kv * (dk + dv),),
        "attn_output.weight": (h * dv, d), "attn_output.bias": (d,),
        "attn_q_norm.weight": (dk,), "attn_k_norm.weight": (dk,), "attn_sinks.weight": (h,),
        "layer_output_scale.weight": (1,),
        "ffn_gate.weight": (d, ff), "ffn_up.weight": (d, 2 * ff if c.spec.fused_up else ff), "ffn_down.weight": (ff, d),
        "ffn_gate.bias": (ff,), "ffn_up.bias": (2 * ff if c.spec.fused_up else ff,), "ffn_down.bias": (d,),
        "ffn_gate_inp.weight": (d, e), "ffn_gate_inp.bias": (e,),
        "ffn_gate_exps.weight": (d, ff_exp, e), "ffn_up_exps.weight": (d, ff_exp, e),
        "ffn_down_exps.weight": (ff_exp, d, e),
        "ffn_gate_exps.bias": (ff_exp, e), "ffn_up_exps.bias": (ff_exp, e), "ffn_down_exps.bias": (d, e),
        "ffn_gate_shexp.weight": (d, ff_sh), "ffn_up_shexp.weight": (d, ff_sh), "ffn_down_shexp.weight": (ff_sh, d),
        "ffn_gate_inp_shexp.weight": (d,),
    }
    for name in c.spec.block.names:  # the block's norms
        if name.endswith("norm.weight"):
            shapes[name] = (d,)
    kind = LAYER_KINDS.get(c.mixer_key(i))
    if kind is not None and kind.shapes:  # a kind's own tensors (Gated DeltaNet, short convolution)
        shapes.update(resolve(kind.shapes)(c, i))
    return shapes


def _check_part(f: GGUFFile, pre: str, part: Tensors, shapes: Shapes) -> None:
    """Required tensors present, one whole alternative of each `one_of`, every present one at its shape."""
    for group in part.one_of:
        present = [alt for alt in group if any(pre + n in f.tensors for n in alt)]
        if len(present) > 1:
            raise IncompleteModel(f"{f.path.name} holds both {pre}{present[0][0]} and {pre}{present[1][0]}; "
                                  "the engine cannot tell which to use")
        for name in (present or group)[0]:
            _check(f, pre + name, shapes.get(name))
    for name in part.required:
        _check(f, pre + name, shapes.get(name))
    for name in part.optional:
        _check(f, pre + name, shapes.get(name), required=False)


def _check_nothing_else(f: GGUFFile, c: Config) -> None:
    """Refuse a tensor the declaration does not list for where it sits."""
    allowed_global = c.spec.tensors.names
    allowed = [c.spec.layer_tensors(c.mixers[i], c.ffns[i]).names for i in range(c.n_layers)]
    for name in f.tensors:
        layer = tensor_layer(name)
        if layer is None:
            ok = name in allowed_global
        else:
            ok = layer >= c.n_layers or name.split(".", 2)[2] in allowed[layer]
        if not ok:
            where = ("outside the blocks" if layer is None
                     else f"in a {c.mixers[layer]}-attention, {c.ffns[layer]}-FFN layer")
            raise UnexpectedTensor(
                f"{f.path.name} holds tensor {name}, which the engine's {c.arch} recipe does not use {where}; "
                "running without it would give wrong logits, so the engine refuses (inspect still works)"
            )


def check_tensors(f: GGUFFile, c: Config) -> None:
    """Raise `IncompleteModel` unless the file holds exactly the declared tensors, at their shapes."""
    if c.n_head % max(min(c.n_head_kv), 1) or min(c.n_head_kv) < 1:
        raise IncompleteModel(f"{f.path.name}: {c.n_head} query heads cannot share {list(set(c.n_head_kv))} KV heads")
    for i in range(c.n_layers):
        if c.n_rot(i) % 2 or c.n_rot(i) > c.head_k(i):
            raise IncompleteModel(f"{f.path.name}: RoPE over {c.n_rot(i)} dims does not fit heads of {c.head_k(i)}")
    if c.spec.attention_gate and c.head_dim_k != c.head_dim_v:  # the gate multiplies the output per value
        raise IncompleteModel(f"{f.path.name}: a gated attention head needs keys and values of one size, "
                              f"not {c.head_dim_k} and {c.head_dim_v}")
    if "moe" in c.ffns and not 0 < c.n_experts_used <= c.n_experts:
        raise IncompleteModel(f"{f.path.name}: {c.n_experts_used} experts used out of {c.n_experts}")
    r = c.router
    if "moe" in c.ffns and r.groups > 1 and (c.n_experts % r.groups or not 0 < r.groups_used <= r.groups):
        raise IncompleteModel(f"{f.path.name}: {c.n_experts} experts cannot form {r.groups} groups "
                              f"of which {r.groups_used} are used")
    if "sliding" in c.mixers and c.sliding_window < 1:
        raise IncompleteModel(f"{f.path.name}: sliding-window layers without a window size")
    if not f.tensors:
        _check(f, "token_embd.weight", None)
    d, v = c.n_embd, c.n_vocab
    _check_part(f, "", c.spec.tensors, {"token_embd.weight": (d, v), "output.weight": (d, v),
                                        c.spec.output_norm: (d,),
                                        "output_norm.weight": (d,), "rope_freqs.weight": (c.rope_dims // 2,)})
    for i in range(c.n_layers):
        check_layer(f, c, i)
    _check_nothing_else(f, c)


def check_layer(f: GGUFFile, c: Config, i: int) -> None:
    """Raise `IncompleteModel` unless layer i holds every tensor its declared kinds read, at their shapes."""
    _check_part(f, f"blk.{i}.", c.spec.layer_tensors(c.mixers[i], c.ffns[i]), _layer_shapes(f, c, i))


def check_named(f: GGUFFile, shapes: dict[str, tuple[int, ...]], optional: tuple[str, ...] = ()) -> None:
    """Raise `IncompleteModel` unless each named tensor is there at its shape (those in `optional` may be absent)."""
    for name, shape in shapes.items():
        _check(f, name, shape, required=name not in optional)
