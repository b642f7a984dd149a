"""Each host's part of a layer split: which layers it holds, the bytes it keeps and the bytes it reads per token.

The layers are dealt out evenly in order (the first hosts take one more when
they do not divide), as llama.cpp's split does for hosts of equal memory. The
first host also keeps the token embedding (it embeds the tokens) and the last
one the output head (it computes the logits); a tied head needs the embedding
matrix on the last host too, so it is counted there as well.

- kept: the host's layers' tensors (`LayerInfo.nbytes`) and their KV cache for the
  context (`budget.layer_kv_bytes`), plus the embedding or head it keeps;
- read per decoded token: the trunk's reads (`ModelCard.bytes_per_token` less the
  embedding row and the head) shared over layers by their size, each layer's KV
  cache at the prompt's depth, the embedding row on the first host and the whole
  head on the last.

Not handled: multi-token-prediction blocks (llama.cpp does not run them for plain
decoding), recurrent state, hosts of different sizes.

Example: 4 layers over 3 hosts -> layers (0, 1), (2,), (3,); the head on host 3.
"""

from __future__ import annotations

from dataclasses import dataclass

from walkthrough.costs.budget import layer_kv_bytes
from walkthrough.inspect.card import ModelCard

HEAD_GROUPS = ("embedding", "output")


@dataclass(frozen=True)
class HostShare:
    """One host of the split."""

    host: int  # from 1; host 1 is the one holding the file and embedding the tokens
    layers: tuple[int, ...]  # layer indices, in order
    embedding: bool  # keeps the token embedding
    head: bool  # keeps the output head
    kept_bytes: float  # weights + KV cache for the context
    read_bytes: float  # per decoded token

    def describe(self) -> str:
        """'L0-13 +embedding', 'L28-39 +head', 'no layers'."""
        layers = (f"L{self.layers[0]}" + (f"-{self.layers[-1]}" if len(self.layers) > 1 else "")
                  if self.layers else "no layers")
        return layers + (" +embedding" if self.embedding else "") + (" +head" if self.head else "")


def deal(n_layers: int, hosts: int) -> list[tuple[int, ...]]:
    """Layer indices per host, evenly and in order: deal(4, 3) -> [(0, 1), (2,), (3,)]."""
    out, start = [], 0
    for i in range(hosts):
        n = n_layers // hosts + (1 if i < n_layers % hosts else 0)
        out.append(tuple(range(start, start + n)))
        start += n
    return out


def dealt(split: list[int]) -> list[tuple[int, ...]]:
    """Layer indices per host from counts: dealt([0, 2, 2]) -> [(), (0, 1), (2, 3)]."""
    starts = [sum(split[:i]) for i in range(len(split))]
    return [tuple(range(start, start + n)) for start, n in zip(starts, split)]


def shares(card: ModelCard, hosts: int, context: int, prompt_tokens: int, cache_type: str = "f16",
           split: list[int] | None = None) -> list[HostShare]:
    """Every host's layers, bytes kept and bytes read per decoded token (see the module docstring).

    `split`: layers per host, host 1 first (as `--split` gives them); default `deal`'s even split.
    """
    trunk = [layer for layer in card.layers if not layer.mtp]
    groups = card.bytes_by_group
    reads = card.bytes_per_token_by_group
    embedding = float(groups.get("embedding", 0))
    head = float(groups.get("output", 0)) or (embedding if card.tied_embeddings else 0.0)
    head_read = float(reads.get("output", 0))
    trunk_read = max(float(card.bytes_per_token or 0) - sum(reads.get(g, 0) for g in HEAD_GROUPS), 0.0)
    sized = sum(layer.nbytes for layer in trunk) or 1
    out = []
    for i, layers in enumerate(deal(len(trunk), hosts) if split is None else dealt(split)):
        first, last = i == 0, i == hosts - 1
        mine = [trunk[j] for j in layers]
        kept = sum(layer.nbytes + layer_kv_bytes(layer, context, cache_type) for layer in mine)
        read = sum(trunk_read * layer.nbytes / sized + layer_kv_bytes(layer, prompt_tokens, cache_type)
                   for layer in mine)
        kept += (embedding if first else 0.0) + (head if last else 0.0)
        read += (reads.get("embedding", 0) if first else 0.0) + (head_read if last else 0.0)
        out.append(HostShare(i + 1, layers, first, last, kept, read))
    return out


def hosts_needed(card: ModelCard, usable: float, context: int, cache_type: str = "f16") -> int | None:
    """The fewest hosts of `usable` bytes each whose shares all fit; None when not even one layer per host
    does (or the host has no memory)."""
    n_layers = max(sum(1 for layer in card.layers if not layer.mtp), 1)
    if usable <= 0:
        return None
    for n in range(1, n_layers + 1):
        if max(s.kept_bytes for s in shares(card, n, context, 1, cache_type)) <= usable:
            return n
    return None
