"""Messages from the background workers to the app: each carries what the worker computed.

Workers never touch widgets or the request state; they post one of these and
the app's handler, on the UI thread, stores the value in `RequestState` (whose
changes redraw the screens).

A message that names its worker (`FromWorker`) is `stale` once that worker
was cancelled, and its handler drops it: a worker replaced by a newer one
(another edit of the messages, another unload, a replayed play) may still
post what it finished, but nothing it posts changes the state after its
cancel. The check is on the UI thread, where cancels happen, so no post can
slip between a worker's last look at its flag and the cancel.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from textual.message import Message
from textual.worker import Worker

from walkthrough.request.parts import Part

if TYPE_CHECKING:
    from walkthrough.engine.protocol import Engine
    from walkthrough.engine.serving.coldstart import StartTimes
    from walkthrough.engine.serving.turns import Summary, Turn
    from walkthrough.engine.steps import Step


@dataclass
class FromWorker(Message):
    """A message posted by `worker` (None: by no worker); dropped by its handler once `stale`."""

    worker: Worker | None = field(default=None, kw_only=True)

    @property
    def stale(self) -> bool:
        """Its worker was cancelled: what it carries is not wanted any more."""
        return self.worker is not None and self.worker.is_cancelled


@dataclass
class Progress(FromWorker):
    """A worker moved on: `what` is being done (empty: nothing)."""

    what: str

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, Progress)


@dataclass
class PartReady(FromWorker):
    """A part of the request was built: `value` is what `walkthrough.request.parts` returned for it."""

    part: Part
    value: Any


@dataclass
class PartFailed(FromWorker):
    """A part cannot be built for this file; `reason` says why, in one line."""

    part: Part
    reason: str


@dataclass
class LoadFailed(Message):
    """The model file itself could not be opened: the app cannot continue."""

    error: str


@dataclass
class PassProgress(Message):
    """The pass of run `run_id` in flight has run `done` of `total` layers; once all of them have run, the
    output head comes, decoding `head_bytes` of weights first (its first use; 0 when it is held)."""

    run_id: int
    done: int
    total: int
    head_bytes: int = 0

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, PassProgress)


@dataclass
class StepDone(Message):
    """The engine finished one pass of run `run_id` (`step` None: the run was already finished)."""

    run_id: int
    step: Step | None


@dataclass
class PassCancelled(Message):
    """A pass of run `run_id` was abandoned (the run was restarted or the app is quitting)."""

    run_id: int


@dataclass
class RunFailed(Message):
    """A pass of run `run_id` raised a WalkthroughError (say, a token outside the vocabulary)."""

    run_id: int
    error: str


@dataclass
class RoundDone(FromWorker):
    """A round (or the prompt's prefill) of speculative run `run_id` finished; `step` None: the answer is done,
    or `error` says why the round could not run."""

    run_id: int
    step: Step | None
    error: str | None = None


@dataclass
class CallPassed(FromWorker):
    """A pass of the four calls' current call ended (`what` says which)."""

    what: str

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, CallPassed)


@dataclass
class CallPlayed(FromWorker):
    """One of the four calls finished, on the calls' own model (kept for the warm starts)."""

    turn: Turn
    model: Engine


@dataclass
class CallsFinished(FromWorker):
    """The four calls' sums."""

    summary: Summary


@dataclass
class StartsMeasured(FromWorker):
    """The first request's first token: cold (a fresh process), warm, warm with its KV cache kept."""

    starts: tuple[StartTimes, StartTimes, StartTimes]
    prompt_tokens: int


@dataclass
class CallsFailed(FromWorker):
    """The four calls or their starts stopped: `error` says why."""

    error: str
