"""A model's name decoded, as Rich text: the claims of the file name and of `general.name`, each set beside
what the card counts ("35B claimed, 35.5 B counted: agrees"). The parsing and the checks are
`walkthrough.inspect.model_name`'s; this module only lays them out."""

from __future__ import annotations

from rich.text import Text

from walkthrough.inspect.model_name import Check, NameClaims, check_claims, names_to_decode
from walkthrough.textsafe import safe_text

VERDICT = {True: ("agrees", "green"), False: ("differs", "bold yellow"), None: ("cannot tell", "dim")}


def claims_summary(claims: NameClaims) -> str:
    """ "family Qwen3.6, size 35B, active A3B, tuning Instruct, quant Q4_K_M" (only what the name says)."""
    parts = [("family", claims.family), ("size", claims.size_text), ("active", claims.active_text),
             ("tuning", claims.tuning), ("version", claims.version), ("quant", claims.quant)]
    said = [f"{label} {value}" for label, value in parts if value]
    return ", ".join(said) if said else "no recognisable parts"


def _check_text(check: Check) -> Text:
    word, style = VERDICT[check.agrees]
    text = Text()
    text.append_text(safe_text(f"{check.stated} claimed, {check.counted}: "))
    text.append(word, style=style)
    return text


def name_lines(file_name: str, general_name: str | None, card) -> Text:
    """One line per distinct name (the file's, then `general.name`): its parts, then each claim checked."""
    out = Text()
    for n, (source, claims) in enumerate(names_to_decode(file_name, general_name)):
        if n:
            out.append("\n")
        out.append(f"{source} ", style="bold")
        out.append_text(safe_text(claims.text))
        out.append(": ")
        out.append_text(safe_text(claims_summary(claims)))
        for check in check_claims(claims, card):
            out.append("\n  ")
            out.append_text(_check_text(check))
    return out
