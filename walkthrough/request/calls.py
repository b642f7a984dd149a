"""The four calls' jobs (over the Chat stage): played and measured on the request's model, through
the run service, posting what they compute.

`play_calls` plays the scripted sequence (`engine.serving.turns.FourCalls`)
from the current messages in a session of its own, on the model the stage's
run uses (`calls_model`: one model of the file in memory, its dequantized
weights held once). Each call is also run from an empty cache, so "with" and
"without reuse" are both measured. `measure_starts` measures the first
request's first token from a fresh process (a cold start) against this process
(warm, and with the prompt's KV cache kept). Every pass is a job of the run
service (`RunService.steps`, `RunService.job`), so none computes beside a pass
of the stage's run or a speculative round; each result is posted
(`request.events`) for the app to keep in `state.calls`.

A job whose caller cancels it stops at the next layer of its pass (the
engine's `Cancelled`) or kills the cold start's process, and posts nothing
more.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from walkthrough.engine.glassbox.session import Cancelled
from walkthrough.errors import WalkthroughError
from walkthrough.request import events

if TYPE_CHECKING:  # the engine loads when the calls play, not when the app starts
    from walkthrough.engine.glassbox.model import Model
    from walkthrough.engine.protocol import Engine
    from walkthrough.engine.sampler import SamplerSettings
    from walkthrough.inspect.gguf import GGUFFile
    from walkthrough.inspect.tokenizer import GGUFTokenizer
    from walkthrough.request.run import RunService


@dataclass(frozen=True)
class CallsInput:
    """What the calls need from the request: the file, its tokenizer and template, the messages, the
    knobs."""

    path: Path
    file: GGUFFile
    tokenizer: GGUFTokenizer
    template: str
    messages: list[dict]
    settings: SamplerSettings
    chunk: int
    max_tokens: int
    max_memory: int | None = None  # --max-memory: the numpy engine's weight budget (None: the default)


def calls_model(model: Engine | None, file: GGUFFile, max_memory: int | None = None) -> Model:
    """The numpy model the calls run on: the request's own `model` when it is one, so the file's
    weights are held once.

    The calls need the numpy engine (their sessions go back to checkpoints and say why reuse
    stopped, which llama.cpp's do not), so when the request runs on llama.cpp, or its model is not
    built yet, they build a numpy model of the file for themselves, within the same budget
    (`max_memory`, --max-memory; None: the engine's default, a share of the free memory).
    """
    from walkthrough.engine.engines import load_model
    from walkthrough.engine.glassbox.model import Model

    return model if isinstance(model, Model) else load_model("numpy", file, max_memory=max_memory)


def play_calls(runs: RunService, c: CallsInput, model: Model,
               cancelled: Callable[[], bool] = lambda: False) -> None:
    """Play the four calls on `model`, posting each pass (`CallPassed`), each call (`CallPlayed`),
    their sums (`CallsFinished`) or why they stopped (`CallsFailed`); nothing once cancelled."""
    from walkthrough.engine.glassbox.session import Session
    from walkthrough.engine.serving.turns import Conversation, FourCalls, summarize

    try:
        talk = Conversation(Session(model), c.tokenizer, c.template, settings=c.settings,
                            max_tokens=c.max_tokens, chunk=c.chunk, measure_fresh=True,
                            cancelled=cancelled)
        for label, messages in FourCalls.for_request(c.messages).requests(talk, c.messages):
            for step in runs.steps("four calls", talk.ask(messages, label), cancelled):
                runs.post(events.CallPassed(f"{label}: {step.phase} {step.start}:{step.end}"))
            runs.post(events.CallPlayed(talk.turns[-1], model))
        runs.post(events.CallsFinished(summarize(talk.turns)))
    except Cancelled:
        return
    except WalkthroughError as err:
        runs.post(events.CallsFailed(str(err)))


def measure_starts(runs: RunService, c: CallsInput, model: Engine, first: list[int],
                   cancelled: Callable[[], bool] = lambda: False) -> None:
    """Measure the first token of `first` cold (a fresh process), warm on `model`, and warm with the
    KV cache kept, as one job; post them (`StartsMeasured`) or why not (`CallsFailed`)."""
    from walkthrough.engine.serving.coldstart import StartTimes, cold_start, kept_start, warm_start

    def measure() -> tuple[StartTimes, StartTimes, StartTimes]:
        cold = cold_start(c.path, first, chunk=c.chunk, max_memory=c.max_memory, cancelled=cancelled)
        return (cold, warm_start(model, first, chunk=c.chunk, cancelled=cancelled),
                kept_start(model, first, chunk=c.chunk, cancelled=cancelled))

    try:
        starts = runs.job("cold and warm starts", measure, cancelled)
    except Cancelled:
        return
    except WalkthroughError as err:
        runs.post(events.CallsFailed(str(err)))
        return
    runs.post(events.StartsMeasured(starts, len(first)))
