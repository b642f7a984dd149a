"""Moving between stages: next, previous, by id or number, and the command palette's entries.

Every stage is one mode of the app, in the order of `stages.STAGES`; nothing
here knows a stage by position except through that list.
"""

from __future__ import annotations

from collections.abc import Iterable

from textual.app import App, SystemCommand
from textual.screen import Screen

from walkthrough.request import stages

PALETTE_SKIPS = frozenset({"Glossary", "Help", "Terms", "Quit", "Next stage", "Previous stage"})


class StageModes(App):
    """Mixin of the app: the stage shown and the keys and palette entries that change it."""

    def _stage_index(self) -> int:
        ids = stages.ids()
        return ids.index(self.current_mode) if self.current_mode in ids else 0

    def action_next_stage(self) -> None:
        ids = stages.ids()
        self.switch_mode(ids[min(self._stage_index() + 1, len(ids) - 1)])

    def action_previous_stage(self) -> None:
        self.switch_mode(stages.ids()[max(self._stage_index() - 1, 0)])

    def action_goto_stage(self, stage: str) -> None:
        if stage in stages.ids():
            self.switch_mode(stage)

    def action_goto_number(self, number: int) -> None:
        if 1 <= number <= len(stages.STAGES):
            self.switch_mode(stages.STAGES[number - 1].id)

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        for stage in stages.STAGES:
            yield SystemCommand(f"Stage {stage.number}: {stage.label}",
                                f"Go to the {stage.label} stage",
                                lambda stage=stage.id: self.action_goto_stage(stage))
        if hasattr(screen, "action_glossary"):
            yield SystemCommand("Glossary", "The terms the stages use", screen.action_glossary)
            yield SystemCommand("Help", "What this stage shows and its keys",
                                screen.action_stage_help)
        # The stage's own keys (step, play, knobs, views...), each under its description.
        seen = set(PALETTE_SKIPS)
        for key, active in screen.active_bindings.items():
            binding = active.binding
            if active.node is not screen or not binding.description or binding.description in seen:
                continue  # only the stage's own keys, each once
            if binding.action.startswith("app.goto"):
                continue
            seen.add(binding.description)

            async def run(action: str = binding.action, node=active.node) -> None:
                await self.run_action(action, node)

            yield SystemCommand(binding.description, f"key {key}", run)

    @property
    def stage_number(self) -> int:
        """1-based number of the current stage."""
        return self._stage_index() + 1

    @property
    def stage_label(self) -> str:
        return stages.STAGES[self._stage_index()].label

    @property
    def is_last_stage(self) -> bool:
        return self._stage_index() == len(stages.STAGES) - 1
