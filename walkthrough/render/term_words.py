"""Where glossary terms occur in text: the words each entry lists, found as whole words, longest first.

Every entry of `glossary.json` lists the words that name it on screen
("output head", "lm_head", "output.weight"...). `find_terms` scans a text once
with one pattern of all of them: case-insensitive, whole words only, a plural
"s" or "es" allowed, and where two candidates start at the same place the longer
wins, so "output head" is the output head and not an attention head, and
"embedding width" is the hidden size. Phrases in the glossary's `not_terms`
are matched and dropped ("output tokens" names no term). A word starting with "re:" is a regular
expression (byte tokens: `re:<0x[0-9A-Fa-f]{2}>`).

Example: terms_in("KV cache 24 positions, 6.0 KiB; 4 query heads") ->
("KV cache", "units", "query/key/value", "head")
"""

from __future__ import annotations

import re
from functools import lru_cache

from walkthrough.render.terms import load_terms, not_terms


def _trie_pattern(words: list[str]) -> str:
    """One regular expression matching any of `words`, as a trie, so the longest word at a place wins.

    Example: ["out", "output", "output head"] -> "out(?:put(?:\\ head)?)?"
    """
    trie: dict = {}
    for word in words:
        node = trie
        for ch in word:
            node = node.setdefault(ch, {})
        node[""] = {}

    def pattern(node: dict) -> str:
        ends = "" in node
        branches = [re.escape(ch) + pattern(child) for ch, child in sorted(node.items()) if ch]
        if not branches:
            return ""
        body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
        if ends:  # a word ends here: the longer ones are tried first (greedy), this one if they fail
            return f"(?:{body})?" if len(branches) > 1 or len(body) > 1 else body + "?"
        return body

    return pattern(trie)


@lru_cache(maxsize=1)
def _lookup() -> tuple[re.Pattern[str], dict[str, str], list[tuple[re.Pattern[str], str]]]:
    """The words' trie pattern (lower case, whole words, plural allowed), each word's term, and the regex words."""
    keys: dict[str, str] = {}
    expressions = []
    for key, term in load_terms().items():
        for word in term.words:
            if word.startswith("re:"):
                expressions.append((re.compile(word[3:]), key))
            else:
                keys.setdefault(word.lower(), key)
    for phrase in not_terms():
        keys[phrase.lower()] = ""  # matched (so its words are not), then dropped
    trie = _trie_pattern(sorted(keys))
    return re.compile(rf"(?<!\w)(?:{trie})(?:e?s)?(?!\w)", re.IGNORECASE), keys, expressions


def _key_of(found: str, keys: dict[str, str]) -> str:
    word = found.lower()
    for cut in ("", "s", "es"):
        stem = word[: len(word) - len(cut)] if cut else word
        if word.endswith(cut) and stem in keys:
            return keys[stem]
    raise KeyError(found)


def find_terms(text: str) -> list[tuple[int, int, str]]:
    """Every occurrence of a term in `text`: (start, end, term key), in order, never overlapping."""
    pattern, keys, expressions = _lookup()
    found = [(m.start(), m.end(), _key_of(m.group(), keys)) for m in pattern.finditer(text)]
    found = [hit for hit in found if hit[2]]
    for expression, key in expressions:
        found += [(m.start(), m.end(), key) for m in expression.finditer(text)
                  if not any(s < m.end() and m.start() < e for s, e, _ in found)]
    return sorted(found)


def terms_in(text: str) -> tuple[str, ...]:
    """The term keys `text` uses, each once, in the order they first occur."""
    return tuple(dict.fromkeys(key for _, _, key in find_terms(text)))


def most_specific(text: str) -> tuple[str, ...]:
    """The term keys `text` uses, the one named by the longest words first ("head_count_kv" before "attention").

    Example: most_specific("qwen3.attention.head_count_kv | uint32") -> ("GQA", "attention")
    """
    hits = sorted(find_terms(text), key=lambda hit: (hit[0] - hit[1], hit[0]))
    return tuple(dict.fromkeys(key for _, _, key in hits))
