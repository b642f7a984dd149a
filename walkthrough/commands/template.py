"""`walkthrough template [MODEL] --messages F.json`: print the chat template's rendering, exactly.

The template is the model's `tokenizer.chat_template` (or `--template-name NAME`
for one of its named templates, or `--template F.jinja`), rendered in the sandbox
of `walkthrough.inspect.template` as transformers renders it, with the generation
prompt unless `--no-generation-prompt`. `bos_token`/`eos_token` are the
vocabulary's BOS/EOS text, unless `--bos-token`/`--eos-token` say otherwise.
MODEL may be left out when `--template` is given (BOS/EOS are then empty unless
given); without both, the bundled tiny model is used.

Into a pipe or a file the text is written as rendered: no newline is added,
nothing is escaped. On a terminal, control and invisible characters are shown as
escapes (`\\x1b`, `\\u202e`), so the template's text cannot drive the terminal.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from walkthrough.commands.common import add_model_argument, open_model, warn

if TYPE_CHECKING:
    from walkthrough.inspect.gguf import GGUFFile


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register `template` and its options."""
    p = subparsers.add_parser(
        "template",
        help="render a chat template for a messages file and print the text exactly",
        description="Render a model's chat template (or --template F.jinja) for a JSON list of "
        "{role, content} messages, the way Hugging Face transformers does, in a sandbox.",
    )
    add_template_arguments(p)
    p.add_argument(
        "--messages",
        required=True,
        metavar="F.json",
        help="a JSON list of {role, content} messages",
    )
    p.add_argument(
        "--bos-token",
        metavar="S",
        help="text of bos_token in the template (default: the vocabulary's)",
    )
    p.add_argument(
        "--eos-token",
        metavar="S",
        help="text of eos_token in the template (default: the vocabulary's)",
    )


def add_template_arguments(p: argparse.ArgumentParser) -> None:
    """MODEL and the template options `template` and `tokenize` share."""
    add_model_argument(p)
    p.add_argument(
        "--template", metavar="F.jinja", help="use this template file instead of the model's"
    )
    p.add_argument(
        "--template-name",
        metavar="NAME",
        help="one of the model's named templates (tokenizer.chat_template.NAME)",
    )
    p.add_argument(
        "--no-generation-prompt",
        action="store_true",
        help="leave out the assistant header that asks the model to answer",
    )


def template_source(args: argparse.Namespace, f: GGUFFile | None) -> tuple[str, str]:
    """The template text and how errors should name it: `--template` or the model's (named) template."""
    from walkthrough.errors import WalkthroughError
    from walkthrough.inspect.template import load_template_file, select_template

    if args.template is not None:
        if args.template_name is not None:
            raise WalkthroughError(
                "--template and --template-name both pick a template; give one of them"
            )
        return load_template_file(args.template), f"template {args.template}"
    where = Path(f.path).name
    name = args.template_name or "default"
    return select_template(f, args.template_name, where=where), f"chat template {name!r} of {where}"


def run(args: argparse.Namespace) -> int:
    """Render and print; user errors propagate to the CLI as one line."""
    from walkthrough.inspect.chat import special_token_text
    from walkthrough.inspect.template import load_messages, render

    messages = load_messages(args.messages)
    needs_model = args.template is None or (
        args.model is not None and None in (args.bos_token, args.eos_token)
    )
    f = open_model(args.model) if needs_model else None
    try:
        source, origin = template_source(args, f)
        bos, eos = args.bos_token, args.eos_token
        if f is not None and None in (bos, eos):
            from walkthrough.inspect.tokenizer import GGUFTokenizer

            tokenizer = GGUFTokenizer.from_gguf(f)
            bos = special_token_text(tokenizer, tokenizer.bos_id) if bos is None else bos
            eos = special_token_text(tokenizer, tokenizer.eos_id) if eos is None else eos
        text = render(
            source,
            messages,
            add_generation_prompt=not args.no_generation_prompt,
            bos_token=bos or "",
            eos_token=eos or "",
            origin=origin,
        )
    finally:
        if f is not None:
            f.close()
    write_rendered(text, sys.stdout)
    return 0


def write_rendered(text: str, out: TextIO) -> None:
    """The rendered text, byte for byte into a pipe or file; on a terminal, hidden characters made visible.

    A template's output is the model's input, so scripts get it exactly; a terminal would act on the
    escapes and control characters a file put there instead of showing them. A lone surrogate (which
    UTF-8 cannot hold) is written as its escape, with a warning.
    """
    from walkthrough.textsafe import visible

    if out.isatty():
        text = visible(text, keep_newlines=True)
    elif any(0xD800 <= ord(c) <= 0xDFFF for c in text):
        warn("the rendered text holds lone surrogates, which UTF-8 cannot store; written as \\udXXX escapes")
        text = "".join(visible(c) if 0xD800 <= ord(c) <= 0xDFFF else c for c in text)
    out.write(text)
    out.flush()
