"""The glossary's terms as records, read once from `glossary.json` (what each term is, its words on screen)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

GLOSSARY_FILE = Path(__file__).with_name("glossary.json")


@dataclass(frozen=True)
class Term:
    key: str
    title: str
    text: str
    see: tuple[str, ...]
    words: tuple[str, ...]  # what names the term on screen (`term_words`)


@lru_cache(maxsize=1)
def load_terms() -> dict[str, Term]:
    """Every glossary term by key, in file order."""
    data = json.loads(GLOSSARY_FILE.read_text(encoding="utf-8"))
    return {
        t["key"]: Term(t["key"], t["title"], t["text"], tuple(t.get("see", ())), tuple(t.get("words", (t["key"],))))
        for t in data["terms"]
    }


@lru_cache(maxsize=1)
def not_terms() -> tuple[str, ...]:
    """Phrases holding a term's word that name no term ("output tokens" is not the output head)."""
    return tuple(json.loads(GLOSSARY_FILE.read_text(encoding="utf-8")).get("not_terms", ()))


def term_title(key: str) -> str:
    """The display title of a term key (the key itself if the glossary lacks it)."""
    term = load_terms().get(key)
    return key if term is None else term.title
