"""One attention score as two arrows: a token's query, one key, their real dot product, and a 2-D picture.

A numpy session recording attention rows also keeps, per pass and attention layer, the
queries as attention multiplied them (after RoPE and any q-norm, rounded as the run rounded
them) and the keys it wrote, as the cache holds them (`LayerTrace.queries`, `.keys`,
`.score_scale`). `QueryKeys.from_steps` places them at their positions (a later pass
writes over a rewound one, as `attention_map` does), and `pair(layer, head, row, key)`
gives:

- the score the run's softmax saw: q.k x scale (scale = 1/sqrt(hd) for most models),
  the product in float64 rounded to float32 as `ops.attention` does;
- a plane: the first two principal directions of the head's keys over every recorded
  position (SVD of the keys, not centred: the best plane for the keys in least squares,
  which keeps their common offset), the share of the keys' squared length it holds,
  q and k projected on it (coordinates u1.x, u2.x), and the score those two coordinates alone
  give, (q1 k1 + q2 k2) x scale: a projection, which can differ from the real score
  in size and even in sign, since a head of 64 dimensions keeps most of its dot product
  outside any plane.

Query head h reads KV head h // (n_head / n_head_kv). The llama.cpp engine records no queries.

Example: with hd = 64, q.k = 12.8 gives the score 12.8 / 8 = 1.6.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

MIN_KEYS = 3  # positions needed before two principal directions mean anything


@dataclass(frozen=True)
class DotPair:
    """A query and one key of one head, their score, and both projected on the keys' first two directions."""

    layer: int
    head: int
    kv_head: int
    row: int  # the query's position
    key: int  # the key's position
    query: np.ndarray  # [hd]
    key_vector: np.ndarray  # [hd]
    scale: float  # what q.k is multiplied by
    score: float  # q.k x scale, the run's
    q2: tuple[float, float]  # q on (u1, u2)
    k2: tuple[float, float]
    plane_share: float  # share of the keys' squared length along u1 and u2 (0..1)
    n_keys: int  # positions the directions come from

    @property
    def dot(self) -> float:
        """q.k before the scale."""
        return float(np.dot(self.query.astype(np.float64), self.key_vector.astype(np.float64)))

    @property
    def projected_score(self) -> float:
        """(q1 k1 + q2 k2) x scale: the score of the two projected arrows only."""
        return (self.q2[0] * self.k2[0] + self.q2[1] * self.k2[1]) * self.scale

    @property
    def angle(self) -> float:
        """Degrees between q and k in their own hd dimensions."""
        norms = float(np.linalg.norm(self.query) * np.linalg.norm(self.key_vector))
        return float(np.degrees(np.arccos(np.clip(self.dot / norms, -1, 1)))) if norms else 0.0


@dataclass
class QueryKeys:
    """Every recorded query and key of every attention layer, by position."""

    queries: dict[int, np.ndarray]  # layer -> [T, n_head, hd]
    keys: dict[int, np.ndarray]  # layer -> [T, n_head_kv, hd]
    scales: dict[int, float]
    length: int  # T

    @classmethod
    def from_steps(cls, steps: Sequence) -> QueryKeys:
        """Assemble the queries and keys the steps recorded (steps without them are skipped)."""
        length = max((s.end for s in steps if any(t.queries is not None for t in s.layers)), default=0)
        queries: dict[int, np.ndarray] = {}
        keys: dict[int, np.ndarray] = {}
        scales: dict[int, float] = {}
        for step in steps:
            for trace in step.layers:
                if trace.queries is None or trace.keys is None:
                    continue
                if trace.index not in queries:
                    queries[trace.index] = np.zeros((length, *trace.queries.shape[1:]), np.float32)
                    keys[trace.index] = np.zeros((length, *trace.keys.shape[1:]), np.float32)
                queries[trace.index][step.start:step.end] = trace.queries
                keys[trace.index][step.start:step.end] = trace.keys
                scales[trace.index] = trace.score_scale
        return cls(queries, keys, scales, length)

    def scores(self, layer: int, head: int, row: int) -> np.ndarray:
        """[row + 1] q.k x scale of the query at `row` against every key it sees (float32, as the run)."""
        q, k = self._vectors(layer, head)
        products = (k[: row + 1].astype(np.float64) @ q[row].astype(np.float64)).astype(np.float32)
        return products * np.float32(self.scales[layer])

    def _vectors(self, layer: int, head: int) -> tuple[np.ndarray, np.ndarray]:
        """[T, hd] queries of query head `head` and [T, hd] keys of the KV head it reads."""
        queries, keys = self.queries[layer], self.keys[layer]
        group = max(1, queries.shape[1] // max(1, keys.shape[1]))
        return queries[:, head], keys[:, head // group]

    def pair(self, layer: int, head: int, row: int, key: int) -> DotPair:
        """The query at `row` and the key at `key` (<= row) of one layer and query head, with the plane.

        Raises:
            ValueError: the layer has no recorded queries, a position is out of range, or fewer than
                `MIN_KEYS` positions were recorded.
        """
        if layer not in self.queries:
            raise ValueError(f"layer {layer}: no queries recorded")
        if not 0 <= key <= row < self.length:
            raise ValueError(f"key {key} and query {row} must satisfy 0 <= key <= query < {self.length}")
        if self.length < MIN_KEYS:
            raise ValueError(f"{self.length} positions: two directions need at least {MIN_KEYS} keys")
        q, k = self._vectors(layer, head)
        # Not centred: the keys' common offset is often most of q.k, and a plane without it would hide it.
        _, sigma, vt = np.linalg.svd(k.astype(np.float64), full_matrices=False)  # vt [min(T, hd), hd]
        variance = float(np.sum(sigma**2))
        u = vt[:2]  # [2, hd] the first two principal directions
        for i in range(2):  # a direction's sign is arbitrary: point it where the keys' mean lies
            if float(u[i] @ k.mean(axis=0)) < 0:
                u[i] = -u[i]
        score = float(self.scores(layer, head, row)[key])
        qv, kv = q[row].astype(np.float64), k[key].astype(np.float64)
        group = max(1, self.queries[layer].shape[1] // max(1, self.keys[layer].shape[1]))
        return DotPair(
            layer, head, head // group, row, key, q[row].copy(), k[key].copy(), self.scales[layer], score,
            (float(u[0] @ qv), float(u[1] @ qv)), (float(u[0] @ kv), float(u[1] @ kv)),
            float(np.sum(sigma[:2] ** 2) / variance) if variance else 0.0, self.length,
        )
