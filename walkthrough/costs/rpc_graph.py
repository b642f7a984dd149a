"""The graph llama.cpp's RPC client sends each worker every pass, in bytes (measured figures in rpc_graph.json).

ggml's RPC backend does not keep a worker's graph between passes: each
graph_compute carries the worker's part of the graph again, every node and every
tensor it reads. Per pass a worker is sent

    fixed + n_tokens x n_embd x 4 (the activations) + per_layer x its layers (+ head if it holds the head)

with the three figures fitted on one file of each architecture measured (`rpc_graph.json`
says on which file, which splits, by what command, and the fit's worst miss). A card of an architecture
measured takes its own figure; any other the figure of the measured one with the
same kind of FFN (MoE or dense), and `GraphBytes.basis` says so.

Example: SmolLM2 (llama, n_embd 576), a worker holding 10 layers without the head, one token:
3,924 + 2,304 + 12,680 x 10 = 133,028 bytes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from walkthrough.inspect.card import ModelCard

F32_BYTES = 4


@dataclass(frozen=True)
class GraphBytes:
    """The resend figures that apply to one model."""

    fixed: int  # per pass per worker: the command, inputs and the nodes every graph has
    head: int  # more on the worker holding the output head (fitted: qwen35moe's is negative)
    per_layer: int  # per layer on the worker
    basis: str  # which measurement the per-layer figure is, and whether it is this architecture's own

    def sent(self, layers: int, head: bool, n_embd: int, n_tokens: int = 1) -> int:
        """Bytes sent to one worker in one pass (graph and activations)."""
        return self.fixed + n_tokens * n_embd * F32_BYTES + self.per_layer * layers + (self.head if head else 0)

    def graph(self, layers: int, head: bool) -> int:
        """The graph alone (what `sent` adds to the activations)."""
        return self.fixed + self.per_layer * layers + (self.head if head else 0)


def load(path: Path | None = None) -> dict:
    return json.loads((path or Path(__file__).with_name("rpc_graph.json")).read_text(encoding="utf-8"))


def for_card(card: ModelCard, path: Path | None = None) -> GraphBytes:
    """The figures for this model: its architecture's, else those of the measured one with its FFN kind."""
    raw = load(path)
    rows = raw["per_layer"]
    kind = "moe" if card.is_moe else "dense"
    own = next((r for r in rows if r["architecture"] == card.architecture), None)
    row = own or next(r for r in rows if r["ffn"] == kind)
    basis = (f"measured on {row['architecture']}" if own else
             f"{card.architecture} not measured: {row['architecture']}'s ({kind} FFN)")
    return GraphBytes(row["fixed"], row["head"], row["bytes"], basis)
