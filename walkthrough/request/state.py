"""The request the app follows: the opened file, its card, the messages, tokens, and the passes run so far.

A plain record (no Textual) with one writer: the app's UI thread. Workers build
values (`walkthrough.request.parts`, the run service `walkthrough.request.run`)
and post them in messages; the app's handlers assign them here. Every stage's
results live here, never on a screen: the stage's run (`steps`), the Speculate
stage's run (`speculation`), the four calls (`calls`). Every assignment of a public
field is reported to a listener (the app), which checks it happens on the UI
thread and redraws the screens once per batch of changes: no field can change
without the screens hearing of it. Collections are replaced, never changed in
place (`steps` is a tuple, `unavailable` a fresh dict), so every change is an
assignment.

Each part that cannot be built for a file (an architecture the engine cannot
run, a file without a vocabulary) is recorded in `unavailable` with a one-line
reason, so the stage can say so instead of failing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from walkthrough.engine.knobs import DEFAULT_DRAFT_MAX, MAX_NEW_TOKENS
from walkthrough.errors import WalkthroughError
from walkthrough.inspect.locate import DEFAULT_REQUEST
from walkthrough.request.parts import RUN_NEEDS, OpenedFile, Part, Rendered

if TYPE_CHECKING:
    from walkthrough.costs.estimate import Estimate
    from walkthrough.costs.hardware import Profile
    from walkthrough.costs.measured import Measured
    from walkthrough.engine.attention_map import AttentionMap
    from walkthrough.engine.protocol import Engine
    from walkthrough.engine.query_key import QueryKeys
    from walkthrough.engine.sampler import SampleResult, SamplerSettings
    from walkthrough.engine.serving.coldstart import StartTimes
    from walkthrough.engine.serving.turns import Summary, Turn
    from walkthrough.engine.steps import Step
    from walkthrough.inspect.card import ModelCard
    from walkthrough.inspect.chat import ChatTokens
    from walkthrough.inspect.gguf import GGUFFile
    from walkthrough.inspect.projector import Media, MediaTokens, Projector
    from walkthrough.inspect.tokenizer import GGUFTokenizer

PREFILL_CHUNK = 64  # prompt tokens per prefill pass


@dataclass(frozen=True)
class FirstToken:
    """How a run reached its first token: prompt tokens, how many came from the cache, the passes' time."""

    prompt: int
    reused: int
    seconds: float  # the prompt passes' wall time (Step.seconds summed)
    cold: bool  # the first run on a model just made (its weights dequantized on first use)
    engine: str = ""  # the engine that ran the passes ("numpy", "llama.cpp")


@dataclass(frozen=True)
class Speculation:
    """The Speculate stage's run of the request: its knobs, the passes it ran, where it stands.

    A new one (the next `run_id`) replaces it whenever the request, its model or its knobs change.
    """

    run_id: int = 0
    drafter: str = "lookup"  # "lookup", "mtp" or "draft" (with --draft)
    k: int = DEFAULT_DRAFT_MAX  # drafts per round, at most
    prefill: Step | None = None  # the prompt's last pass (it chose the first token)
    rounds: tuple[Step, ...] = ()  # verification passes, in order
    finished: bool = False
    error: str | None = None
    busy: bool = False  # a round is in flight
    playing: bool = False  # rounds one after another
    started_for: tuple | None = None  # the (model, prompt, knobs) it runs on: another one starts it again

    @property
    def shown(self) -> int:
        """Steps of this run held here (the prefill's last pass and the rounds)."""
        return (self.prefill is not None) + len(self.rounds)

    def answer(self) -> list[int]:
        """Tokens written so far: the prefill's choice, then each round's."""
        first = [] if self.prefill is None else [self.prefill.chosen]
        return first + [t for step in self.rounds for t in step.generated]


@dataclass(frozen=True)
class Calls:
    """The four calls (over the Chat stage): each call's turn, their sums, the cold and warm starts."""

    play: int = 0  # which play of the calls this is (r plays them again)
    turns: tuple[Turn, ...] = ()
    summary: Summary | None = None
    starts: tuple[StartTimes, StartTimes, StartTimes] | None = None  # cold, warm, warm with the KV cache kept
    prompt_tokens: int = 0  # of the first request, whose first token the starts measure
    status: str = "starting"  # what is being done, or why it stopped
    model: Engine | None = None  # the calls' own model, kept for the warm starts


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
    """Everything the stages show for one request (written on the UI thread only)."""

    spec: str | None
    messages: list[dict[str, str]]  # replaced as a whole on every edit
    seed: int = 0
    temperature: float = 0.0  # the run starts greedy unless asked otherwise
    hardware: str | None = None
    chunk: int = PREFILL_CHUNK
    max_new_tokens: int = MAX_NEW_TOKENS
    draft: Path | None = None  # --draft: a draft model for the Speculate stage
    beside: str | None = None  # --beside: a second file for the Costs stage's held-vs-read view (None: the tiny model)
    mmproj: Path | None = None  # --mmproj: the model's multimodal projector, whose image tokens join the prompt
    media: Media | None = None  # the images or video the user adds (File stage, i; --images)
    template_file: Path | None = None  # --template: a Jinja file used instead of the model's templates
    template_name: str | None = None  # which of the file's chat templates (None: the default one)
    _before_plain: str | None = None  # the template chosen before plain text was (`toggle_plain`)
    # Parts, as the loader builds them.
    loaded: frozenset[Part] = frozenset()
    unavailable: dict[str, str] = field(default_factory=dict)  # part -> why it cannot be shown
    path: Path | None = None
    file: GGUFFile | None = None
    card: ModelCard | None = None
    tokenizer: GGUFTokenizer | None = None
    template_names: tuple[str, ...] = ()  # the file's templates, "default" first
    template_source: str | None = None
    rendered: str | None = None  # the chat template's output for `messages`
    chat: ChatTokens | None = None  # rendered text, tokens (with their message), regions
    engine: str = "numpy"  # which engine runs the passes: "numpy" or "llama.cpp" (walkthrough.engine.engines)
    max_memory: int | None = None  # --max-memory: the numpy engine's weight budget (None: a share of free memory)
    exact_products: bool = False  # --exact-products: the numpy engine multiplies as ggml's CPU kernels do
    model: Engine | None = None  # the engine's model (Model or LlamaModel), once it accepts the file
    settings: SamplerSettings | None = None  # the knobs for the passes still to run
    # The run.
    run_id: int = 0
    steps: tuple[Step, ...] = ()  # Step records of the current run, in order
    finished: bool = False
    progress: tuple[int, int] | None = None  # (layers done, layers) of the pass in flight, None when idle
    unloads: int = 0  # times the engine's model and cache were dropped (u): the next run starts cold
    runs_on_model: int = 0  # runs that reached their first token on the current model
    first_tokens: tuple[FirstToken, ...] = ()  # every run's first token so far, oldest first
    speculation: Speculation = field(default_factory=Speculation)  # the Speculate stage's run
    calls: Calls | None = None  # the four calls, once played
    profile_index: int = 0
    _profiles: list[Profile] | None = None
    _beside_card: tuple[str, ModelCard, list] | None = None
    _projector: Projector | None = None
    _listener: Callable[[str], None] | None = None

    def __setattr__(self, name: str, value: Any) -> None:
        listener = self.__dict__.get("_listener")
        if listener is not None and not name.startswith("_"):
            listener(name)  # may refuse (raise) before anything changes: a write from the wrong thread
        object.__setattr__(self, name, value)

    def listen(self, listener: Callable[[str], None] | None) -> None:
        """Call `listener(field name)` on every assignment of a public field, just before it (the app redraws from it)."""
        self._listener = listener

    # ---- storing what the workers built (UI thread) ----------------------------------
    def store(self, part: Part, value: Any) -> None:
        """Keep a part the loader built, and mark it loaded."""
        if part is Part.FILE:
            opened: OpenedFile = value
            self.path, self.file, self.card = opened.path, opened.file, opened.card
        elif part is Part.TOKENIZER:
            self.tokenizer = value
        elif part is Part.TEMPLATE:
            rendered: Rendered = value
            self.template_names, self.template_source, self.rendered = rendered.names, rendered.source, rendered.text
        elif part is Part.TOKENS:
            self.chat = value
            self.rendered = value.text
        elif part is Part.ENGINE:
            self.model = value
            self.runs_on_model = 0  # a model just made: its first run dequantizes every weight it uses
            if self.settings is None:
                from walkthrough.engine.sampler import SamplerSettings

                self.settings = SamplerSettings(temperature=self.temperature, seed=self.seed)
        self.unavailable = {k: v for k, v in self.unavailable.items() if k != part}
        self.loaded = self.loaded | {part}

    def mark_unavailable(self, part: Part, reason: str) -> None:
        """A part cannot be built: keep why (and drop what an earlier build left of it)."""
        if part is Part.TEMPLATE:
            self.template_source = self.rendered = None
        elif part is Part.TOKENS:
            self.chat = None
        self.unavailable = {**self.unavailable, part: reason}
        self.loaded = self.loaded - {part}

    @property
    def engine_ready(self) -> bool:
        return self.model is not None

    @property
    def prompt_ids(self) -> list[int]:
        return list(self.chat.ids) if self.chat is not None else []

    # ---- the run -------------------------------------------------------------------
    @property
    def can_run(self) -> bool:
        return self.engine_ready and bool(self.prompt_ids) and self.context_problem is None

    @property
    def context_problem(self) -> str | None:
        """Why the prompt and an answer of up to `max_new_tokens` do not fit the model's context, or None."""
        from walkthrough.engine.context_fit import fit_error

        if self.card is None or not self.prompt_ids:
            return None
        return fit_error(self.card.context_length, len(self.prompt_ids), self.max_new_tokens, "--max-tokens",
                         "shorten the messages (Chat stage: e edits, d deletes)")

    def run_blocker(self) -> str | None:
        """Why the request cannot run (the first missing part's reason, or a prompt too long), or None."""
        for part in RUN_NEEDS:
            if part in self.unavailable:
                return f"{part}: {self.unavailable[part]}"
        if self.context_problem is not None:
            return self.context_problem
        if not self.can_run:
            return "still preparing the model and the prompt"
        return None

    @property
    def has_other_template(self) -> bool:
        """The file has a chat template other than the one in use (and no --template file overrides them)."""
        names = self.template_names
        return self.template_file is None and bool(names) and names != (self.current_template,)

    def next_template(self) -> bool:
        """Choose the file's next chat template (in `template_names` order, cycling); False when there is no other.

        The prompt must be rebuilt after (the app's `rebuild_prompt`).
        """
        names, current = self.template_names, self.current_template
        if not self.has_other_template:
            return False
        self.template_name = names[(names.index(current) + 1) % len(names)] if current in names else names[0]
        return True

    @property
    def current_template(self) -> str:
        """The name of the template choice in use (`template_name`, else the first of `template_names`)."""
        return self.template_name or (self.template_names[0] if self.template_names else "")

    @property
    def plain(self) -> bool:
        """Whether the prompt is the messages' plain text (no template)."""
        from walkthrough.inspect.template import PLAIN

        return self.template_file is None and self.current_template == PLAIN

    def toggle_plain(self) -> bool:
        """Switch between plain text and the template (the one used before, else the first there is);
        False when there is nothing to switch to (a --template file is fixed). Rebuild the prompt after."""
        from walkthrough.inspect.template import PLAIN

        if self.template_file is not None:
            return False
        if not self.plain:
            self._before_plain = self.template_name
            self.template_name = PLAIN
            return True
        others = [n for n in self.template_names if n != PLAIN]
        back = self._before_plain if self._before_plain not in (None, PLAIN) else None
        if back is None and not others:
            return False
        self.template_name = back or (None if self.template_names[0] != PLAIN else others[0])
        return True

    # ---- reading the run --------------------------------------------------------------
    @property
    def last_step(self) -> Step | None:
        return self.steps[-1] if self.steps else None

    @property
    def prefill_steps(self) -> list[Step]:
        return [s for s in self.steps if s.phase == "prefill"]

    @property
    def decode_steps(self) -> list[Step]:
        return [s for s in self.steps if s.phase == "decode"]

    @property
    def prefill_done(self) -> bool:
        return bool(self.steps) and self.steps[-1].end >= len(self.prompt_ids) and bool(self.prompt_ids)

    @property
    def capped(self) -> bool:
        """The run stopped because it picked as many tokens as the cap allows (not at an end-of-turn token)."""
        return bool(self.steps) and self.steps[-1].capped

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

    def preview_sample(self, step: Step | None) -> SampleResult | None:
        """The step's sampling stages under the current knobs (what-if): same logits, same draw unless the seed moved."""
        from walkthrough.engine.sampler import Sampler, sample_stages

        if step is None or step.sample is None or self.settings is None:
            return None
        if self.settings == step.sample.settings:
            return step.sample
        if self.settings.seed != step.sample.settings.seed:
            return sample_stages(step.logits, self.settings, float(Sampler(self.settings).rng.random()))
        return step.sample.resample(self.settings)

    def profiles(self) -> list[Profile]:
        """Hardware profiles (bundled and the user's), the one named by --hardware first."""
        from walkthrough.costs.hardware import load_profiles

        if self._profiles is None:
            found = list(load_profiles().values())
            first = [p for p in found if p.id == self.hardware]
            self._profiles = first + [p for p in found if p.id != self.hardware]
        return self._profiles

    def beside_card(self) -> tuple[str, ModelCard, list] | None:
        """The file shown beside this one in the held-vs-read view, (name, card, tensor infos): --beside, else
        the bundled tiny model; None when that is the file opened. Its header is read once, on first use.

        Raises:
            WalkthroughError: the --beside file cannot be opened or described.
        """
        from walkthrough.inspect.locate import BUNDLED_MODEL
        from walkthrough.request.parts import open_file

        if self.beside is None and self.path is not None and self.path.resolve() == BUNDLED_MODEL.resolve():
            return None
        if self._beside_card is None:
            opened = open_file(self.beside if self.beside is not None else str(BUNDLED_MODEL))
            self._beside_card = (opened.card.name or opened.path.name, opened.card, list(opened.file.tensors.values()))
        return self._beside_card

    @property
    def profile(self) -> Profile | None:
        profiles = self.profiles()
        return profiles[self.profile_index % len(profiles)] if profiles else None

    def estimate(self) -> Estimate:
        """This request (its prompt and answer budget) on the chosen machine: a `walkthrough.costs.estimate.Estimate`.

        Raises:
            WalkthroughError: the hardware profiles cannot be read (a broken user hardware file).
        """
        from walkthrough.costs.estimate import estimate

        prompt = self.prompt_with_media()
        return estimate(self.card, self.profile, prompt + self.max_new_tokens, prompt, self.max_new_tokens)

    def projector(self) -> Projector | None:
        """The --mmproj file's projector (read once), None without one.

        Raises:
            WalkthroughError: the file cannot be opened, is not a projector, or its `clip.*` keys are unusable.
        """
        if self.mmproj is None:
            return None
        if self._projector is None:
            from walkthrough.inspect.projector import open_projector

            self._projector = open_projector(self.mmproj)
        return self._projector

    def media_tokens(self) -> MediaTokens | None:
        """The prompt tokens the user's images or video become with the projector; None without either.

        Raises:
            WalkthroughError: as `projector`, or the projector's type is not modelled.
        """
        projector = self.projector()
        if projector is None or self.media is None or self.media.count == 0:
            return None
        from walkthrough.inspect.projector import media_tokens

        return media_tokens(projector, self.media)

    def prompt_with_media(self) -> int:
        """The prompt's tokens plus the media's (at least 1); the media count 0 when they cannot be counted."""
        try:
            media = self.media_tokens()
        except WalkthroughError:
            media = None
        return max(len(self.prompt_ids), 1) + (media.tokens if media is not None else 0)

    def attention_rows_blocker(self) -> str | None:
        """Why this run does not record every attention row (too many bytes for the request's length), or None."""
        from walkthrough.engine.attention_map import ROWS_BUDGET, rows_bytes

        positions = len(self.prompt_ids) + self.max_new_tokens
        need = rows_bytes(self.model.config, positions, self.chunk)
        if need <= ROWS_BUDGET:
            return None
        return (f"every attention row of {positions} positions would take {need / 1e6:,.0f} MB "
                f"(more than {ROWS_BUDGET / 1e6:,.0f} MB); shorten the request to see the matrix")

    def attention_map(self) -> AttentionMap:
        """The causal attention matrices of the passes run so far (`engine.attention_map`)."""
        from walkthrough.engine.attention_map import AttentionMap

        return AttentionMap.from_steps(self.steps, self.model.config)

    def query_keys(self) -> QueryKeys:
        """The queries and keys the passes run so far recorded, for the dot-product arrows (`engine.query_key`)."""
        from walkthrough.engine.query_key import QueryKeys

        return QueryKeys.from_steps(self.steps)

    def memory_lines(self) -> tuple[str, str | None]:
        """What the chosen engine will hold for this request beside the free memory, and a warning when it
        will not fit (`engine.memory`); the engine's real budget once it is made."""
        from walkthrough.costs.memory import report

        weights = getattr(self.model, "weights", None)  # the numpy engine's cache, once the model is made
        budget = weights.max_cache_bytes if weights is not None else self.max_memory
        positions = max(len(self.prompt_ids), 1) + self.max_new_tokens
        return report(self.file, self.card, self.engine, positions, self.chunk, budget, len(self.prompt_ids))

    def engine_advice(self) -> str | None:
        """Why to run this file on llama.cpp instead (a large file on numpy, llama.cpp installed), else None."""
        from walkthrough.engine.engines import advice

        return None if self.card is None else advice(self.card, self.engine)

    def measured(self) -> Measured | None:
        """What this run's passes measured so far, on the engine that ran them (`engine.measured.Measured`), None
        before the first token."""
        from walkthrough.costs.measured import measure

        return measure(self.steps)

    def piece(self, token_id: int) -> str:
        """A token's display text (its id in angle brackets when there is no tokenizer)."""
        return self.tokenizer.piece(token_id) if self.tokenizer is not None else f"<{token_id}>"
