"""An abliteration from start to end, as records the CLI and the app both show.

1. `find`: both prompt sets through the model (`collect.residuals`), the direction at a layer
   (`direction.find_direction`, fitted on all but the held-out prompts) and every prompt's
   projection on it.
2. `edit`: the edited GGUF written (`edit.write_edited`) into a stream the caller opened, then
   measured, not assumed: how much each edited writer can still add along the direction; the
   residual stream of every prompt, at every layer, run again on the edited file, and its
   component along the direction; the original and the edited model compared on the first
   held-out prompt with the behaviour (`engine.compare`: KL, top-1, the first token where their
   greedy answers part) and both greedy answers to the held-out prompt of each set.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from walkthrough.engine.abliterate import edit as edits
from walkthrough.engine.abliterate.collect import prompt_ids, residuals
from walkthrough.engine.abliterate.direction import Direction, find_direction
from walkthrough.engine.abliterate.prompts import PromptSets
from walkthrough.engine.compare import Comparison, compare_models, greedy_answer
from walkthrough.engine.glassbox.model import Model
from walkthrough.inspect.gguf import open_gguf
from walkthrough.inspect.template import choose_template
from walkthrough.inspect.tokenizer import GGUFTokenizer

Say = Callable[[str], None]  # what is being done now, for a progress line; may raise to stop
ANSWER_TOKENS = 24


def _quiet(_: str) -> None:
    return None


@dataclass
class Found:
    """The direction and each prompt's projection on it."""

    sets: PromptSets
    with_res: np.ndarray  # [n_with, n_layers, d] residual stream at each prompt's last position
    without_res: np.ndarray
    direction: Direction

    @property
    def layer(self) -> int:
        return self.direction.layer

    def at_layer(self, layer: int) -> Found:
        """The same prompts' direction at another layer (no prompt is run again)."""
        n_with, n_without = (len(s) for s in self.sets.fitted)
        return Found(self.sets, self.with_res, self.without_res,
                     find_direction(self.with_res[:n_with], self.without_res[:n_without], layer))

    def projections(self) -> tuple[np.ndarray, np.ndarray]:
        """[n_with], [n_without]: each prompt's component along the direction at its layer."""
        i = self.layer
        return self.direction.project(self.with_res[:, i]), self.direction.project(self.without_res[:, i])


@dataclass
class Answer:
    prompt: str
    before: str
    after: str


@dataclass
class Edited:
    """The edited file and what was measured on it."""

    path: Path
    tensors: list[str]
    writers_before: float  # largest |u . column| / column length over the edited tensors, original file
    writers_after: float  # the same, read back from the written file
    stream_before: float  # largest |u . h| / |h| over every prompt and layer, original model
    stream_after: float  # the same, edited model
    after_with: np.ndarray  # [n_with] projections at the layer, edited model
    after_without: np.ndarray
    comparison: Comparison
    compared_prompt: str
    answers: list[Answer]


def find(model: Model, sets: PromptSets, layer: int | None = None, say: Say = _quiet) -> Found:
    """Collect both sets and find the direction (at `layer`, or the best-separating one)."""
    say(f"running the {len(sets.with_)} prompts with the behaviour")
    with_res = residuals(model, sets.with_)
    say(f"running the {len(sets.without)} prompts without it")
    without_res = residuals(model, sets.without)
    n_with, n_without = (len(s) for s in sets.fitted)
    return Found(sets, with_res, without_res, find_direction(with_res[:n_with], without_res[:n_without], layer))



def _stream_share(res: np.ndarray, unit: np.ndarray) -> float:
    """Largest |u . h| / |h| over [n, n_layers, d] residuals."""
    return float(np.max(np.abs(res @ unit) / np.maximum(np.linalg.norm(res, axis=-1), 1e-30)))


def edit(
    model: Model,
    found: Found,
    open_out: Callable[[], AbstractContextManager[tuple[Path, BinaryIO]]],
    *,
    store: str = "f32",
    tokens: int = ANSWER_TOKENS,
    say: Say = _quiet,
) -> Edited:
    """Write the edited file through `open_out()` (a context giving its path and a binary stream),
    then measure it (see the module docstring)."""
    edits.check_editable(model.config)
    unit = found.direction.unit
    say("writing the edited file")
    with open_out() as (path, out):
        names = edits.write_edited(model.file, unit, out, layer=found.layer, behaviour=found.sets.behaviour,
                                   store=store)
    before = edits.along(model.file, names, unit)
    with open_gguf(path) as written:
        after = edits.along(written, names, unit)
    edited = Model.open(path)
    say("running the prompts through the edited file")
    with_after = residuals(edited, found.sets.with_)
    without_after = residuals(edited, found.sets.without)
    i = found.layer
    tokenizer = GGUFTokenizer.from_gguf(model.file)
    template = choose_template(model.file)
    held = [found.sets.with_[-1], found.sets.without[-1]]
    say("comparing the two files on a held-out prompt")
    comparison = compare_models(model, edited, prompt_ids(tokenizer, template, held[0]), tokens)
    answers = []
    for prompt in held:
        say("answering greedily with both files")
        ids = prompt_ids(tokenizer, template, prompt)
        answers.append(Answer(prompt, tokenizer.decode(greedy_answer(model, ids, tokens)),
                              tokenizer.decode(greedy_answer(edited, ids, tokens))))
    both = np.concatenate([found.with_res, found.without_res])
    return Edited(
        path=path, tensors=names,
        writers_before=max(before.values()), writers_after=max(after.values()),
        stream_before=_stream_share(both, unit),
        stream_after=_stream_share(np.concatenate([with_after, without_after]), unit),
        after_with=with_after[:, i] @ unit, after_without=without_after[:, i] @ unit,
        comparison=comparison, compared_prompt=held[0], answers=answers,
    )
