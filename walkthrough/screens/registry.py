"""Which screen class shows each stage, in stage order (the app registers one mode per stage)."""

from __future__ import annotations

from walkthrough.screens.base import STAGE_IDS, StageScreen


def stage_screens() -> dict[str, type[StageScreen]]:
    """Stage id -> screen class, in the order of `STAGE_IDS`."""
    from walkthrough.screens.costs import CostsScreen
    from walkthrough.screens.decode import DecodeScreen
    from walkthrough.screens.file import FileScreen
    from walkthrough.screens.prefill import PrefillScreen
    from walkthrough.screens.sampling import SamplingScreen
    from walkthrough.screens.summary import SummaryScreen
    from walkthrough.screens.template import TemplateScreen
    from walkthrough.screens.tokens import TokensScreen

    screens = (FileScreen, TemplateScreen, TokensScreen, PrefillScreen, DecodeScreen, SamplingScreen, CostsScreen,
               SummaryScreen)
    by_stage = {screen.STAGE: screen for screen in screens}
    return {stage: by_stage[stage] for stage in STAGE_IDS}
