"""Bytes held against bytes read per token, at the file's own quantization and at other ggml types,
computed from the model card and the header's tensor table (the article's figure comparing a mixture of
experts with a dense model); no file is requantized.

Held is every tensor's bytes: what memory must hold. Read is what decoding one
token touches (`ModelCard.bytes_per_token`: all of a dense model; a mixture of
experts reads its routed experts' used share only). At another type each tensor
takes the type llama.cpp's quantizer would give it (`requant.converted_type`:
norms, biases and the MoE router stay as stored; rows that do not split into
256-value blocks fall back to a 32-value type) at ggml's bytes per block
(`gguf.GGML_QUANT_SIZES`); a group's reads scale with its bytes, since a token
reads the same share of each tensor in a group (one embedding row, the used
experts). Not modelled: the mixes of a `_M`/`_S` recipe (one type for every
weight here).

Example: SmolLM2-135M (dense) as stored (Q4_1, a Q8_0 embedding) holds 96.6 MB and reads 96.6 MB per token;
at Q4_K (its 576-wide rows fall back to Q5_0) it holds and reads 92.6 MB.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from walkthrough.inspect.card import ModelCard, counted_group
from walkthrough.inspect.gguf import TensorInfo
from walkthrough.inspect.requant import converted_type, size_at

# the types the view switches through, widest first (the file's own mix comes before them)
TYPES = tuple(GGMLQuantizationType[name] for name in ("F16", "Q8_0", "Q6_K", "Q5_K", "Q4_K", "Q4_0", "Q3_K", "Q2_K"))


def bits_per_weight(t: GGMLQuantizationType) -> float:
    """A ggml type's bits per weight: bytes per block x 8 / values per block (Q4_K: 144 x 8 / 256 = 4.5)."""
    values, nbytes = GGML_QUANT_SIZES[t]
    return 8 * nbytes / values


@dataclass(frozen=True)
class HeldRead:
    """One file at one quantization: bytes held and bytes read per decoded token."""

    name: str
    moe: bool
    quant: str  # "as stored" or a ggml type name
    bits: float  # bits per weight over every parameter
    held: float
    read: float | None  # None: the card cannot say what a token reads

    @property
    def ratio(self) -> float | None:
        """Held / read: how many times a token's reads fit in what is held."""
        return self.held / self.read if self.read else None


def held_read(card: ModelCard, tensors: Iterable[TensorInfo], name: str,
              t: GGMLQuantizationType | None = None) -> HeldRead:
    """The file's bytes held and read per token as stored (`t` None) or quantized to type `t`."""
    read_known = card.bytes_per_token is not None
    if t is None:
        held = float(sum(card.bytes_by_group.values()))
        read = float(card.bytes_per_token) if read_known else None
        quant = "as stored"
    else:
        held_by_group: dict[str, float] = {}
        for info in tensors:
            to = converted_type(info, t)  # its rows split into `to`'s blocks: size_at has a size
            size = info.nbytes if to is None else size_at(info, to)
            group = counted_group(info.name, card)
            held_by_group[group] = held_by_group.get(group, 0.0) + size
        held = sum(held_by_group.values())
        read = 0.0
        for g, reads in card.bytes_per_token_by_group.items():
            source = "embedding" if g == "output" and not card.bytes_by_group.get(g) else g  # a tied head
            stored = card.bytes_by_group.get(source, 0)
            if stored:
                read += reads * held_by_group.get(source, 0.0) / stored  # the same share of the group
        read = read if read_known else None
        quant = t.name
    n = card.n_params
    return HeldRead(name, card.is_moe, quant, 8 * held / n if n else 0.0, held, read)


def quant_label(index: int) -> str:
    """What position `index` of the view's cycle shows: 0 the file's own mix, then `TYPES` in order."""
    return "as stored" if index % (len(TYPES) + 1) == 0 else TYPES[index % (len(TYPES) + 1) - 1].name


def at_index(card: ModelCard, tensors: Iterable[TensorInfo], name: str, index: int) -> HeldRead:
    """`held_read` at position `index` of the view's cycle (0: as stored)."""
    i = index % (len(TYPES) + 1)
    return held_read(card, tensors, name, None if i == 0 else TYPES[i - 1])


def largest_held(files: list[tuple[str, ModelCard, list[TensorInfo]]]) -> float:
    """The most any of these files (name, card, tensors) holds at any position of the view's cycle: one axis
    for every type."""
    return max(at_index(card, tensors, name, i).held for name, card, tensors in files for i in range(len(TYPES) + 1))
