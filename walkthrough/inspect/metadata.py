"""Metadata values made presentable: JSON-safe, long arrays summarised as their count and first items.

Shared by `walkthrough inspect` (`--json`, `--metadata`) and the app's File
screen. A tokenizer's arrays hold 150k+ entries; summarising reads only the
first few (string arrays are read item by item from the file, never decoded
whole), so showing the metadata of a large vocabulary stays instant.

Values stay data: strings are returned as decoded (invalid UTF-8 already
replaced by the reader); making control characters visible is the display's
job (`walkthrough.textsafe`). Non-finite floats become the strings "nan",
"inf", "-inf" so the result always encodes as strict JSON.

Strings too long to be decoded on open (`gguf.EAGER_STRING_BYTES`) are
summarised the same way, from a bounded head read: {"type": "string",
"bytes": 1073741824, "first": "the first 4096 bytes…"}.

Example: a 151,936-token list -> {"type": "array[string]", "count": 151936,
"first": ["!", "\\"", "#", "$", "%", "&", "'", "("]}; [3, 3, 2, 0] stays [3, 3, 2, 0].
"""

from __future__ import annotations

import math
import struct
from typing import Any

import numpy as np
from gguf.constants import GGUFValueType

from walkthrough.inspect.gguf import GGUFFile, MetadataField

SHORT_ARRAY = 16  # arrays up to this many items are given whole
FIRST_ITEMS = 8  # items kept from a longer array
MAX_ITEM_BYTES = 4096  # a longer string item of a summarised array is cut (marked with "…")
_U64 = struct.Struct("<Q")


def json_scalar(value: Any) -> Any:
    """A metadata scalar as a JSON-safe Python value (numpy scalars unwrapped, NaN/inf as text)."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def _first_strings(f: GGUFFile, field: MetadataField, n: int) -> list[str]:
    """The first n strings of a string array, read from the file (lengths were validated on open)."""
    out = []
    with open(f.path, "rb") as fh:
        fh.seek(field.value_offset)
        for _ in range(min(n, field.count)):
            (length,) = _U64.unpack(fh.read(8))
            text = fh.read(min(length, MAX_ITEM_BYTES)).decode("utf-8", errors="replace")
            if length > MAX_ITEM_BYTES:
                fh.seek(length - MAX_ITEM_BYTES, 1)
                text += "…"
            out.append(text)
    return out


def array_items(f: GGUFFile, key: str, n: int) -> list[Any]:
    """The first n items of an array key as JSON-safe values (only those are read)."""
    field = f.fields[key]
    if field.element_type == GGUFValueType.STRING:
        return _first_strings(f, field, n)
    return [json_scalar(v) for v in f.array_head(key, n)]


def summarize_value(f: GGUFFile, key: str, *, short: int = SHORT_ARRAY, first: int = FIRST_ITEMS) -> Any:
    """One key's value, JSON-safe: scalars and strings as they are, short arrays as lists,
    longer arrays as {"type", "count", "first"}."""
    field = f.fields[key]
    if field.is_lazy:
        head, _ = f.string_head(key, MAX_ITEM_BYTES)
        return {"type": field.type_name, "bytes": field.nbytes, "first": head + "…"}
    if not field.is_array:
        return json_scalar(field.scalar)
    if field.count <= short:
        return array_items(f, key, field.count)
    return {"type": field.type_name, "count": field.count, "first": array_items(f, key, first)}


def summarize_metadata(f: GGUFFile, **limits: int) -> dict[str, Any]:
    """Every metadata key of the file (first shard), in file order, summarised as by `summarize_value`."""
    return {key: summarize_value(f, key, **limits) for key in f.fields}


def describe(value: Any, max_chars: int = 120) -> str:
    """A summarised value as one line of plain text, cut to max_chars (not yet made terminal-safe).

    Example: {"type": "array[int32]", "count": 300, "first": [1, 2]} -> "300 items: [1, 2, …]";
    {"type": "string", "bytes": 70000, "first": "abc…"} -> "70,000 bytes: abc…"
    """
    if isinstance(value, dict) and "bytes" in value:
        text = f"{value['bytes']:,} bytes: {value['first']}"
    elif isinstance(value, dict):
        items = ", ".join(repr(v) for v in value["first"])
        text = f"{value['count']} items: [{items}, …]"
    elif isinstance(value, list):
        text = f"[{', '.join(repr(v) for v in value)}]"
    else:
        text = str(value)
    return text if len(text) <= max_chars else text[: max_chars - 1] + "…"
