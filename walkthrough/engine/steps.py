"""The record of one forward pass (a prefill chunk or one decoded token), as screens and `trace` show it.

A `Step` says what went in (phase, positions [start, end), input ids), what
each layer did (its kind and what it keeps: KV rows and bytes for attention,
a fixed state for linear attention; experts chosen per token with their router weights, the
experts woken over the pass, the last token's attention weights per head when
asked for, KV rows and bytes), what it cost (bytes read per tensor group in
stored formats, FLOPs, seconds), and what came out (the last position's logits,
every position's logits when asked for, the sampler's stages and the chosen
token), and how surprised the model was by each token fed (`surprisal`, nats;
for all of a prefill pass's tokens only when its session measures them).
`to_json()` is the JSON Lines record of `walkthrough trace --json`.

A verification pass of speculative decoding (phase "verify", `speculative.py`)
also carries a `Draft`: the drafted tokens, how many the model agreed with, the
sampler's result at every position it emitted a token for, and what the
drafter cost (bytes read, FLOPs, seconds).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from walkthrough.engine import surprisal as sp
from walkthrough.engine.checkpoints import Reuse
from walkthrough.engine.glassbox.ops import softmax
from walkthrough.engine.prefix_break import Break
from walkthrough.engine.sampler import SampleResult, SamplerSettings

TOP_CANDIDATES = 5  # candidates listed in `Step.top()` and the JSON record


@dataclass
class LayerTrace:
    """What one layer did in one pass."""

    index: int
    mixer: str  # "full" (attention with KV cache) or "linear" (fixed recurrent state)
    ffn: str  # "dense" or "moe"
    # MoE layers: [rows, k] chosen expert ids (best first) and the router weights applied to them. Rows are
    # the pass's tokens, except in the last layer of a pass that only needs the last logits (1 row).
    experts: np.ndarray | None = None
    expert_weights: np.ndarray | None = None
    attention: np.ndarray | None = None  # [n_head, kv_len] last token's attention weights (opt-in)
    attention_rows: np.ndarray | None = None  # [n_head, n_tokens, kv_len] every row of the pass (opt-in)
    # with the rows (numpy engine): the pass's queries as attention multiplied them [n_tokens, n_head, hd],
    # the keys it wrote, as the cache holds them [n_tokens, n_head_kv, hd], and the factor on q.k
    queries: np.ndarray | None = None
    keys: np.ndarray | None = None
    score_scale: float = 1.0
    activation_bytes: int = 0  # activation arrays the layer produced this pass (`Meter.written`)
    kv_len: int = 0  # positions cached after this pass (attention layers)
    kv_bytes: int = 0  # bytes of this layer's cache after this pass
    state_bytes: int = 0  # fixed recurrent state (linear layers)

    @property
    def woken(self) -> tuple[int, ...]:
        """Distinct experts any token of the pass chose, ascending."""
        return () if self.experts is None else tuple(np.unique(self.experts).tolist())

    def tokens_per_expert(self, n_experts: int, *, last_token_only: bool = False) -> np.ndarray | None:
        """[n_experts] how many of the pass's tokens (or only its last) chose each expert; None for dense layers."""
        if self.experts is None:
            return None
        chosen = self.experts[-1:] if last_token_only else self.experts  # [rows, k]
        return np.bincount(chosen.ravel(), minlength=n_experts)

    def most_attended(self, head: int, n: int) -> list[tuple[int, float]]:
        """The n positions the last token's `head` weighted most, with their weights, strongest first.

        Needs the attention weights (recorded when asked for). Ties keep position order.
        """
        row = self.attention[head]  # [kv_len]
        return [(int(pos), float(row[pos])) for pos in np.argsort(-row, kind="stable")[:n]]

    def cache_record(self) -> dict[str, Any]:
        """The layer's kind and what it keeps: KV rows and bytes (attention) or its fixed state's bytes (linear)."""
        if self.mixer == "linear":
            return {"kind": self.mixer, "ffn": self.ffn, "state_bytes": self.state_bytes}
        return {"kind": self.mixer, "ffn": self.ffn, "kv_len": self.kv_len, "kv_bytes": self.kv_bytes}


@dataclass
class Draft:
    """What one round of speculative decoding drafted and what its verification pass kept."""

    drafter: str  # "lookup", "mtp" or "draft:NAME"
    k: int  # drafts asked for (the drafter may propose fewer)
    tokens: list[int]  # the drafted tokens, in order (fed after the pending token)
    accepted: int  # how many of them, from the first, the model's own choices equal
    samples: list[SampleResult]  # one per emitted token: the accepted drafts, then the model's own next choice
    bytes_read: dict[str, int] = field(default_factory=dict)  # the drafter's reads (plus "total"), empty for lookup
    flops: int = 0  # the drafter's
    seconds: float = 0.0  # the drafter's time
    replay: dict[str, int] | None = None  # hybrid models: bytes of the pass that re-fed the kept tokens

    @property
    def emitted(self) -> list[int]:
        """Tokens this round added to the answer (accepted drafts and the model's next token)."""
        return [s.chosen for s in self.samples]

    @property
    def rejected(self) -> int:
        return len(self.tokens) - self.accepted

    def to_json(self) -> dict[str, Any]:
        return {"drafter": self.drafter, "k": self.k, "tokens": list(self.tokens), "accepted": self.accepted,
                "emitted": self.emitted, "drafter_bytes": dict(self.bytes_read), "drafter_flops": self.flops,
                "drafter_seconds": round(self.seconds, 6), **({"replay_bytes": dict(self.replay)} if self.replay else {})}


@dataclass
class Step:
    """One forward pass."""

    phase: str  # "prefill" or "decode"
    start: int  # first position of this pass
    end: int  # one past the last position
    input_ids: list[int]
    layers: list[LayerTrace]
    bytes_read: dict[str, int]  # stored bytes read per group, plus "kv_cache" and "total"
    flops: int
    kv_len: int  # positions in the cache after this pass
    kv_bytes: int  # bytes of the KV cache after this pass
    state_bytes: int  # fixed recurrent states (hybrid models), 0 otherwise
    logits: np.ndarray  # [n_vocab] last position
    seconds: float = 0.0  # wall time of the forward pass, without the one-time work below
    first_use_seconds: float = 0.0  # one-time work this pass did: weights produced the first time they were used,
    # and matrix shapes checked for the lane products (`glassbox.lane_products.plan`)
    first_use_bytes: int = 0  # bytes that first-use work produced (float32 or packed weights)
    first_use_checks: int = 0  # matrix shapes that first-use work checked
    all_logits: np.ndarray | None = None  # [n_tokens, n_vocab] when asked for
    surprisal: np.ndarray | None = None  # [n_tokens] nats of each input token given all before it (nan: unknown)
    sample: SampleResult | None = None  # the sampler's stages, when this pass picked a token
    stopped: bool = False  # the chosen token ends the generation
    capped: bool = False  # the chosen token was the last the run's token cap allowed (`Session.generate`)
    reuse: Reuse | None = None  # first pass of a request: the tokens taken from the cache and why reuse stopped
    cause: Break | None = None  # first pass of a request whose prefix broke: the cause, when the caller knows it
    checkpointed: bool = False  # a hybrid session saved its recurrent state after this pass
    turn: str | None = None  # the request of a conversation this pass belongs to (engine.turns), if any
    hidden: np.ndarray | None = None  # [n_tokens, d] final hidden rows after the output norm, when kept
    draft: Draft | None = None  # speculative decoding: the round this verification pass checked
    engine: str = ""  # the engine that ran the pass: its model's `engine` ("numpy" or "llama.cpp")
    split: dict | None = None  # llama.cpp over RPC workers: per host seconds, boundary bytes (`_split_record`)

    @property
    def reused(self) -> int:
        """Tokens of this request taken from the cache (on its first pass; 0 on every other)."""
        return 0 if self.reuse is None else self.reuse.reused

    @property
    def generated(self) -> list[int]:
        """Tokens this pass added to the answer: the chosen one, or every token a verification pass emitted."""
        if self.draft is not None:
            return self.draft.emitted
        return [] if self.chosen is None else [self.chosen]

    @property
    def positions(self) -> tuple[int, int]:
        return (self.start, self.end)

    @property
    def chosen(self) -> int | None:
        return None if self.sample is None else self.sample.chosen

    @property
    def is_moe(self) -> bool:
        return any(layer.experts is not None for layer in self.layers)

    @property
    def intensity(self) -> float:
        """Arithmetic intensity: FLOPs per byte read (0.0 for a pass that read nothing)."""
        total = self.bytes_read.get("total", 0)
        return self.flops / total if total else 0.0

    def top(self, n: int = TOP_CANDIDATES) -> list[tuple[int, float]]:
        """The n most likely next tokens of the model's distribution (softmax of the raw logits)."""
        probs = softmax(self.logits.astype(np.float64))
        ids = np.argsort(-probs, kind="stable")[:n]
        return [(int(i), float(probs[i])) for i in ids]

    @property
    def chosen_surprisal(self) -> float | None:
        """-log p of the chosen token under this pass's raw last logits (nats), None if nothing was chosen."""
        if self.chosen is None:
            return None
        return float(sp.surprisal(self.logits[None, :], [self.chosen])[0])

    def to_json(self, *, logits: bool = False) -> dict[str, Any]:
        """The JSON Lines record of this pass (`walkthrough trace --json`)."""
        out: dict[str, Any] = {
            **({"turn": self.turn} if self.turn is not None else {}),
            **({"engine": self.engine} if self.engine else {}),  # which engine ran the pass
            "phase": self.phase,
            "positions": [self.start, self.end],
            "input_ids": list(self.input_ids),
            "chosen": self.chosen,
            "bytes_read": dict(self.bytes_read),
            "kv_len": self.kv_len,
            "kv_bytes": self.kv_bytes,
            "flops": self.flops,
            "top": [{"id": i, "p": round(p, 6)} for i, p in self.top()],
        }
        if self.state_bytes:
            out["state_bytes"] = self.state_bytes
        if self.split is not None:
            out["split"] = self.split
        if self.first_use_bytes:  # one-time work (weights produced the first time), timed apart from the pass
            out["first_use_bytes"] = self.first_use_bytes
        if self.first_use_checks:  # matrix shapes checked for the lane products, in the same one-time time
            out["first_use_checks"] = self.first_use_checks
        out["layers"] = [t.cache_record() for t in self.layers]
        out["activation_bytes"] = [t.activation_bytes for t in self.layers]
        if self.is_moe:
            out["experts"] = [None if t.experts is None else t.experts.tolist() for t in self.layers]
            out["expert_weights"] = [
                None if t.expert_weights is None else np.round(t.expert_weights.astype(np.float64), 6).tolist()
                for t in self.layers
            ]
            out["experts_woken"] = [None if t.experts is None else list(t.woken) for t in self.layers]
        if self.surprisal is not None:
            out["surprisal"] = [None if not np.isfinite(x) else round(float(x), 6) for x in self.surprisal]
        if self.sample is not None:
            out["sampling"] = self.sample.summary()
            out["chosen_surprisal"] = round(self.chosen_surprisal, 6)
        if self.stopped:
            out["stopped"] = True
        if self.capped:
            out["capped"] = True
        if self.reuse is not None:
            out["reused"] = self.reuse.reused
            out["reuse"] = self.reuse.to_json()
        if self.cause is not None:
            out["cause"] = self.cause.to_json()
        if self.checkpointed:
            out["checkpoint"] = True
        if self.draft is not None:
            out["draft"] = self.draft.to_json()
        if logits:
            rows = self.all_logits if self.all_logits is not None else self.logits[None, :]
            out["logits"] = np.round(rows.astype(np.float64), 5).tolist()
        return out


@dataclass(frozen=True)
class Totals:
    """What a run of passes adds up to."""

    passes: int
    tokens: int  # positions the passes covered
    bytes_read: dict[str, int] = field(default_factory=dict)  # per group, plus "total"
    flops: int = 0
    seconds: float = 0.0

    @property
    def bytes_per_pass(self) -> float:
        return self.bytes_read.get("total", 0) / self.passes if self.passes else 0.0


def totals(steps: Sequence[Step]) -> Totals:
    """Passes, positions, bytes read per group, FLOPs and seconds summed over `steps`."""
    read: dict[str, int] = {}
    for step in steps:
        for group, nbytes in step.bytes_read.items():
            read[group] = read.get(group, 0) + nbytes
    return Totals(len(steps), sum(s.end - s.start for s in steps), read,
                  sum(s.flops for s in steps), sum(s.seconds for s in steps))


@dataclass(frozen=True)
class DrawnWith:
    """Answer tokens `first`..`last` (1-based, inclusive) were picked with these sampler settings."""

    first: int
    last: int
    settings: SamplerSettings


def drawn_with(steps: Sequence[Step]) -> list[DrawnWith]:
    """The settings each answer token was picked with (each `SampleResult` keeps its own), as runs of tokens.

    Example: 3 greedy tokens, then the temperature turned to 0.8 for 2 more ->
    [DrawnWith(1, 3, T=0 settings), DrawnWith(4, 5, T=0.8 settings)].
    """
    runs: list[DrawnWith] = []
    n = 0
    for step in steps:
        samples = step.draft.samples if step.draft is not None else [step.sample] if step.sample else []
        for sample in samples:
            n += 1
            if runs and runs[-1].settings == sample.settings:
                runs[-1] = DrawnWith(runs[-1].first, n, sample.settings)
            else:
                runs.append(DrawnWith(n, n, sample.settings))
    return runs
