"""The Jinja environment chat templates render in, as Hugging Face transformers builds it, inside our sandbox.

This is the in-process renderer; `walkthrough.inspect.template.render` runs it in
a child process (`walkthrough.inspect.render_process`) so it can be stopped from
outside. It imports only jinja2 and the sandbox, so that child starts quickly.

What matches transformers' `render_jinja_template` (which wrote the reference
texts in `../shared/fixtures/templates/`): an immutable sandbox with
`trim_blocks`, `lstrip_blocks` and the loop-controls extension; a `tojson` filter
that does not HTML-escape (`ensure_ascii=False`, `indent=None`, `separators=None`,
`sort_keys=False` by default, all overridable from the template); the globals
`raise_exception(message)` and `strftime_now(format)`; the variables `messages`,
`tools=None`, `documents=None`, `add_generation_prompt`, `bos_token`, `eos_token`
plus any extra keyword; and the `{% generation %}...{% endgeneration %}` block,
which renders its body unchanged (transformers records where such a block's text
falls to build an assistant-token mask; the text itself is the body's).

Example:
    >>> render_here("{% for m in messages %}{% generation %}{{ m.content }}{% endgeneration %}{% endfor %}",
    ...             [{"role": "assistant", "content": "hi"}])
    'hi'
"""

from __future__ import annotations

import json
import threading
from datetime import datetime
from functools import lru_cache
from typing import Any, ClassVar

import jinja2.ext
from jinja2 import nodes

from walkthrough.inspect.sandbox import (
    DEFAULT_LIMITS,
    BoundedSandbox,
    Limits,
    TemplateError,
    compile_source,
    run,
)
from walkthrough.textsafe import visible


class GenerationBlock(jinja2.ext.Extension):
    """`{% generation %}BODY{% endgeneration %}`: renders BODY.

    transformers' chat templates mark the assistant's own text with this block (its
    `AssistantTracker` extension), so that `return_assistant_tokens_mask` can tell
    which tokens a model is trained on. Only the text matters here: the block adds
    nothing to it and removes nothing from it.
    """

    tags: ClassVar[set[str]] = {"generation"}

    def parse(self, parser: Any) -> nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.CallBlock(self.call_method("_body", []), [], [], body).set_lineno(lineno)

    def _body(self, caller: Any) -> str:
        return caller()


def _raise_exception(message: Any) -> None:
    raise TemplateError(f"refused the messages: {visible(str(message))}")


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: Any = None,
    separators: Any = None,
    sort_keys: bool = False,
) -> str:
    # transformers' replacement for jinja's tojson: no HTML escaping, json.dumps options exposed.
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


@lru_cache(maxsize=1)
def environment() -> BoundedSandbox:
    """The shared sandbox with transformers' options, extensions and `tojson`."""
    env = BoundedSandbox(
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=[GenerationBlock, jinja2.ext.loopcontrols],
    )
    env.set_filter("tojson", _tojson)
    return env


@lru_cache(maxsize=32)
def _compiled(source: str, origin: str):
    return compile_source(environment(), source, origin)


def render_here(
    source: str,
    messages: list[dict],
    *,
    origin: str = "chat template",
    limits: Limits = DEFAULT_LIMITS,
    cancel: threading.Event | None = None,
    now: datetime | None = None,
    **variables: Any,
) -> str:
    """Render in this process, with `variables` (`add_generation_prompt`, `bos_token`, ...) over the defaults.

    `now=None` means the clock. Prefer `template.render`, which can be stopped from outside.
    """
    template = _compiled(source, origin)

    def strftime_now(fmt: str) -> str:
        return (now or datetime.now()).strftime(fmt)

    return run(
        template,
        {
            "raise_exception": _raise_exception,
            "strftime_now": strftime_now,
            "tools": None,
            "documents": None,
            "bos_token": "",
            "eos_token": "",
            "add_generation_prompt": True,
            **variables,
            "messages": messages,
        },
        limits=limits,
        cancel=cancel,
        origin=origin,
    )
