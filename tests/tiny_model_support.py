"""Running the bundled tiny model on generated records: shared by its quality tests and its quality benchmark.

`Runner` answers a chat greedily with our template, tokenizer and engine; `record_line` and
`cited_lines` read which record line lists a medication and which lines an answer cites. What is
right comes from the corpus generator (`assets/corpus.py`), imported here as `corpus`.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from walkthrough.engine.glassbox.model import Model
from walkthrough.engine.glassbox.session import Session
from walkthrough.engine.sampler import Sampler
from walkthrough.inspect.gguf import open_gguf
from walkthrough.inspect.template import render, select_template
from walkthrough.inspect.tokenizer import GGUFTokenizer

ASSETS = Path(__file__).resolve().parents[1] / "assets"
MODEL_PATH = ASSETS / "tiny-clinical-moe.gguf"
MAX_NEW_HELD_OUT = 160  # room for records with many medication lines and two interactions
sys.path.insert(0, str(ASSETS))
import corpus  # assets/ is not a package: found through sys.path

__all__ = ["ASSETS", "MAX_NEW_HELD_OUT", "MODEL_PATH", "Runner", "cited_lines", "corpus", "record_line"]


class Runner:
    """Greedy chat answers from a GGUF: template -> tokens -> engine -> text."""

    def __init__(self, path: Path = MODEL_PATH) -> None:
        self.file = open_gguf(path)
        self.model = Model(self.file)
        self.tok = GGUFTokenizer.from_gguf(self.file)
        self.template = select_template(self.file)

    def answer(self, messages: list[dict], max_new: int) -> tuple[str, list]:
        """The decoded answer (special tokens as text) and every Step of the run."""
        prompt = render(self.template, messages, add_generation_prompt=True)
        ids = self.tok.encode(prompt, parse_special=True)
        steps = list(Session(self.model).generate(ids, Sampler.greedy(), max_new))
        out = [s.chosen for s in steps if s.chosen is not None]
        return self.tok.decode(out), steps


def record_line(user_text: str, drug: str) -> int | None:
    """The number of the record line that lists `drug` as a medication; None if no line does."""
    match = re.search(rf"^(\d+)\. Medication: {re.escape(drug)} ", user_text, re.MULTILINE)
    return int(match.group(1)) if match else None


def cited_lines(text: str) -> list[tuple[str, int]]:
    """Each drug the answer says interacts, with the line it cites: "with X (line N)" -> (X, N)."""
    return [(m.group(1), int(m.group(2)))
            for m in re.finditer(r"interacts with ([a-z][a-z ]*?) \(line (\d+)\)", text)]
