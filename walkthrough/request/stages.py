"""The stages, declared once: one ordered list of (id, label, screen class); numbers are positions in it.

Every other place (the stage bar, the digit keys, titles, Summary's rows,
Costs' "(stage N)", the command palette, autoplay, the glossary) asks this
module. Adding a stage is one module with its screen class and one line here,
at the place it goes:

    Stage("draft", "Draft", "walkthrough.screens.draft:DraftScreen"),

The class is named by import path so this module imports no screen (screens
import it); `Stage.screen()` imports the class on first use.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module


@dataclass(frozen=True)
class Stage:
    """One stage: its id (mode name, stylesheet stem), the label in the stage bar, its screen class."""

    id: str
    label: str
    target: str  # "package.module:ClassName"

    def screen(self) -> type:
        """The stage's screen class, a `StageScreen` (imported on first use; this layer imports no screen)."""
        module, name = self.target.split(":")
        return getattr(import_module(module), name)

    @property
    def number(self) -> int:
        """1-based position in `STAGES`."""
        return number(self.id)


STAGES: list[Stage] = [
    Stage("file", "File", "walkthrough.screens.file:FileScreen"),
    Stage("template", "Chat", "walkthrough.screens.template:TemplateScreen"),
    Stage("tokens", "Tokens", "walkthrough.screens.tokens:TokensScreen"),
    Stage("prefill", "Prefill", "walkthrough.screens.prefill:PrefillScreen"),
    Stage("decode", "Decode", "walkthrough.screens.decode:DecodeScreen"),
    Stage("speculate", "Speculate", "walkthrough.screens.speculate:SpeculateScreen"),
    Stage("sampling", "Sampling", "walkthrough.screens.sampling:SamplingScreen"),
    Stage("costs", "Costs", "walkthrough.screens.costs:CostsScreen"),
    Stage("summary", "Summary", "walkthrough.screens.summary:SummaryScreen"),
]
MAX_STAGES = 9  # digit keys 1-9 reach a stage


def ids() -> list[str]:
    """Stage ids in order."""
    return [stage.id for stage in STAGES]


def get(stage_id: str) -> Stage:
    """The stage with this id (KeyError names it if there is none)."""
    for stage in STAGES:
        if stage.id == stage_id:
            return stage
    raise KeyError(f"no stage {stage_id!r}")


def number(stage_id: str) -> int:
    """The 1-based number of a stage, as the stage bar shows it."""
    return ids().index(stage_id) + 1


def label(stage_id: str) -> str:
    """'5 Decode'-style reference to a stage: its number and label."""
    return f"{number(stage_id)} {get(stage_id).label}"


def of_screen(cls: type) -> Stage:
    """The stage whose screen is `cls` (or one of its bases)."""
    for klass in cls.__mro__:
        target = f"{klass.__module__}:{klass.__qualname__}"
        for stage in STAGES:
            if stage.target == target:
                return stage
    raise KeyError(f"{cls.__name__} is not a stage's screen in walkthrough.request.stages.STAGES")
