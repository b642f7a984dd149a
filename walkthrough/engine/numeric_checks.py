"""Refuse numbers that would poison a forward pass: hyperparameters and small weights that are not usable floats.

A GGUF can parse perfectly and still hold a RoPE base of NaN, a norm epsilon of
-1, a scaling factor stored as the text "abc", or a norm weight of 3e38. Run as
they are, they turn every logit into NaN (or into numbers that mean nothing), and
the failure surfaces far away, in the sampler. These checks run before the engine
does and name the key or tensor, the value, and what is expected, in one line.

What is checked:
- Float hyperparameters the engine reads (`{arch}.rope.freq_base`, the norm
  epsilons, `{arch}.rope.scaling.factor` / `rope.scale_linear`), wherever they are
  present in the file: a real number (not text, an array or a bool), finite, above 0
  (a scaling factor may be 0, which means none).
  Then the run's derived values (`Config.norm_eps`, `rope_base`, `rope_freq_scale`).
- Every 1-D tensor (norm weights, biases, RoPE factors, recurrent-layer constants):
  finite, and below `float32_max / sqrt(n_embd)` in magnitude, the largest scale a
  unit-RMS activation (entries up to sqrt(n_embd)) can take without overflowing float32.
- After a pass, the logits (`check_logits`): a backstop for the matrices, which are too
  big to scan before a run.

Example: `llama.rope.freq_base = nan` ->
    "model.gguf: llama.rope.freq_base is nan; expected a finite number above 0 (the engine cannot run it)"
"""

from __future__ import annotations

import math
import numbers
from typing import TYPE_CHECKING, Any

import numpy as np

from walkthrough.errors import WalkthroughError
from walkthrough.textsafe import visible

if TYPE_CHECKING:
    from walkthrough.engine.glassbox.config import Config
    from walkthrough.engine.glassbox.weights import Weights
    from walkthrough.inspect.gguf import GGUFFile

FLOAT32_MAX = float(np.finfo(np.float32).max)
# Metadata keys (after "{arch}.") holding a float the engine reads, and whether 0 is allowed: a RoPE
# scaling factor of 0 means "no scaling" (llama.cpp's llm_load_hparams: `ropescale == 0.0f ? 1.0f : 1/ropescale`),
# a softcap of 0 means none (the engine reads 0 as off).
FLOAT_KEYS = {
    "rope.freq_base": False,
    "rope.freq_base_swa": False,
    "final_logit_softcapping": True,
    "attn_logit_softcapping": True,
    "attention.layer_norm_rms_epsilon": False,
    "attention.layer_norm_epsilon": False,
    "rope.scaling.factor": True,
    "rope.scale_linear": True,
}
MAX_SMALL_TENSOR_VALUES = 1 << 20  # 1-D tensors up to this many values are scanned before a run


class InvalidNumbers(WalkthroughError):
    """A hyperparameter or weight is not a usable number; the engine refuses to run the file."""


def _shown(value: Any) -> str:
    if isinstance(value, (list, tuple, np.ndarray)):
        return f"an array of {len(value):,} values"
    if isinstance(value, str):
        return f"the text {visible(value[:40])!r}"
    return visible(repr(value)[:40])


def positive_number(value: Any, key: str, where: str, *, zero: bool = False) -> float:
    """`value` as a float if it is a real number, finite and above 0 (or 0 itself with `zero`).

    Raises:
        InvalidNumbers: naming `key`, what it holds, and what is expected.
    """
    ok = isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))
    number = float(value) if ok else math.nan
    if not (ok and math.isfinite(number) and (number > 0 or (zero and number == 0))):
        floor = "of at least 0" if zero else "above 0"
        raise InvalidNumbers(
            f"{where}: {visible(key)} is {_shown(value)}; expected a finite number {floor} "
            "(the engine cannot run it; inspect still works)"
        )
    return number


def check_metadata(f: GGUFFile, arch: str) -> None:
    """Every `FLOAT_KEYS` entry present in the file is a finite number above 0 (or 0 where allowed)."""
    for suffix, zero in FLOAT_KEYS.items():
        key = f"{arch}.{suffix}"
        if key in f.fields:
            positive_number(f.get(key), key, f.path.name, zero=zero)


def check_config(config: Config, where: str) -> None:
    """The run's float hyperparameters are finite and above 0."""
    for name in ("norm_eps", "rope_base", "rope_freq_scale", "rope_base_swa"):
        positive_number(getattr(config, name), name, where)


def check_small_tensors(f: GGUFFile, weights: Weights, n_embd: int) -> None:
    """Every 1-D tensor is finite and below the float32-overflow scale (see the module docstring)."""
    bound = FLOAT32_MAX / math.sqrt(max(n_embd, 1))
    for name, info in f.tensors.items():
        if len(info.shape) != 1 or info.shape[0] > MAX_SMALL_TENSOR_VALUES:
            continue
        values = weights.get(name)  # [n] float32
        finite = np.isfinite(values)
        if not finite.all():
            bad = float(values[~finite][0])
            raise InvalidNumbers(
                f"{f.path.name}: tensor {visible(name)} holds {bad} at index {int(np.argmin(finite))}; "
                "weights must be finite numbers (the engine cannot run it)"
            )
        peak = float(np.abs(values).max(initial=0.0))
        if peak > bound:
            raise InvalidNumbers(
                f"{f.path.name}: tensor {visible(name)} holds {peak:.3g}; above {bound:.3g} it overflows "
                f"float32 on an activation of {n_embd} values (the engine cannot run it)"
            )


def check_logits(logits: np.ndarray, where: str) -> None:
    """Raise `InvalidNumbers` if a pass produced NaN or infinite logits ([n_vocab] or [n, n_vocab])."""
    if not np.isfinite(logits).all():
        kind = "NaN" if np.isnan(logits).any() else "infinite"
        raise InvalidNumbers(
            f"{where}: the forward pass produced {kind} logits; the file's weights or hyperparameters "
            "are broken (inspect still works)"
        )
