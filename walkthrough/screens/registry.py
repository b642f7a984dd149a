"""Which screen class shows each stage; stages whose building blocks have not landed get a stand-in."""

from __future__ import annotations

import importlib

from walkthrough.screens.base import STAGES, StageScreen
from walkthrough.screens.pending import pending_stage

# stage -> (module in walkthrough.screens, class name, title, what it needs if the module is missing)
_SCREENS: dict[str, tuple[str, str, str, str]] = {
    "file": ("file", "FileScreen", "Stage 1: the file", "the GGUF reader"),
    "template": ("template", "TemplateScreen", "Stage 2: the chat template", "the chat template renderer"),
    "tokens": ("tokens", "TokensScreen", "Stage 3: tokens", "the tokenizer"),
    "prefill": ("prefill", "PrefillScreen", "Stage 4: prefill", "the engine"),
    "decode": ("decode", "DecodeScreen", "Stage 5: decode", "the engine"),
    "sampling": ("sampling", "SamplingScreen", "Stage 6: sampling", "the engine's sampler"),
    "costs": ("costs", "CostsScreen", "Stage 7: costs", "the cost model and hardware profiles"),
    "summary": ("summary", "SummaryScreen", "Stage 8: summary", "the engine's step records"),
}


def stage_screens() -> dict[str, type[StageScreen]]:
    """Stage id -> screen class, in stage order."""
    screens: dict[str, type[StageScreen]] = {}
    for stage, _label in STAGES:
        module_name, class_name, title, needs = _SCREENS[stage]
        try:
            module = importlib.import_module(f"walkthrough.screens.{module_name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"walkthrough.screens.{module_name}":
                raise
            screens[stage] = pending_stage(stage, title, needs)
            continue
        screens[stage] = getattr(module, class_name)
    return screens
