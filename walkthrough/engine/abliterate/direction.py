"""The direction of a behaviour: the difference of the two sets' mean residual streams, and each
prompt's projection on it.

At layer L, with h the residual stream at a prompt's last position:
    direction = mean(h over prompts with the behaviour) - mean(h over prompts without), made unit length
    projection(h) = h . direction
How well a layer separates the sets is the gap between the two sets' mean projections over their
pooled standard deviation (`separation`); without `--layer` the layer that separates best is used.

Example: with = [[2, 0], [4, 0]], without = [[0, 0], [0, 2]] -> means [3, 0] and [0, 1],
direction [3, -1] / sqrt(10), projections 1.90, 3.79 and 0, -0.63.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from walkthrough.errors import WalkthroughError

TINY = 1e-12


@dataclass(frozen=True)
class Direction:
    layer: int
    unit: np.ndarray  # [d] float64, length 1
    gap: float  # length of the difference of means before normalising
    separation: np.ndarray  # [n_layers]: per layer, mean gap of the projections / pooled std

    def project(self, h: np.ndarray) -> np.ndarray:
        """[..., d] -> [...] the component along the direction."""
        return h @ self.unit


def _unit_differences(with_: np.ndarray, without: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """[n_layers, d] unit directions per layer and [n_layers] their lengths before normalising."""
    diff = with_.mean(axis=0) - without.mean(axis=0)  # [n_layers, d]
    norm = np.linalg.norm(diff, axis=-1)  # [n_layers]
    return diff / np.maximum(norm, TINY)[:, None], norm


def separation(with_: np.ndarray, without: np.ndarray) -> np.ndarray:
    """[n, n_layers, d] x2 -> [n_layers]: how far apart the sets' projections lie, in pooled std units."""
    units, _ = _unit_differences(with_, without)
    a = np.einsum("nld,ld->nl", with_, units)  # [n_with, n_layers]
    b = np.einsum("nld,ld->nl", without, units)
    spread = np.sqrt((a.var(axis=0) + b.var(axis=0)) / 2)
    return (a.mean(axis=0) - b.mean(axis=0)) / np.maximum(spread, TINY)


def find_direction(with_: np.ndarray, without: np.ndarray, layer: int | None = None) -> Direction:
    """The direction at `layer` (the best-separating layer when None) from [n, n_layers, d] residuals.

    Raises:
        WalkthroughError: the layer is out of range, or the two sets' means are the same there.
    """
    n_layers = with_.shape[1]
    sep = separation(with_, without)
    if layer is None:
        layer = int(np.argmax(sep))
    if not 0 <= layer < n_layers:
        raise WalkthroughError(f"--layer {layer}: this model has layers 0..{n_layers - 1}")
    units, norms = _unit_differences(with_, without)
    if norms[layer] <= TINY:
        raise WalkthroughError(f"layer {layer}: the two prompt sets have the same mean; no direction to find")
    return Direction(layer, units[layer], float(norms[layer]), sep)
