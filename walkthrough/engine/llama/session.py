"""One request run by llama.cpp, behind the numpy engine's `Session` interface: same passes, same `Step` records.

    model = LlamaModel.open("model.gguf")
    session = LlamaSession(model, record_attention=True)
    for step in session.prefill(ids, chunk=64, sampler=sampler): ...
    for step in session.decode(sampler, max_tokens=100): ...

`prefill`, `request`, `decode`, `choose` and `reuse_prefix` are the numpy `Session`'s own (sampling stays
ours: the Sampling stage's knobs work on llama.cpp's logits); only `feed`, one
pass, differs: it fills a `llama_batch`, calls `llama_decode` and reads what
the stages show from llama.cpp itself:

- logits of the last position (every position with `all_logits`, or with
  `measure_surprisal` for `Step.surprisal`), copied from `llama_get_logits_ith`;
- experts chosen per token and their router weights, attention weights of the
  last token (every token's with `attention_rows`; without flash attention,
  which is off when they are asked for),
  and progress per layer, through the eval callback (`llama_capture`);
- the KV cache's length (`llama_memory_seq_pos_max` + 1) and bytes (cells used
  x the bytes llama.cpp allocated per cell for each layer's K and V);
- seconds, measured around `llama_decode`; bytes read and FLOPs counted from
  the file and the experts actually chosen (`pass_cost`).

Progress and interruption follow the numpy `Session`: `progress(layers_done,
n_layers)` is called before the first layer and after each one (from the eval
callback, on `l_out-N`); if it raises (`Cancelled`), llama.cpp's abort callback
stops the graph at its next node, `llama_decode` returns 2, and `feed` raises
that exception. The session cannot go on after that (the recurrent state of a
hybrid model may be half-updated), so start a new one.

Not handled: sequences beyond the context size chosen at creation (`n_ctx`:
an error says so), quantized KV caches together with attention weights
(llama.cpp needs flash attention for a quantized V cache).
"""

from __future__ import annotations

import contextlib
import time

import numpy as np

from walkthrough.engine import surprisal
from walkthrough.engine.checkpoints import Checkpoint, Checkpoints
from walkthrough.engine.glassbox.session import Session
from walkthrough.engine.llama import rpc_traffic
from walkthrough.engine.llama.capture import Capture, Progress
from walkthrough.engine.llama.model import LlamaModel, recent_log
from walkthrough.engine.llama.pass_cost import PassShape
from walkthrough.engine.sampler import Sampler
from walkthrough.engine.steps import LayerTrace, Step
from walkthrough.errors import WalkthroughError

# enum ggml_type values (ggml.h) of the KV cache types the numpy engine offers too.
KV_TYPES = {"f32": 0, "f16": 1, "q4_0": 2, "q8_0": 8}
DEFAULT_CONTEXT = 4096  # positions, unless the file's own context is shorter
MICRO_BATCH = 512  # llama.cpp's default n_ubatch: tokens per graph run inside one pass
DECODE_ABORTED = 2  # llama_decode's return value when the abort callback stopped it (llama.h)


class PassInterrupted(WalkthroughError):
    """A pass was stopped before it finished; the session cannot continue."""


class LlamaSession(Session):
    """The run state of one request in a llama.cpp context: its KV cache lives in llama.cpp's memory."""

    def __init__(
        self,
        model: LlamaModel,
        *,
        kv_type: str = "f16",
        record_attention: bool = False,
        n_ctx: int | None = None,
        measure_surprisal: bool = False,
        attention_rows: bool = False,
        flash_attention: bool | None = None,
        named: frozenset[str] = frozenset(),
        experts: bool = True,
    ):
        """A context for one request.

        Args:
            experts: read the experts each MoE layer chose (every yes splits llama.cpp's graph there; off,
                a split run sends llama.cpp's own graph splits only, as `bench_rpc.py` measures them).
            flash_attention: True or False forces llama.cpp's flash attention on or off; None leaves it to
                llama.cpp (off whenever attention weights are recorded, which need it off).
            named: stems of graph tensor names to read whole at every pass (`Capture.tensors`).
        """
        if kv_type not in KV_TYPES:
            raise WalkthroughError(f"KV cache type {kv_type!r} is not one of {', '.join(KV_TYPES)}")
        self.model = model
        self.lib = lib = model.lib
        self.kv_type = kv_type
        # Attention weights exist only where llama.cpp materialises them: without flash attention, which a
        # quantized V cache requires.
        self.attention_rows = attention_rows and not kv_type.startswith("q")
        self.record_attention = (record_attention or attention_rows) and not kv_type.startswith("q")
        self.measure_surprisal = measure_surprisal  # every position's logits kept, for `Step.surprisal`
        self.n_ctx = n_ctx or min(model.card.context_length or DEFAULT_CONTEXT, DEFAULT_CONTEXT)
        self.tokens: list[int] = []
        self.last_logits: np.ndarray | None = None
        self.pending: int | None = None
        self.steps_run = 0
        self._broken: str | None = None
        self.checkpoints = Checkpoints(auto=False)  # none: llama.cpp's memory rewinds itself (see `rewind`)
        self.capture = Capture(lib, model.config.n_layers, attention=self.record_attention,
                               attention_rows=self.attention_rows, named=named, experts=experts)
        placement = model.placement
        if placement is not None:  # time each host: note when its last layer's output is computed (the last
            # host's time runs to the pass's end: a mark there would split its graph once more, and ggml's RPC
            # client would send that host's layers again with the head's part)
            self.capture.marks = frozenset(last for _, last in placement.segments()[:-1])
            self.capture.split = True
        self._abort = lib.ggml_abort_callback(lambda _data: self.capture.stop.is_set())
        params = lib.llama_context_default_params()
        params.n_ctx = self.n_ctx
        params.n_batch = self.n_ctx  # a pass may hold any number of tokens that fit the context ...
        params.n_ubatch = min(MICRO_BATCH, self.n_ctx)  # ... computed MICRO_BATCH at a time
        params.n_seq_max = 1
        params.n_threads = params.n_threads_batch = model.n_threads
        params.type_k = params.type_v = KV_TYPES[kv_type]
        params.flash_attn_type = (lib.LLAMA_FLASH_ATTN_TYPE_DISABLED if self.record_attention
                                  else lib.LLAMA_FLASH_ATTN_TYPE_AUTO if not kv_type.startswith("q")
                                  else lib.LLAMA_FLASH_ATTN_TYPE_ENABLED)
        if flash_attention is not None and not self.record_attention:
            params.flash_attn_type = (lib.LLAMA_FLASH_ATTN_TYPE_ENABLED if flash_attention
                                      else lib.LLAMA_FLASH_ATTN_TYPE_DISABLED)
        params.cb_eval = self.capture.callback
        params.cb_eval_user_data = None
        params.abort_callback = self._abort
        params.abort_callback_data = None
        params.no_perf = True
        self.ctx = lib.llama_init_from_model(model.ptr, params)
        if not self.ctx:
            raise WalkthroughError(f"llama.cpp could not make a context of {self.n_ctx} positions: {recent_log()}")
        self.memory = lib.llama_get_memory(self.ctx)
        self.batch = lib.llama_batch_init(self.n_ctx, 0, 1)

    @property
    def position(self) -> int:
        """Positions processed so far (the KV cache length, as llama.cpp's memory reports it)."""
        return int(self.lib.llama_memory_seq_pos_max(self.memory, 0)) + 1

    @property
    def recurrent(self) -> bool:
        """True when some layer keeps a fixed state that cannot be truncated (hybrid models)."""
        return "linear" in self.model.config.mixers

    def checkpoint(self, *, keep: bool = True) -> Checkpoint:
        raise WalkthroughError("the llama.cpp engine keeps no checkpoints of a hybrid model's state")

    def rewind(self, position: int) -> int:
        """Forget every position from `position` on in llama.cpp's memory; returns the position reached.

        A KV cache is truncated there (`llama_memory_seq_rm`); a hybrid model's recurrent state cannot be,
        so it goes back to 0 and the caller feeds everything again. The pending token and logits are dropped.
        """
        if not 0 <= position <= self.position:
            raise WalkthroughError(f"cannot rewind to position {position}: the session holds {self.position}")
        if position == self.position:
            return position
        if self.recurrent or not self.lib.llama_memory_seq_rm(self.memory, 0, position, -1):
            position = 0
            self.lib.llama_memory_clear(self.memory, True)
        del self.tokens[position:]
        self.last_logits = None
        self.pending = None
        return position

    def feed(
        self,
        ids: list[int],
        *,
        phase: str,
        sampler: Sampler | None = None,
        all_logits: bool = False,
        progress: Progress | None = None,
    ) -> Step:
        """Run one pass over `ids` at the next positions in llama.cpp; sample from its last logits if asked.

        Raises:
            whatever `progress` raised to stop the pass (the session is unusable after it).
        """
        ids = [int(i) for i in ids]
        if self._broken:
            raise PassInterrupted(self._broken)
        if not ids:
            raise WalkthroughError("a pass needs at least one token")
        self.model.check_ids(ids)
        start, n = self.position, len(ids)
        if start + n > self.n_ctx:
            raise WalkthroughError(f"the request needs {start + n} positions; this llama.cpp context holds "
                                   f"{self.n_ctx} (start a new run with a larger context)")
        rows = n if all_logits or self.measure_surprisal else 1  # positions whose logits llama.cpp keeps
        previous = self.last_logits  # [V] the distribution the first of `ids` was drawn against
        self._fill_batch(ids, start, rows)
        self.capture.reset(progress)
        traffic = rpc_traffic.counters(self.model.rpc) if self.model.rpc else None
        began = time.perf_counter()
        try:
            if progress is not None:
                progress(0, self.model.config.n_layers)
            code = self.lib.llama_decode(self.ctx, self.batch)
            self.capture.check()
        except BaseException:
            self._broken = "a pass of this run was stopped mid-way; start a new run"
            raise
        ended = time.perf_counter()
        seconds = ended - began
        if code == DECODE_ABORTED:
            self._broken = "a pass of this run was stopped mid-way; start a new run"
            raise PassInterrupted(f"llama.cpp stopped the pass at positions {start}..{start + n}")
        if code != 0:
            raise WalkthroughError(f"llama.cpp could not run the pass (llama_decode returned {code}): {recent_log()}")
        self.capture.scan_cache = False
        logits = self._logits(rows, n)  # [rows, n_vocab]
        end = self.position
        layers = self._layers(end)
        read, flops = self.model.counter.count(PassShape(
            ids=ids, start=start, out_rows=rows,
            woken=[None if t.experts is None else t.woken for t in layers],
            pairs=[0 if t.experts is None else int(t.experts.size) for t in layers],
            kv_bytes=[t.kv_bytes for t in layers], state_bytes=[t.state_bytes for t in layers],
        ))
        self.tokens.extend(ids)
        self.last_logits = logits[-1]
        self.pending = None
        self.steps_run += 1
        step = Step(
            phase=phase, start=start, end=end, input_ids=ids, layers=layers, bytes_read=read, flops=flops,
            kv_len=end, kv_bytes=sum(t.kv_bytes for t in layers), state_bytes=sum(t.state_bytes for t in layers),
            logits=logits[-1], seconds=seconds, all_logits=logits if all_logits else None,
            surprisal=surprisal.of_pass(previous, logits if rows == n else None, ids),
            engine=self.model.engine,
            split=None if traffic is None else self._split_record(n, rows, began, ended, traffic),
        )
        if sampler is not None:
            step.sample = self.choose(sampler)
            step.stopped = step.sample.chosen in self.model.config.end_ids
        return step

    def _split_record(self, n: int, rows: int, began: float, ended: float, traffic: dict) -> dict:
        """One pass over hosts: each host's time (measured between the eval callback's readings of its last
        layer's output, so it includes receiving the activations), the bytes each boundary carries (computed:
        n_tokens x n_embd x 4), and what went over each worker's connection (measured: TCP counters)."""
        placement = self.model.placement
        times, previous = [], began
        segments = placement.segments()
        for k, (host, last) in enumerate(segments):
            at = ended if k == len(segments) - 1 else self.capture.mark_times.get(last, previous)
            what = "input + " if k == 0 else ""
            what += f"layers to {last}" + (" + output head" if k == len(segments) - 1 else "")
            times.append({"host": host, "through_layer": last, "covers": what, "seconds": round(at - previous, 6)})
            previous = at
        return {"placement": placement.to_json(), "hosts": times, "crossings": placement.crossings(n, rows),
                "measured": rpc_traffic.difference(traffic, rpc_traffic.counters(self.model.rpc))}

    def _fill_batch(self, ids: list[int], start: int, rows: int) -> None:
        """The pass's tokens at their positions in sequence 0; logits kept for the last `rows` of them."""
        b = self.batch
        for j, token in enumerate(ids):
            b.token[j] = token
            b.pos[j] = start + j
            b.n_seq_id[j] = 1
            b.seq_id[j][0] = 0
            b.logits[j] = j >= len(ids) - rows
        b.n_tokens = len(ids)

    def _logits(self, rows: int, n: int) -> np.ndarray:
        """[rows, n_vocab] logits of the last `rows` positions of the pass, copied out of llama.cpp."""
        n_vocab = self.model.config.n_vocab
        out = np.empty((rows, n_vocab), np.float32)
        for r, j in enumerate(range(n - rows, n)):
            out[r] = np.ctypeslib.as_array(self.lib.llama_get_logits_ith(self.ctx, j), shape=(n_vocab,))
        return out

    def _layers(self, length: int) -> list[LayerTrace]:
        c, card = self.model.config, self.model.card
        traces = []
        for i in range(c.n_layers):
            t = LayerTrace(i, c.mixers[i], c.ffns[i])
            t.experts, t.expert_weights = self.capture.layer_experts(i)
            cells = self.capture.cell_bytes.get(i, {})
            if "r" in cells or "s" in cells:
                t.state_bytes = cells.get("r", 0) + cells.get("s", 0)
            if "k" in cells or "v" in cells:
                window = card.layers[i].sliding_window if i < len(card.layers) else None
                t.kv_len = min(length, window) if window else length
                t.kv_bytes = (cells.get("k", 0) + cells.get("v", 0)) * t.kv_len
                attention = self.capture.attention.get(i)  # [n_head, n_tokens, n_kv]
                if attention is not None:
                    t.attention = attention[:, -1, : t.kv_len].astype(np.float32)  # [n_head, kv_len]
                    if self.attention_rows:
                        t.attention_rows = attention[:, :, : t.kv_len].astype(np.float32)  # [n_head, n, kv_len]
            traces.append(t)
        return traces

    def close(self) -> None:
        """Free the context and its batch (the model stays loaded)."""
        if getattr(self, "ctx", None):
            self.lib.llama_batch_free(self.batch)
            self.lib.llama_free(self.ctx)
            self.ctx = None

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # interpreter shutdown: the library may be gone already
            self.close()
