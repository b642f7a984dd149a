"""What the subcommands share: the MODEL argument, opening the file it names, and warnings.

Imported when the parser is built, so it stays light: the GGUF reader and the
locator load only when a command runs.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from walkthrough.inspect.gguf import GGUFFile

MODEL_HELP = (
    "a .gguf file, a folder, ollama:NAME[:TAG] or hf:ORG/REPO[/FILE] (default: the bundled tiny model)"
)


def add_model_argument(parser: argparse.ArgumentParser) -> None:
    """The optional MODEL positional (`args.model`, None for the bundled tiny model)."""
    parser.add_argument("model", nargs="?", default=None, metavar="MODEL", help=MODEL_HELP)


def add_media_arguments(parser: argparse.ArgumentParser, counted: str) -> None:
    """`--mmproj F` and `--images SPEC` (`args.mmproj`, `args.images`); `counted` says where the tokens show."""
    parser.add_argument("--mmproj", metavar="F",
                        help=f"the model's multimodal projector (mmproj-*.gguf): {counted}")
    parser.add_argument("--images", metavar="SPEC",
                        help="with --mmproj: N or NxWxH images, vF or vFxWxH a video of F frames (default one "
                        "1024x768 image)")


def add_engine_argument(parser: argparse.ArgumentParser) -> None:
    """`--engine numpy|llama.cpp` (`args.engine`, numpy by default)."""
    from walkthrough.engine.engines import ENGINES

    parser.add_argument("--engine", default=ENGINES[0], choices=ENGINES,
                        help="numpy (default, the glass box) or llama.cpp (real speed; "
                        "needs pip install 'walkthrough[llama]')")


def add_rpc_arguments(parser: argparse.ArgumentParser) -> None:
    """`--rpc HOST:PORT[,...]` (`args.rpc`: endpoints or None) and `--split N,N,...` (`args.split`)."""
    parser.add_argument("--rpc", type=_endpoints, default=None, metavar="HOST:PORT[,...]",
                        help="with --engine llama.cpp: also place layers on these workers (`walkthrough worker` "
                        "on each; ggml's RPC backend, unauthenticated: trusted networks only)")
    parser.add_argument("--split", type=_counts, default=None, metavar="N,N,...",
                        help="with --rpc: layers on this host, then on each worker in order (default: "
                        "llama.cpp's split of every layer over the workers by their free memory)")


def _endpoints(text: str) -> list:
    from walkthrough.engine.llama.rpc import parse_endpoints

    return _usage_error(parse_endpoints, text)


def _counts(text: str) -> list[int]:
    parts = [p.strip() for p in text.split(",")]
    if not all(p.isdigit() for p in parts):
        raise argparse.ArgumentTypeError(f"{text!r} is not layer counts like 2,3,3")
    return [int(p) for p in parts]


def add_memory_argument(parser: argparse.ArgumentParser) -> None:
    """`--max-memory SIZE` (`args.max_memory`, bytes; None: the default budget, a share of free memory)."""
    parser.add_argument("--max-memory", type=memory_size, default=None, metavar="SIZE",
                        help="the numpy engine's budget for dequantized weights, e.g. 512M or 2G (default: "
                        "half the free memory); a larger model still runs, decoding the rest again on use")


def memory_size(text: str) -> int:
    """argparse type of --max-memory: bytes (`engine.memory.parse_size`), a bad size a usage error."""
    from walkthrough.costs.memory import parse_size

    return _usage_error(parse_size, text)


def _usage_error(parse, text: str):
    """parse(text), a WalkthroughError turned into argparse's one-line usage error."""
    from walkthrough.errors import WalkthroughError

    try:
        return parse(text)
    except WalkthroughError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def memory_report(model, positions: int, chunk: int, prompt: int | None = None) -> str:
    """The line saying what the engine made for this request will hold beside the free memory; a warning
    line first (on stderr, suggesting llama.cpp) when that will not fit. `prompt`: the tokens prefilled."""
    from walkthrough.costs.memory import report

    weights = getattr(model, "weights", None)  # the numpy engine's cache (llama.cpp maps the file)
    line, problem = report(model.file, model.card, model.engine, positions, chunk,
                           weights.max_cache_bytes if weights is not None else None, prompt)
    if problem:
        warn(problem)
    return line


def open_model(spec: str | os.PathLike | None, *, runs: str | None = None) -> GGUFFile:
    """The opened `GGUFFile` for MODEL (first shard of a split model; the bundled tiny model for None).

    A partial download (`inspect.partial`) opens with one warning line, or, when the command `runs` the
    model (`runs` names what needs the weights, e.g. "trace"), is refused with a one-line error.

    Raises:
        WalkthroughError: nothing found for `spec`, the file is not a readable GGUF, or it is a partial
            download and `runs` is set.
    """
    from walkthrough.inspect.gguf import open_gguf
    from walkthrough.inspect.locate import model_path

    f = open_gguf(model_path(spec))
    if f.missing is not None:
        if runs is not None:
            f.close()
            f.require_whole(runs)
        warn(f"{f.path.name}: {f.missing.warning()}")
    return f


def warn(message: str) -> None:
    """One warning line on stderr; the message may hold file text, so control characters are made visible."""
    from walkthrough.textsafe import visible

    print(f"walkthrough: warning: {visible(message)}", file=sys.stderr)
