"""Bytes read and FLOPs of one pass from the file's tensor table and the experts the pass chose.

The numpy engine meters every weight it touches (`meter`); the llama.cpp engine
cannot, so this module applies the same counting rules to what llama.cpp
reports: every trunk tensor is read once per pass in its stored format, except
that a routed expert tensor (`*_exps`) reads only the slices of the experts
some token of the pass chose in that layer, a lookup table (`token_embd`,
`position_embd`) one row per distinct index (a table that is also the output
head is read whole, its looked-up rows counted as embedding), and layers that
serve only multi-token prediction nothing. Attention reads the KV cache it attends over; linear-attention layers their
fixed state (group "state").

FLOPs: 2 per weight of every matrix per row it multiplies (the last layer's FFN
and the output head multiply only the rows whose logits are kept, as llama.cpp
does), 2 per weight per token-expert pair for routed experts, and 2 x (key +
value size) per head per query-key pair the causal mask lets through.

`PassCounter(f, card)` sorts the tensor table out once per file; `count(shape)`
then costs a few sums per pass. Example: a decode pass of a 2-layer MoE file
with 8 experts that chose experts {1, 4} in layer 0 and {4, 6} in layer 1 reads
2/8 of each layer's expert tensors: the card's `bytes_per_token` for those layers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from walkthrough.inspect.card import ModelCard, tensor_group, tensor_layer
from walkthrough.inspect.gguf import GGUFFile, TensorInfo
from walkthrough.inspect.tensors import embedding_rows

_LOOKUP_STEMS = {"token_embd": "ids", "position_embd": "positions"}
_ATTENTION_KINDS = ("full", "sliding")


@dataclass(frozen=True)
class PassShape:
    """What a pass did, as far as costs go."""

    ids: Sequence[int]  # tokens fed
    start: int  # first position
    out_rows: int  # rows whose logits are kept (1, or every token with all logits)
    woken: Sequence[Sequence[int] | None]  # per layer: distinct experts chosen (None for dense layers)
    pairs: Sequence[int]  # per layer: token-expert pairs computed (0 for dense layers)
    kv_bytes: Sequence[int]  # per layer: KV bytes attended over (0 for other layers)
    state_bytes: Sequence[int]  # per layer: fixed state read (0 for other layers)


def _group(t: TensorInfo, card: ModelCard) -> str:
    group = tensor_group(t.name)
    layer = tensor_layer(t.name)
    if group == "attention" and layer is not None and layer < len(card.layers) \
            and card.layers[layer].attention == "linear":
        return "linear_attention"
    return group


def _is_matrix(t: TensorInfo) -> bool:
    return len(t.shape) >= 2 and t.shape[1] > 1


_LAST_LAYER_GROUPS = ("ffn", "router", "experts", "shared_expert")  # run on the kept rows only in the last layer


class PassCounter:
    """The counting rules applied to one file; the tensor table is sorted out once, each pass costs a few sums."""

    def __init__(self, f: GGUFFile, card: ModelCard):
        self.card = card
        self.n_layers = n_layers = card.n_layers or 0
        tied = "output.weight" not in f.tensors
        self.fixed: dict[str, int] = {}  # group -> bytes every pass reads whole
        self.params_per_row = 0  # weights multiplied once per token of the pass
        self.params_per_out_row = 0  # weights multiplied once per kept row (last layer's FFN, output head)
        self.lookups: list[tuple[str, str, int]] = []  # (group, "ids" | "positions", bytes per row)
        self.experts: list[tuple[str, int, int, int]] = []  # (group, layer, bytes per expert, params per expert)
        self.tied_row_bytes = 0  # a tied embedding's row: read by the lookup, not again by the head
        for t in f.tensors.values():
            layer = tensor_layer(t.name)
            if layer is not None and layer >= n_layers:
                continue  # multi-token-prediction block: not run
            group = _group(t, card)
            stem = t.name.rsplit(".", 1)[0]
            if stem in _LOOKUP_STEMS:
                self.lookups.append((group, _LOOKUP_STEMS[stem], t.nbytes // max(embedding_rows(t), 1)))
                if not (tied and stem == "token_embd"):
                    continue
                # tied: the output head reads the rest of the table (the looked-up rows are counted once)
                group = "output"
                self.tied_row_bytes = self.lookups[-1][2]
            if group == "experts" and layer is not None and card.n_experts:
                self.experts.append((group, layer, t.nbytes // card.n_experts, t.n_elements // card.n_experts))
                continue
            self.fixed[group] = self.fixed.get(group, 0) + t.nbytes
            if not _is_matrix(t):
                continue
            if group == "output" or (layer == n_layers - 1 and group in _LAST_LAYER_GROUPS):
                self.params_per_out_row += t.n_elements
            else:
                self.params_per_row += t.n_elements
        self.attention_flops_per_pair = sum(
            2 * card.n_head * (card.head_dim_k + card.head_dim_v)
            for layer in card.layers[:n_layers]
            if layer.attention in _ATTENTION_KINDS and card.n_head and card.head_dim_k and card.head_dim_v
        )

    def count(self, shape: PassShape) -> tuple[dict[str, int], int]:
        """Bytes read per group (plus "kv_cache", "state" and "total") and FLOPs of one pass."""
        n = len(shape.ids)
        read = dict(self.fixed)
        flops = 2 * (self.params_per_row * n + self.params_per_out_row * shape.out_rows)
        for group, index, row in self.lookups:
            rows = len(set(shape.ids)) if index == "ids" else n
            read[group] = read.get(group, 0) + row * rows
        if self.tied_row_bytes:
            read["output"] -= self.tied_row_bytes * len(set(shape.ids))
        for group, layer, nbytes, params in self.experts:
            read[group] = read.get(group, 0) + nbytes * len(shape.woken[layer] or ())
            flops += 2 * params * shape.pairs[layer]
        visible = sum(range(shape.start + 1, shape.start + n + 1))  # query-key pairs under the causal mask
        flops += self.attention_flops_per_pair * visible
        if any(shape.kv_bytes):
            read["kv_cache"] = int(sum(shape.kv_bytes))
        if any(shape.state_bytes):
            read["state"] = int(sum(shape.state_bytes))
        read["total"] = sum(read.values())
        return read, flops
