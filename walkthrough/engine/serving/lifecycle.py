"""A model's lifecycle in a server (pull, load, first use, serve, idle, keep-alive expiry, unload) as a
timeline of questions, from the cold and warm starts this run measured (`coldstart.StartTimes`).

A cold start's first token splits into loading (the process starting, the
engine's imports, opening and mapping the file: `first_token - passes`), first
use (the prompt's passes minus the same passes on a model already loaded: the
weights dequantized and their pages faulted in) and the prompt itself (the warm
start's first token). A server keeps the model loaded for `keep_alive` seconds
after a request: a question arriving within it pays the warm start only; after
it, the model was unloaded and the question pays the cold start again. Pulling
the file is paid once per machine (its bytes from the registry; network time is
not measured here: the file is on disk already).

Modelled, not measured: the keep-alive window (Ollama's default, `KEEP_ALIVE`)
and the questions' arrival times (`gaps`, the user's schedule). The answer's
decoding is left out: idle time is counted from the first token.

Example: cold 1.5 s (load 1.0, first use 0.3, prompt 0.2), warm 0.2 s, gaps 180 s and 600 s, keep-alive
300 s -> question 1 at 0:00 cold 1.5 s; question 2 at 3:00 warm 0.2 s (idle 178.5 s); the model unloads at
8:00; question 3 at 13:00 cold 1.5 s; it unloads at 18:01.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from walkthrough.engine.serving.coldstart import StartTimes

# Ollama keeps a model loaded for 5 minutes after a request unless told otherwise (keep_alive, OLLAMA_KEEP_ALIVE):
# https://github.com/ollama/ollama/blob/main/docs/faq.md ("How do I keep a model loaded in memory or make it
# unload immediately?"); keep_alive 0 unloads right after the request.
KEEP_ALIVE = 300.0
KEEP_ALIVE_SOURCE = "Ollama's default, https://github.com/ollama/ollama/blob/main/docs/faq.md"
KEEP_ALIVES = (KEEP_ALIVE, 1800.0, 0.0)  # the view's choices: the default, half an hour, unload at once
GAPS = (180.0, 600.0)  # the example schedule: a question 3 minutes after the first, one 10 minutes after that


@dataclass(frozen=True)
class StartCost:
    """Where a cold start's first token went, in seconds."""

    load: float  # process, imports, opening the file
    first_use: float  # the weights' first use, beyond the prompt's own passes
    prompt: float  # the prompt's passes on a loaded model (the warm start)
    kept: float  # the first token when the prompt's KV cache was kept too

    @property
    def cold(self) -> float:
        return self.load + self.first_use + self.prompt

    @classmethod
    def measured(cls, cold: StartTimes, warm: StartTimes, kept: StartTimes) -> StartCost:
        load = cold.first_token - cold.passes
        return cls(load, max(cold.passes - warm.first_token, 0.0), warm.first_token, kept.first_token)


@dataclass(frozen=True)
class Question:
    """One question of the schedule: when it came, whether the model was loaded, when its first token came."""

    number: int
    at: float  # seconds since the first question
    loaded: bool  # the model was still loaded (within keep-alive of the last request)
    idle: float  # seconds the model sat loaded and idle before it (0 when it came to an unloaded model)
    unloaded_at: float | None  # when the model was unloaded before it (keep-alive expired), if it was
    first_token: float  # seconds to its first token

    @property
    def done(self) -> float:
        return self.at + self.first_token


@dataclass(frozen=True)
class Lifecycle:
    """The questions of a schedule and when the model is finally unloaded."""

    cost: StartCost
    keep_alive: float
    questions: tuple[Question, ...]
    unloaded_at: float  # after the last question
    held_bytes: int  # what the loaded model holds while idle (the file's weights)

    @property
    def waiting(self) -> float:
        """Seconds all the questions waited for their first tokens."""
        return sum(q.first_token for q in self.questions)

    def to_json(self) -> dict:
        """The record `trace --four-calls --measure --json` prints."""
        c = self.cost
        return {"load_s": c.load, "first_use_s": c.first_use, "prompt_s": c.prompt, "kept_s": c.kept,
                "cold_s": c.cold, "keep_alive_s": self.keep_alive, "held_bytes": self.held_bytes,
                "questions": [{"at_s": q.at, "loaded": q.loaded, "idle_s": q.idle, "unloaded_at_s": q.unloaded_at,
                               "first_token_s": q.first_token} for q in self.questions],
                "unloaded_at_s": self.unloaded_at}


def lifecycle(cost: StartCost, gaps: Sequence[float] = GAPS, keep_alive: float = KEEP_ALIVE,
              held_bytes: int = 0) -> Lifecycle:
    """The questions asked at 0 and then `gaps` seconds apart (each gap from one question's arrival to the
    next's), with the model kept `keep_alive` seconds after each first token."""
    questions: list[Question] = []
    at, expires = 0.0, None  # when the loaded model unloads (None: not loaded)
    for number in range(1, len(gaps) + 2):
        if number > 1:
            at += gaps[number - 2]
        loaded = expires is not None and at <= expires
        last = questions[-1] if questions else None
        idle = at - last.done if loaded and last is not None else 0.0
        unloaded_at = expires if expires is not None and not loaded else None
        first = cost.prompt if loaded else cost.cold
        q = Question(number, at, loaded, max(idle, 0.0), unloaded_at, first)
        questions.append(q)
        expires = q.done + keep_alive
    return Lifecycle(cost, keep_alive, tuple(questions), expires, held_bytes)
