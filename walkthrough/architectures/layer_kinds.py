"""Layer kinds, declared once: what runs each half of a layer, what it keeps between passes, what it reads.

A layer is a mixer (moves information between positions) and an FFN (transforms each position). Each
kind names the engine function that runs it by import path ("module:function", so this module imports
no engine), what it keeps between passes ("kv": keys and values per position, the KV cache; "state": a
fixed-size state, made by the function `state` names; "": nothing), the metadata keys it reads
beyond the card's (after `{arch}.`) and, for tensors the shared table of `validate.py` lacks, the
function giving their shapes.
A kind with hyperparameters of its own names the function reading them from the file (`params`): the
engine's `Config.params[name]` holds what it returns, and only its own module reads it. A kind keeping a
state names the function sizing it from its metadata (`state_values`), which the card calls for its
layers' state bytes. So neither `engine/glassbox/config.py` nor `inspect/card.py` names a kind's keys.
The numpy engine runs a layer with `LAYER_KINDS[key].forward` (`engine/glassbox/layers.py:runner`) and
its KV cache keeps K and V for the layers whose kind keeps "kv" (`engine/glassbox/cache.py`).
Which kind runs a layer the card calls "full" or "linear" is the architecture's
(`Architecture.mixer_kind`).

Adding a kind is its module (one function `[n, d] -> [n, d]`) and one line here, or `register(...)`:

    LayerKind("toy", "walkthrough.engine.glassbox.toy:toy_mixer"),

Example: LAYER_KINDS["shortconv"].keeps -> "state"; LAYER_KINDS["sliding"].metadata ->
("attention.sliding_window", "attention.sliding_window_pattern", "rope.freq_base_swa", ...)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from importlib import import_module

_GLASSBOX = "walkthrough.engine.glassbox"
_SIZES = "walkthrough.architectures.state_sizes"


@dataclass(frozen=True)
class LayerKind:
    """One kind of mixer or FFN: the key the engine runs it by, its function, what it keeps, what it reads."""

    name: str  # the runner key: `Config.mixer_key(layer)` for a mixer, the card's FFN kind for an FFN
    forward: str  # "module:function" running it: (PassInput, layer, x [n, d], LayerTrace) -> [n, d]
    keeps: str = ""  # "kv": K and V per position (the KV cache); "state": a fixed-size state; "": nothing
    metadata: tuple[str, ...] = ()  # keys it reads beyond the card's (after `{arch}.`)
    state: str = ""  # keeps "state": "module:function" making one layer's zero state, (Config, layer) -> arrays
    shapes: str = ""  # "module:function" giving its own tensors' shapes, (Config, layer) -> {name: shape}
    # "module:function" reading its own hyperparameters, (GGUFFile, ModelCard) -> value: `Config.params[name]`
    params: str = ""
    # keeps "state": "module:function" sizing one layer's state in values from its metadata, (read, n_embd)
    # -> int | None (`architectures.state_sizes`); the card's state bytes
    state_values: str = ""


_SWA_KEYS = ("attention.sliding_window", "attention.sliding_window_pattern", "rope.freq_base_swa",
             "attention.key_length_swa", "attention.value_length_swa", "rope.dimension_count_swa")
_SSM_KEYS = ("ssm.conv_kernel", "ssm.state_size", "ssm.group_count", "ssm.time_step_rank", "ssm.inner_size")
_ROUTER_KEYS = ("expert_weights_norm", "expert_weights_scale", "expert_gating_func", "expert_group_count",
                "expert_group_used_count")

LAYER_KINDS: dict[str, LayerKind] = {
    kind.name: kind
    for kind in (
        LayerKind("full", f"{_GLASSBOX}.layers:full_attention", "kv"),
        LayerKind("sliding", f"{_GLASSBOX}.layers:full_attention", "kv", _SWA_KEYS),
        LayerKind("gated_full", f"{_GLASSBOX}.gated_attention:gated_full_attention", "kv",
                  ("rope.dimension_sections",), params=f"{_GLASSBOX}.qwen35:rope_sections"),
        LayerKind("linear", f"{_GLASSBOX}.deltanet:gated_deltanet", "state", _SSM_KEYS,
                  f"{_GLASSBOX}.deltanet:new_state", f"{_GLASSBOX}.deltanet:layer_shapes",
                  f"{_GLASSBOX}.qwen35:hybrid_dims", f"{_SIZES}:ssm_state_values"),
        LayerKind("shortconv", f"{_GLASSBOX}.shortconv:short_conv", "state", ("shortconv.l_cache",),
                  f"{_GLASSBOX}.shortconv:new_state", f"{_GLASSBOX}.shortconv:layer_shapes",
                  f"{_GLASSBOX}.shortconv:kernel", f"{_SIZES}:shortconv_state_values"),
        LayerKind("dense", f"{_GLASSBOX}.layers:dense_ffn"),
        LayerKind("moe", f"{_GLASSBOX}.layers:moe_ffn", "", _ROUTER_KEYS),
    )
}


def register(kind: LayerKind) -> None:
    """Declare one more layer kind (refused if its name is taken: a kind is declared once)."""
    if kind.name in LAYER_KINDS:
        raise ValueError(f"layer kind {kind.name!r} is already declared ({LAYER_KINDS[kind.name].forward})")
    if kind.keeps not in ("kv", "state", ""):
        raise ValueError(f"layer kind {kind.name!r} keeps {kind.keeps!r}, not 'kv', 'state' or ''")
    if (kind.keeps == "state") != bool(kind.state):
        raise ValueError(f"layer kind {kind.name!r}: a kind keeping a state names the function making it")
    if kind.state_values and kind.keeps != "state":
        raise ValueError(f"layer kind {kind.name!r} sizes a state it does not keep")
    LAYER_KINDS[kind.name] = kind


def resolve(target: str) -> Callable:
    """The function a declaration names: "package.module:function" -> that function (imported now)."""
    module, name = target.split(":")
    return getattr(import_module(module), name)


def state_values(name: str, read: Callable[[str], int | None], n_embd: int | None) -> int | None:
    """Values in one layer's state for a kind sizing it from its metadata (`LayerKind.state_values`);
    None when the kind is not declared, sizes no state, or the file does not say enough."""
    kind = LAYER_KINDS.get(name)
    if kind is None or not kind.state_values:
        return None
    return resolve(kind.state_values)(read, n_embd)


def keeps(name: str) -> str:
    """What a layer of this kind keeps between passes: "kv", "state" or "" (also for the card's "none" and
    "unknown" layers, which no declared kind runs)."""
    kind = LAYER_KINDS.get(name)
    return kind.keeps if kind is not None else ""
