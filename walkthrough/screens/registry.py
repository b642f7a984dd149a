"""Which screen class shows each stage, in stage order (the app registers one mode per stage)."""

from __future__ import annotations

from walkthrough.request import stages
from walkthrough.screens.base import StageScreen


def stage_screens() -> dict[str, type[StageScreen]]:
    """Stage id -> screen class, in the order of `stages.STAGES`."""
    return {stage.id: stage.screen() for stage in stages.STAGES}
