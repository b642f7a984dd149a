"""The KV cache of one session, kept outside the layers so the UI can read it.

Per full-attention layer it holds the keys and values of every position so far
([length, n_head_kv, head_dim] each). Sliding-window layers are stored the same way
(attention masks what lies outside the window), but counted as llama.cpp keeps them:
at most the window's positions. Bytes are counted at the chosen cache
type as llama.cpp stores it: "f16" (llama.cpp's default), "q8_0", "q4_0", or
"f32"; values written are rounded to that type (quantized per position row of
n_head_kv x head_dim values, as ggml quantizes the rows of its K and V
tensors), so attention reads what such a cache would hold.

Linear-attention layers (hybrid models) keep a fixed-size recurrent state
instead: `states[layer]` holds it ({"conv": [K-1, channels], "recurrent":
[value heads, head_v, head_k]}, float32, made by `qwen35.HybridDims.new_state`;
lfm2's short convolutions only {"conv": [L-1, d]}),
`state_bytes_by_layer` / `state_bytes` count it; it does not grow with the
length. `layer_kinds` says which layer keeps what ("full": K and V rows,
"linear": a fixed state).

Example: a 2-layer model with 2 KV heads of 16 values at "f16" holds
2 layers x 2 x (16 + 16) x 2 bytes = 256 bytes per token, the card's
`kv_bytes_per_token["f16"]`.
"""

from __future__ import annotations

import numpy as np
from gguf import quants
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from walkthrough.architectures.layer_kinds import LAYER_KINDS, keeps, resolve
from walkthrough.engine.glassbox import quantdot
from walkthrough.engine.glassbox.config import Config
from walkthrough.errors import WalkthroughError
from walkthrough.inspect.card import type_bytes_per_value

CACHE_TYPES = ("f16", "q8_0", "q4_0", "f32")


def _round_to_type(x: np.ndarray, cache_type: str) -> np.ndarray:
    """[n, h, d] float32 -> the same values after a round trip through the cache type."""
    if cache_type == "f32":
        return x
    if cache_type == "f16":
        return x.astype(np.float16).astype(np.float32)
    rows = x.reshape(x.shape[0], -1)  # one row per position, as ggml lays out K and V
    if cache_type == "q8_0":  # ggml stores rows with the CPU's `quantize_row_q8_0` (x86: ties to even)
        codes, d, _ = quantdot.quantize_q8(rows)  # [n, blocks, 32], [n, blocks]
        return (codes * d[..., None]).astype(np.float32).reshape(x.shape)
    qtype = GGMLQuantizationType[cache_type.upper()]  # q4_0: `quantize_row_q4_0_ref`, as gguf.quants
    return quants.dequantize(quants.quantize(rows, qtype), qtype).reshape(x.shape)


ROTATION_MIN = 64  # the smallest Walsh-Hadamard rotation llama.cpp gives a quantized cache (src/llama-kv-cache.cpp)


def _rotations(config: Config, layers: list[int], cache_type: str) -> dict[int, tuple[int, int]]:
    """Per attention layer, the rotations llama.cpp applies with a quantized cache (llama_kv_cache's `attn_rot_k`,
    `attn_rot_v`; `LLAMA_ATTN_ROT_DISABLE` turns them off there): when every layer of a cache (the sliding
    layers keep a cache of their own) has one key size, a multiple of 64, q and k turn in runs of the largest
    power of 2 from 64 up that divides it (`build_input_k_rot`); likewise v, in runs of 64 (`build_input_v_rot`),
    and the attention output turns back. An orthonormal rotation leaves q.k and the weighted sum of values as they
    were; it spreads each block's largest values so the 8- or 4-bit codes lose less."""
    if not cache_type.startswith("q"):
        return {}
    out = {}
    for group in ([i for i in layers if config.mixers[i] == "sliding"], [i for i in layers if config.mixers[i] != "sliding"]):
        keys, values = {config.head_k(i) for i in group}, {config.head_v(i) for i in group}
        n_k = n_v = 0
        if len(keys) == 1 and keys.pop() % ROTATION_MIN == 0:
            size = config.head_k(group[0])
            n_k = ROTATION_MIN
            while size % (2 * n_k) == 0:
                n_k *= 2
        if len(values) == 1 and values.pop() % ROTATION_MIN == 0:
            n_v = ROTATION_MIN
        out.update(dict.fromkeys(group, (n_k, n_v)))
    return out


class KVCache:
    """Keys and values per attention layer and position, plus fixed states of linear layers."""

    def __init__(self, config: Config, cache_type: str = "f16", capacity: int = 256, *,
                 flash_attention: bool = False):
        """`flash_attention`: attention reads the cache as llama.cpp's flash attention does (with exact
        products only: `ops.flash_attention`)."""
        self.flash_attention = flash_attention
        if cache_type not in CACHE_TYPES:
            raise WalkthroughError(f"KV cache type {cache_type!r} is not one of {', '.join(CACHE_TYPES)}")
        self.cache_type = cache_type
        self.config = config
        self.layers = [i for i in range(len(config.mixers)) if keeps(config.mixer_key(i)) == "kv"]
        self.length = 0  # positions held
        self._per_value = type_bytes_per_value(cache_type)
        self._k: dict[int, np.ndarray] = {}
        self._v: dict[int, np.ndarray] = {}
        for i in self.layers:
            h = config.n_head_kv[i]
            if cache_type.startswith("q"):
                block = GGML_QUANT_SIZES[GGMLQuantizationType[cache_type.upper()]][0]
                if (h * config.head_k(i)) % block or (h * config.head_v(i)) % block:
                    raise WalkthroughError(
                        f"a {cache_type} KV cache needs rows that are multiples of {block} values; "
                        f"layer {i} has {h} x {config.head_k(i)}; choose f16"
                    )
            self._k[i] = np.zeros((capacity, h, config.head_k(i)), np.float32)
            self._v[i] = np.zeros((capacity, h, config.head_v(i)), np.float32)
        self._rotations = _rotations(config, self.layers, cache_type)
        self.states: dict[int, dict[str, np.ndarray]] = {}  # linear-attention layers: name -> fixed-size array
        self.state_bytes_by_layer: dict[int, int] = {}
        for i in range(len(config.mixers)):
            if keeps(config.mixer_key(i)) == "state":  # the kind's declaration names what makes its zero state
                kind = LAYER_KINDS[config.mixer_key(i)]
                self.states[i] = resolve(kind.state)(config, i)
                self.state_bytes_by_layer[i] = sum(a.nbytes for a in self.states[i].values())

    def rotation(self, layer: int) -> tuple[int, int]:
        """(n_k, n_v): the Walsh-Hadamard rotations llama.cpp gives an attention layer's q and k, and its v, runs of
        that many values (`ops.hadamard_rows`; 0: none). See `_rotations`."""
        return self._rotations.get(layer, (0, 0))

    @property
    def layer_kinds(self) -> tuple[str, ...]:
        """Per layer: "full" (keeps K and V per position) or "linear" (keeps a fixed state)."""
        return self.config.mixers

    def write(self, layer: int, start: int, k: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Store k [n, h_kv, hd] and v [n, h_kv, hd_v] at positions start..start+n.

        Returns:
            every key and value up to start+n: [start+n, h_kv, hd], [start+n, h_kv, hd_v].
        """
        end = start + k.shape[0]
        if end > self._k[layer].shape[0]:
            self._grow(layer, end)
        self._k[layer][start:end] = _round_to_type(k, self.cache_type)
        self._v[layer][start:end] = _round_to_type(v, self.cache_type)
        return self._k[layer][:end], self._v[layer][:end]

    def _grow(self, layer: int, needed: int) -> None:
        size = max(needed, 2 * self._k[layer].shape[0])
        for store in (self._k, self._v):
            old = store[layer]
            new = np.zeros((size,) + old.shape[1:], np.float32)
            new[: old.shape[0]] = old
            store[layer] = new

    def keys(self, layer: int) -> np.ndarray:
        """[length, h_kv, hd] keys of one layer."""
        return self._k[layer][: self.length]

    def values(self, layer: int) -> np.ndarray:
        """[length, h_kv, hd_v] values of one layer."""
        return self._v[layer][: self.length]

    def layer_bytes_per_token(self, layer: int) -> int:
        c = self.config
        return round(c.n_head_kv[layer] * (c.head_k(layer) + c.head_v(layer)) * self._per_value)

    @property
    def bytes_per_token(self) -> int:
        """KV bytes one more position adds, over all attention layers."""
        c = self.config
        values = sum(c.n_head_kv[i] * (c.head_k(i) + c.head_v(i)) for i in self.layers)
        return round(values * self._per_value)

    def layer_bytes(self, layer: int, length: int | None = None) -> int:
        """KV bytes a layer needs at `length` positions: a sliding-window layer keeps at most its window."""
        length = self.length if length is None else length
        window = self.config.window(layer)
        return self.layer_bytes_per_token(layer) * (min(length, window) if window else length)

    def nbytes(self, length: int | None = None) -> int:
        """KV bytes held at `length` positions (default: now), sliding-window layers counted to their window."""
        return sum(self.layer_bytes(i, length) for i in self.layers)

    @property
    def state_bytes(self) -> int:
        """Bytes of the fixed recurrent states of linear-attention layers (0 for plain transformers)."""
        return sum(self.state_bytes_by_layer.values())

    def truncate(self, length: int, states: dict[int, dict[str, np.ndarray]] | None = None) -> None:
        """Forget positions from `length` on (to run a different continuation from there).

        Keys and values are rows per position, so any shorter length is exact. The fixed states of
        linear-attention layers are not: going back needs the states saved at `length` (a checkpoint,
        see `checkpoints`), which are copied in; at length 0 they start from zero again.
        """
        if length < 0 or length > self.length:
            raise WalkthroughError(f"cannot truncate a cache of {self.length} positions to {length}")
        if self.states:
            if states is not None:  # copied in even at the same length (a state a broken pass left half-done)
                for layer, state in states.items():
                    for name, array in state.items():
                        self.states[layer][name][...] = array
            elif length == 0:
                for state in self.states.values():
                    for array in state.values():
                        array[...] = 0.0
            elif length != self.length:
                raise WalkthroughError(
                    f"the recurrent state cannot be rewound to position {length} without a checkpoint there"
                )
        self.length = length
