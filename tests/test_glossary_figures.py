"""Glossary entries whose numbers the code can compute: the KV cache types' sizes and decode's FLOPs per byte."""

from __future__ import annotations

import json
from importlib import resources

from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

from walkthrough.costs.corpus import bundled


def _entry(key: str) -> str:
    data = json.loads(resources.files("walkthrough.render").joinpath("glossary.json").read_text(encoding="utf-8"))
    entries = data["terms"] if isinstance(data, dict) else data
    return next(e for e in entries if e["key"] == key)["text"]


def test_kv_cache_types_say_their_size_with_scales() -> None:
    text = _entry("KV cache type")
    for qtype in (GGMLQuantizationType.Q8_0, GGMLQuantizationType.Q4_0):
        block, size = GGML_QUANT_SIZES[qtype]
        share = size / (2 * block)  # against F16's 2 bytes per value
        assert f"{size} bytes ({share:.0%}" in text or f"in {size} ({share:.0%})" in text, (qtype.name, text)
    assert "halves" not in text and "quarters" not in text


def test_flops_per_weight_byte_depend_on_the_bits() -> None:
    text = _entry("arithmetic intensity")
    for bits, shown in ((16, "1 at F16"), (8, "2 at 8 bits"), (4.89, f"{16 / 4.89:.1f} at Q4_K_M")):
        assert shown in text, (bits, text)


def test_efficiency_is_fitted_not_typed() -> None:
    text = _entry("efficiency")
    assert "ceiling times this share" not in text and "fits it per backend family" in text
    assert bundled().runs  # the measured runs it is fitted on exist
