"""The request the app follows: the opened file, its card, the messages, tokens, and the passes run so far.

A plain object (no Textual): the app's workers fill it in through `open_file`,
the `builders()` and `run_pass`, then post a message; screens read it and never
compute model math. Each part that cannot be built for a file (an architecture
the engine cannot run, a file without a vocabulary) is recorded in
`unavailable` with a one-line reason, so the stage can say so instead of failing.

The run: `start_run()` makes a fresh engine session; `run_pass()` runs the next
pass (a prefill chunk, then one decoded token at a time) and returns its `Step`,
or None once the answer is finished. Passes are serialised by a lock, so a
restart never races a pass still running in a worker thread.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from walkthrough.errors import WalkthroughError
from walkthrough.inspect.locate import DEFAULT_REQUEST, model_path

PREFILL_CHUNK = 64  # prompt tokens per prefill pass
MAX_NEW_TOKENS = 120  # decode passes before the app stops the answer


def load_messages(path: str | Path | None) -> list[dict[str, str]]:
    """Chat messages from a JSON file; with no path, the default request in `assets/` (if present).

    Raises:
        WalkthroughError: the file is unreadable or not a list of role/content objects.
    """
    from walkthrough.inspect.template import load_messages as read_messages

    if path is None:
        if not DEFAULT_REQUEST.is_file():
            return []
        path = DEFAULT_REQUEST
    return read_messages(path)


@dataclass
class RequestState:
    """Everything the stages show for one request."""

    spec: str | None
    messages: list[dict[str, str]]
    seed: int = 0
    temperature: float = 0.0  # the run starts greedy unless asked otherwise
    hardware: str | None = None
    chunk: int = PREFILL_CHUNK
    max_new_tokens: int = MAX_NEW_TOKENS
    path: Path | None = None
    file: Any = None  # walkthrough.inspect.gguf.GGUFFile
    card: Any = None  # walkthrough.inspect.card.ModelCard
    unavailable: dict[str, str] = field(default_factory=dict)  # part -> why it cannot be shown
    tokenizer: Any = None  # walkthrough.inspect.tokenizer.GGUFTokenizer
    template_name: str | None = None  # which of the file's chat templates (None: the default one)
    template_names: list[str] = field(default_factory=list)  # the file's templates, "default" first
    template_source: str | None = None
    rendered: str | None = None  # the chat template's output for `messages`
    chat: Any = None  # walkthrough.inspect.chat.ChatTokens: rendered text, tokens (with their message), regions
    prompt_ids: list[int] = field(default_factory=list)
    engine: str = "numpy"  # which engine runs the passes: "numpy" or "llama.cpp" (walkthrough.engine.engines)
    engine_ready: bool = False
    model: Any = None  # the engine's model (engine.model.Model or engine.llama_model.LlamaModel), once it accepts the file
    settings: Any = None  # walkthrough.engine.sampler.SamplerSettings
    session: Any = None  # walkthrough.engine.session.Session of the current run
    sampler: Any = None
    steps: list[Any] = field(default_factory=list)  # Step records of the current run, in order
    finished: bool = False
    run_id: int = 0
    profile_index: int = 0
    _profiles: list[Any] | None = None
    _passes: Iterator[Any] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # ---- building the parts -------------------------------------------------------
    def open_file(self) -> None:
        """Resolve, open and describe the model file (header only; cheap even for large files)."""
        from walkthrough.inspect.card import build_card
        from walkthrough.inspect.gguf import open_gguf

        self.path = model_path(self.spec)
        self.file = open_gguf(self.path)
        self.card = build_card(self.file)

    def builders(self) -> list[tuple[str, Callable[[], None]]]:
        """The later parts to build after the file, in order, each raising WalkthroughError if it cannot."""
        return [
            ("tokenizer", self.build_tokenizer),
            ("template", self.render_template),
            ("tokens", self.build_tokens),
            ("engine", self.prepare_engine),
        ]

    def build_tokenizer(self) -> None:
        from walkthrough.inspect.tokenizer import GGUFTokenizer

        self.tokenizer = GGUFTokenizer.from_gguf(self.file)

    def _special_text(self, token_id: int | None) -> str:
        return "" if token_id is None or self.tokenizer is None else self.tokenizer.text_of(token_id)

    def render_template(self) -> None:
        """Render the file's chat template for the messages (needs the tokenizer for BOS/EOS texts)."""
        from walkthrough.inspect.template import chat_templates, render, select_template

        self.rendered = None
        self.template_names = list(chat_templates(self.file))
        self.template_source = select_template(self.file, self.template_name, where=self.path.name)
        self.rendered = render(
            self.template_source,
            self.messages,
            bos_token=self._special_text(getattr(self.tokenizer, "bos_id", None)),
            eos_token=self._special_text(getattr(self.tokenizer, "eos_id", None)),
            origin=f"chat template of {self.path.name}",
        )

    def build_tokens(self) -> None:
        """Tokens of the rendered prompt, each knowing the message it came from (message text never special)."""
        from walkthrough.inspect.chat import chat_tokens

        self.chat, self.prompt_ids = None, []
        if self.tokenizer is None:
            raise WalkthroughError(self.unavailable.get("tokenizer", "the file has no usable tokenizer"))
        if self.template_source is None:
            raise WalkthroughError(self.unavailable.get("template", "the file has no chat template"))
        self.chat = chat_tokens(self.tokenizer, self.template_source, self.messages,
                                origin=f"chat template of {self.path.name}")
        self.rendered = self.chat.text
        self.prompt_ids = self.chat.ids

    def prepare_engine(self) -> None:
        """Prepare the engine's model for this file (header only); the engine's WalkthroughError says why it cannot."""
        from walkthrough.engine.engines import load_model
        from walkthrough.engine.sampler import SamplerSettings

        self.model = load_model(self.engine, self.file, self.card)
        if self.settings is None:
            self.settings = SamplerSettings(temperature=self.temperature, seed=self.seed)
        self.engine_ready = True

    def next_template(self) -> bool:
        """Choose the file's next chat template (in `template_names` order, cycling); False when there is no other.

        The prompt must be rebuilt after (`rebuild_prompt`).
        """
        from walkthrough.inspect.template import DEFAULT_NAME

        names, current = self.template_names, self.template_name or DEFAULT_NAME
        if not names or names == [current]:
            return False
        self.template_name = names[(names.index(current) + 1) % len(names)] if current in names else names[0]
        return True

    def rebuild_prompt(self) -> None:
        """After the messages changed: render, tokenize and restart the run."""
        for part in ("template", "tokens"):
            self.unavailable.pop(part, None)
        for part, build in (("template", self.render_template), ("tokens", self.build_tokens)):
            try:
                build()
            except WalkthroughError as exc:
                self.unavailable[part] = str(exc)
        self.start_run()

    # ---- running --------------------------------------------------------------------
    @property
    def can_run(self) -> bool:
        return self.engine_ready and bool(self.prompt_ids)

    def run_blocker(self) -> str | None:
        """Why the request cannot run (the first missing part's reason), or None."""
        for part in ("tokenizer", "template", "tokens", "engine"):
            if part in self.unavailable:
                return f"{part}: {self.unavailable[part]}"
        if not self.can_run:
            return "still preparing the model and the prompt"
        return None

    def start_run(self) -> None:
        """A fresh session and sampler: the request from its first token (nothing runs yet)."""
        from walkthrough.engine.engines import new_session
        from walkthrough.engine.sampler import Sampler

        with self._lock:
            self.run_id += 1
            self.steps = []
            self.finished = False
            self.session = self._passes = None
            if not self.can_run:
                return
            self.session = new_session(self.model, record_attention=True, measure_surprisal=True,
                                       attention_rows=self.attention_rows_blocker() is None,
                                       n_ctx=len(self.prompt_ids) + self.max_new_tokens)
            self.sampler = Sampler(self.settings)
            self._passes = itertools.chain(
                self.session.prefill(self.prompt_ids, chunk=self.chunk, sampler=self.sampler),
                self.session.decode(self.sampler, self.max_new_tokens),
            )

    def attention_rows_blocker(self) -> str | None:
        """Why this run does not record every attention row (too many bytes for the request's length), or None."""
        from walkthrough.engine.attention_map import ROWS_BUDGET, rows_bytes

        positions = len(self.prompt_ids) + self.max_new_tokens
        need = rows_bytes(self.model.config, positions)
        if need <= ROWS_BUDGET:
            return None
        return (f"every attention row of {positions} positions would take {need / 1e6:,.0f} MB "
                f"(more than {ROWS_BUDGET / 1e6:,.0f} MB); shorten the request to see the matrix")

    def attention_map(self) -> Any:
        """The causal attention matrices of the passes run so far (`engine.attention_map`)."""
        from walkthrough.engine.attention_map import AttentionMap

        return AttentionMap.from_steps(self.steps, self.model.config)

    def run_pass(self) -> tuple[int, Any]:
        """Run the next pass: (run id, Step), or (run id, None) when the request is finished."""
        with self._lock:
            if self._passes is None:
                return self.run_id, None
            return self.run_id, next(self._passes, None)

    def set_settings(self, settings: Any) -> None:
        """New sampler knobs: they apply to the passes still to run; a new seed restarts the draws."""
        from walkthrough.engine.sampler import Sampler

        reseed = self.settings is None or settings.seed != self.settings.seed
        self.settings = settings
        if self.sampler is not None:
            if reseed:
                self.sampler.rng = Sampler(settings).rng
            self.sampler.settings = settings

    # ---- reading the run --------------------------------------------------------------
    @property
    def last_step(self) -> Any:
        return self.steps[-1] if self.steps else None

    @property
    def prefill_steps(self) -> list[Any]:
        return [s for s in self.steps if s.phase == "prefill"]

    @property
    def decode_steps(self) -> list[Any]:
        return [s for s in self.steps if s.phase == "decode"]

    @property
    def prefill_done(self) -> bool:
        return bool(self.steps) and self.steps[-1].end >= len(self.prompt_ids) and bool(self.prompt_ids)

    def answer_ids(self) -> list[int]:
        """Tokens generated so far (each pass's chosen token), in order."""
        return [s.chosen for s in self.steps if s.chosen is not None]

    def session_tokens(self, n: int) -> list[int]:
        """The first n token ids fed in this run (prompt, then the answer), by position."""
        return (self.prompt_ids + self.answer_ids())[:n]

    def cumulative_bytes(self) -> dict[str, int]:
        """Bytes read per group (and "total") over every pass of the run so far."""
        from walkthrough.engine.steps import totals

        return totals(self.steps).bytes_read

    def preview_sample(self, step: Any) -> Any:
        """The step's sampling stages under the current knobs (what-if): same logits, same draw unless the seed moved."""
        from walkthrough.engine.sampler import Sampler, sample_stages

        if step is None or step.sample is None or self.settings is None:
            return None
        if self.settings == step.sample.settings:
            return step.sample
        if self.settings.seed != step.sample.settings.seed:
            return sample_stages(step.logits, self.settings, float(Sampler(self.settings).rng.random()))
        return step.sample.resample(self.settings)

    def profiles(self) -> list[Any]:
        """Hardware profiles (bundled and the user's), the one named by --hardware first."""
        from walkthrough.engine.hardware import load_profiles

        if self._profiles is None:
            found = list(load_profiles().values())
            first = [p for p in found if p.id == self.hardware]
            self._profiles = first + [p for p in found if p.id != self.hardware]
        return self._profiles

    @property
    def profile(self) -> Any:
        profiles = self.profiles()
        return profiles[self.profile_index % len(profiles)] if profiles else None

    def estimate(self) -> Any:
        """This request (its prompt and answer budget) on the chosen machine: a `walkthrough.engine.costs.Estimate`.

        Raises:
            WalkthroughError: the hardware profiles cannot be read (a broken user hardware file).
        """
        from walkthrough.engine.costs import estimate

        prompt = max(len(self.prompt_ids), 1)
        return estimate(self.card, self.profile, prompt + self.max_new_tokens, prompt, self.max_new_tokens)

    def engine_advice(self) -> str | None:
        """Why to run this file on llama.cpp instead (a large file on numpy, llama.cpp installed), else None."""
        from walkthrough.engine.engines import advice

        return None if self.card is None else advice(self.card, self.engine)

    def measured(self) -> Any:
        """What this run's passes measured so far (`engine.measured.Measured`), None before the first token."""
        from walkthrough.engine.measured import measure

        return measure(self.steps, self.engine)

    def piece(self, token_id: int) -> str:
        """A token's display text (its id in angle brackets when there is no tokenizer)."""
        return self.tokenizer.piece(token_id) if self.tokenizer is not None else f"<{token_id}>"

    def close(self) -> None:
        """Release the file's mapping, after any pass still running in a worker thread has ended."""
        with self._lock:
            self._passes = None
            if self.file is not None:
                self.file.close()
