"""A runnable model: an opened GGUF, its card and config, lazy weights, and the forward pass.

The forward pass for every architecture declared in `arch.ARCHITECTURES` (the
architecture comes from `general.architecture`):

    x = embed(ids) * embed_scale
    for each layer:  x = x + post_norm(mixer(rmsnorm(x)));  x = x + post_norm(ffn(rmsnorm(x)))
    logits = softcap(lm_head(rmsnorm(x)))

The post-norms exist only where the declaration names them (gemma's sandwich),
the scale and soft-cap only where it asks for them.

The mixer and FFN of each layer run by kind (`layers.runner`: the card's per-layer kinds,
`Config.mixer_key`), each kind's function declared in `architectures.layer_kinds`. A missing `output.weight` means the
embedding matrix is reused as the output head (tied embeddings).

Example:
    >>> model = Model.open("ref-qwen2-f32.gguf")
    >>> session = Session(model)              # walkthrough.engine.glassbox.session
    >>> steps = list(session.prefill([1, 2, 3]))
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable

import numpy as np

from walkthrough.engine.glassbox import ops
from walkthrough.engine.glassbox.cache import KVCache
from walkthrough.engine.glassbox.config import Config, build_config
from walkthrough.engine.glassbox.layers import PassInput, runner
from walkthrough.engine.glassbox.meter import HeldProduct, Meter, Probe
from walkthrough.engine.glassbox.validate import check_tensors
from walkthrough.engine.glassbox.weights import DEFAULT_CACHE_BYTES, Weights, product_dtype
from walkthrough.engine.numeric_checks import check_small_tensors
from walkthrough.engine.steps import LayerTrace
from walkthrough.errors import WalkthroughError
from walkthrough.inspect.card import ModelCard, build_card, tensor_group, tensor_layer
from walkthrough.inspect.gguf import GGUFFile, open_gguf

Progress = Callable[[int, int], None]  # (layers done, layers in all): `session.Progress`
EMBEDDING = "token_embd.weight"
OUTPUT = "output.weight"
ROPE_FREQS = "rope_freqs.weight"  # per-pair frequency divisors (llama 3 long context, gemma4's proportional RoPE)


def layers_in_float64(f: GGUFFile) -> bool:
    """Whether every matrix of the file's layers (`blk.N.*`, two or more dimensions) is multiplied in float64
    (`weights.product_dtype`: an F32 file's)."""
    matrices = [t for name, t in f.tensors.items() if name.startswith("blk.") and len(t.shape) >= 2]
    return bool(matrices) and all(product_dtype(t) is np.float64 for t in matrices)


class Model:
    """Everything needed to run one file; holds no per-request state (that is the Session's)."""

    engine = "numpy"  # the engine's name, carried by every Step it runs (walkthrough.engine.engines.ENGINES)

    def __init__(
        self,
        f: GGUFFile,
        *,
        card: ModelCard | None = None,
        max_cache_bytes: int = DEFAULT_CACHE_BYTES,
        match_llama_cpp: bool = True,
        exact_products: bool = False,
    ):
        """Prepare an opened file to run (header only; weights are read on first use).

        Args:
            match_llama_cpp: round each matrix product's input as llama.cpp's CPU backend does for the
                weight's stored type (`activations`); False gives plain float32 products.
            exact_products: compute as llama.cpp's CPU backend does, bit for bit where docs/op-diff.md says so:
                quantized and F32 weights multiplied as ggml does (`quantdot`, `ggml_math.f32_matmul`) and
                attention's sums in ggml's order, SiLU's exp ggml's own and what ggml hands to the C library
                one call per value (slow: 10 to 25 times); the other operations follow ggml's CPU kernels either
                way (`ggml_math`), RoPE and attention's softmax as `exact_elementwise` says.

        Raises:
            WalkthroughError: the file cannot run (a partial download, an unknown architecture, a tensor
                missing or bad).
        """
        f.require_whole("the numpy engine")
        self.file = f
        self.match_llama_cpp = match_llama_cpp
        self.exact_products = exact_products
        self.card = card or build_card(f)
        self.config: Config = build_config(f, self.card)
        check_tensors(f, self.config)
        self.weights = Weights(f, max_cache_bytes=max_cache_bytes)
        check_small_tensors(f, self.weights, self.config.n_embd)  # NaN/Inf norm weights refused before a pass
        self.tied_output = not self.weights.has(OUTPUT)
        # RoPE's fused products and the softmax's exp follow ggml's bits where the layers' products do: with exact
        # products, or where every matrix of the layers is multiplied in float64 (an F32 file's, all but ggml's
        # sums; on the random F32 gemma4 reference numpy's rounding in either moved a logit by 2.5e-3, the
        # fixtures allow 1e-3). Where a layer's product is a float32 sum, it parts from ggml's in its last bits
        # anyway, and the engine takes numpy's float32 rounding for both: about a tenth of a SmolLM2 decode pass
        # (docs/op-diff.md, fourteenth round).
        self.exact_elementwise = exact_products or layers_in_float64(f)
        self._groups: dict[str, str] = {}  # tensor name -> group, memoised (looked up for every weight, every pass)
        # (two threads filling it at once write the same value under a key: one dict store each, no lock needed)
        self.probe: Probe | None = None  # sees every pass's intermediates under llama.cpp's names (`Meter.look`)
        self._held: dict[tuple, HeldProduct] = {}  # products resolved once for every pass (`Meter.held`)

    @classmethod
    def open(cls, path: str | os.PathLike, **kwargs) -> Model:
        """Open a GGUF file and prepare it to run (reads the header only)."""
        return cls(open_gguf(path), **kwargs)

    def group_of(self, name: str) -> str:
        """The card's tensor group of a tensor, attention of linear layers counted as linear attention."""
        group = self._groups.get(name)
        if group is None:
            group = tensor_group(name)
            layer = tensor_layer(name)
            if group == "attention" and layer is not None and layer < self.config.n_layers \
                    and self.config.mixers[layer] == "linear":
                group = "linear_attention"
            self._groups[name] = group
        return group

    def meter(self) -> Meter:
        """A fresh meter for one pass."""
        return Meter(self.weights, self.group_of, match_llama_cpp=self.match_llama_cpp,
                     exact_products=self.exact_products, exact_elementwise=self.exact_elementwise, probe=self.probe,
                     held=self._held)

    def check_ids(self, ids: list[int]) -> None:
        bad = [i for i in ids if not 0 <= i < self.config.n_vocab]
        if bad:
            raise WalkthroughError(
                f"token id {bad[0]} is outside this model's vocabulary (0..{self.config.n_vocab - 1})"
            )

    def forward(self, ids: np.ndarray, start: int, cache: KVCache, meter: Meter, *, record_attention: bool = False,
                all_logits: bool = False, progress: Progress | None = None) -> tuple[np.ndarray, list[LayerTrace]]:
        """Run one pass over tokens `ids` at positions start..start+n (`progress` as in `hidden`).

        Returns:
            logits [n, n_vocab] if all_logits else [1, n_vocab] (last position), and one LayerTrace per layer.
        """
        x, traces = self.hidden(ids, start, cache, meter, record_attention=record_attention, all_rows=all_logits,
                                progress=progress)
        return self.head(x, meter), traces

    def hidden(
        self,
        ids: np.ndarray,
        start: int,
        cache: KVCache,
        meter: Meter,
        *,
        record_attention: bool = False,
        all_rows: bool = False,
        unmetered_rows: bool = False,
        attention_rows: bool = False,
        progress: Progress | None = None,
    ) -> tuple[np.ndarray, list[LayerTrace]]:
        """The trunk of a pass: [n] ids -> the final hidden state after the output norm.

        Args:
            unmetered_rows: also finish the rows the pass does not need (to measure every token's
                surprisal) through a meter nobody reads, so the pass costs what it costs without them.
            attention_rows: attention layers keep every row of their weights (`LayerTrace.attention_rows`).
            progress: called as progress(layers_done, n_layers) before the first layer and after each one;
                whatever it raises (`session.Cancelled`) abandons the pass.

        Returns:
            [n, d] if all_rows or unmetered_rows else [1, d] (last position), and one LayerTrace per layer.
            This is what the output head reads, and what a multi-token-prediction block is seeded with (`mtp`).
        """
        c = self.config
        p = self.pass_input(c, meter, cache, start, len(ids), record_attention)
        p.attention_rows = attention_rows
        x = meter.rows(EMBEDDING, ids)  # [n, d]
        if c.spec.embed_scale:
            x = x * np.float32(c.embed_scale)
        traces = []
        aside: list[np.ndarray] | None = [] if unmetered_rows and not all_rows and len(ids) > 1 else None
        if progress is not None:
            progress(0, c.n_layers)
        for i in range(c.n_layers):
            trace = LayerTrace(i, c.mixers[i], c.ffns[i])
            # As llama.cpp does, the last layer's FFN runs only on the rows whose logits are wanted.
            last_only = i == c.n_layers - 1 and not all_rows
            before = meter.written
            x = block(p, i, x, trace, last_only=last_only, aside=aside)
            trace.activation_bytes = meter.written - before
            traces.append(trace)
            if progress is not None:
                progress(i + 1, c.n_layers)
        if aside:  # the rows the pass skipped, finished outside its meter
            scratch = copy.copy(p)
            scratch.meter = self.meter()
            last = c.n_layers - 1
            x = np.concatenate([ffn_half(scratch, last, aside[0], LayerTrace(last, c.mixers[last], c.ffns[last])), x])
        return meter.look("result_norm", -1, ops.rmsnorm(x, meter.tensor(c.spec.output_norm), c.norm_eps)), traces

    def pass_input(
        self, config: Config, meter: Meter, cache: KVCache, start: int, n: int, record_attention: bool = False
    ) -> PassInput:
        """What every layer of a pass over n tokens at positions start..start+n shares (RoPE angles included)."""
        c = config
        positions = np.arange(start, start + n)
        factors = meter.optional(ROPE_FREQS)  # [n_rot/2] or None; read (and counted) once per pass
        cos, sin = ops.rope_angles(positions, c.rope_dims, c.rope_base, c.rope_freq_scale, factors, c.rope_yarn)
        p = PassInput(c, meter, cache, positions, cos, sin, record_attention)
        if "sliding" in c.mixers:
            yarn = c.rope_yarn if c.rope_freq_scale_swa != 1.0 else None  # sliding layers sharing the scaling
            factors = factors if c.spec.swa_rope_factors else None
            n_rot = c.n_rot(c.mixers.index("sliding"))
            p.cos_swa, p.sin_swa = ops.rope_angles(
                positions, n_rot, c.rope_base_swa, c.rope_freq_scale_swa, factors, yarn)
        return p

    def head_pending(self) -> int:
        """Bytes the output head decodes before its first product (0 once it is held; a head too large for
        the weight budget decodes a block at a time every pass, `Weights.row_blocks`, and counts too).
        What a pass does after its last layer, so a progress display can say it (the head of a large
        vocabulary takes seconds the first time)."""
        name = EMBEDDING if self.tied_output else OUTPUT
        info = self.weights.info(name)
        meter = self.meter()
        dtype, offsets = meter.product_dtype(name), meter.folds_offsets(name)
        held = (self.weights.holds_columns(name, offsets=offsets) if dtype is np.float32  # `head`: by columns
                else self.weights.holds(name, dtype, offsets=offsets))
        if self.weights.whole(name, dtype) and held:
            return 0
        return info.n_elements * np.dtype(dtype).itemsize

    def head(self, x: np.ndarray, meter: Meter) -> np.ndarray:
        """[n, d] normed hidden rows -> [n, n_vocab] logits (the tied embedding when there is no output matrix)."""
        head = EMBEDDING if self.tied_output else OUTPUT
        logits = meter.linear(head, x, "output.bias", group="output", by_columns=True)  # [n, n_vocab]
        if self.config.final_softcap:
            logits = ops.softcap(logits, self.config.final_softcap, exact=meter.exact_products)
        return meter.look("result_output", -1, logits)


def _norm(p: PassInput, i: int, h: np.ndarray, name: str | None) -> np.ndarray:
    """A declared RMSNorm of layer i, or none."""
    return h if name is None else p.meter.wrote(ops.rmsnorm(h, p.meter.tensor(f"blk.{i}.{name}"), p.config.norm_eps))


def ffn_half(p: PassInput, i: int, x: np.ndarray, trace: LayerTrace) -> np.ndarray:
    """The second half of block i: x + FFN(norm(x)) (post-norm if declared), times the layer's output scale
    if it has one (gemma4), [rows, d] -> [rows, d]."""
    spec, m = p.config.spec, p.meter
    x = x + _norm(p, i, runner(trace.ffn)(p, i, m.look("ffn_norm", i, _norm(p, i, x, spec.ffn_norm)), trace),
                  spec.ffn_post_norm)
    scale = m.optional(f"blk.{i}.layer_output_scale.weight")  # [1]
    return m.look("l_out", i, x if scale is None else x * scale)


def block(
    p: PassInput, i: int, x: np.ndarray, trace: LayerTrace, *, last_only: bool = False,
    aside: list[np.ndarray] | None = None,
) -> np.ndarray:
    """One transformer block: [n, d] -> [n, d] ([1, d] when last_only: only the last row goes on).

    With last_only, a list `aside` receives the other rows [n - 1, d] as they enter the FFN.
    """
    spec, m = p.config.spec, p.meter
    mixed = runner(p.config.mixer_key(i))(p, i, m.look("attn_norm", i, _norm(p, i, x, spec.attn_norm)), trace)
    x = m.look("ffn_inp", i, x + _norm(p, i, m.look("attn_out", i, mixed), spec.attn_post_norm))
    if last_only:
        if aside is not None:
            aside.append(x[:-1])
        x = x[-1:]
    return ffn_half(p, i, x, trace)
