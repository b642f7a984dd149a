"""Command-line entry point: `walkthrough [MODEL]` opens the app, subcommands serve scripts.

Each subcommand lives in `walkthrough/commands/<name>.py` and exposes
`add_parser(subparsers)` and `run(args) -> int`. Heavy modules (numpy, textual,
tokenizers) are imported inside `run`, so `walkthrough --help` stays instant.
Errors from user input (`WalkthroughError`, unreadable files) become one line
on stderr and exit status 2, never a traceback; the line may quote file text, so
its control characters are made visible (`walkthrough.textsafe`).

`main()` first sets OPENBLAS_NUM_THREADS and MKL_NUM_THREADS to 1 unless the
user set them: BLAS reads them once, when numpy is first imported, and nothing
imports numpy before a command runs. The engine's products are small, and an
extra BLAS thread on a busy machine makes every product wait for it (see
`main`); export the variable to choose another count.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from walkthrough.commands.argv import Parser
from walkthrough.errors import WalkthroughError
from walkthrough.textsafe import visible

SUBCOMMANDS = ("inspect", "tokenize", "template", "trace", "estimate", "bench", "calibrate", "compare", "abliterate",
               "serve", "worker")
EXIT_USAGE = 2
EXIT_BROKEN_PIPE = 1  # what Rich's Console exits with when its reader leaves
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports Ctrl-C
BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
USAGE = "%(prog)s [MODEL] [options]        (opens the app)\n       %(prog)s COMMAND [MODEL] [options]"


def _command(name: str):
    """The module of a subcommand, or of the app for "app"."""
    return importlib.import_module(f"walkthrough.commands.{name}")


def app_parser(**kwargs) -> argparse.ArgumentParser:
    """The parser of `walkthrough [MODEL] [options]`, which opens the app."""
    parser = Parser(prog="walkthrough", **kwargs)
    _command("app").add_arguments(parser)
    return parser


def build_parser() -> argparse.ArgumentParser:
    """The subcommands' parser; its help ends with the app's options."""
    parser = Parser(  # its subcommands' parsers are Parsers too: no abbreviated options anywhere
        prog="walkthrough",
        usage=USAGE,
        description="Follow one request to a language model, from the file on disk to the last token.",
        epilog="without a COMMAND, opens the app:\n" + app_parser(add_help=False).format_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", prog="walkthrough")  # "usage: walkthrough trace ..."
    for name in SUBCOMMANDS:
        _command(name).add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the process exit status."""
    # One BLAS thread unless the user set one (before numpy loads). The engine's products are small,
    # and on a busy machine a second OpenBLAS thread makes every product wait for it: a 286-token
    # prefill of the tiny model took 45-55 ms with one thread and 1.1-1.6 s with OpenBLAS's default
    # of two, on the 2-core development machine under load (tests/bench/bench_engine.py --blas-threads).
    for variable in BLAS_THREAD_VARIABLES:
        os.environ.setdefault(variable, "1")
    argv = list(sys.argv[1:] if argv is None else argv)
    # `walkthrough [MODEL] [app options]` (no subcommand) opens the app.
    opens_app = not argv or (argv[0] not in SUBCOMMANDS and argv[0] not in ("-h", "--help"))
    try:
        if opens_app:
            args = app_parser().parse_args(argv)
            return _command("app").run(args)
        args = build_parser().parse_args(argv)
        return _command(args.command).run(args)
    except WalkthroughError as exc:
        print(f"walkthrough: error: {visible(str(exc))}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:  # `walkthrough ... | head`: the reader left; stop quietly, as Rich does
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so exit's flush cannot fail
        return EXIT_BROKEN_PIPE
    except OSError as exc:
        where = f" ({exc.filename})" if getattr(exc, "filename", None) else ""
        print(f"walkthrough: error: {visible(f'{exc.strerror or exc}{where}')}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
