"""The two prompt sets of an abliteration: prompts with a behaviour and without it, from a JSON file.

The file holds `behaviour` (words for what differs), `with` and `without` (lists of prompt
strings, each a user message) and optionally `held_out` (how many prompts at the end of each
set are kept out of the direction, to show the edit on prompts it was not fitted on). The
bundled pair (`assets/abliteration_prompts.json`) asks the same questions in both sets, once
to be answered in French and once in English.

Example: {"behaviour": "answer in French", "with": ["Answer in French: hi"],
"without": ["Answer in English: hi"], "held_out": 0}
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from walkthrough.errors import WalkthroughError

BUNDLED = Path(__file__).resolve().parents[2] / "assets" / "abliteration_prompts.json"
MAX_PROMPTS = 64  # per set: each prompt is one prefill
MAX_CHARS = 2000  # per prompt


@dataclass(frozen=True)
class PromptSets:
    behaviour: str
    with_: list[str]  # prompts showing the behaviour
    without: list[str]
    held_out: int = 0  # prompts at the end of each set not used for the direction

    @property
    def fitted(self) -> tuple[list[str], list[str]]:
        """The prompts the direction is found from."""
        k = self.held_out
        return (self.with_[: len(self.with_) - k], self.without[: len(self.without) - k])


def load_prompt_sets(path: str | Path | None = None) -> PromptSets:
    """Read a prompt-sets file (the bundled one when None).

    Raises:
        WalkthroughError: unreadable, not JSON, or not of the form above (the line says which part).
    """
    where = Path(path) if path is not None else BUNDLED
    try:
        doc = json.loads(where.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise WalkthroughError(f"{where}: cannot read the prompt sets ({exc}); give a JSON file with "
                               "'with' and 'without' lists of prompts") from None
    if not isinstance(doc, dict):
        raise WalkthroughError(f"{where}: expected a JSON object with 'with' and 'without' lists of prompts")
    sets = []
    for key in ("with", "without"):
        value = doc.get(key)
        if not isinstance(value, list) or not value or not all(isinstance(p, str) and p.strip() for p in value):
            raise WalkthroughError(f"{where}: '{key}' must be a list of non-empty prompt strings")
        if len(value) > MAX_PROMPTS or any(len(p) > MAX_CHARS for p in value):
            raise WalkthroughError(f"{where}: '{key}' holds more than {MAX_PROMPTS} prompts or one longer "
                                   f"than {MAX_CHARS} characters; use fewer, shorter prompts")
        sets.append(value)
    held = doc.get("held_out", 0)
    if not isinstance(held, int) or isinstance(held, bool) or not 0 <= held < min(len(s) for s in sets):
        raise WalkthroughError(f"{where}: 'held_out' must be a whole number below the size of each set")
    behaviour = doc.get("behaviour", "the behaviour")
    return PromptSets(str(behaviour), sets[0], sets[1], held)
