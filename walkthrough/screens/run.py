"""The run controller: the engine side of the current run (session, sampler, passes), safe from any thread.

The UI thread starts a run with a `RunPlan` (everything the run needs, frozen)
and changes its sampler knobs; pass workers call `next_pass`, which runs one
pass under a lock and returns its `Step` (None once the run is finished). The
controller holds no data the screens read: the Steps travel to the UI thread in
messages and are stored there (`RequestState.steps`).

Starting a new run, or `stop()`, cancels the pass in flight: the engine's
progress hook raises `Cancelled` at the next layer, so `r` and `q` act within
one layer's time, not one pass's.

The session outlives its runs, as a server's cache outlives its requests: a
new run (an edit, a follow-up, a restart) sends its whole prompt to the same
session, which keeps every token before the first one that differs
(`Session.request`) and, after a pass was abandoned, goes back to a state it
can continue from (`Session.recover`). When the plan says which messages and
rendered prompt it comes from, the first pass also carries why reuse stopped
(`Step.cause`, `engine.prefix_break`). `unload()` drops the session and lets
the app drop its model, so the next run pays the first use of every weight
again.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from walkthrough.engine.session import Cancelled, Progress

if TYPE_CHECKING:
    from walkthrough.engine.model import Model
    from walkthrough.engine.prefix_break import Held
    from walkthrough.engine.sampler import Sampler, SamplerSettings
    from walkthrough.engine.session import Session
    from walkthrough.engine.steps import Step
    from walkthrough.inspect.chat import ChatTokens


@dataclass(frozen=True)
class RunPlan:
    """One run of the request: which model, which prompt, how it is cut and capped, which knobs to start with."""

    run_id: int
    model: Model
    prompt_ids: tuple[int, ...]
    chunk: int
    max_tokens: int
    settings: SamplerSettings
    attention_rows: bool = False  # keep every row of the attention weights (the attention map)
    request: PromptSource | None = None  # where the prompt came from, to say why reuse stopped


@dataclass(frozen=True)
class PromptSource:
    """The messages a prompt was rendered from, the rendering, and how to render or read again."""

    messages: list[dict[str, Any]]
    chat: ChatTokens
    render: Callable[[list[dict[str, Any]]], ChatTokens]  # messages -> ChatTokens with the same template, now
    decode: Callable[[list[int]], str]  # token ids -> text


class _Run:
    """A started run: its plan, its cancel flag, and (from its first pass) its session's pass generator."""

    def __init__(self, plan: RunPlan) -> None:
        self.plan = plan
        self.cancel = threading.Event()
        self.settings = plan.settings  # latest knobs, applied to the sampler before the next pass
        self.sampler: Sampler | None = None
        self.passes: Iterator[Step] | None = None
        self.report: Progress | None = None  # the progress callable of the pass in flight
        self.held: Held | None = None  # what the session held when the run began, with where it came from


class RunController:
    """The current run; `start`, `set_settings` and `stop` never block, `next_pass` runs one pass."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # one pass at a time (the model's weight cache is shared)
        self._run: _Run | None = None
        self._session: Session | None = None  # kept from run to run (its KV cache is what runs reuse)
        self._source: PromptSource | None = None  # where the tokens the session holds came from
        self._drop = False  # `unload` asked: the next run starts a new session

    def start(self, plan: RunPlan) -> None:
        """Make `plan` the current run (nothing runs yet); a pass of the previous run stops at its next layer."""
        old, self._run = self._run, _Run(plan)
        if old is not None:
            old.cancel.set()

    def stop(self) -> None:
        """No current run; a pass in flight stops at its next layer."""
        old, self._run = self._run, None
        if old is not None:
            old.cancel.set()

    def set_settings(self, settings: SamplerSettings) -> None:
        """New sampler knobs for the passes still to run (a new seed restarts the draws)."""
        run = self._run
        if run is not None:
            run.settings = settings

    def next_pass(self, run_id: int, progress: Progress | None = None,
                  cancelled: Callable[[], bool] = lambda: False) -> Step | None:
        """Run the next pass of run `run_id`: its Step, or None when the run is finished.

        Args:
            progress: called with (layers done, layers in all) during the pass.
            cancelled: the caller's own stop request (its worker was cancelled), checked at every layer.

        Raises:
            Cancelled: the run was replaced or stopped (before or during the pass), or `cancelled()`.
            WalkthroughError: the engine refused the pass.
        """
        with self._lock:
            run = self._run
            if run is None or run.plan.run_id != run_id or run.cancel.is_set():
                raise Cancelled()
            if run.passes is None:
                self._begin(run)
            self._apply_settings(run)

            def report(done: int, total: int) -> None:
                if run.cancel.is_set() or cancelled():
                    run.cancel.set()  # the generator is closed by the exception: this run cannot go on
                    raise Cancelled()
                if progress is not None:
                    progress(done, total)

            run.report = report
            step = next(run.passes, None)
            if step is not None and step.reuse is not None:
                self._explain(run, step)
            return step

    def unload(self) -> None:
        """Stop the run and let go of the session (its KV cache): the next run starts from an empty one.

        Never blocks: the pass in flight stops at its next layer, and the next run's first pass drops the session.
        """
        self.stop()
        self._drop = True

    def close(self, release: Callable[[], None]) -> None:
        """Stop the run, wait for a pass in flight to let go (within a layer), then call `release`."""
        self.stop()
        with self._lock:
            release()

    def _begin(self, run: _Run) -> None:
        from walkthrough.engine.engines import new_session
        from walkthrough.engine.prefix_break import Held
        from walkthrough.engine.sampler import Sampler

        plan, session, source = run.plan, self._session, self._source
        if self._drop:
            session, self._drop = None, False
        keep = (session is not None and session.model is plan.model and session.attention_rows == plan.attention_rows
                and getattr(plan.model, "engine", "numpy") == "numpy")  # llama.cpp's context is sized per run
        if keep:
            session.recover()  # a pass abandoned midway leaves nothing half-done behind
        else:
            session, source = new_session(plan.model, record_attention=True, measure_surprisal=True,
                                          attention_rows=plan.attention_rows,
                                          n_ctx=len(plan.prompt_ids) + plan.max_tokens), None
        if source is not None and session.tokens[: len(source.chat.ids)] == list(source.chat.ids):
            run.held = Held(source.messages, source.chat, session.tokens[len(source.chat.ids):])
        self._session, self._source = session, plan.request
        run.sampler = Sampler(plan.settings)
        marks = [] if plan.request is None else _user_starts(plan.request)
        run.passes = session.generate(list(plan.prompt_ids), run.sampler, plan.max_tokens, chunk=plan.chunk,
                                      marks=marks, progress=lambda done, total: run.report(done, total))

    @staticmethod
    def _explain(run: _Run, step: Step) -> None:
        """Say why the first pass's reuse stopped, from where the held and the new tokens came from."""
        from walkthrough.engine.prefix_break import explain

        request = run.plan.request
        if run.held is None or request is None or step.reuse.differs_at is None:
            return
        step.cause = explain(run.held, request.messages, request.chat, step.reuse.differs_at,
                             decode=request.decode, render_again=request.render)

    @staticmethod
    def _apply_settings(run: _Run) -> None:
        from walkthrough.engine.sampler import Sampler

        sampler, settings = run.sampler, run.settings
        if sampler.settings == settings:
            return
        if settings.seed != sampler.settings.seed:
            sampler.rng = Sampler(settings).rng
        sampler.settings = settings


def _user_starts(request: PromptSource) -> list[int]:
    from walkthrough.engine.turns import user_starts

    return user_starts(request.chat, request.messages)
