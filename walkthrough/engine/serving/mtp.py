"""The multi-token-prediction (MTP, "nextn") block of Qwen3.5/3.6 files, run as a drafter.

Such a file stores one extra block after the trunk (`{arch}.nextn_predict_layers`
= 1, tensors `blk.L.*` with L the trunk's layer count). The ordinary forward pass
never runs it. As a drafter it predicts the token after next from the trunk's
final hidden state and the next token (llama.cpp vendored 0.3.36:
`llama_model_qwen35moe::graph_mtp` in src/models/qwen35moe.cpp, driven by
`common_speculative_impl_draft_mtp` in common/speculative.cpp):

    e = rmsnorm(embed(x_p), nextn.enorm)            # the token at position p
    g = rmsnorm(h_{p-1}, nextn.hnorm)               # the trunk's hidden state at p-1, after its output norm
    y = eh_proj([e ; g])                            # [2d] -> [d]
    y = a gated full-attention block with MoE FFN at position p (its own KV cache, one layer)
    h' = rmsnorm(y, nextn.shared_head_norm or output_norm);  logits = head(h')

Feeding, as llama.cpp does: every pass the trunk runs (prompt chunks,
verification passes) is replayed through the block with each token paired with
the trunk's hidden row one position earlier (the first with the last row of
the pass before, zeros at the very start), so the block's KV cache covers
every position. Drafting starts at the pending token with the trunk's last kept
row, and chains: each draft is fed back with the block's own h'. After a
verification pass keeps j drafts, the next seed is the trunk's row of the last
kept token.
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np

from walkthrough.engine.glassbox import ops
from walkthrough.engine.glassbox.cache import KVCache
from walkthrough.engine.glassbox.meter import Meter
from walkthrough.engine.glassbox.model import EMBEDDING, OUTPUT, Model, Progress, block
from walkthrough.engine.glassbox.validate import check_layer, check_named
from walkthrough.engine.serving.drafters import Proposal
from walkthrough.engine.steps import LayerTrace, Step
from walkthrough.errors import WalkthroughError

SKIPPED = "none"  # the kind given to trunk layers in the block's own config: no cache, never run


class MTPBlock:
    """The file's MTP block as a runnable layer with a config and a KV cache of its own."""

    def __init__(self, model: Model):
        card, c, f = model.card, model.config, model.file
        if not card.n_mtp_layers:
            raise WalkthroughError(
                f"{f.path.name} has no multi-token-prediction block ({card.architecture}.nextn_predict_layers is "
                "absent or 0); draft with --speculate lookup or --speculate draft --draft MODEL instead"
            )
        self.model = model
        self.layer = L = c.n_layers
        info = card.layers[L] if L < len(card.layers) else None
        n_head_kv = (info.n_head_kv if info and info.n_head_kv else None) or c.n_head_kv[-1]
        ffn = info.ffn if info else c.ffns[-1]
        self.config = replace(c, n_layers=L + 1, mixers=(SKIPPED,) * L + ("full",), ffns=(SKIPPED,) * L + (ffn,),
                              n_head_kv=c.n_head_kv + (n_head_kv,))
        check_layer(f, self.config, L)
        d, pre = c.n_embd, f"blk.{L}.nextn."
        check_named(f, {pre + "eh_proj.weight": (2 * d, d), pre + "enorm.weight": (d,), pre + "hnorm.weight": (d,),
                        pre + "embed_tokens.weight": (d, c.n_vocab), pre + "shared_head_head.weight": (d, c.n_vocab),
                        pre + "shared_head_norm.weight": (d,)},
                    optional=(pre + "embed_tokens.weight", pre + "shared_head_head.weight",
                              pre + "shared_head_norm.weight"))
        has = model.weights.has
        self.embedding = pre + "embed_tokens.weight" if has(pre + "embed_tokens.weight") else EMBEDDING
        self.head_norm = pre + "shared_head_norm.weight" if has(pre + "shared_head_norm.weight") else "output_norm.weight"
        if has(pre + "shared_head_head.weight"):
            self.head = pre + "shared_head_head.weight"
        else:
            self.head = EMBEDDING if model.tied_output else OUTPUT

    def new_cache(self, kv_type: str = "f16") -> KVCache:
        """A KV cache holding the block's one attention layer."""
        return KVCache(self.config, kv_type)

    def forward(
        self, ids: np.ndarray, h: np.ndarray, start: int, cache: KVCache, meter: Meter
    ) -> tuple[np.ndarray, np.ndarray, LayerTrace]:
        """ids [n] at positions start..start+n, h [n, d] the trunk's rows one position earlier.

        Returns:
            logits [n, n_vocab], the block's normed hidden rows h' [n, d] (the seed of a chained draft), its trace.
        """
        c, L = self.config, self.layer
        pre = f"blk.{L}.nextn."
        e = ops.rmsnorm(meter.rows(self.embedding, ids), meter.tensor(pre + "enorm.weight"), c.norm_eps)  # [n, d]
        g = ops.rmsnorm(h.astype(np.float32), meter.tensor(pre + "hnorm.weight"), c.norm_eps)  # [n, d]
        x = meter.linear(pre + "eh_proj.weight", np.concatenate([e, g], axis=1))  # [n, 2d] -> [n, d]
        p = self.model.pass_input(c, meter, cache, start, len(ids))
        trace = LayerTrace(L, "full", c.ffns[L])
        x = block(p, L, x, trace)  # [n, d]
        out = ops.rmsnorm(x, meter.tensor(self.head_norm), c.norm_eps)  # [n, d]
        return meter.linear(self.head, out, group="output", by_columns=True), out, trace


class MTPDrafter:
    """Drafts with the file's MTP block; needs the trunk's hidden rows (`Session(keep_hidden=True)`)."""

    name = "mtp"
    needs_hidden = True

    def __init__(self, model: Model, *, kv_type: str = "f16"):
        self.block = MTPBlock(model)
        self.cache = self.block.new_cache(kv_type)
        self.seed = np.zeros(model.config.n_embd, np.float32)  # trunk row before the next position to feed
        self._rows: np.ndarray | None = None  # the trunk's rows of the last pass observed
        self._rows_start = 0
        self._spent = Proposal([])  # what feeding the block cost since the last proposal

    def _run(self, ids: list[int], h: np.ndarray, start: int, into: Proposal) -> tuple[np.ndarray, np.ndarray]:
        meter = self.block.model.meter()
        self.cache.length = start
        logits, out, _ = self.block.forward(np.asarray(ids), h, start, self.cache, meter)
        self.cache.length = start + len(ids)
        for group, nbytes in meter.totals().items():
            into.bytes_read[group] = into.bytes_read.get(group, 0) + nbytes
        into.flops += meter.flops
        return logits, out

    def observe(self, step: Step) -> None:
        """Replay a trunk pass through the block: token at p with the trunk's row at p - 1."""
        if step.hidden is None:
            raise WalkthroughError("MTP drafting needs the trunk's hidden rows: run the session with keep_hidden")
        began = time.perf_counter()
        h = np.concatenate([self.seed[None, :], step.hidden[:-1]])  # [n, d]
        self._run(step.input_ids, h, step.start, self._spent)
        self._rows, self._rows_start = step.hidden, step.start
        self.seed = step.hidden[-1]
        self._spent.seconds += time.perf_counter() - began

    def rewind(self, length: int) -> None:
        """The trunk kept `length` positions: forget the block's rows past them, seed from the last kept row."""
        self.cache.length = min(self.cache.length, length)
        if self._rows is not None and self._rows_start < length <= self._rows_start + len(self._rows):
            self.seed = self._rows[length - 1 - self._rows_start]

    def propose(self, context: list[int], k: int, progress: Progress | None = None) -> Proposal:
        """k drafts, one run of the block each; `progress(i, k)` is called before the i-th."""
        out, self._spent = self._spent, Proposal([])
        began = time.perf_counter()
        start = len(context) - 1  # the pending token's position
        token, h = context[-1], self.seed[None, :]
        for i in range(k):
            if progress is not None:
                progress(i, k)
            logits, h = self._run([token], h, start + i, out)
            token = int(np.argmax(logits[-1]))
            out.tokens.append(token)
        self.cache.length = start  # the verification pass's replay rewrites these positions
        out.seconds += time.perf_counter() - began
        return out
