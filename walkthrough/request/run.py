"""The run service: the one owner of the request's model, running every pass on it as a job, one at
a time.

Every pass the app runs goes through here, under its one lock: the stage's
run (prefill chunks and decoded tokens, `next_pass`), the Speculate stage's
rounds (`next_round`), the four calls (`steps`) and the warm starts (`job`).
Two jobs never compute at once, so the model's weight cache, its counters and
the CPU are never shared by two passes (a Decode play and a Speculate round
take turns, pass by pass). The service is called from worker threads and
holds no data the screens read: what a job computes is posted as a plain
record (`request.events`) through the callback the app gave it (`post`); the
app wraps it in a Textual message and stores it in the request state on the
UI thread. `current_job` names the job holding the lock and `idle()`
says none does (for the tests and the stage bar).

A job waiting for the lock gives up as soon as its caller cancels it (checked
every `WAIT_POLL` seconds), and a job computing checks at every layer.

The stage's run. The UI thread starts one with a `RunPlan` (everything the run
needs, frozen) and changes its sampler knobs; pass workers call `run_pass`,
which runs one pass (`next_pass`) and posts its `Step` (None once the run is
finished), a long pass's progress before it.
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

The Speculate stage's run (`RoundPlan`, `start_rounds`, `next_round`) has a
session of its own on the same model. A round cut off by a cancel leaves that
session mid-round, so the run is dropped; the next round builds it again and
computes the steps the caller already holds before the new one (same seed,
same steps). The caller says how many it holds, so a step computed but
dropped (its worker cancelled just after) is computed again, not skipped.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from walkthrough.engine.glassbox.session import Cancelled, Progress, stop_when
from walkthrough.errors import WalkthroughError
from walkthrough.request import events
from walkthrough.request.events import Post, nowhere

if TYPE_CHECKING:
    from walkthrough.engine.prefix_break import Held
    from walkthrough.engine.protocol import Engine, Session
    from walkthrough.engine.sampler import Sampler, SamplerSettings
    from walkthrough.engine.steps import Step
    from walkthrough.inspect.chat import ChatTokens

WAIT_POLL = 0.05  # seconds between looks at a waiting job's cancel flag
# seconds into a pass before its progress is posted (short passes would only flood the app)
PROGRESS_AFTER = 0.3
PROGRESS_EVERY = 0.1  # seconds between progress reports of one pass
T = TypeVar("T")


@dataclass(frozen=True)
class RunPlan:
    """One run of the request: which model, which prompt, how it is cut and capped, which knobs to
    start with."""

    run_id: int
    model: Engine
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
    # messages -> ChatTokens with the same template, now
    render: Callable[[list[dict[str, Any]]], ChatTokens]
    decode: Callable[[list[int]], str]  # token ids -> text


class _Run:
    """A started run: its plan, its cancel flag, and (from its first pass) its session's pass
    generator."""

    def __init__(self, plan: RunPlan) -> None:
        self.plan = plan
        self.cancel = threading.Event()
        self.settings = plan.settings  # latest knobs, applied to the sampler before the next pass
        self.sampler: Sampler | None = None
        self.passes: Iterator[Step] | None = None
        self.report: Progress | None = None  # the progress callable of the pass in flight
        # what the session held when the run began, with where it came from
        self.held: Held | None = None


@dataclass(frozen=True)
class RoundPlan:
    """A speculative run of the request (the Speculate stage's), frozen when it starts."""

    run_id: int
    model: Engine
    prompt_ids: tuple[int, ...]
    chunk: int
    settings: SamplerSettings
    max_tokens: int
    drafter: str  # "lookup", "mtp" or "draft"
    k: int  # drafts per round, at most
    draft: Path | None = None  # the draft model's file, for drafter "draft"


class _Rounds:
    """A started speculative run: its plan, its cancel flag, its generator of Steps and how many it
    made."""

    def __init__(self, plan: RoundPlan) -> None:
        self.plan = plan
        self.cancel = threading.Event()  # set when another run replaces this one
        # the prompt's last prefill pass, then one per round
        self.steps: Iterator[Step | None] | None = None
        self.made = 0  # Steps the generator made so far
        self.report: Progress | None = None  # the pass hook of the call in flight


class RunService:
    """Every pass on the request's model, one job at a time; `start`, `start_rounds`, `set_settings`
    and `stop` never block, the other calls run a job (from a worker thread)."""

    def __init__(self, post: Post = nowhere) -> None:
        """Args:
            post: called (from the worker threads) with every record a job posts.
        """
        self.post = post
        # one job at a time on the model (its weight cache, the cores)
        self._lock = threading.Lock()
        self._job: str | None = None  # the job holding the lock
        self._run: _Run | None = None
        # kept from run to run (its KV cache is what runs reuse)
        self._session: Session | None = None
        self._source: PromptSource | None = None  # where the tokens the session holds came from
        self._drop = False  # `unload` asked: the next run starts a new session
        self._rounds: _Rounds | None = None  # the Speculate stage's run

    # ---- jobs ----------------------------------------------------------------------------------
    @property
    def current_job(self) -> str | None:
        """The job computing now ("pass", "speculative round", "four calls", ...), None when
        idle."""
        return self._job

    def idle(self) -> bool:
        """No job holds the model."""
        return not self._lock.locked()

    @contextmanager
    def _holding(self, job: str, cancelled: Callable[[], bool]) -> Iterator[None]:
        """Hold the model for `job`; while another job holds it, wait, or raise Cancelled once
        `cancelled()`."""
        while not self._lock.acquire(timeout=WAIT_POLL):
            if cancelled():
                raise Cancelled()
        self._job = job
        try:
            yield
        finally:
            self._job = None
            self._lock.release()

    def job(self, name: str, work: Callable[[], T],
            cancelled: Callable[[], bool] = lambda: False) -> T:
        """Run `work()` as job `name` while holding the model (say, the warm starts).

        Raises:
            Cancelled: `cancelled()` while waiting for the model (and whatever `work` raises).
        """
        with self._holding(name, cancelled):
            return work()

    def steps(self, name: str, passes: Iterator[T],
              cancelled: Callable[[], bool] = lambda: False) -> Iterator[T]:
        """The items of `passes`, each computed as job `name` (other jobs may run between two of
        them)."""
        while True:
            with self._holding(name, cancelled):
                item = next(passes, None)
            if item is None:
                return
            yield item

    # ---- the stage's run -------------------------------------------------------------------------
    @property
    def plan(self) -> RunPlan | None:
        """The plan of the stage's current run (None: no run)."""
        run = self._run
        return None if run is None else run.plan

    def _replace(self, slot: str, new: _Run | _Rounds | None) -> None:
        """Put `new` in the run slot `slot`; the run it held is cancelled (its pass stops at its
        next layer)."""
        old = getattr(self, slot)
        setattr(self, slot, new)
        if old is not None:
            old.cancel.set()

    def start(self, plan: RunPlan) -> None:
        """Make `plan` the current run (nothing runs yet); a pass of the previous run stops at its
        next layer."""
        self._replace("_run", _Run(plan))

    def stop(self) -> None:
        """No current run; a pass in flight stops at its next layer."""
        self._replace("_run", None)

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
            cancelled: the caller's own stop request (its worker was cancelled), checked at every
            layer.

        Raises:
            Cancelled: the run was replaced or stopped (before or during the pass), or
            `cancelled()`. WalkthroughError: the engine refused the pass.
        """
        with self._holding("pass", cancelled):
            run = self._run
            if run is None or run.plan.run_id != run_id or run.cancel.is_set():
                raise Cancelled()
            if run.passes is None:
                self._begin(run)
            self._apply_settings(run)

            def report(done: int, total: int) -> None:
                if run.cancel.is_set() or cancelled():
                    # the generator is closed by the exception: this run cannot go on
                    run.cancel.set()
                    raise Cancelled()
                if progress is not None:
                    progress(done, total)

            run.report = report
            step = next(run.passes, None)
            if step is not None and step.reuse is not None:
                self._explain(run, step)
            return step

    def run_pass(self, run_id: int, cancelled: Callable[[], bool] = lambda: False) -> None:
        """Run the next pass of run `run_id` (`next_pass`) and post what came of it: `StepDone`,
        `PassCancelled` or `RunFailed`, and `PassProgress` while a long pass runs (from
        `PROGRESS_AFTER` seconds in, every `PROGRESS_EVERY` seconds) and when the output head's
        first use comes."""
        run = self._run
        model = run.plan.model if run is not None and run.plan.run_id == run_id else None
        began = time.monotonic()
        reported = [began]

        def progress(done: int, total: int) -> None:
            now = time.monotonic()
            # The head's first use can take longer than all the layers: said whenever it comes.
            head = head_pending(model) if done == total else 0
            if head or (now - began >= PROGRESS_AFTER and now - reported[0] >= PROGRESS_EVERY):
                reported[0] = now
                self.post(events.PassProgress(run_id, done, total, head))

        try:
            step = self.next_pass(run_id, progress, cancelled)
        except Cancelled:
            self.post(events.PassCancelled(run_id))
            return
        except WalkthroughError as exc:
            self.post(events.RunFailed(run_id, str(exc)))
            return
        self.post(events.StepDone(run_id, step))

    def unload(self) -> None:
        """Stop the run and let go of the session (its KV cache): the next run starts from an empty
        one.

        Never blocks: the pass in flight stops at its next layer, and the next run's first pass
        drops the session.
        """
        self.stop()
        self._drop = True

    def close(self, release: Callable[[], None]) -> None:
        """Stop both runs, wait for the job in flight to let go (within a layer), then call
        `release`."""
        self.stop()
        self.stop_rounds()
        with self._holding("close", lambda: False):
            release()

    # ---- the Speculate stage's run ---------------------------------------------------------------
    def start_rounds(self, plan: RoundPlan) -> None:
        """Make `plan` the speculative run (nothing runs until `next_round`); a round of the
        previous one stops at its next layer."""
        self._replace("_rounds", _Rounds(plan))

    def stop_rounds(self) -> None:
        """No speculative run; a round in flight stops at its next layer."""
        self._replace("_rounds", None)

    def next_round(self, run_id: int, shown: int,
                   cancelled: Callable[[], bool] = lambda: False,
                   progress: Progress | None = None) -> Step | None:
        """The Step of speculative run `run_id` after the `shown` first ones (the prefill's last
        pass first), None when the answer is done.

        Args:
            shown: Steps of this run the caller holds.
            cancelled: the caller's own stop request (its worker was cancelled), checked at every
            layer.
            progress: called with (layers done, layers in all) during each of the round's passes.

        Raises:
            Cancelled: the run was replaced (before or during the round), or `cancelled()`; the run
            itself
                can go on at the next call.
            WalkthroughError: the engine refused the round.
        """
        with self._holding("speculative round", cancelled):
            run = self._rounds
            if run is None or run.plan.run_id != run_id or run.cancel.is_set():
                raise Cancelled()
            stop = stop_when(lambda: run.cancel.is_set() or cancelled())

            def report(done: int, total: int) -> None:
                stop(done, total)
                if progress is not None:
                    progress(done, total)

            run.report = report
            try:
                # a round was cut off, or its step not kept
                if run.steps is None or run.made != shown:
                    run.steps, run.made = _speculative(run.plan, _reporting(run)), 0
                    while run.made < shown:  # the steps the caller holds, computed again
                        next(run.steps)
                        run.made += 1
                step = next(run.steps, None)
            except Cancelled:
                run.steps = None  # the exception closed the generator, and its session is mid-round
                raise
            run.made += step is not None
            return step

    def run_round(self, run_id: int, shown: int,
                  cancelled: Callable[[], bool] = lambda: False) -> None:
        """Run the round of speculative run `run_id` after the `shown` first Steps (`next_round`)
        and post it in a `RoundDone` (with the error, if the engine refused it); a cancelled round
        posts nothing; a long round posts `RoundProgress` as `run_pass` posts a pass's."""
        began = time.monotonic()
        reported = [began]

        def progress(done: int, total: int) -> None:
            now = time.monotonic()
            if now - began >= PROGRESS_AFTER and now - reported[0] >= PROGRESS_EVERY:
                reported[0] = now
                self.post(events.RoundProgress(run_id, done, total))

        try:
            step = self.next_round(run_id, shown, cancelled, progress)
        except Cancelled:
            return
        except WalkthroughError as exc:
            self.post(events.RoundDone(run_id, None, str(exc)))
            return
        self.post(events.RoundDone(run_id, step))

    def _begin(self, run: _Run) -> None:
        from walkthrough.engine.engines import new_session
        from walkthrough.engine.prefix_break import Held
        from walkthrough.engine.sampler import Sampler

        plan, session, source = run.plan, self._session, self._source
        if self._drop:
            session, self._drop = None, False
        keep = (session is not None and session.model is plan.model
                and session.attention_rows == plan.attention_rows
                and plan.model.engine == "numpy")  # llama.cpp's context is sized per run
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
        run.passes = session.generate(list(plan.prompt_ids), run.sampler, plan.max_tokens,
                                      chunk=plan.chunk, marks=marks,
                                      progress=lambda done, total: run.report(done, total))

    @staticmethod
    def _explain(run: _Run, step: Step) -> None:
        """Say why the first pass's reuse stopped, from where the held and the new tokens came
        from."""
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


def head_pending(model: Engine | None) -> int:
    """Bytes the model's output head decodes on its first use (`Model.head_pending`; 0 for
    llama.cpp)."""
    pending = getattr(model, "head_pending", None)
    return pending() if pending is not None else 0


def _user_starts(request: PromptSource) -> list[int]:
    from walkthrough.engine.serving.turns import user_starts

    return user_starts(request.chat, request.messages)


def _reporting(run: _Rounds) -> Progress:
    """The pass hook a speculative run's passes call: the hook of the round in flight."""
    return lambda done, total: run.report(done, total)


def _speculative(plan: RoundPlan, progress: Progress) -> Iterator[Step | None]:
    """The prompt's last prefill pass, then one verification pass per round (numpy engine only)."""
    from walkthrough.engine.glassbox.model import Model
    from walkthrough.engine.glassbox.session import Session as NumpySession
    from walkthrough.engine.sampler import Sampler
    from walkthrough.engine.serving import speculative

    if not isinstance(plan.model, Model):
        raise WalkthroughError("speculative decoding runs on the numpy engine; open the file "
                               "without --engine llama.cpp to see it")
    drafter = speculative.make_drafter(plan.drafter, plan.model, draft=plan.draft)
    session = NumpySession(plan.model, keep_hidden=drafter.needs_hidden)
    sampler = Sampler(plan.settings)
    last = None
    for last in speculative.prefill(session, drafter, plan.prompt_ids, chunk=plan.chunk,
                                    sampler=sampler, progress=progress):
        pass
    yield last
    if not last.stopped:
        yield from speculative.speculate(session, sampler, drafter, plan.max_tokens - 1, k=plan.k,
                                         progress=progress)
