"""Chat templates: find them in a GGUF, read a messages file, and render both the way transformers does.

Rendering follows Hugging Face transformers' `render_jinja_template` (which wrote
the reference texts in `../shared/fixtures/templates/`; the environment is
`walkthrough.inspect.jinja_env`, `{% generation %}` blocks included). On top of
transformers, the template runs under the time and size limits of
`walkthrough.inspect.sandbox`, in a helper process that is killed when it runs
too long, uses too much memory or is cancelled (`walkthrough.inspect.render_process`).

`strftime_now` reads the clock, or `SOURCE_DATE_EPOCH` (seconds since 1970, read
as UTC) when it is set, so screencasts and tests render the same date every run.

Example:
    >>> render("{{ bos_token }}{% for m in messages %}[{{ m.role }}] {{ m.content }}{% endfor %}",
    ...        [{"role": "user", "content": "hi"}], bos_token="<s>")
    '<s>[user] hi'
"""

from __future__ import annotations

import json
import os
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gguf.constants import Keys

from walkthrough.errors import WalkthroughError
from walkthrough.inspect.builtin_templates import BUILTIN, suggest
from walkthrough.inspect.builtin_templates import choices as builtin_choices
from walkthrough.inspect.render_process import render_isolated
from walkthrough.inspect.sandbox import DEFAULT_LIMITS, Limits, TemplateError
from walkthrough.textsafe import visible

if TYPE_CHECKING:
    from walkthrough.inspect.gguf import GGUFFile

__all__ = [
    "DEFAULT_NAME",
    "PLAIN",
    "Limits",
    "MessagesError",
    "TemplateError",
    "chat_templates",
    "check_messages",
    "choose_template",
    "content_text",
    "load_messages",
    "load_template_file",
    "no_template_advice",
    "plain_text",
    "read_utf8",
    "render",
    "select_template",
    "suggest_template",
    "template_choices",
]

DEFAULT_NAME = "default"  # the name `chat_templates` gives `tokenizer.chat_template`
PLAIN = "plain text"  # the choice of no template: the messages' text is the prompt (llama.cpp's completion)
PLAIN_SEPARATOR = "\n\n"  # between two messages' text in plain-text mode
_NAMED_PREFIX = Keys.Tokenizer.CHAT_TEMPLATE_N.split("{", 1)[0]  # "tokenizer.chat_template."


class MessagesError(WalkthroughError):
    """A messages file is not a JSON list of {"role", "content"} objects; the message says where."""


# ---- templates in a file --------------------------------------------------------
def chat_templates(f: GGUFFile) -> dict[str, str]:
    """Every chat template stored in an opened GGUF: `tokenizer.chat_template` as "default",
    `tokenizer.chat_template.NAME` as NAME (llama.cpp's named templates, e.g. "tool_use").

    Args:
        f: a `GGUFFile` (anything with `.fields` and `.get(key)`).

    Raises:
        TemplateError: a template key holds something other than text.
    """
    found: dict[str, str] = {}
    keys = [Keys.Tokenizer.CHAT_TEMPLATE] + sorted(
        k for k in f.fields if k.startswith(_NAMED_PREFIX)
    )
    for key in keys:
        if key not in f.fields:
            continue
        value = f.get(key)
        if not isinstance(value, str):
            raise TemplateError(
                f"metadata key {visible(key)} holds a {type(value).__name__}, not template text"
            )
        found[
            DEFAULT_NAME if key == Keys.Tokenizer.CHAT_TEMPLATE else key[len(_NAMED_PREFIX) :]
        ] = value
    return found


def select_template(f: GGUFFile, name: str | None = None, *, where: str = "the model") -> str:
    """The template called `name` (default: "default") among `chat_templates(f)`, else the built-in
    template of that name (`builtin_templates.BUILTIN`, llama.cpp's names).

    Raises:
        TemplateError: no such template; the message lists the ones there are.
    """
    templates = chat_templates(f)
    if name in templates or (name is None and DEFAULT_NAME in templates):
        return templates[name or DEFAULT_NAME]
    if name in BUILTIN:
        return BUILTIN[name]
    if not templates:
        raise TemplateError(f"{where} has no chat template ({Keys.Tokenizer.CHAT_TEMPLATE}); "
                            f"{no_template_advice(f)}")
    names = ", ".join(visible(n) for n in (*templates, *BUILTIN))
    raise TemplateError(f"{where} has no chat template named {visible(name)!r}; it has: {names}")


def choose_template(f: GGUFFile, name: str | None = None, *, where: str = "the model") -> str | None:
    """Like `select_template`, but plain text (None) for `PLAIN`, and for a file without a chat template
    when no name is given: the messages' text is then the prompt (`plain_text`)."""
    if name == PLAIN or (name is None and not chat_templates(f)):
        return None
    return select_template(f, name, where=where)


def template_choices(f: GGUFFile) -> tuple[str, ...]:
    """What the app's template key cycles through: the file's templates ("default" first), or, for a
    file without one, plain text then the built-in templates (the one its name suggests first)."""
    templates = chat_templates(f)
    if templates:
        return tuple(templates)
    hint = suggest_template(f)
    return (PLAIN, *builtin_choices(hint[0] if hint else None))


def suggest_template(f: GGUFFile) -> tuple[str, str] | None:
    """The built-in template a file's names (or special tokens) point to and why (`builtin_templates.suggest`)."""
    names = [Path(f.path).name if getattr(f, "path", None) else ""]
    names += [f.short_text(key, 200) or "" for key in ("general.name", "general.basename", "general.architecture")]
    return suggest(names, lambda text: _has_token(f, text))


def _has_token(f: GGUFFile, text: str) -> bool:
    """Whether the vocabulary (read once, cached by the file) holds a token spelled `text`."""
    key = Keys.Tokenizer.LIST
    if key not in f.fields or f.too_big(key) is not None:
        return False
    tokens = f.get(key)
    return isinstance(tokens, list) and text in tokens


def no_template_advice(f: GGUFFile) -> str:
    """What to do about a missing chat template: plain text, or a built-in one (the suggested one named)."""
    hint = suggest_template(f)
    named = f"--template-name {hint[0]} ({hint[1]})" if hint else "--template-name NAME"
    return (f"the prompt is plain text (--raw); for a chat, {named}, one of llama.cpp's built-in templates "
            f"written here: {', '.join(BUILTIN)}; or --template FILE")


def plain_text(messages: list[dict]) -> str:
    """The prompt of plain-text (completion) mode: the messages' text, a blank line between two."""
    return PLAIN_SEPARATOR.join(content_text(m.get("content")) for m in messages)


def read_utf8(
    path: str | os.PathLike, what: str, error: type[WalkthroughError] = WalkthroughError
) -> str:
    """The text of a UTF-8 file, or `error` saying which file could not be read as `what` and why."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise error(
            f"{path}: not UTF-8 text (bad byte at offset {exc.start}); save it as UTF-8"
        ) from None
    except OSError as exc:
        raise error(f"{path}: cannot read {what} ({exc.strerror or exc})") from None


def load_template_file(path: str | os.PathLike) -> str:
    """The text of a template file (UTF-8).

    Raises:
        TemplateError: the file cannot be read or is not UTF-8 text.
    """
    return read_utf8(path, "the template", TemplateError)


# ---- messages ------------------------------------------------------------------------
def json_kind(value: Any) -> str:
    """How a JSON value is named in error messages: "an object", "a list", "a number", ..."""
    if isinstance(value, bool):
        return "true/false"
    if value is None:
        return "null"
    kinds = {dict: "an object", list: "a list", str: "a string", int: "a number", float: "a number"}
    return kinds.get(type(value), type(value).__name__)


def check_messages(data: Any, origin: str = "messages") -> list[dict]:
    """`data` if it is a list of {"role": str, "content": str | list of parts | null} objects.

    Other keys (tool_calls, reasoning_content, name, ...) pass through untouched.

    Raises:
        MessagesError: naming the first item (counting from 1) that is wrong and how.
    """
    if not isinstance(data, list):
        raise MessagesError(
            f'{origin}: expected a JSON list of {{"role", "content"}} objects, found {json_kind(data)}'
        )
    if not data:
        raise MessagesError(f"{origin}: the list of messages is empty; give at least one message")
    for n, item in enumerate(data, 1):
        if not isinstance(item, dict):
            raise MessagesError(
                f"{origin}: item {n} is {json_kind(item)}, not an object with 'role' and 'content'"
            )
        if "role" not in item:
            raise MessagesError(f"{origin}: item {n} has no 'role'")
        if not isinstance(item["role"], str) or not item["role"]:
            raise MessagesError(
                f"{origin}: item {n} has a 'role' that is {json_kind(item['role'])}, not a name"
            )
        if "content" not in item:
            raise MessagesError(f"{origin}: item {n} has no 'content'")
        content = item["content"]
        if isinstance(content, list):
            for k, part in enumerate(content, 1):
                if not isinstance(part, dict):
                    raise MessagesError(
                        f"{origin}: item {n}, content part {k} is {json_kind(part)}, not an object"
                    )
        elif content is not None and not isinstance(content, str):
            raise MessagesError(
                f"{origin}: item {n} has a 'content' that is {json_kind(content)}; "
                "give text, a list of parts, or null"
            )
    return data


def content_text(content: Any) -> str:
    """A message's content as one text to show or edit: text itself, "" for null, and for a list of parts
    the parts' "text" fields joined, any other part shown as its type in brackets ("[image]").

    Example: content_text([{"type": "text", "text": "see"}, {"type": "image"}]) -> "see[image]"
    """
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part["text"] if isinstance(part, dict) and isinstance(part.get("text"), str)
            else f"[{part.get('type', 'part') if isinstance(part, dict) else 'part'}]"
            for part in content
        )
    return ""


def load_messages(path: str | os.PathLike) -> list[dict]:
    """Read and check a messages file (a JSON list of {"role", "content"} objects).

    Raises:
        MessagesError: unreadable, not JSON, or not shaped like messages (the message says where).
    """
    text = read_utf8(path, "the messages", MessagesError)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise MessagesError(
            f"{path}: not valid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from None
    except RecursionError:
        raise MessagesError(f"{path}: JSON nested too deeply") from None
    return check_messages(data, str(path))


# ---- rendering -------------------------------------------------------------------------
def pinned_now() -> datetime | None:
    """The time `SOURCE_DATE_EPOCH` pins (UTC), or None when it is not set.

    Raises:
        TemplateError: SOURCE_DATE_EPOCH is set but is not a whole number of seconds.
    """
    raw = os.environ.get("SOURCE_DATE_EPOCH")
    if raw is None or raw == "":
        return None
    try:
        return datetime.fromtimestamp(int(raw), tz=timezone.utc)
    except (ValueError, OverflowError, OSError):
        raise TemplateError(
            f"SOURCE_DATE_EPOCH={visible(raw)!r} is not a whole number of seconds since 1970; fix or unset it"
        ) from None


def render(
    source: str,
    messages: list[dict],
    *,
    add_generation_prompt: bool = True,
    bos_token: str = "",
    eos_token: str = "",
    origin: str = "chat template",
    limits: Limits = DEFAULT_LIMITS,
    cancel: threading.Event | None = None,
    now: datetime | None = None,
    **extra: Any,
) -> str:
    """Render a chat template for `messages`, exactly as transformers would.

    Args:
        source: the template text.
        messages: checked messages (see `check_messages`).
        origin: how errors name the template ("chat template of model.gguf").
        limits: time and size bounds (the sandbox's defaults: 1.5 s, 16 Mi characters).
        cancel: set it from another thread to stop the render.
        now: the time `strftime_now` shows; default `SOURCE_DATE_EPOCH` if set, else the clock.
        extra: more template variables (`tools`, `documents`, `enable_thinking`, ...).

    Raises:
        TemplateError: the template is not valid Jinja, raised (e.g. "System role not supported"),
            broke a sandbox rule, or ran out of time or room.
    """
    variables = {"add_generation_prompt": add_generation_prompt, "bos_token": bos_token,
                 "eos_token": eos_token, **extra}
    return render_isolated(source, messages, variables, origin, limits, cancel, now or pinned_now())
