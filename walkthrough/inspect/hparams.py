"""Typed, hostile-safe access to a GGUF's `{arch}.*` hyperparameters, and the per-layer patterns they imply.

Metadata comes from an untrusted file: a count may be negative, a float, NaN, a
string or an array of strings. `Hparams.int` and `Hparams.per_layer` accept
only non-negative integers (an integral float counts) and give None for
anything else, so the card never raises on a strange value, it just does not
know that number.

The patterns follow llama.cpp (vendored 0.3.36):
- recurrent layers: `attention.recurrent_layers` (one flag per layer), else
  `full_attention_interval` (layer i is recurrent unless (i + 1) % interval == 0;
  `src/models/qwen35moe.cpp`), else the layer's tensors;
- sliding-window layers: `attention.sliding_window_pattern` as one flag per
  layer or a period (`llama_hparams::set_swa_pattern` in `src/llama-hparams.cpp`),
  else the architecture's default period (`SWA_DEFAULTS`);
- recurrent state values per layer: `llama_hparams::n_embd_r` + `n_embd_s`.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

from walkthrough.architectures.sliding import SWA_DEFAULTS, SWA_DISABLED
from walkthrough.architectures.state_sizes import (
    rwkv_state_values,
    shortconv_state_values,
    ssm_state_values,
)
from walkthrough.inspect.gguf import GGUFFile, TensorInfo
from walkthrough.inspect.tensors import RECURRENT_PREFIXES

# Keys that size a recurrent layer's state (see recurrent_state_values).
_STATE_KEYS = ("wkv.head_size", "shortconv.l_cache", "ssm.inner_size", "ssm.state_size")


def as_count(value: Any) -> int | None:
    """A non-negative integer from a metadata value, or None (bools, NaN, negatives, strings...)."""
    if isinstance(value, (bool, np.bool_)):
        return None
    if isinstance(value, numbers.Integral):
        return int(value) if value >= 0 else None
    if isinstance(value, numbers.Real) and math.isfinite(value) and value >= 0 and float(value).is_integer():
        return int(value)
    return None


def _is_sequence(value: Any) -> bool:
    return isinstance(value, (list, tuple, np.ndarray))


class Hparams:
    """`{arch}.*` keys of one file, read defensively; `notes` lists what could not be determined."""

    def __init__(self, f: GGUFFile, arch: str):
        self.f, self.arch = f, arch
        self.notes: list[str] = []

    def raw(self, suffix: str) -> Any:
        return self.f.get(f"{self.arch}.{suffix}")

    def int(self, suffix: str) -> int | None:
        """One count; for a per-layer array, the largest entry."""
        value = self.raw(suffix)
        if _is_sequence(value):
            counts = [c for c in map(as_count, value) if c is not None] if len(value) <= 1 << 20 else []
            return max(counts) if counts else None
        return as_count(value)

    def per_layer(self, suffix: str, n_layers: int) -> list[int | None]:
        """A key that may be one number or one per layer, as one entry per layer (None where unknown)."""
        value = self.raw(suffix)
        if _is_sequence(value):
            values = [as_count(v) for v in value[:n_layers]]
            return values + [None] * (n_layers - len(values))
        return [as_count(value)] * n_layers

    def float(self, suffix: str) -> float | None:
        value = self.raw(suffix)
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
            return None
        return float(value)

    def flags(self, suffix: str, n_layers: int) -> list[bool] | None:
        """A per-layer flag array covering every layer, or None."""
        value = self.raw(suffix)
        if not _is_sequence(value) or len(value) < n_layers:
            return None
        return [bool(v) if isinstance(v, (bool, np.bool_)) else as_count(v) not in (None, 0) for v in value[:n_layers]]

    def recurrent_flags(self, n_all: int, n_trunk: int, parts: list[dict[str, TensorInfo]],
                        kv_heads: list[int | None]) -> list[bool]:
        """Which layers are linear attention (recurrent, fixed state); MTP blocks never are."""
        explicit = self.flags("attention.recurrent_layers", n_all)
        if explicit is not None:
            return explicit
        interval = self.int("full_attention_interval")
        if interval:
            return [i < n_trunk and (i + 1) % interval != 0 for i in range(n_all)]
        has_state_keys = any(self.raw(k) is not None for k in _STATE_KEYS)
        out = []
        for i in range(n_all):
            if parts[i]:
                out.append(i < n_trunk and any(p.startswith(RECURRENT_PREFIXES) for p in parts[i]))
            else:  # no tensors for this layer: a hybrid declares its recurrent layers with zero KV heads
                out.append(i < n_trunk and has_state_keys and kv_heads[i] == 0)
        return out


def swa_flags(hp: Hparams, n_all: int, n_trunk: int) -> list[bool]:
    """Which layers use the sliding window (only meaningful where a window is declared)."""
    if hp.arch in SWA_DISABLED:
        return [False] * n_all
    explicit = hp.raw("attention.sliding_window_pattern")
    if _is_sequence(explicit):
        flags = [bool(v) for v in explicit[:n_all]]
        return [f and i < n_trunk for i, f in enumerate(flags + [False] * (n_all - len(flags)))]
    default = SWA_DEFAULTS.get(hp.arch)
    period = as_count(explicit)
    if period is None and default is not None:
        period = default[0]
    if period is None:
        if hp.raw("attention.sliding_window") is not None:
            hp.notes.append("sliding_window_layers")  # a window is declared, but not which layers use it
        return [False] * n_all
    dense_first = default[1] if default is not None else False
    if period == 0:
        return [i < n_trunk for i in range(n_all)]
    if dense_first:
        return [i < n_trunk and i % period != 0 for i in range(n_all)]
    return [i < n_trunk and i % period < period - 1 for i in range(n_all)]


def recurrent_state_values(hp: Hparams, n_embd: int | None) -> int | None:
    """Values in one recurrent layer's fixed state (conv/shift state + recurrent state), or None, for a
    file whose architecture no layer kind declares: the formula its keys point to
    (`architectures.state_sizes`: RWKV's `wkv.head_size`, a short convolution's `shortconv.l_cache`,
    else Mamba-style SSM / Gated DeltaNet sizes).
    Example (the qwen35moe reference: conv 4, inner 64, state 16, groups 2): 1408 values.
    """
    if hp.int("wkv.head_size"):
        return rwkv_state_values(hp.int, n_embd)
    if hp.int("shortconv.l_cache"):
        return shortconv_state_values(hp.int, n_embd)
    return ssm_state_values(hp.int, n_embd)
