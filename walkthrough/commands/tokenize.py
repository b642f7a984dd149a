"""`walkthrough tokenize [MODEL] (--text T | --text-file F | --messages F.json | --batch F.jsonl)`: token ids.

Without `--raw`, the text (as one user message) or the messages go through the
chat template and are tokenized as llama.cpp's chat path does, except that
message text never becomes special tokens (`walkthrough.inspect.chat`). With
`--raw`, the text is tokenized alone: no template, no BOS/EOS, special-token
text as plain text (llama.cpp's add_special=false, parse_special=false).

`--json` prints one object: `ids`, `pieces`, `special` (and `message`, the index
of the message each token came from, null for template text, when a template
was used), the counts `characters`, `bytes` and `tokens` of the tokenized text,
`lost` (the character spans `start`, `end` and their `text` that the vocabulary
cannot encode, which llama.cpp drops; empty when the text round-trips), `warnings`
when there are any, and `text` itself. `--batch F.jsonl` reads one JSON string per line and writes
one such object per line (without `text`), for scripts that count tokens over
many documents; the tokenizer and template are built once.

Human output (`tokenize_view`) shows the text cut into pieces in alternating
colours, special tokens marked, whitespace made visible, then one row per token.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from walkthrough.commands import tokenize_merges
from walkthrough.commands.common import open_model, warn
from walkthrough.commands.template import add_template_arguments
from walkthrough.textsafe import json_visible


def add_parser(subparsers) -> None:
    """Register `tokenize` and its options."""
    p = subparsers.add_parser(
        "tokenize",
        help="show the token ids of a text or a chat, as llama.cpp cuts them",
        description="Tokenize a text or a chat with a model's own vocabulary. Without --raw the chat "
        "template is applied and special tokens are parsed in the template's text only.",
    )
    add_template_arguments(p)
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--text", metavar="TEXT", help="the text (one user message unless --raw)")
    source.add_argument("--text-file", metavar="F", help="read the text from a UTF-8 file")
    source.add_argument(
        "--messages", metavar="F.json", help="a JSON list of {role, content} messages"
    )
    source.add_argument(
        "--batch", metavar="F.jsonl", help="one JSON string per line; one JSON result per line"
    )
    p.add_argument(
        "--raw",
        action="store_true",
        help="no template, no BOS/EOS, special-token text as plain text",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    tokenize_merges.add_arguments(p)


def _read_text(path: str) -> str:
    from walkthrough.inspect.template import read_utf8

    return read_utf8(path, "the text")


def read_batch(path: str) -> list[str]:
    """The strings of a JSON Lines file, one per line.

    Raises:
        WalkthroughError: naming the first line that is not a JSON string.
    """
    from walkthrough.errors import WalkthroughError
    from walkthrough.inspect.template import json_kind

    texts = []
    for n, line in enumerate(_read_text(path).splitlines(), 1):
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            raise WalkthroughError(
                f"{path} line {n}: not valid JSON ({exc.msg}); give one JSON string per line"
            ) from None
        except RecursionError:
            raise WalkthroughError(f"{path} line {n}: JSON nested too deeply; give one JSON string per line") from None
        if not isinstance(value, str):
            raise WalkthroughError(
                f"{path} line {n}: expected a JSON string, found {json_kind(value)}"
            )
        texts.append(value)
    return texts


def result_json(result, *, chat: bool, with_text: bool) -> dict[str, Any]:
    """The `--json` / `--batch` object of one tokenized text."""
    out: dict[str, Any] = {
        "ids": result.ids,
        "pieces": [t.piece for t in result.tokens],
        "special": [t.special for t in result.tokens],
    }
    if chat:
        out["message"] = [t.message for t in result.tokens]
    out["characters"] = len(result.text)
    out["bytes"] = len(result.text.encode("utf-8", "surrogatepass"))
    out["tokens"] = len(result.tokens)
    out["lost"] = [{"start": a, "end": b, "text": result.text[a:b]} for a, b in result.lost]
    if with_text:
        out["text"] = result.text
    if result.warnings:
        out["warnings"] = result.warnings
    return out


def _check_options(args: argparse.Namespace) -> None:
    from walkthrough.errors import WalkthroughError

    if args.raw and args.messages is not None:
        raise WalkthroughError(
            "--raw tokenizes plain text; a messages file always goes through the template"
        )
    if args.batch is not None and tokenize_merges.wanted(args):
        raise WalkthroughError("--merges and --learn-merges take one text, not --batch")
    if args.raw and (args.template is not None or args.template_name is not None):
        raise WalkthroughError("--raw uses no template; drop --template / --template-name")


def run(args: argparse.Namespace) -> int:
    """Tokenize and print; user errors propagate to the CLI as one line."""
    from walkthrough.commands.template import template_source
    from walkthrough.inspect.chat import chat_tokens, raw_tokens
    from walkthrough.inspect.template import load_messages
    from walkthrough.inspect.tokenizer import GGUFTokenizer

    _check_options(args)
    if args.messages is not None:
        inputs: list[Any] = [load_messages(args.messages)]
    elif args.batch is not None:
        inputs = read_batch(args.batch)
    else:
        inputs = [args.text if args.text is not None else _read_text(args.text_file)]

    with open_model(args.model) as f:
        tokenizer = GGUFTokenizer.from_gguf(f)
        source, origin = (None, "raw text") if args.raw else template_source(args, f)
        model_name = Path(f.path).name
    for warning in tokenizer.warnings:
        warn(f"{model_name}: {warning}")

    def tokenize(item: Any):
        if args.raw:
            return raw_tokens(tokenizer, item)
        messages = item if isinstance(item, list) else [{"role": "user", "content": item}]
        return chat_tokens(
            tokenizer,
            source,
            messages,
            add_generation_prompt=not args.no_generation_prompt,
            origin=origin,
        )

    if args.batch is not None:
        for item in inputs:
            line = result_json(tokenize(item), chat=not args.raw, with_text=False)
            sys.stdout.write(json_visible(json.dumps(line, ensure_ascii=False)) + "\n")
        sys.stdout.flush()
        return 0
    result = tokenize(inputs[0])
    if tokenize_merges.wanted(args):
        return tokenize_merges.run(args, tokenizer, result, sys.stdout)
    if args.json:
        print(
            json_visible(
                json.dumps(result_json(result, chat=not args.raw, with_text=True), ensure_ascii=False)
            )
        )
        return 0
    for warning in result.warnings:
        warn(warning)
    from walkthrough.commands.tokenize_view import print_tokens

    messages = (
        inputs[0] if isinstance(inputs[0], list) else [{"role": "user", "content": inputs[0]}]
    )
    title = origin if model_name in origin else f"{model_name}, {origin}"
    print_tokens(result, messages=None if args.raw else messages, title=title, out=sys.stdout)
    return 0
