"""`walkthrough [MODEL] [options]`: open the app on a model (the bundled tiny model by default).

`cli.py` calls `add_arguments` and `run` when no subcommand is given. Bad input
(a missing model, a malformed messages file) is reported before the terminal is
taken over, as one line, exit status 2.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from walkthrough.commands.argv import argv_from
from walkthrough.commands.options import PACE, SEED, TEMPERATURE, whole
from walkthrough.engine.knobs import MAX_NEW_TOKENS

if TYPE_CHECKING:
    from walkthrough.inspect.projector import Media
    from walkthrough.safewrite import Writer

EXIT_LOAD_FAILED = 2
WORKER_THREADS = "walkthrough-worker"  # name prefix of the threads the app's workers run on
IDLE_WORKERS_END = 0.2  # seconds idle worker threads get to end once the app has ended


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The app's own options."""
    parser.description = "Follow one request to a language model, stage by stage, in the terminal."
    parser.add_argument("model", nargs="?", default=None, metavar="MODEL",
                        help="a .gguf file, a folder, ollama:NAME[:TAG] or hf:ORG/REPO[/FILE] (default: the bundled tiny model)")
    parser.add_argument("--messages", metavar="F.json",
                        help='chat messages: a JSON list of {"role", "content"} (default: the bundled request)')
    parser.add_argument("--seed", type=SEED, default=0, help="seed for sampling (default 0)")
    parser.add_argument("--temperature", type=TEMPERATURE, default=0.0, metavar="T",
                        help="sampling temperature to start with (default 0: greedy; t/T change it in the app)")
    parser.add_argument("--max-tokens", type=whole(1), default=MAX_NEW_TOKENS, metavar="N",
                        help=f"tokens the answer may have before the run stops it (default {MAX_NEW_TOKENS})")
    parser.add_argument("--template", metavar="F.jinja", help="use this chat template file instead of the model's")
    parser.add_argument("--template-name", metavar="NAME",
                        help="one of the model's named chat templates (tokenizer.chat_template.NAME), or a "
                        "built-in one (chatml, gemma, llama3, ...)")
    parser.add_argument("--raw", action="store_true",
                        help="plain text, no chat template: the messages' text is the prompt (r on the Chat "
                        "stage switches); the default for a file without a template")
    parser.add_argument("--hardware", metavar="NAME", help="hardware profile for the costs stage")
    parser.add_argument("--draft", metavar="MODEL",
                        help="a smaller GGUF with the same vocabulary, a drafter on the Speculate stage")
    parser.add_argument("--beside", metavar="MODEL",
                        help="a second GGUF for the Costs stage's held-vs-read view, key e (default: the bundled tiny model)")
    from walkthrough.commands.common import (
        add_engine_argument,
        add_media_arguments,
        add_memory_argument,
        add_rpc_arguments,
    )

    add_media_arguments(parser, "the File stage counts the tokens --images become (i there changes them), "
                        "and Costs adds them to the prompt")
    add_engine_argument(parser)
    parser.add_argument("--exact-products", action="store_true",
                        help="numpy engine: multiply as ggml's CPU kernels do, llama.cpp's numbers bit for bit "
                        "(10 to 25 times slower; docs/op-diff.md)")
    add_rpc_arguments(parser)
    add_memory_argument(parser)
    parser.add_argument("--autoplay", action="store_true", help="walk through every stage at a steady pace")
    parser.add_argument("--pace", type=PACE, default=2.0, metavar="SECONDS",
                        help="seconds between autoplay moves (default 2)")
    parser.add_argument("--exit", action="store_true", dest="exit_at_end",
                        help="exit at the end of the autoplay (alone: once the file is shown)")
    parser.add_argument("--screenshots", metavar="DIR",
                        help="walk every stage and save an SVG picture of each into DIR")
    parser.add_argument("--format", choices=("svg", "png"), default="svg",
                        help="pictures for --screenshots: svg, or png drawn by headless Chromium (default svg)")
    parser.add_argument("--record", metavar="FILE.cast",
                        help="record the session as an asciicast v2 file (asciinema players read it); "
                        "with --autoplay --exit, a screencast of the whole walk")
    parser.add_argument("--overwrite", action="store_true",
                        help="--record and --screenshots may replace files this run did not make "
                        "(never the model, the draft, the messages or the template)")


def _check_workers(args: argparse.Namespace) -> None:
    """--rpc: each worker reached and registered now (one line if not), before the screen is taken; every
    model the app loads then places its layers over them; a worker lost later restores the terminal first."""
    from walkthrough.engine.engines import use_workers
    from walkthrough.engine.llama import rpc
    from walkthrough.errors import WalkthroughError

    if args.engine != "llama.cpp":
        raise WalkthroughError("--rpc places llama.cpp's layers on workers: add --engine llama.cpp")
    if not args.rpc:
        raise WalkthroughError("--split says how many layers each host of --rpc holds: give --rpc too")
    rpc.add_servers(args.rpc)
    rpc.on_fatal(_restore_terminal)
    use_workers(args.rpc, args.split)


def _restore_terminal() -> None:
    """Leave the app's screen modes (alternate screen, mouse, hidden cursor) so the one-line error is readable."""
    import os

    with contextlib.suppress(OSError):
        os.write(sys.__stdout__.fileno(), b"\x1b[?1000l\x1b[?1002l\x1b[?1003l\x1b[?1006l\x1b[?2004l"
                 b"\x1b[?25h\x1b[?1049l\r\n")
    if _saved_tty:
        import termios

        with contextlib.suppress(OSError, termios.error):
            termios.tcsetattr(sys.__stdin__.fileno(), termios.TCSADRAIN, _saved_tty[0])


_saved_tty: list = []  # the terminal's modes before the app, restored when a lost worker ends the process


def run(args: argparse.Namespace) -> int:
    """Check the inputs, run the app, and return its exit status."""
    draft = check_inputs(args)
    if args.record is not None:
        return _record(args)
    from walkthrough.app import make_app

    app = make_app(
        args.model,
        args.messages,
        seed=args.seed,
        temperature=args.temperature,
        hardware=args.hardware,
        max_tokens=args.max_tokens,
        draft=draft,
        beside=args.beside,
        mmproj=args.mmproj,
        media=media_of(args),
        template=args.template,
        template_name=plain_or(args.template_name, args.raw),
        autoplay=args.autoplay,
        exit_at_end=args.exit_at_end,
        screenshots=args.screenshots,
        pace=args.pace,
        engine=args.engine,
        overwrite=args.overwrite,
        picture_format=args.format,
        max_memory=args.max_memory,
        exact_products=args.exact_products,
    )
    # q on a terminal ends the process at once (walkthrough/app_quit.py); elsewhere (textual-serve's
    # pipes) Textual closes the app in order.
    app.end_process_on_quit = sys.stdin.isatty() and sys.__stderr__ is not None and sys.__stderr__.isatty()
    loop = asyncio.new_event_loop()  # not asyncio.run: its shutdown waits for every worker thread to finish
    workers = ThreadPoolExecutor(thread_name_prefix=WORKER_THREADS)
    loop.set_default_executor(workers)  # where Textual runs thread workers
    if sys.__stdin__ is not None and sys.__stdin__.isatty():
        import termios

        _saved_tty[:] = [termios.tcgetattr(sys.__stdin__.fileno())]
    app.run(loop=loop)
    workers.shutdown(wait=False, cancel_futures=True)  # idle threads end now; busy ones after their work
    _skip_the_last_collection()
    if args.screenshots is not None and args.format == "png" and not app.error:
        from walkthrough.pictures import svg_to_png

        for svg in app.walk.saved:
            svg_to_png(svg, svg.with_suffix(".png"), app.walk.writer)
    if app.error:
        from walkthrough.textsafe import visible

        print(f"walkthrough: error: {visible(app.error)}", file=sys.stderr)
        _end_without_workers(EXIT_LOAD_FAILED)
        return EXIT_LOAD_FAILED
    _end_without_workers(app.return_code or 0)
    return app.return_code or 0


def _end_without_workers(code: int) -> None:
    """End the process now if worker threads are still computing for the app that has ended.

    The app cancels its workers when it ends and every pass (the stage's, the four calls', a warm start's,
    a speculative round's) stops at its next layer, but a layer of a big model, or work that does not
    look at its worker at all, still takes its time, and Python's exit joins every worker thread (before
    passes stopped within a layer: measured with tests/bench/key_storm.py on SmolLM2, a blank terminal
    for more than 30 s after q). Nothing they compute is read any more, and they write no file.
    """
    deadline = time.monotonic() + IDLE_WORKERS_END
    while time.monotonic() < deadline:
        if not any(t.name.startswith(WORKER_THREADS) and t.is_alive() for t in threading.enumerate()):
            return
        time.sleep(0.02)
    from walkthrough.textual_private import end_process

    sys.stdout.flush()
    sys.stderr.flush()
    end_process(code)


def _skip_the_last_collection() -> None:
    """The app has ended: let the process end without the garbage collector walking the whole heap.

    Python's exit runs a full collection over everything the app made (the file's metadata, the
    tokenizer, every screen's widgets): measured with tests/bench/key_storm.py --keys 0 on the tiny
    model, 1.0-1.3 s of the 1.8-2.3 s from `q` to the process's end. Frozen objects are left out of
    collections (memory is returned to the system at exit all the same): 0.3-0.4 s.
    """
    from walkthrough.textual_private import skip_last_collection

    skip_last_collection()


def plain_or(template_name: str | None, raw: bool) -> str | None:
    """The app's template choice: plain text for --raw (`template.PLAIN`), else --template-name's."""
    from walkthrough.inspect.template import PLAIN

    return PLAIN if raw else template_name


def check_inputs(args: argparse.Namespace) -> Path | None:
    """Every one-line error the app's options can cause, before the screen is taken (or a recording starts).

    Returns:
        the draft model's file, if one was named.
    """
    from walkthrough.errors import WalkthroughError
    from walkthrough.inspect.locate import model_path

    model_path(args.model)  # a missing file is a one-line error before the screen is taken
    draft = model_path(args.draft) if args.draft is not None else None
    if args.beside is not None:
        model_path(args.beside)  # the held-vs-read view's second file: missing is a one-line error now
    media = media_of(args)
    if args.mmproj is not None:
        from walkthrough.inspect.projector import media_tokens, open_projector

        media_tokens(open_projector(args.mmproj), media)  # a type this cannot count: one line now, not later
    elif args.images is not None:
        raise WalkthroughError("--images needs the model's projector: add --mmproj mmproj-....gguf")
    if args.exact_products and args.engine != "numpy":
        raise WalkthroughError("--exact-products is the numpy engine's: leave out --engine llama.cpp")
    if args.raw and (args.template is not None or args.template_name is not None):
        raise WalkthroughError("--raw uses no template; drop --template / --template-name")
    if args.template is not None:
        if args.template_name is not None:
            raise WalkthroughError("--template and --template-name both pick a template; give one of them")
        from walkthrough.inspect.template import load_template_file

        load_template_file(args.template)  # unreadable or not UTF-8: one line before the screen is taken
    if args.hardware is not None:
        from walkthrough.costs.hardware import load_profiles, pick

        pick(load_profiles(), args.hardware)  # an unknown profile name lists the known ones
    if args.engine == "llama.cpp":
        from walkthrough.engine.llama.model import bindings

        bindings()  # not installed: one line saying how to install it, before the screen is taken
    if args.rpc or args.split:
        _check_workers(args)
    if args.screenshots is not None and args.format == "png":
        from walkthrough.pictures import chromium

        chromium()  # missing: one line now, before the walk (make_app checks the folder)
    if args.record is not None:
        writer(args).check(Path(args.record), "--record")
    return draft


def media_of(args: argparse.Namespace) -> Media:
    """--images as `inspect.projector.Media` (one 1024x768 image when not given)."""
    from walkthrough.inspect.projector import parse_media

    return parse_media(args.images if args.images is not None else "1")


def writer(args: argparse.Namespace) -> Writer:
    """What writes the app's files (`--record`, `--screenshots`): never over an input or another's file."""
    from walkthrough.safewrite import Writer, run_inputs

    return Writer(run_inputs(args.model, args.draft, args.messages, args.template, args.mmproj), overwrite=args.overwrite)


def child_argv(args: argparse.Namespace) -> list[str]:
    """The app's options as parsed, less `--record`: what the recorded child process runs."""
    from walkthrough.cli import app_parser

    return argv_from(app_parser(), args, leave_out={"record"})


def _record(args: argparse.Namespace) -> int:
    """Run the app in a child process on a pseudo-terminal and record it to `args.record`."""
    from walkthrough.recording import record

    return record(child_argv(args), Path(args.record), writer=writer(args))
