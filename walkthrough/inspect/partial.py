"""A partial download: a GGUF whose header is whole but whose tensor data stops early.

Downloads are written front to back, so a cut file keeps its header (metadata,
vocabulary, chat template, tensor table) and loses the tensors at the end. The
reader (`gguf._parse_shard`) opens such a file when its data is laid out as every
GGUF writer lays it out (each tensor at the previous one's end, rounded up to
the alignment), and records what is missing here; a file cut any other way
stays refused as damaged. Everything that reads only the header (inspect,
tokenize, template, estimate, the File, Tokens and Template stages) works;
reading a missing tensor's bytes raises `GGUFError`, and the engines refuse the
file before a pass with `refusal`.

Example: a 7.6 GB file whose first 199 MB arrived ->
    warning(): "partial download: 4.2 GiB (4,483,843,808 bytes) of the 4.4 GiB of tensor data (95%) are
    missing, 331 of 339 tensors: blk.1.ffn_down.weight (cut), blk.1.ffn_norm.weight, ... ; the header,
    vocabulary, template and estimate work; running the model needs the whole file: fetch it again"
"""

from __future__ import annotations

from dataclasses import dataclass

from walkthrough.units import binary_bytes, exact_bytes

NAMED = 3  # a warning names this many missing tensors and counts the rest
FETCH = "fetch the file again (or resume the download)"


@dataclass(frozen=True)
class MissingData:
    """The tensor data a partial download lacks (over all shards of a split model)."""

    missing_bytes: int  # bytes of tensor data past the end of the file(s)
    data_bytes: int  # bytes of tensor data the tensor table describes
    tensors: tuple[str, ...]  # tensors cut or absent, in table order; the first may be partly there
    n_tensors: int  # tensors in the table
    first_cut: bool  # the first missing tensor has some of its bytes in the file

    def __post_init__(self) -> None:
        if not self.tensors:
            raise ValueError("a partial download misses at least one tensor")

    @property
    def share(self) -> float:
        return self.missing_bytes / self.data_bytes if self.data_bytes else 1.0

    def names(self) -> str:
        """The first few missing tensors and how many more, e.g. "a (cut), b, c and 328 more"."""
        shown = list(self.tensors[:NAMED])
        if self.first_cut:
            shown[0] += " (cut)"
        rest = len(self.tensors) - len(shown)
        return ", ".join(shown) + (f" and {rest:,} more" if rest else "")

    def summary(self) -> str:
        """How much is missing and which tensors, in one clause."""
        return (f"{exact_bytes(self.missing_bytes)} of the {binary_bytes(self.data_bytes)} of tensor data "
                f"({self.share:.0%}) are missing, {len(self.tensors):,} of {self.n_tensors:,} tensors: "
                f"{self.names()}")

    def warning(self) -> str:
        """The one warning line shown when such a file opens."""
        return (f"partial download: {self.summary()}; the header, vocabulary, template and estimate work; "
                f"running the model needs the whole file: {FETCH}")

    def refusal(self, what: str) -> str:
        """Why `what` (e.g. "the numpy engine") cannot run: the weights are not all there."""
        return (f"{what} needs every weight, and this file is a partial download ({self.summary()}); "
                f"{FETCH}; inspect, tokenize, template and estimate work from its header")

    def tensor_refusal(self, name: str) -> str:
        """Why the bytes of tensor `name` cannot be read."""
        return (f"tensor {name}'s data is not in the file: it is a partial download "
                f"({binary_bytes(self.missing_bytes)} of tensor data missing); {FETCH}")


def merge(parts: list[MissingData | None], n_tensors: int, data_bytes: int) -> MissingData | None:
    """One record for a split model's shards (None when every shard is whole)."""
    found = [p for p in parts if p is not None]
    if not found:
        return None
    return MissingData(sum(p.missing_bytes for p in found), data_bytes,
                       tuple(name for p in found for name in p.tensors), n_tensors, found[0].first_cut)
