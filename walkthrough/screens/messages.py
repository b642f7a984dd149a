"""Messages shared by the app and its screens: what the background workers report.

Workers never touch widgets; they post one of these to the app, which updates
the request state and bumps `WalkthroughApp.revision` so screens refresh.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from textual.message import Message


@dataclass
class Progress(Message):
    """A worker moved on: `what` is being done, `done` of `total` units."""

    what: str
    done: int = 0
    total: int = 0

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, Progress) and message.what == self.what


@dataclass
class StageLoaded(Message):
    """Part of the request state is ready (`part`: "file", "tokens", "engine"...)."""

    part: str


@dataclass
class StageUnavailable(Message):
    """A part cannot be built for this file; `reason` says why, in one line."""

    part: str
    reason: str


@dataclass
class LoadFailed(Message):
    """The model file itself could not be opened: the app cannot continue."""

    error: str


@dataclass
class StepDone(Message):
    """The engine finished one pass of run `run_id` (`step` None: the answer is finished)."""

    run_id: int
    step: Any


@dataclass
class RunFailed(Message):
    """A pass raised a WalkthroughError (say, a token outside the vocabulary)."""

    error: str
