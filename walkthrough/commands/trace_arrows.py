"""`walkthrough trace --arrows LAYER:HEAD`: after the run, the last token's query and the key it weighted most,
as the attention view's two arrows (`engine.query_key`, drawn by `render.dot_arrows`).

The run records every attention row and the queries and keys beside them (numpy engine only); the
arrows are a projection on the head's keys' first two principal directions, and the score line is the run's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TextIO

from walkthrough.errors import WalkthroughError


def parse_arrows(spec: str, n_layers: int, n_head: int, mixers: Sequence[str]) -> tuple[int, int]:
    """"LAYER:HEAD" -> (layer, head), each within the model and the layer an attention one.

    Example: "5:0" -> (5, 0) on a model with more than 5 layers.
    """
    layer_text, sep, head_text = spec.partition(":")
    if not (sep and layer_text.isdigit() and head_text.isdigit() and len(spec) <= 12):
        raise WalkthroughError(f"--arrows {spec[:20]!r}: write LAYER:HEAD, e.g. --arrows 0:0")
    layer, head = int(layer_text), int(head_text)
    if layer >= n_layers or head >= n_head:
        raise WalkthroughError(f"--arrows {layer}:{head}: this model has layers 0..{n_layers - 1} and heads "
                               f"0..{n_head - 1}")
    if mixers[layer] == "linear":
        raise WalkthroughError(f"--arrows {layer}:{head}: layer {layer} is linear attention (no keys); pick an "
                               "attention layer")
    return layer, head


def print_arrows(steps: Sequence, config, layer: int, head: int, out: TextIO) -> None:
    """The last position's query against the key it weighted most in `layer`, `head`: arrows and score."""
    from rich.console import Console

    from walkthrough.engine.attention_map import AttentionMap
    from walkthrough.engine.query_key import MIN_KEYS, QueryKeys
    from walkthrough.render.dot_arrows import arrows_canvas, pair_lines

    qk = QueryKeys.from_steps(steps)
    console = Console(file=out, markup=False, emoji=False, highlight=False)
    if qk.length < MIN_KEYS or layer not in qk.queries:
        console.print(f"arrows: {qk.length} positions recorded in layer {layer}; at least {MIN_KEYS} are needed")
        return
    amap = AttentionMap.from_steps(steps, config)
    row = qk.length - 1
    key, weight = amap.top(layer, head, row, 1)[0]
    pair = qk.pair(layer, head, row, key)
    console.print(f"layer {layer}, head {head}: the query of position {row} and the key it weighted most, "
                  f"position {key} (projection on this head's keys' first two principal directions, u1 across, "
                  "u2 up)")
    console.print(arrows_canvas(pair, min(console.width - 2, 61), 13))
    console.print(pair_lines(pair, weight))
