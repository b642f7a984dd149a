"""What a model's name claims, and how the file bears it out.

`parse_name` reads a file name or `general.name` the way people write them
(`<family>-<size>-A<active>-<tuning>-<quant>`, in any order after the family,
with "-", "_", "." or spaces between parts) into claims: the family, the size
(`35B`, `135M`, `1.7B`; `8x7B` for experts times expert size), the active size
of a mixture of experts (`A3B`), the tuning (Instruct, Chat, Base, it, ...), a
version (`v0.3`) and the quant type (`Q4_K_M`, `IQ2_XS`, `F16`...).

`check_claims` compares each claim with the model card: the size with the
parameters counted in the tensor table, the active size with the parameters a
token uses, the quant with the ggml type holding most of the weight bytes. It
only reports; a name is text somebody typed, never a source of numbers.

Example: parse_name("Qwen3.6-35B-A3B-Instruct-Q4_K_M.gguf") ->
NameClaims(family="Qwen3.6", size=35e9, size_text="35B", active=3e9, active_text="A3B",
tuning="Instruct", version=None, quant="Q4_K_M")
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["SIZE_TOLERANCE", "Check", "NameClaims", "check_claims", "names_to_decode", "parse_name"]

SIZE_TOLERANCE = 0.10  # published sizes are rounded: within 10% of the count "agrees"
MAX_NAME_CHARS = 256  # a longer name is cut before parsing (it is text from the file)
_UNITS = {"k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}
_SIZE = re.compile(r"^(?:(\d{1,4})x)?(\d{1,4}(?:\.\d{1,3})?)([mbt])$", re.IGNORECASE)
_ACTIVE = re.compile(r"^a(\d{1,4}(?:\.\d{1,3})?)([mbt])$", re.IGNORECASE)
_VERSION = re.compile(r"^v\d{1,4}(?:\.\d{1,4})*$", re.IGNORECASE)
_QUANT = re.compile(
    r"(?:^|[-._ ])((?:UD-)?(?:I?Q\d(?:_[0-9A-Z]{1,2}){0,2}|TQ\d_\d|BF16|F16|F32|FP16|FP32|MXFP4))$", re.IGNORECASE
)
_SHARD = re.compile(r"-\d{5}-of-\d{5}$")
TUNINGS = {  # lower case -> as written in a claim
    "instruct": "Instruct", "chat": "Chat", "base": "Base", "it": "it (instruction-tuned)", "thinking": "Thinking",
    "reasoning": "Reasoning", "sft": "SFT", "dpo": "DPO", "rlhf": "RLHF", "pt": "pt (pretrained)",
}


@dataclass(frozen=True)
class NameClaims:
    """What a name says about its model; None where it says nothing."""

    text: str  # the name parsed (after cutting `.gguf` and a shard suffix)
    family: str | None
    size: float | None  # total parameters claimed (`8x7B` -> 56e9, an upper bound: experts share attention)
    size_text: str | None  # as written: "35B"
    experts: int | None  # the N of "NxSIZE"
    active: float | None  # parameters per token claimed ("A3B" -> 3e9)
    active_text: str | None
    tuning: str | None
    version: str | None
    quant: str | None  # upper case, "Q4_K_M"


@dataclass(frozen=True)
class Check:
    """One claim against the card: what the name says, what the file holds, and whether they agree."""

    claim: str  # "size", "active", "experts", "quant"
    stated: str  # "35B"
    counted: str  # "35.5 B counted"
    agrees: bool | None  # None: the card cannot tell


def parse_name(name: str) -> NameClaims:
    """The claims in a file name or `general.name` (see the module docstring)."""
    text = name[:MAX_NAME_CHARS].strip()
    if text.lower().endswith(".gguf"):
        text = text[:-5]
    text = _SHARD.sub("", text)
    quant = None
    match = _QUANT.search(text)
    if match and match.start(1) > 0:
        quant = match.group(1).upper()
        text_rest = text[: match.start()]
    else:
        text_rest = text
    parts = [p for p in re.split(r"[-_ ]+", text_rest) if p]
    family_parts: list[str] = []
    size = size_text = experts = active = active_text = tuning = version = None
    for part in parts:
        if size_text is None and (m := _SIZE.match(part)):
            experts = int(m.group(1)) if m.group(1) else None
            size = float(m.group(2)) * _UNITS[m.group(3).lower()] * (experts or 1)
            size_text = part
        elif active_text is None and (m := _ACTIVE.match(part)):
            active = float(m.group(1)) * _UNITS[m.group(2).lower()]
            active_text = part
        elif tuning is None and part.lower() in TUNINGS and (size_text or family_parts):
            tuning = TUNINGS[part.lower()]
        elif version is None and _VERSION.match(part):
            version = part
        elif size_text is None and active_text is None and tuning is None:
            family_parts.append(part)
    return NameClaims(text, "-".join(family_parts) or None, size, size_text, experts, active, active_text, tuning,
                      version, quant)


def names_to_decode(file_name: str, general_name: str | None) -> list[tuple[str, NameClaims]]:
    """("file name", claims) and, when it says something else, ("general.name", claims)."""
    names = [("file name", parse_name(file_name))]
    if general_name and parse_name(general_name).text != names[0][1].text:
        names.append(("general.name", parse_name(general_name)))
    return names


def _count(n: float) -> str:
    for scale, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= scale:
            return f"{n / scale:.3g} {suffix}"
    return f"{n:.0f}"


def _near(claimed: float, counted: float) -> bool:
    return abs(counted - claimed) <= SIZE_TOLERANCE * claimed


def _base_type(quant: str) -> str:
    """The ggml type a quant label is named after: "Q4_K_M" -> "Q4_K", "UD-IQ2_XS" -> "IQ2_XS"."""
    quant = quant.removeprefix("UD-")
    if re.fullmatch(r"Q\d_K_(?:S|M|L|XL)", quant):
        return quant[:4]
    return {"FP16": "F16", "FP32": "F32"}.get(quant, quant)


def check_claims(claims: NameClaims, card) -> list[Check]:
    """Each claim `claims` makes that the card can answer, in the order size, experts, active, quant.

    `card` is a `ModelCard` (n_params, n_params_active, n_experts, bytes_by_type).
    """
    checks = []
    if claims.size is not None:
        bound = " (experts x expert size: an upper bound)" if claims.experts else ""
        checks.append(Check("size", f"{claims.size_text}{bound}", f"{_count(card.n_params)} counted",
                            _near(claims.size, card.n_params) if not claims.experts else card.n_params <= claims.size))
    if claims.experts is not None:
        checks.append(Check("experts", f"{claims.experts} experts", f"{card.n_experts} routed experts in the file",
                            claims.experts == card.n_experts))
    if claims.active is not None:
        active = card.n_params_active
        checks.append(Check("active", claims.active_text, "?" if active is None else f"{_count(active)} active",
                            None if active is None else _near(claims.active, active)))
    if claims.quant is not None:
        weights = {t: b for t, b in card.bytes_by_type.items() if t not in ("F32",)} or card.bytes_by_type
        if weights:
            main, nbytes = max(weights.items(), key=lambda item: item[1])
            share = nbytes / sum(card.bytes_by_type.values())
            checks.append(Check("quant", claims.quant, f"most weight bytes in {main} ({share:.0%})",
                                _base_type(claims.quant) == main))
        else:
            checks.append(Check("quant", claims.quant, "no tensors", None))
    return checks
