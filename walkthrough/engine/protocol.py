"""What every engine provides, declared: `Engine` (a loaded model) and `Session` (its run state), as
Protocols.

The numpy engine (`engine.model.Model`, `engine.session.Session`) and the
llama.cpp engine (`engine.llama_model.LlamaModel`, `engine.llama_session.LlamaSession`)
both implement them (tests/test_engine_protocol.py checks it, member by member
and parameter by parameter), so the stages, `trace`, the four calls and the
serving features type their model and session by these and run on either:

    model: Engine = load_model("numpy", f, card)
    session: Session = new_session(model, record_attention=True)
    for step in session.generate(ids, Sampler(settings), max_tokens=20): ...

What is engine-specific stays out: the numpy engine's weights, meter and KV
cache object; llama.cpp's context, batch and library handle. A caller that
needs one of those names the concrete class.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    import numpy as np

    from walkthrough.engine.checkpoints import Checkpoint, Reuse
    from walkthrough.engine.glassbox.session import Progress
    from walkthrough.engine.sampler import Sampler, SampleResult
    from walkthrough.engine.steps import Step
    from walkthrough.inspect.card import ModelCard
    from walkthrough.inspect.gguf import GGUFFile


@runtime_checkable
class ModelLayout(Protocol):
    """What a session and the stages read of a model's layers and vocabulary (numpy: `Config`)."""

    @property
    def arch(self) -> str: ...
    @property
    def n_layers(self) -> int: ...
    @property
    def n_vocab(self) -> int: ...
    @property
    def n_experts(self) -> int: ...
    @property
    def n_head(self) -> int: ...  # query heads
    @property
    def n_head_kv(self) -> tuple[int, ...]: ...  # per layer
    @property
    def mixers(self) -> tuple[str, ...]: ...  # per layer: "full", "sliding", "linear", ...
    @property
    def ffns(self) -> tuple[str, ...]: ...  # per layer: "dense", "moe" or "none"
    @property
    def end_ids(self) -> frozenset[int]: ...  # the ids that end a generation


@runtime_checkable
class Engine(Protocol):
    """A file prepared by one engine to run; it holds no per-request state (that is the
    session's)."""

    @property
    # the engine's name (`engines.ENGINES`), carried by every Step it runs
    def engine(self) -> str: ...
    @property
    def file(self) -> GGUFFile: ...
    @property
    def card(self) -> ModelCard: ...
    @property
    def config(self) -> ModelLayout: ...

    def check_ids(self, ids: list[int]) -> None:
        """Raise WalkthroughError for an id outside the vocabulary."""


@runtime_checkable
class Session(Protocol):
    """The run state of a conversation on one engine: the tokens held, the last logits, the pending
    token, and the passes that extend it, one `Step` per pass (see `engine.session.Session` for each
    one's rules)."""

    @property
    def model(self) -> Engine: ...
    tokens: list[int]  # every token fed so far, in order
    last_logits: np.ndarray | None  # [n_vocab] of the last pass's last position
    pending: int | None  # chosen, not yet fed
    attention_rows: bool  # every row of the attention weights is kept
    record_attention: bool  # the last token's attention weights are kept

    @property
    def position(self) -> int:
        """Positions processed so far (the KV cache length)."""

    @property
    def recurrent(self) -> bool:
        """Some layer keeps a fixed state that cannot be truncated (hybrid models)."""

    def checkpoint(self, *, keep: bool = True) -> Checkpoint:
        """Save the state at the current position (WalkthroughError where the engine keeps none)."""

    def restore(self, saved: Checkpoint) -> None:
        """Go back exactly to `saved`."""

    def rewind(self, position: int) -> int:
        """Forget every position from `position` on; returns the position reached (can be
        smaller)."""

    def recover(self) -> int:
        """After a pass was abandoned midway, make the session consistent again; returns the
        position."""

    def reuse_prefix(self, ids: list[int]) -> Reuse:
        """Keep what the session holds of a new prompt and rewind to there; what was kept and
        why."""

    def feed(self, ids: list[int], *, phase: str, sampler: Sampler | None = None,
             all_logits: bool = False, progress: Progress | None = None) -> Step:
        """One pass over `ids` at the next positions; sample from its last logits if a sampler is
        given."""

    def choose(self, sampler: Sampler) -> SampleResult:
        """Sample the next token from the last logits; the next decode pass feeds it."""

    def prefill(self, ids: Iterable[int], *, chunk: int | None = None,
                sampler: Sampler | None = None, all_logits: bool = False,
                checkpoint_at: Iterable[int] = (),
                progress: Progress | None = None) -> Iterator[Step]:
        """A prompt in passes of `chunk` tokens."""

    def request(self, ids: Iterable[int], *, chunk: int | None = None,
                sampler: Sampler | None = None, all_logits: bool = False, marks: Iterable[int] = (),
                progress: Progress | None = None) -> Iterator[Step]:
        """A new request's prompt: reuse what the session holds, prefill the rest."""

    def decode(self, sampler: Sampler, max_tokens: int, *, stop_ids: Iterable[int] | None = None,
               all_logits: bool = False, progress: Progress | None = None) -> Iterator[Step]:
        """One pass per token until a stop token or `max_tokens` passes."""

    def generate(self, ids: Iterable[int], sampler: Sampler, max_tokens: int, *,
                 chunk: int | None = None, all_logits: bool = False, marks: Iterable[int] = (),
                 progress: Progress | None = None) -> Iterator[Step]:
        """`request`, then `decode`, until an end-of-turn token or `max_tokens` picked."""
