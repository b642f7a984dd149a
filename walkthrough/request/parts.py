"""Building the parts of a request, as plain functions: inputs in, a value out (no shared state touched).

The app's loader worker calls them in `Part` order and posts each result in a
`PartReady` message; the UI thread stores it in the `RequestState`. A part that
cannot be built raises `WalkthroughError` with the one-line reason the stage
shows. Each function imports its heavy modules itself, so opening the app stays
quick.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

from walkthrough.errors import WalkthroughError

if TYPE_CHECKING:
    import threading

    from walkthrough.engine.protocol import Engine
    from walkthrough.inspect.card import ModelCard
    from walkthrough.inspect.chat import ChatTokens
    from walkthrough.inspect.gguf import GGUFFile
    from walkthrough.inspect.tokenizer import GGUFTokenizer


class Part(StrEnum):
    """The load steps, in the order they are built (a StrEnum: equal to its plain name, e.g. "tokens")."""

    FILE = "file"  # the header: GGUFFile and ModelCard
    TOKENIZER = "tokenizer"
    TEMPLATE = "template"  # the chat template rendered for the messages
    TOKENS = "tokens"  # the rendered prompt's tokens, each knowing its message
    ENGINE = "engine"  # the engine's model for the file (an `Engine`: numpy's Model or LlamaModel)
    RUN = "run"  # a run started (or restarted) from the first token


RUN_NEEDS = (Part.TOKENIZER, Part.TEMPLATE, Part.TOKENS, Part.ENGINE)  # parts a run needs, in order


@dataclass(frozen=True)
class OpenedFile:
    """The resolved path, the opened file, its card."""

    path: Path
    file: GGUFFile
    card: ModelCard


@dataclass(frozen=True)
class Rendered:
    """The file's chat templates, the one chosen, and what it rendered for the messages."""

    names: tuple[str, ...]  # the choices: the file's templates, "default" first (`template.template_choices`)
    source: str | None  # None: plain text, no template (the messages' text is the prompt)
    text: str


def open_file(spec: str | None) -> OpenedFile:
    """Resolve, open and describe the model file (header only; cheap even for large files)."""
    from walkthrough.inspect.card import build_card
    from walkthrough.inspect.gguf import open_gguf
    from walkthrough.inspect.locate import model_path

    path = model_path(spec)
    f = open_gguf(path)
    return OpenedFile(path, f, build_card(f))


def build_tokenizer(f: GGUFFile) -> GGUFTokenizer:
    from walkthrough.inspect.tokenizer import GGUFTokenizer

    return GGUFTokenizer.from_gguf(f)


def render_template(
    f: GGUFFile,
    tokenizer: GGUFTokenizer | None,
    messages: list[dict[str, str]],
    *,
    template_name: str | None = None,
    template_file: Path | None = None,
    cancel: threading.Event | None = None,
) -> Rendered:
    """Render the chosen chat template (a file given with --template wins) for the messages, or their plain
    text (`template.PLAIN`, and the default for a file without a template); setting `cancel` stops the
    render (its helper process is killed)."""
    from walkthrough.inspect.template import (
        choose_template,
        load_template_file,
        plain_text,
        render,
        template_choices,
    )

    if template_file is not None:
        source: str | None = load_template_file(template_file)
        names: tuple[str, ...] = (template_file.name,)
    else:
        names = template_choices(f)
        source = choose_template(f, template_name, where=f.path.name)
    if source is None:
        return Rendered(names, None, plain_text(messages))

    def special(token_id: int | None) -> str:
        return "" if token_id is None or tokenizer is None else tokenizer.text_of(token_id)

    text = render(source, messages, bos_token=special(getattr(tokenizer, "bos_id", None)),
                  eos_token=special(getattr(tokenizer, "eos_id", None)), origin=template_origin(f, template_file),
                  cancel=cancel)
    return Rendered(names, source, text)


def template_origin(f: GGUFFile, template_file: Path | None) -> str:
    return f"template file {template_file}" if template_file is not None else f"chat template of {f.path.name}"


def build_tokens(
    tokenizer: GGUFTokenizer, source: str | None, messages: list[dict[str, str]], origin: str,
    cancel: threading.Event | None = None,
) -> ChatTokens:
    """Tokens of the rendered prompt, each knowing the message it came from (message text never special),
    or of the plain text when `source` is None (`chat.completion_tokens`); setting `cancel` stops its
    renders."""
    from walkthrough.inspect.chat import chat_tokens, completion_tokens

    if source is None:
        return completion_tokens(tokenizer, messages)
    return chat_tokens(tokenizer, source, messages, origin=origin, cancel=cancel)


def prepare_engine(engine: str, f: GGUFFile, card: ModelCard, max_memory: int | None = None,
                   exact_products: bool = False) -> Engine:
    """The named engine's model for this file (`engine.engines.load_model`, the numpy engine's weights
    bounded by `max_memory`, its products ggml's own with `exact_products`); its WalkthroughError says why not."""
    from walkthrough.engine.engines import load_model

    return load_model(engine, f, card, max_memory, exact_products=exact_products)


def missing(part: Part, unavailable: dict[str, str], what: str) -> WalkthroughError:
    """The error for a part that cannot be built because an earlier one is missing."""
    return WalkthroughError(unavailable.get(part, what))
