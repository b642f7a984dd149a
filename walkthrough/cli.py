"""Command-line entry point: `walkthrough [MODEL]` opens the app, subcommands serve scripts.

Each subcommand lives in `walkthrough/commands/<name>.py` and exposes
`add_parser(subparsers)` and `run(args) -> int`. Heavy modules (numpy, textual,
tokenizers) are imported inside `run`, so `walkthrough --help` stays instant.
Errors from user input (`WalkthroughError`, unreadable files) become one line
on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from walkthrough.errors import WalkthroughError

SUBCOMMANDS = ("inspect", "tokenize", "template", "trace", "estimate")
EXIT_USAGE = 2
BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def _load_command(name: str):
    try:
        return importlib.import_module(f"walkthrough.commands.{name}")
    except ModuleNotFoundError as exc:
        if exc.name == f"walkthrough.commands.{name}":
            return None
        raise


def build_parser() -> argparse.ArgumentParser:
    """The full parser: the app's own options, then one sub-parser per available subcommand."""
    parser = argparse.ArgumentParser(
        prog="walkthrough",
        description="Follow one request to a language model, from the file on disk to the last token.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    app_module = _app_command()
    if app_module is not None:  # without a COMMAND, `walkthrough [MODEL] [options]` opens the app
        app_parser = argparse.ArgumentParser(prog="walkthrough", add_help=False)
        app_module.add_arguments(app_parser)
        parser.epilog = "without a COMMAND, opens the app:\n" + app_parser.format_help()
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMANDS:
        module = _load_command(name)
        if module is not None:
            module.add_parser(sub)
    return parser


def _app_command():
    return _load_command("app")


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
            app_module = _app_command()
            if app_module is None:
                print("walkthrough: the app is not built yet; try `walkthrough inspect`", file=sys.stderr)
                return EXIT_USAGE
            parser = argparse.ArgumentParser(prog="walkthrough")
            app_module.add_arguments(parser)
            return app_module.run(parser.parse_args(argv))
        parser = build_parser()
        args = parser.parse_args(argv)
        module = _load_command(args.command)
        return module.run(args)
    except WalkthroughError as exc:
        print(f"walkthrough: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as exc:
        where = f" ({exc.filename})" if getattr(exc, "filename", None) else ""
        print(f"walkthrough: error: {exc.strerror or exc}{where}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
