"""What the request's jobs post: plain records of what a worker computed, for the app to apply.

The run service and the loader's workers never touch the request state: they
post one of these through the callback the app gave them (`Post`), and the app
(Textual) wraps it in a message of its own and applies it on the UI thread
(`WalkthroughApp.on_posted` calls `apply_<record's name in snake case>`).
Nothing here knows Textual.

Two flags, read by the app's wrapper:
- `merges`: in a burst of records of this kind, only the newest one is applied
  (progress reports: each says all the older one said).
- `follows_worker`: the record is dropped once the worker that posted it was
  cancelled. A worker replaced by a newer one (another edit of the messages,
  another unload, a replayed play) may still post what it finished, but nothing
  it posts changes the state after its cancel. The records of the stage's run
  name their run instead (`run_id`), and their handlers compare it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from walkthrough.request.parts import Part

if TYPE_CHECKING:
    from walkthrough.engine.protocol import Engine
    from walkthrough.engine.serving.coldstart import StartTimes
    from walkthrough.engine.serving.turns import Summary, Turn
    from walkthrough.engine.steps import Step


@dataclass(frozen=True)
class Event:
    """Something a job computed, to be applied by the app on its UI thread."""

    merges: ClassVar[bool] = False  # a burst of these keeps only the newest
    follows_worker: ClassVar[bool] = True  # dropped once its worker was cancelled

    @classmethod
    def handler(cls) -> str:
        """The app's method applying this kind of record.

        Example: StepDone.handler() -> "apply_step_done"
        """
        return "apply_" + re.sub(r"(?<!^)(?=[A-Z])", "_", cls.__name__).lower()


Post = Callable[[Event], None]  # how a job hands a record to the app


def nowhere(event: Event) -> None:
    """A `Post` that drops every record (a service used without an app: scripts, tests)."""


# ---- loading the request -------------------------------------------------------------------------
@dataclass(frozen=True)
class Progress(Event):
    """A worker moved on: `what` is being done (empty: nothing)."""

    merges: ClassVar[bool] = True
    what: str


@dataclass(frozen=True)
class PartReady(Event):
    """A part of the request was built: `value` is what `walkthrough.request.parts` returned for
    it."""

    part: Part
    value: Any  # the part's own type: OpenedFile, GGUFTokenizer, Rendered, ChatTokens, Engine


@dataclass(frozen=True)
class PartFailed(Event):
    """A part cannot be built for this file; `reason` says why, in one line."""

    part: Part
    reason: str


@dataclass(frozen=True)
class LoadFailed(Event):
    """The model file itself could not be opened: the app cannot continue."""

    follows_worker: ClassVar[bool] = False
    error: str


# ---- the stage's run -----------------------------------------------------------------------------
@dataclass(frozen=True)
class PassProgress(Event):
    """The pass of run `run_id` in flight has run `done` of `total` layers; once all of them have
    run, the output head comes, decoding `head_bytes` of weights first (its first use; 0 when it is
    held)."""

    merges: ClassVar[bool] = True
    follows_worker: ClassVar[bool] = False
    run_id: int
    done: int
    total: int
    head_bytes: int = 0


@dataclass(frozen=True)
class StepDone(Event):
    """The engine finished one pass of run `run_id` (`step` None: the run was already finished)."""

    follows_worker: ClassVar[bool] = False
    run_id: int
    step: Step | None


@dataclass(frozen=True)
class PassCancelled(Event):
    """A pass of run `run_id` was abandoned (the run was restarted or the app is quitting)."""

    follows_worker: ClassVar[bool] = False
    run_id: int


@dataclass(frozen=True)
class RunFailed(Event):
    """A pass of run `run_id` raised a WalkthroughError (say, a token outside the vocabulary)."""

    follows_worker: ClassVar[bool] = False
    run_id: int
    error: str


# ---- the Speculate stage's run -------------------------------------------------------------------
@dataclass(frozen=True)
class RoundDone(Event):
    """A round (or the prompt's prefill) of speculative run `run_id` finished; `step` None: the
    answer is done, or `error` says why the round could not run."""

    run_id: int
    step: Step | None
    error: str | None = None


@dataclass(frozen=True)
class RoundProgress(Event):
    """The round of speculative run `run_id` in flight (the prompt's prefill, chunk by chunk, or a
    verification pass) has run `done` of `total` layers of its pass."""

    merges: ClassVar[bool] = True
    follows_worker: ClassVar[bool] = False
    run_id: int
    done: int
    total: int


# ---- the four calls ------------------------------------------------------------------------------
@dataclass(frozen=True)
class CallPassed(Event):
    """A pass of the four calls' current call ended (`what` says which)."""

    merges: ClassVar[bool] = True
    what: str


@dataclass(frozen=True)
class CallPlayed(Event):
    """One of the four calls finished, on `model` (kept for the warm starts)."""

    turn: Turn
    model: Engine


@dataclass(frozen=True)
class CallsFinished(Event):
    """The four calls' sums."""

    summary: Summary


@dataclass(frozen=True)
class StartsMeasured(Event):
    """The first request's first token: cold (a fresh process), warm, warm with its KV cache
    kept."""

    starts: tuple[StartTimes, StartTimes, StartTimes]
    prompt_tokens: int


@dataclass(frozen=True)
class CallsFailed(Event):
    """The four calls or their starts stopped: `error` says why."""

    error: str


EVENTS: tuple[type[Event], ...] = (Progress, PartReady, PartFailed, LoadFailed, PassProgress,
                                   StepDone, PassCancelled, RunFailed, RoundDone, RoundProgress, CallPassed,
                                   CallPlayed, CallsFinished, StartsMeasured, CallsFailed)
