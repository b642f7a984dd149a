"""The request the app follows: the opened file, its card, the messages, and later tokens and passes.

A plain object (no Textual): the app's workers fill it in through `open_file`
and friends, then post a message; screens read it and never compute model math.
Each part that cannot be built for a file (an architecture the engine cannot
run, a file without a vocabulary) is recorded in `unavailable` with a one-line
reason, so the stage can say so instead of failing.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from walkthrough.errors import WalkthroughError

ASSETS_DIR = Path(__file__).resolve().parents[2] / "assets"
DEFAULT_MODEL = ASSETS_DIR / "tiny-clinical-moe.gguf"
DEFAULT_REQUEST = ASSETS_DIR / "default_request.json"


def resolve_model(spec: str | None) -> Path:
    """The GGUF path for a model spec (a path, or None for the bundled tiny model).

    Raises:
        WalkthroughError: the file does not exist.
    """
    if spec is None:
        if not DEFAULT_MODEL.is_file():
            raise WalkthroughError(
                f"the bundled model {DEFAULT_MODEL} is missing; pass a .gguf file: walkthrough FILE"
            )
        return DEFAULT_MODEL
    try:
        from walkthrough.inspect.locate import locate  # resolves ollama:NAME, hf:..., split files
    except ImportError:
        locate = None
    if locate is not None:
        found = locate(spec)
        return Path(found[0] if isinstance(found, (list, tuple)) else found)
    path = Path(spec).expanduser()
    if not path.exists():
        raise WalkthroughError(f"{spec}: no such file; give the path of a .gguf model file")
    return path


def load_messages(path: str | Path | None) -> list[dict[str, str]]:
    """Chat messages from a JSON file (a list of {"role", "content"}, or {"messages": [...]}).

    With no path, the default request in `assets/` (an empty chat if it is not there yet).

    Raises:
        WalkthroughError: the file is unreadable or not a list of role/content objects.
    """
    if path is None:
        if not DEFAULT_REQUEST.is_file():
            return []
        path = DEFAULT_REQUEST
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise WalkthroughError(f"{path}: cannot read messages ({exc.strerror}); check the path") from exc
    except (ValueError, UnicodeDecodeError) as exc:
        raise WalkthroughError(f"{path}: not valid JSON ({exc}); expected a list of messages") from exc
    if isinstance(data, dict):
        data = data.get("messages")
    if not isinstance(data, list):
        raise WalkthroughError(f'{path}: expected a JSON list of {{"role", "content"}} objects')
    messages = []
    for i, m in enumerate(data):
        if not (isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)):
            raise WalkthroughError(f'{path}: message {i} needs string "role" and "content" fields')
        messages.append({"role": m["role"], "content": m["content"]})
    return messages


@dataclass
class RequestState:
    """Everything the stages show for one request."""

    spec: str | None
    messages: list[dict[str, str]]
    seed: int = 0
    hardware: str | None = None
    path: Path | None = None
    file: Any = None  # walkthrough.inspect.gguf.GGUFFile
    card: Any = None  # walkthrough.inspect.card.ModelCard
    unavailable: dict[str, str] = field(default_factory=dict)  # part -> why it cannot be shown
    engine_ready: bool = False
    model: Any = None  # walkthrough.engine.model.Model, once the engine accepts the file

    def open_file(self) -> None:
        """Resolve, open and describe the model file (header only; cheap even for large files)."""
        from walkthrough.inspect.card import build_card
        from walkthrough.inspect.gguf import open_gguf

        self.path = resolve_model(self.spec)
        self.file = open_gguf(self.path)
        self.card = build_card(self.file)

    def builders(self) -> list[tuple[str, Callable[[], None]]]:
        """The later parts to build after the file, in order, each raising WalkthroughError if it cannot."""
        return [("engine", self.prepare_engine)]

    def prepare_engine(self) -> None:
        """Prepare the engine's model for this file (header only), or say why it cannot run it."""
        from walkthrough.engine.model import Model

        if not self.file.tensors:
            raise WalkthroughError("the file holds no tensors (a vocabulary-only file), so there is nothing to run")
        self.model = Model(self.file, card=self.card)
        self.engine_ready = True

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
