"""A conversation played in one session: each request rendered by the file's template, reused, run and measured.

A chat client re-sends the whole conversation with every message. Each
request here is rendered and tokenized as the first one was
(`inspect.chat.chat_tokens`), compared with the tokens the session holds
(`Session.request` keeps the longest common prefix; hybrid models go back to
a checkpoint), and only the rest is computed. A `Turn` records what was
reused and why reuse stopped (`prefix_break`), the answer, and what the
request cost: tokens computed, FLOPs, bytes read, and the time to the first
token (rendering, tokenizing, the passes and the first draw, measured on this
machine). With `measure_fresh`, the same request is also run from an empty
cache in the same process (weights already loaded), so "with and without
reuse" are both measured, not estimated.

Example:
    talk = Conversation(session, tokenizer, template, settings=SamplerSettings(), max_tokens=40)
    for step in talk.ask(messages, label="first"): ...
    for step in talk.ask(talk.follow_up("And with warfarin?"), label="follow-up"): ...
    talk.turns[-1].reuse.reused        # the whole first request and its answer
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from walkthrough.engine.checkpoints import Reuse
from walkthrough.engine.context_fit import check_fits
from walkthrough.engine.glassbox.session import Session, stop_when
from walkthrough.engine.prefix_break import Break, Held, explain
from walkthrough.engine.sampler import Sampler, SamplerSettings
from walkthrough.engine.steps import Step, totals
from walkthrough.inspect.chat import ChatTokens, chat_tokens

if TYPE_CHECKING:
    from walkthrough.inspect.tokenizer import GGUFTokenizer

NOT_WEIGHTS = ("kv_cache", "state", "total")  # bytes_read groups that are not weights


@dataclass(frozen=True)
class Cost:
    """What running a request's prompt took, up to its first token."""

    computed: int  # prompt positions computed
    passes: int
    flops: int
    bytes_read: dict[str, int]  # per group, plus "total"
    seconds: float  # time to the first token: render, tokenize, passes, first draw

    @property
    def weight_bytes(self) -> int:
        """Bytes of weights read (everything but the KV cache and recurrent states)."""
        return sum(n for group, n in self.bytes_read.items() if group not in NOT_WEIGHTS)

    def to_json(self) -> dict[str, Any]:
        return {"computed": self.computed, "passes": self.passes, "flops": self.flops,
                "weight_bytes": self.weight_bytes, "bytes_read": self.bytes_read.get("total", 0),
                "first_token_seconds": round(self.seconds, 4)}


@dataclass
class Turn:
    """One request of a conversation and what it cost."""

    label: str
    messages: list[dict]
    chat: ChatTokens
    reuse: Reuse
    cause: Break | None  # why the shared prefix ended where it did (None: it did not break)
    steps: list[Step]
    answer: list[int]  # ids chosen, the end-of-turn token included when one came
    answer_text: str  # the answer as a client would send it back (end-of-turn token left out)
    cost: Cost  # this request, as run (with reuse)
    fresh: Cost | None = None  # the same request from an empty cache, when measured
    checkpoints: int = 0  # checkpoints the session keeps after the turn (hybrid models)
    checkpoint_bytes: int = 0

    @property
    def flops_saved(self) -> int | None:
        return None if self.fresh is None else self.fresh.flops - self.cost.flops

    @property
    def weight_bytes_saved(self) -> int | None:
        return None if self.fresh is None else self.fresh.weight_bytes - self.cost.weight_bytes

    def to_json(self) -> dict[str, Any]:
        """The turn's summary record (`trace --json` prints it after the turn's passes)."""
        out: dict[str, Any] = {"turn": self.label, "prompt_tokens": len(self.chat.ids), "reuse": self.reuse.to_json(),
                               "cause": None if self.cause is None else self.cause.to_json(),
                               "answer_tokens": len(self.answer), "cost": self.cost.to_json()}
        if self.fresh is not None:
            out["without_reuse"] = self.fresh.to_json()
            out["flops_saved"] = self.flops_saved
            out["weight_bytes_saved"] = self.weight_bytes_saved
        if self.checkpoints:
            out["checkpoints"] = self.checkpoints
            out["checkpoint_bytes"] = self.checkpoint_bytes
        return out


def answer_text(tokenizer: GGUFTokenizer, ids: list[int], end_ids: frozenset[int]) -> str:
    """The answer as a chat client sends it back: the chosen tokens' text, end-of-turn tokens left out."""
    return tokenizer.decode([i for i in ids if i not in end_ids])


def follow_up(messages: list[dict], answer: str, text: str) -> list[dict]:
    """A follow-up request: the messages, the answer as the assistant's message, then a new user message."""
    return [*messages, {"role": "assistant", "content": answer}, {"role": "user", "content": text}]


def user_starts(chat: ChatTokens, messages: list[dict]) -> list[int]:
    """Token positions where each user message's text begins (where llama.cpp's server checkpoints)."""
    users = {i for i, m in enumerate(messages) if m.get("role") == "user"}
    seen: set[int] = set()
    starts = []
    for position, token in enumerate(chat.tokens):
        if token.message in users and token.message not in seen:
            seen.add(token.message)
            starts.append(position)
    return starts


class Conversation:
    """Requests sent one after another to one session, as a chat client and a server with a kept cache do."""

    def __init__(
        self,
        session: Session,
        tokenizer: GGUFTokenizer,
        template: str,
        *,
        settings: SamplerSettings | None = None,
        max_tokens: int = 16,
        chunk: int | None = None,
        origin: str = "chat template",
        now: datetime | None = None,
        measure_fresh: bool = False,
        cancelled: Callable[[], bool] | None = None,
    ):
        """Args:
            cancelled: checked at every layer of every pass (the fresh runs' too); once true, the pass in
                flight raises `session.Cancelled` and the conversation cannot go on.
        """
        self.session = session
        self.tokenizer = tokenizer
        self.template = template
        self.settings = settings or SamplerSettings()
        self.max_tokens = max_tokens
        self.chunk = chunk
        self.origin = origin
        self.now = now  # the time the template's strftime_now shows (None: the clock)
        self.measure_fresh = measure_fresh
        self.progress = stop_when(cancelled)
        self.held: Held | None = None
        self.turns: list[Turn] = []

    def render(self, messages: list[dict]) -> ChatTokens:
        extra = {} if self.now is None else {"now": self.now}
        return chat_tokens(self.tokenizer, self.template, messages, add_generation_prompt=True,
                           origin=self.origin, **extra)

    def requests(self, messages: list[dict]) -> Iterator[tuple[str, list[dict]]]:
        """The requests a client sends for a conversation with several user messages: (label, messages).

        One request per user message, re-sending everything before it. An assistant message the
        conversation gives is sent as given; where it gives none, the model's answer to the previous
        request is (so consume each request's passes before asking for the next).
        """
        segments: list[list[dict]] = [[]]
        for message in messages:
            if message.get("role") == "user" and any(m.get("role") == "user" for m in segments[-1]):
                segments.append([])
            segments[-1].append(message)
        history: list[dict] = []
        for n, segment in enumerate(segments, start=1):
            if n > 1 and segment[0].get("role") != "assistant":
                history.append({"role": "assistant", "content": self.turns[-1].answer_text})
            history = history + segment
            yield f"turn {n}", history

    def follow_up(self, text: str) -> list[dict]:
        """The last request's messages, its answer as the assistant's message, and a new user message."""
        last = self.turns[-1]
        return follow_up(last.messages, last.answer_text, text)

    def ask(self, messages: list[dict], label: str = "") -> Iterator[Step]:
        """Send `messages` as the next request: yields each pass; then `turns[-1]` is its `Turn`.

        Raises:
            ContextTooSmall: the rendered prompt and an answer of up to `max_tokens` do not fit the model's
                context (raised when the first pass is asked for).
        """
        began = time.perf_counter()
        chat = self.render(messages)
        # a request grown by earlier turns may no longer fit: one line, before any pass (engine/context_fit.py)
        check_fits(self.session.model.card.context_length, len(chat.ids), self.max_tokens, "--max-tokens")
        own = time.perf_counter() - began  # time spent here, not in the caller's loop
        sampler = Sampler(self.settings)
        steps: list[Step] = []
        first_token = None
        passes = self.session.generate(chat.ids, sampler, self.max_tokens, chunk=self.chunk,
                                       marks=user_starts(chat, messages), progress=self.progress)
        while True:
            clock = time.perf_counter()
            step = next(passes, None)
            own += time.perf_counter() - clock
            if step is None:
                break
            step.turn = label or None
            if step.reuse is not None and self.held is not None:  # outside the timed part: not the request's work
                step.cause = self.explain(self.held, messages, chat, step.reuse)
            steps.append(step)
            if first_token is None and step.chosen is not None:
                first_token = own
            yield step
        self._record(label, messages, chat, steps, first_token or own)

    def _record(self, label: str, messages: list[dict], chat: ChatTokens, steps: list[Step], seconds: float) -> None:
        prompt = [s for s in steps if s.phase == "prefill"]
        reuse = prompt[0].reuse
        cause = prompt[0].cause
        answer = [s.chosen for s in steps if s.chosen is not None]
        text = answer_text(self.tokenizer, answer, self.session.model.config.end_ids)
        sums = totals(prompt)
        cost = Cost(sums.tokens, sums.passes, sums.flops, sums.bytes_read, seconds)
        fresh = self._fresh(chat, messages) if self.measure_fresh else None
        checkpoints = self.session.checkpoints
        self.turns.append(Turn(label, messages, chat, reuse, cause, steps, answer, text, cost, fresh,
                               len(checkpoints.kept), checkpoints.nbytes))
        self.held = Held(messages, chat, self.session.tokens[len(chat.ids):])

    def explain(self, held: Held, messages: list[dict], chat: ChatTokens, reuse: Reuse) -> Break | None:
        """Why the request parted from what was held (None when no token differs)."""
        if reuse.differs_at is None:
            return None
        return explain(held, messages, chat, reuse.differs_at, decode=self.tokenizer.decode, render_again=self.render)

    def _fresh(self, chat: ChatTokens, messages: list[dict]) -> Cost:
        """The same prompt from an empty cache in this process (render and tokenize again, all passes)."""
        began = time.perf_counter()
        again = self.render(messages)
        s = self.session
        fresh = Session(s.model, kv_type=s.cache.cache_type, checkpoint_every=s.checkpoints.every)
        steps = list(fresh.request(again.ids, chunk=self.chunk, sampler=Sampler(self.settings),
                                   marks=user_starts(again, messages), progress=self.progress))
        seconds = time.perf_counter() - began
        sums = totals(steps)
        return Cost(sums.tokens, sums.passes, sums.flops, sums.bytes_read, seconds)


FOUR_CALLS = Path(__file__).resolve().parents[2] / "assets" / "four_calls.json"


@dataclass(frozen=True)
class FourCalls:
    """The scripted sequence: a request, a follow-up, an edit of its question, a new chat with the same system prompt."""

    follow_up: str  # the second call's new user message
    find: str  # the third call edits the first request's last user message: `find` -> `replace`
    replace: str
    new_conversation: str  # the fourth call's user message
    append: str = ""  # or, when `find` is empty, adds this at the end of it

    @classmethod
    def load(cls, path: Path = FOUR_CALLS) -> FourCalls:
        """The script written for the default request (its clinical follow-up, edit and new record)."""
        data = json.loads(path.read_text(encoding="utf-8"))
        return cls(data["follow_up"], data["edit"]["find"], data["edit"]["replace"], data["new_conversation"])

    @classmethod
    def for_request(cls, messages: list[dict], path: Path = FOUR_CALLS) -> FourCalls:
        """The script for `messages`: `load`'s for the bundled default request, else one made from the
        request itself (`own_request`): a follow-up asking to go on, its last question with a sentence
        added, and a new chat with its system prompt asking the follow-up, never the bundled clinical texts."""
        if cls.is_default(messages):
            return cls.load(path)
        own = json.loads(path.read_text(encoding="utf-8"))["own_request"]
        return cls(own["follow_up"], "", "", own["follow_up"], own["edit"]["append"])

    @staticmethod
    def is_default(messages: list[dict]) -> bool:
        """Whether `messages` are the bundled default request's (the one the clinical script was written for)."""
        from walkthrough.inspect.locate import DEFAULT_REQUEST
        from walkthrough.inspect.template import load_messages

        return DEFAULT_REQUEST.is_file() and messages == load_messages(DEFAULT_REQUEST)

    def describe(self) -> str:
        """What the three later calls send, in one line."""
        edit = (f"your last question with {self.append!r} added" if not self.find
                else f"{self.find!r} changed to {self.replace!r}")
        return (f"follow-up {self.follow_up!r}; edit: {edit}; new chat: the system prompt with "
                f"{self.new_conversation[:40]!r}{'…' if len(self.new_conversation) > 40 else ''}")

    def edited(self, messages: list[dict]) -> list[dict]:
        """`messages` with the last user message edited (`find` -> `replace`; else its last line replaced by
        the follow-up, so any request gets a real edit)."""
        out = [dict(m) for m in messages]
        last = max((i for i, m in enumerate(out) if m.get("role") == "user"), default=None)
        if last is None:
            return out + [{"role": "user", "content": self.follow_up}]
        text = str(out[last].get("content", ""))
        if not self.find:
            out[last]["content"] = text + self.append
        elif self.find in text:
            out[last]["content"] = text.replace(self.find, self.replace, 1)
        else:
            out[last]["content"] = "\n".join([*text.split("\n")[:-1], self.follow_up])
        return out

    def fresh(self, messages: list[dict]) -> list[dict]:
        """A new conversation: the system messages of `messages`, then the new user message."""
        return [*(dict(m) for m in messages if m.get("role") == "system"),
                {"role": "user", "content": self.new_conversation}]

    def requests(self, talk: Conversation, messages: list[dict]) -> Iterator[tuple[str, list[dict]]]:
        """The four calls as (label, messages); the follow-up needs the first call's answer, so consume each
        request's passes (`talk.ask`) before asking for the next."""
        yield "request", messages
        yield "follow-up", talk.follow_up(self.follow_up)
        yield "edit", self.edited(messages)
        yield "new chat", self.fresh(messages)


@dataclass(frozen=True)
class Summary:
    """What a sequence of turns added up to."""

    turns: int
    prompt_tokens: int
    reused: int
    computed: int
    flops: int
    flops_without_reuse: int | None  # None unless every turn was also measured without reuse
    seconds: float  # time to first token, summed
    seconds_without_reuse: float | None

    def to_json(self) -> dict[str, Any]:
        return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in self.__dict__.items()}


def summarize(turns: list[Turn]) -> Summary:
    measured = all(t.fresh is not None for t in turns)
    return Summary(
        len(turns), sum(len(t.chat.ids) for t in turns), sum(t.reuse.reused for t in turns),
        sum(t.cost.computed for t in turns), sum(t.cost.flops for t in turns),
        sum(t.fresh.flops for t in turns) if measured else None, sum(t.cost.seconds for t in turns),
        sum(t.fresh.seconds for t in turns) if measured else None,
    )
