"""A runnable model: an opened GGUF, its card and config, lazy weights, and the forward pass.

The forward pass for llama, qwen2, qwen3, qwen2moe, qwen3moe and the hybrid
qwen35moe (the architecture comes from `general.architecture`; see
`config.ARCHITECTURES`):

    x = embed(ids)
    for each layer:  x = x + mixer(rmsnorm(x));  x = x + ffn(rmsnorm(x))
    logits = lm_head(rmsnorm(x))

The mixer and FFN of each layer are picked by kind from `layers.MIXERS` /
`layers.FFNS` (the card's per-layer kinds; `Config.mixer_key`). Hybrid layers
register there from `deltanet` ("linear") and `gated_attention` ("gated_full"). A missing `output.weight` means the
embedding matrix is reused as the output head (tied embeddings).

Example:
    >>> model = Model.open("ref-qwen2-f32.gguf")
    >>> session = Session(model)              # walkthrough.engine.session
    >>> steps = list(session.prefill([1, 2, 3]))
"""

from __future__ import annotations

import os

import numpy as np

from walkthrough.engine import deltanet, gated_attention, ops  # noqa: F401  (deltanet, gated_attention: mixers)
from walkthrough.engine.cache import KVCache
from walkthrough.engine.config import Config, UnsupportedArchitecture, build_config
from walkthrough.engine.layers import FFNS, MIXERS, PassInput
from walkthrough.engine.meter import Meter
from walkthrough.engine.steps import LayerTrace
from walkthrough.engine.validate import check_tensors
from walkthrough.engine.weights import DEFAULT_CACHE_BYTES, Weights
from walkthrough.errors import WalkthroughError
from walkthrough.inspect.card import ModelCard, build_card, tensor_group, tensor_layer
from walkthrough.inspect.gguf import GGUFFile, open_gguf

EMBEDDING = "token_embd.weight"
OUTPUT = "output.weight"


class Model:
    """Everything needed to run one file; holds no per-request state (that is the Session's)."""

    def __init__(
        self,
        f: GGUFFile,
        *,
        card: ModelCard | None = None,
        max_cache_bytes: int = DEFAULT_CACHE_BYTES,
        match_llama_cpp: bool = True,
    ):
        """Prepare an opened file to run (header only; weights are read on first use).

        Args:
            match_llama_cpp: round each matrix product's input as llama.cpp's CPU backend does for the
                weight's stored type (`activations`); False gives plain float32 products.
        """
        self.file = f
        self.match_llama_cpp = match_llama_cpp
        self.card = card or build_card(f)
        self.config: Config = build_config(f, self.card)
        for i, (mixer, ffn) in enumerate(zip(self.config.mixers, self.config.ffns)):
            if self.config.mixer_key(i) not in MIXERS or ffn not in FFNS:
                raise UnsupportedArchitecture(
                    f"layer {i} of this {self.config.arch} file is {mixer} attention with a {ffn} FFN, "
                    "which the engine cannot run yet (inspect still works)"
                )
        check_tensors(f, self.config)
        self.weights = Weights(f, max_cache_bytes=max_cache_bytes)
        self.tied_output = not self.weights.has(OUTPUT)
        self._groups: dict[str, str] = {}  # tensor name -> group, memoised (looked up for every weight, every pass)
        self._rope_factors = self.weights.get("rope_freqs.weight") if self.weights.has("rope_freqs.weight") else None

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
        return Meter(self.weights, self.group_of, match_llama_cpp=self.match_llama_cpp)

    def check_ids(self, ids: list[int]) -> None:
        bad = [i for i in ids if not 0 <= i < self.config.n_vocab]
        if bad:
            raise WalkthroughError(
                f"token id {bad[0]} is outside this model's vocabulary (0..{self.config.n_vocab - 1})"
            )

    def forward(
        self,
        ids: np.ndarray,
        start: int,
        cache: KVCache,
        meter: Meter,
        *,
        record_attention: bool = False,
        all_logits: bool = False,
    ) -> tuple[np.ndarray, list[LayerTrace]]:
        """Run one pass over tokens `ids` at positions start..start+n.

        Returns:
            logits [n, n_vocab] if all_logits else [1, n_vocab] (last position), and one LayerTrace per layer.
        """
        c = self.config
        n = len(ids)
        positions = np.arange(start, start + n)
        cos, sin = ops.rope_angles(positions, c.rope_dims, c.rope_base, c.rope_freq_scale, self._rope_factors)
        p = PassInput(c, meter, cache, positions, cos, sin, record_attention)
        x = meter.rows(EMBEDDING, ids)  # [n, d]
        traces = []
        for i in range(c.n_layers):
            trace = LayerTrace(i, c.mixers[i], c.ffns[i])
            # As llama.cpp does, the last layer's FFN runs only on the rows whose logits are wanted.
            last_only = i == c.n_layers - 1 and not all_logits
            x = block(p, i, x, trace, last_only=last_only)
            traces.append(trace)
        x = ops.rmsnorm(x, meter.tensor("output_norm.weight"), c.norm_eps)
        head = EMBEDDING if self.tied_output else OUTPUT
        logits = meter.linear(head, x, "output.bias", group="output")  # [n or 1, n_vocab]
        return logits, traces


def _ffn_norm_name(meter: Meter, layer: int) -> str:
    name = f"blk.{layer}.ffn_norm.weight"
    return name if meter.weights.has(name) else f"blk.{layer}.post_attention_norm.weight"


def block(p: PassInput, i: int, x: np.ndarray, trace: LayerTrace, *, last_only: bool = False) -> np.ndarray:
    """One transformer block: [n, d] -> [n, d] ([1, d] when last_only: only the last row goes on)."""
    m, eps = p.meter, p.config.norm_eps
    x = x + MIXERS[p.config.mixer_key(i)](p, i, ops.rmsnorm(x, m.tensor(f"blk.{i}.attn_norm.weight"), eps), trace)
    if last_only:
        x = x[-1:]
    x = x + FFNS[trace.ffn](p, i, ops.rmsnorm(x, m.tensor(_ffn_norm_name(m, i)), eps), trace)
    return x
