"""The run service owns the model: every kind of pass runs as one of its jobs, never two at once.

The Decode play and the Speculate stage's rounds used to run in two threads on one `Model` (the
issue counted 5 overlapping `block()` calls, sharing its weight cache and counters); here they take
turns.
"""

from __future__ import annotations

import threading
import time

import pytest
from app_support import press_stage, reference_app, settle

from walkthrough.engine.glassbox import model as model_module
from walkthrough.engine.glassbox.session import Cancelled
from walkthrough.request.run import RunService

LAYER_SECONDS = 0.002  # each layer is made this much longer, so overlapping passes would meet


class Overlaps:
    """`model.block` counted: how many layers run at once, at most, and how many ran in all."""

    def __init__(self, monkeypatch) -> None:
        real, guard = model_module.block, threading.Lock()
        self.now = self.most = self.layers = 0

        def counted(*args, **kwargs):
            with guard:
                self.now += 1
                self.layers += 1
                self.most = max(self.most, self.now)
            try:
                time.sleep(LAYER_SECONDS)
                return real(*args, **kwargs)
            finally:
                with guard:
                    self.now -= 1

        monkeypatch.setattr(model_module, "block", counted)


async def test_a_decode_play_and_speculate_rounds_take_turns_on_the_model(fixtures_dir,
                                                                          monkeypatch):
    overlaps = Overlaps(monkeypatch)
    # room for the play to go on beside the rounds: at 40 tokens a fast machine's play had done 38 passes when
    # the rounds began, and its cap came before 3 more (a .ci/run failure, 2026-12-02); 56 + 150 fit the cache
    app = reference_app(max_tokens=150)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        state = app.state
        # play: a pass every tick, whatever the stage
        await press_stage(pilot, "decode", "enter")
        await pilot.pause(0.3)
        assert app.playing
        await press_stage(pilot, "speculate", "enter")  # and the rounds, played too
        passes_then = len(state.steps)
        for _ in range(400):
            await pilot.pause(0.05)
            if len(state.speculation.rounds) >= 3 and len(state.steps) >= passes_then + 3:
                break
        assert len(state.speculation.rounds) >= 3, "the rounds did not run"
        assert len(state.steps) >= passes_then + 3, "the play did not go on beside the rounds"
        app.playing = False
        app.stop_round()
        for _ in range(200):
            await pilot.pause(0.05)
            if app.runs.idle():
                break
    assert overlaps.layers > 0
    assert overlaps.most == 1, f"{overlaps.most} layers ran at once on one model"


def test_jobs_run_one_at_a_time_and_say_which_runs():
    service = RunService()
    inside, release = threading.Event(), threading.Event()
    seen: list[str | None] = []

    def long_job() -> str:
        inside.set()
        release.wait(10)
        return "done"

    first = threading.Thread(target=lambda: seen.append(service.job("four calls", long_job)))
    assert service.idle() and service.current_job is None
    first.start()
    assert inside.wait(10)
    assert not service.idle() and service.current_job == "four calls"
    second = threading.Thread(
        target=lambda: seen.append(service.job("warm starts", lambda: service.current_job)))
    second.start()
    time.sleep(0.2)
    assert seen == []  # the second waits while the first holds the model
    release.set()
    first.join(10)
    second.join(10)
    assert seen == ["done", "warm starts"]
    assert service.idle() and service.current_job is None


def test_a_job_waiting_for_the_model_gives_up_when_cancelled():
    service = RunService()
    inside, release, cancel = threading.Event(), threading.Event(), threading.Event()
    holder = threading.Thread(
        target=lambda: service.job("pass", lambda: (inside.set(), release.wait(10))))
    holder.start()
    assert inside.wait(10)
    began = time.monotonic()
    threading.Timer(0.1, cancel.set).start()
    with pytest.raises(Cancelled):
        service.job("speculative round", lambda: None, cancel.is_set)
    assert time.monotonic() - began < 5  # gave up without waiting for the holder
    release.set()
    holder.join(10)


def test_the_steps_of_a_job_run_one_by_one_with_others_between_them():
    service = RunService()
    order: list[str] = []

    def passes():
        for i in range(3):
            order.append(f"call pass {i}")
            yield i

    for i in service.steps("four calls", passes()):
        assert service.idle()  # between two passes the model is free
        service.job("pass", lambda i=i: order.append(f"decode pass {i}"))
    assert order == ["call pass 0", "decode pass 0", "call pass 1", "decode pass 1", "call pass 2",
                     "decode pass 2"]


def _tiny_plan(run_id: int, prompt: tuple[int, ...] = (1, 2, 3), max_tokens: int = 2):
    from walkthrough.engine.glassbox.model import Model
    from walkthrough.engine.sampler import SamplerSettings
    from walkthrough.inspect.gguf import open_gguf
    from walkthrough.inspect.locate import BUNDLED_MODEL
    from walkthrough.request.run import RunPlan

    return RunPlan(run_id, Model(open_gguf(BUNDLED_MODEL)), prompt, chunk=512,
                   max_tokens=max_tokens, settings=SamplerSettings())


def test_the_service_posts_plain_records_through_the_callback_it_was_given(monkeypatch):
    from walkthrough.request import events
    from walkthrough.request import run as run_module

    monkeypatch.setattr(run_module, "PROGRESS_AFTER", 0.0)  # report every layer
    monkeypatch.setattr(run_module, "PROGRESS_EVERY", 0.0)
    posted: list[events.Event] = []
    service = RunService(posted.append)
    plan = _tiny_plan(1)
    layers = plan.model.config.n_layers
    service.start(plan)
    service.run_pass(1)  # the prompt's prefill, on a thread of the test's own: no Textual
    *progress, done = posted
    assert isinstance(done, events.StepDone) and done.run_id == 1 and done.step.phase == "prefill"
    assert [(p.done, p.total) for p in progress] == [(n, layers) for n in range(layers + 1)]
    assert progress[-1].head_bytes > 0 and not any(p.head_bytes for p in progress[:-1])
    posted.clear()
    service.start(_tiny_plan(2))
    service.run_pass(1)  # the run was replaced
    assert posted == [events.PassCancelled(1)]
    posted.clear()
    service.start(_tiny_plan(3, prompt=(10**9,)))
    service.run_pass(3)  # a token outside the vocabulary
    (failed,) = posted
    assert isinstance(failed, events.RunFailed) and failed.run_id == 3 and failed.error


def test_every_record_a_job_posts_is_applied_by_the_app():
    from walkthrough.app import WalkthroughApp
    from walkthrough.request import events

    assert set(events.Event.__subclasses__()) == set(events.EVENTS)
    missing = [kind.handler() for kind in events.EVENTS
               if not callable(getattr(WalkthroughApp, kind.handler(), None))]
    assert missing == []
    assert events.StepDone.handler() == "apply_step_done"
