"""What the llama.cpp engine reads from the graph while llama.cpp computes a pass: its eval callback.

llama.cpp's scheduler calls `cb_eval(tensor, ask, user_data)` for every node of
the graph: first with ask=True ("do you want this one?"), and, for the nodes
answered yes, again with ask=False once the node is computed. Every yes splits
the graph there, so only the tensors a stage needs are asked for; the rest are
computed in one run. Names are llama.cpp's (`cb(cur, "NAME", il)` in
src/llama-graph.cpp and src/models/ARCH.cpp), "NAME-LAYER" in the graph:

- `ffn_moe_topk-N`: layer N's chosen experts, [k, n_tokens] int32, a strided
  view of the router's argsort (read with its `nb` strides).
- `ffn_moe_weights-N`, then `_softmax`, `_norm`, `_scaled` when the architecture
  applies them: the router weights; the last one computed is what multiplies
  the experts' outputs.
- `kq_soft_max-N`: attention weights [n_kv, n_tokens, n_head], materialised
  only without flash attention; the last token's row is kept (every row when asked).
- `l_out-N`: layer N's output, asked for only to report progress (layer N+1 of M done), and, on a
  split over RPC workers, at each host's last layer before the last host's to time the hosts (`marks`);
  there progress is told at those layers only.
- any other names a session asks for (`named`, the op-by-op differ's points: `attn_norm-N`,
  `Qcur-N`, `kq-N`, ..., `result_output`): every node so named is read, in graph order, into
  `tensors[name]` (a name can label several nodes: `Qcur-N` is the projection, its reshape,
  then the roped result).

The KV cache and recurrent states are llama.cpp's own tensors (`cache_k_lN`,
`cache_v_lN`, `cache_r_lN`, `cache_s_lN`, src/llama-kv-cache.cpp and
src/llama-memory-recurrent.cpp); the graph's views of them name them, so the
first pass records the bytes one cache cell of each layer takes (`nb[1]`,
one row per position), as llama.cpp allocated them.

A Python exception cannot cross the C callback, so one is kept, `stop` is set
(the session's abort callback reads it: llama.cpp stops at the next node), and
`check` raises it after the pass. That is how a `progress` callable that raises
`Cancelled` interrupts a pass mid-way.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from types import ModuleType

import numpy as np

from walkthrough.engine.llama.ggml_tensor import name_at, read, split_name, tensor_at

TOPK = b"ffn_moe_topk"
WEIGHTS = (b"ffn_moe_weights", b"ffn_moe_weights_softmax", b"ffn_moe_weights_norm", b"ffn_moe_weights_scaled")
ATTENTION = b"kq_soft_max"
LAYER_OUT = b"l_out"
_CACHE_NAME = re.compile(rb"^cache_(?:[a-z]+_)?([kvrs])_l(\d+)$")

Progress = Callable[[int, int], None]  # (layers done, layers in all)


class Capture:
    """The eval callback of one llama.cpp context, and what it read during the current pass."""

    def __init__(self, lib: ModuleType, n_layers: int, *, attention: bool, attention_rows: bool = False,
                 named: frozenset[str] = frozenset(), experts: bool = True):
        self.n_layers = n_layers
        self.named = frozenset(name.encode() for name in named)  # graph-name stems read whole, every node
        self.attention_rows = attention_rows  # keep every query row, not only the last token's
        self.want = ({TOPK, *WEIGHTS} if experts else set()) | ({ATTENTION} if attention else set()) | self.named
        self.progress: Progress | None = None
        self.marks: frozenset[int] = frozenset()  # layers whose output time to note (the split's host boundaries)
        # on a run split over RPC workers, progress is told at the marks only: each layer output asked for
        # splits the graph, and ggml's RPC client then resends every earlier node on that host (6x the bytes a
        # decode pass on SmolLM2 with 15 layers a worker)
        self.split = False
        self.mark_times: dict[int, float] = {}  # layer -> perf_counter() when its output was computed
        self.stop = threading.Event()  # set when the pass must end early (read by llama.cpp's abort callback)
        self.cell_bytes: dict[int, dict[str, int]] = {}  # layer -> {"k"|"v"|"r"|"s": bytes of one cell}
        self.scan_cache = True  # until a pass has shown the cache tensors
        self._asked: dict[bytes, bool] = {}  # node name -> wanted (the graph's names repeat every pass)
        self.callback = lib.ggml_backend_sched_eval_callback(self._on_tensor)  # kept alive with the context
        self.reset()

    def reset(self, progress: Progress | None = None) -> None:
        """Forget the last pass's readings; `progress` hears about the next pass's layers."""
        if (progress is None) != (self.progress is None):
            self._asked.clear()  # l_out-N nodes change from unwanted to wanted or back
        self.progress = progress
        self.stop.clear()
        self.mark_times = {}
        self.experts: dict[int, list[np.ndarray]] = {}  # layer -> per micro-batch [rows, k] int32
        self.weights: dict[int, list[np.ndarray | None]] = {}  # layer -> per micro-batch [rows, k] float32
        self.attention: dict[int, np.ndarray] = {}  # layer -> [n_head, rows, n_kv] (rows: the last, or all)
        self.tensors: dict[str, list[np.ndarray]] = {}  # "NAME-LAYER" -> values of each node so named (`named`)
        self.error: BaseException | None = None

    def check(self) -> None:
        """Raise what went wrong inside the callback during the pass, if anything."""
        if self.error is not None:
            raise self.error

    def layer_experts(self, layer: int) -> tuple[np.ndarray | None, np.ndarray | None]:
        """([rows, k] experts, [rows, k] router weights) of a layer over the whole pass, or (None, None)."""
        blocks = self.experts.get(layer)
        if not blocks:
            return None, None
        experts = np.concatenate(blocks).astype(np.int64)
        weights = [w for w in self.weights.get(layer, []) if w is not None]
        return experts, (np.concatenate(weights) if len(weights) == len(blocks) else None)

    def _on_tensor(self, address: int, ask: bool, user_data: object) -> bool:
        try:
            if ask:
                return self._wanted(address)
            t = tensor_at(address)
            stem, layer = split_name(t.name)
            self._keep(t, stem, layer)
        except BaseException as exc:  # noqa: BLE001 - kept and raised after the pass
            if self.error is None:
                self.error = exc
            self.stop.set()
        return True

    def _wanted(self, address: int) -> bool:
        if self.scan_cache:
            t = tensor_at(address)
            if t.view_src:
                self._note_cache(t.view_src.contents)
        name = name_at(address)
        wanted = self._asked.get(name)
        if wanted is None:
            stem, layer = split_name(name)
            wanted = self._asked[name] = stem in self.want or (
                stem == LAYER_OUT and (layer in self.marks or (self.progress is not None and not self.split)))
        return wanted

    def _keep(self, t, stem: bytes, layer: int) -> None:
        if stem in self.named:
            self.tensors.setdefault(t.name.decode(), []).append(read(t))
        if stem == TOPK:
            experts = read(t)  # [rows, k]
            self.experts.setdefault(layer, []).append(experts.reshape(-1, experts.shape[-1]))
            self.weights.setdefault(layer, []).append(None)
        elif stem in WEIGHTS and self.weights.get(layer):
            rows = self.experts[layer][-1].shape[0]
            self.weights[layer][-1] = read(t).reshape(rows, -1)  # a later stage replaces an earlier one
        elif stem == ATTENTION:
            probs = read(t)  # [n_stream, n_head, n_tokens, n_kv]
            if probs.shape[-2]:
                probs = probs.reshape(-1, probs.shape[-2], probs.shape[-1])  # [n_head, n_tokens, n_kv]
                rows = probs if self.attention_rows else probs[:, -1:, :]
                kept = self.attention.get(layer)
                if self.attention_rows and kept is not None and kept.shape[-1] <= rows.shape[-1]:
                    # a later micro-batch of the same pass: its rows follow (padded to the longer key span)
                    kept = np.pad(kept, ((0, 0), (0, 0), (0, rows.shape[-1] - kept.shape[-1])))
                    rows = np.concatenate([kept, rows], axis=1)
                self.attention[layer] = rows
        elif stem == LAYER_OUT:
            if layer in self.marks:
                self.mark_times[layer] = time.perf_counter()
            if self.progress is not None:
                self.progress(layer + 1, self.n_layers)

    def _note_cache(self, base) -> None:
        m = _CACHE_NAME.match(base.name)
        if m:
            kind, layer = m.group(1).decode(), int(m.group(2))
            self.cell_bytes.setdefault(layer, {})[kind] = int(base.nb[1])
