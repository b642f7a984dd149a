"""The causal attention matrix of a run, assembled from its passes' recorded rows.

A session made with `attention_rows=True` keeps, for every pass and attention
layer, the weights of every query of the pass over every cached key
(`LayerTrace.attention_rows`, [h, n, L]). `AttentionMap.from_steps(steps,
config)` places each pass's rows at its positions: a prefill chunk fills rows
start..end, a decode pass adds one row, and rows already there stay exactly as
they were (the pass that wrote them is over; nothing recomputes them). A pass
after a rewind writes its rows over the old ones from its start.

`matrix(layer, head)` is [T, T]: row i is what position i attended to, and the
entries right of the diagonal are NaN: the causal mask, which no weight
crosses (a sliding-window layer also masks what lies beyond its window; those
entries are 0, as the engine computes them). Query head h reads KV head
h // (n_head / n_head_kv) (`kv_head`). Linear-attention layers of hybrid
models have no matrix: they keep a fixed state, not one key per position
(`missing(layer)` says so).

Example: after a 3-token prefill and one decode pass, matrix(0, 0) is 4 x 4 with
NaN at (0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3) and each row summing to 1.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from walkthrough.engine.glassbox.config import Config

ROWS_BUDGET = 256_000_000  # bytes of recorded rows the app allows a run (see `rows_bytes`)


@dataclass
class AttentionMap:
    """Every recorded row of every attention layer, by layer: [h, T, T] (NaN where the mask hides a key)."""

    layers: dict[int, np.ndarray]  # attention layer -> [n_head, T, T]
    mixers: tuple[str, ...]  # every layer's kind ("full", "sliding", "gated_full", "linear", ...)
    n_head: int
    n_head_kv: tuple[int, ...]  # per layer
    length: int  # T: positions with a recorded row

    @classmethod
    def from_steps(cls, steps: Sequence, config: Config) -> AttentionMap:
        """Assemble the rows the steps recorded (steps without rows are skipped)."""
        length = max((s.end for s in steps if _has_rows(s)), default=0)
        layers: dict[int, np.ndarray] = {}
        for step in steps:
            if not _has_rows(step):
                continue
            for trace in step.layers:
                rows = trace.attention_rows  # [h, n, L], L = step.end
                if rows is None:
                    continue
                out = layers.get(trace.index)
                if out is None:
                    out = layers[trace.index] = np.full((rows.shape[0], length, length), np.nan, np.float32)
                upto = rows.shape[2]
                out[:, step.start:step.end, :upto] = rows
                out[:, step.start:step.end, upto:] = np.nan
        for out in layers.values():  # the causal mask, whatever a pass wrote there
            out[:, np.triu_indices(length, 1)[0], np.triu_indices(length, 1)[1]] = np.nan
        return cls(layers, tuple(config.mixers), config.n_head, tuple(config.n_head_kv), length)

    def matrix(self, layer: int, head: int) -> np.ndarray:
        """[T, T] weights of one layer and query head; NaN right of the diagonal (masked)."""
        return self.layers[layer][head]

    def kv_head(self, layer: int, head: int) -> int:
        """The KV head query head `head` reads in `layer` (grouped-query attention)."""
        return head // max(1, self.n_head // max(1, self.n_head_kv[layer]))

    def missing(self, layer: int) -> str | None:
        """Why a layer has no matrix (None when it has one)."""
        if layer in self.layers:
            return None
        if self.mixers[layer] == "linear":
            return f"layer {layer} is linear attention: it keeps a fixed state, no weight per position"
        return f"layer {layer}: no attention rows recorded"

    def top(self, layer: int, head: int, row: int, n: int) -> list[tuple[int, float]]:
        """The n positions row `row` weighted most in this layer and head, strongest first (ties: earlier first)."""
        weights = np.nan_to_num(self.matrix(layer, head)[row, : row + 1], nan=0.0)
        order = np.argsort(-weights, kind="stable")[:n]
        return [(int(j), float(weights[j])) for j in order]


def _has_rows(step) -> bool:
    return any(t.attention_rows is not None for t in step.layers)


def rows_bytes(config: Config, positions: int, chunk: int = 1) -> int:
    """Bytes the recorded rows of a run over `positions` tokens take at most (float32, every attention layer
    and head), with the queries and keys kept beside them, the prompt prefilled `chunk` tokens a pass.

    A pass keeps [h, n, L] per layer, L the cache length after it: the row of position i is at most
    i + chunk long (its pass ends at most chunk - 1 positions after it), so a run's rows add up to at most
    h x (T (T + 1) / 2 + T (chunk - 1)) per layer (float32): recording is for short requests. Example:
    SmolLM2 (30 layers, 9 heads, 3 KV heads of 64), 453 positions in chunks of 64: rows 141.9 MB, queries and
    keys 41.7 MB, 183.6 MB in all; 2,000 tokens x 32 heads x 32 layers in chunks of 64, 8.7 GB of rows.
    """
    attention = [i for i, kind in enumerate(config.mixers) if kind != "linear"]
    cells = positions * (positions + 1) // 2 + positions * (max(chunk, 1) - 1)
    rows = len(attention) * config.n_head * cells * 4
    # with the rows, the numpy engine keeps each position's queries and keys (`engine.query_key`); llama.cpp's
    # layout has no head sizes because that engine keeps none
    head_k = getattr(config, "head_k", None)
    if head_k is None:
        return rows
    vectors = sum((config.n_head + config.n_head_kv[i]) * head_k(i) for i in attention) * positions * 4
    return rows + vectors
