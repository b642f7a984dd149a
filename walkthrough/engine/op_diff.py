"""Where the numpy engine's numbers part from llama.cpp's, op by op: the comparison behind tests/bench/op_diff.py.

Both engines run the same tokens in one pass. llama.cpp's intermediates are read through its
eval callback (`Capture.tensors`, asked for by `LlamaSession(named=NAMES)`), ours through the
model's probe (`Meter.look`), both under llama.cpp's graph names ("attn_norm-3",
"result_output"). `POINTS` lists a layer's comparable intermediates in the order the layer
computes them; a name that labels several nodes in llama.cpp's graph (`Qcur-N`: the projection,
its reshape, the roped result) is compared at its first or its last node. The first point of a
layer whose values are not bitwise equal is where that layer parts from llama.cpp; if every
earlier point (and the layers before) agreed bit for bit, that op itself computes differently.

Example: ours [1.0, 2.0], llama.cpp's [1.0, 2.0000002] -> 1 of 2 values differ, max |d| 2.4e-7,
1 ulp (the float32 values are neighbours).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Point:
    """One comparable intermediate: a label, llama.cpp's graph name stem, which of its nodes, its layout."""

    label: str
    name: str
    node: int = 0  # 0: the first node so named in the pass, -1: the last
    attention: bool = False  # [n_head, n_tokens, n_kv] with llama.cpp's n_kv padded (kq, kq_soft_max)
    common: bool = True  # shown by every attention layer; False: by some architectures' layers only


LAYER_POINTS = (
    Point("attn_norm", "attn_norm"),
    Point("Qcur", "Qcur"),
    Point("Kcur", "Kcur"),
    Point("Vcur", "Vcur"),
    Point("Qcur (roped)", "Qcur", -1),
    Point("Kcur (roped)", "Kcur", -1),
    Point("conv in_proj", "model.layers.{}.conv.in_proj", common=False),  # lfm2's short convolution (src/models/lfm2.cpp)
    Point("conv", "model.layers.{}.conv.conv", common=False),
    Point("conv out_proj", "model.layers.{}.conv.out_proj", common=False),
    Point("linear_attn_qkv_mixed", "linear_attn_qkv_mixed", common=False),  # qwen35's Gated DeltaNet (src/models/qwen35.cpp)
    Point("z", "z", common=False),
    Point("beta_sigmoid", "beta_sigmoid", common=False),
    Point("a_softplus", "a_softplus", common=False),
    Point("gate", "gate", common=False),
    Point("conv_output_raw", "conv_output_raw", common=False),
    Point("conv_output_silu", "conv_output_silu", common=False),
    Point("final_output", "final_output", common=False),
    Point("linear_attn_out", "linear_attn_out", common=False),
    Point("kq", "kq", attention=True),
    Point("kq_soft_max", "kq_soft_max", attention=True),
    Point("kqv_out", "kqv_out"),
    Point("attn_out", "attn_out"),
    Point("ffn_inp", "ffn_inp"),
    Point("ffn_norm", "ffn_norm"),
    Point("ffn_gate", "ffn_gate"),
    Point("ffn_up", "ffn_up"),
    Point("ffn_swiglu", "ffn_swiglu"),
    Point("ffn_geglu", "ffn_geglu"),
    Point("ffn_moe_logits", "ffn_moe_logits", common=False),  # an MoE layer (build_moe_ffn, src/llama-graph.cpp)
    Point("ffn_moe_logits_biased", "ffn_moe_logits_biased", common=False),
    Point("ffn_moe_out", "ffn_moe_out", common=False),
    Point("ffn_shexp", "ffn_shexp", common=False),
    Point("l_out", "l_out"),
)
HEAD_POINTS = (Point("result_norm", "result_norm"), Point("result_output", "result_output"))
NAMES = frozenset(p.name for p in LAYER_POINTS + HEAD_POINTS)  # the stems llama.cpp's capture reads

Tensors = dict[str, list[np.ndarray]]  # "NAME-LAYER" -> the values of each node so named, in graph order


@dataclass(frozen=True)
class Diff:
    """One point compared: how many values differ and by how much."""

    label: str
    layer: int  # -1 for the output head's points
    size: int  # values compared
    differing: int  # values not bitwise equal
    max_abs: float
    max_ulps: int  # largest distance in float32 steps

    @property
    def exact(self) -> bool:
        return self.differing == 0

    def describe(self) -> str:
        if self.exact:
            return f"{self.label}: all {self.size:,} values identical"
        return (f"{self.label}: {self.differing:,} of {self.size:,} values differ, max |d| {self.max_abs:.3g}, "
                f"max {self.max_ulps:,} ulps")


def ordered(a: np.ndarray) -> np.ndarray:
    """float32 values -> int64 keys whose differences count float32 steps (+0 and -0 are both 0)."""
    i = np.ascontiguousarray(a, dtype=np.float32).view(np.int32).astype(np.int64)
    return np.where(i < 0, -(i & 0x7FFFFFFF), i)


def compare(label: str, layer: int, ours: np.ndarray, theirs: np.ndarray) -> Diff:
    """Two arrays of the same shape, value by value (NaNs in the same places count as equal)."""
    a, b = np.asarray(ours, np.float32), np.asarray(theirs, np.float32)
    same = (a == b) | (np.isnan(a) & np.isnan(b))
    gap = np.where(same, 0, np.abs(a.astype(np.float64) - b.astype(np.float64)))
    steps = np.where(same, 0, np.abs(ordered(a) - ordered(b)))
    return Diff(label, layer, a.size, int(np.count_nonzero(~same)), float(gap.max(initial=0.0)),
                int(steps.max(initial=0)))


def aligned(point: Point, ours: np.ndarray, theirs: np.ndarray, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Both arrays in one layout: [n_tokens, values] rows, or [n_head, n_tokens, L] attention maps.

    llama.cpp's maps span its padded cache (n_kv >= L positions); only the L positions held are kept,
    and the positions the causal mask hides are zeroed on both sides (llama.cpp's `kq` holds whatever
    the cache's unused cells give there).
    """
    n = len(positions)
    if not point.attention:
        return ours.reshape(n, -1), theirs.reshape(n, -1)
    big_l = ours.shape[-1]
    theirs = theirs.reshape(-1, n, theirs.shape[-1])[:, :, :big_l]
    hidden = np.arange(big_l)[None, :] > positions[:, None]  # [n, L]
    return np.where(hidden, 0, ours), np.where(hidden, 0, theirs)


def nodes_of(tensors: Tensors, point: Point, layer: int) -> list[np.ndarray]:
    """Every node so named in the pass, in graph order (none if the name is not there)."""
    return tensors.get(point.name if layer < 0 else f"{point.name}-{layer}", [])


def pick(tensors: Tensors, point: Point, layer: int) -> np.ndarray | None:
    nodes = nodes_of(tensors, point, layer)
    return nodes[point.node] if nodes else None


def compare_point(point: Point, layer: int, ours: np.ndarray, theirs: list[np.ndarray],
                  positions: np.ndarray) -> Diff:
    """Ours against llama.cpp's node for the point; if that one differs, against any other node of the name.

    Architectures label more nodes with a name than the llama graph does (a bias added to `Qcur`, a
    scale after the rope), so the node the point names may be one step before or after the engine's
    value: another node that equals ours bit for bit counts as agreement (a first-node point is never
    matched to the last node, nor a last-node point to the first); if none does, the point's own node
    is reported.
    """
    own = theirs[point.node]
    if own.size != ours.size and not point.attention:
        raise ValueError(f"{point.label} of layer {layer}: {ours.size} values here, {own.size} in llama.cpp")
    diff = compare(point.label, layer, *aligned(point, ours, own, positions))
    if diff.exact:
        return diff
    others = theirs[:-1] if point.node == 0 else theirs[1:]  # a projection is never the last node, a result never the first
    for other in others:
        if other is not own and other.size == ours.size:
            again = compare(point.label, layer, *aligned(point, ours, other, positions))
            if again.exact:
                return again
    return diff


def only_reshapes(nodes: list[np.ndarray]) -> bool:
    """Whether every node holds the first one's values in its order: the name labels no later stage.

    Some graphs name only the projection `Qcur` (and its reshape) and the roped queries otherwise
    (gemma4's `Qcur_pos`) or not at all (lfm2): their last node is then no roped result to compare.
    """
    first = nodes[0].reshape(-1)
    return all(n.size == first.size and np.array_equal(n.reshape(-1), first, equal_nan=True) for n in nodes[1:])


# Graphs that give a point's name to another stage: architecture -> {our name: llama.cpp's name for that
# value}; a name llama.cpp reuses so is then not compared under its own. gemma4 labels the residual sum after
# attention (our `ffn_inp`) "attn_out" (src/models/gemma4.cpp).
GRAPH_NAMES = {"gemma4": {"ffn_inp": "attn_out"}}


def layer_diffs(ours: Tensors, theirs: Tensors, layer: int, positions: np.ndarray, arch: str = "") -> list[Diff]:
    """Every point both engines showed for one layer (layer -1: the output head), in computing order;
    `arch` (the file's architecture) picks the names its graph gives (`GRAPH_NAMES`)."""
    renamed = GRAPH_NAMES.get(arch, {})
    taken = set(renamed.values())
    out = []
    for point in LAYER_POINTS if layer >= 0 else HEAD_POINTS:
        if point.name in taken and point.name not in renamed:
            continue
        their_point = Point(point.label, renamed.get(point.name, point.name), point.node, point.attention)
        a, b = pick(ours, point, layer), nodes_of(theirs, their_point, layer)
        if a is None or not b or (point.node == -1 and only_reshapes(b)):
            continue
        out.append(compare_point(point, layer, a, b, positions))
    return out


def first_difference(diffs: list[Diff]) -> Diff | None:
    """The first point that is not bitwise equal, or None when all are."""
    return next((d for d in diffs if not d.exact), None)
