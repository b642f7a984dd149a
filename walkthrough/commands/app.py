"""`walkthrough [MODEL] [options]`: open the app on a model (the bundled tiny model by default).

`cli.py` calls `add_arguments` and `run` when no subcommand is given. Bad input
(a missing model, a malformed messages file) is reported before the terminal is
taken over, as one line, exit status 2.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from walkthrough.commands.options import PACE, SEED, TEMPERATURE, whole
from walkthrough.engine.knobs import MAX_NEW_TOKENS

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
                        help="one of the model's named chat templates (tokenizer.chat_template.NAME)")
    parser.add_argument("--hardware", metavar="NAME", help="hardware profile for the costs stage")
    parser.add_argument("--draft", metavar="MODEL",
                        help="a smaller GGUF with the same vocabulary, a drafter on the Speculate stage")
    from walkthrough.commands.common import add_engine_argument

    add_engine_argument(parser)
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


def run(args: argparse.Namespace) -> int:
    """Check the inputs, run the app, and return its exit status."""
    if args.record is not None:
        return _record(args)
    from walkthrough.app import make_app
    from walkthrough.inspect.locate import model_path

    from walkthrough.errors import WalkthroughError

    model_path(args.model)  # a missing file is a one-line error before the screen is taken
    draft = model_path(args.draft) if args.draft is not None else None
    if args.template is not None:
        if args.template_name is not None:
            raise WalkthroughError("--template and --template-name both pick a template; give one of them")
        from walkthrough.inspect.template import load_template_file

        load_template_file(args.template)  # unreadable or not UTF-8: one line before the screen is taken
    if args.hardware is not None:
        from walkthrough.engine.hardware import load_profiles, pick

        pick(load_profiles(), args.hardware)  # an unknown profile name lists the known ones
    if args.engine == "llama.cpp":
        from walkthrough.engine.llama_model import bindings

        bindings()  # not installed: one line saying how to install it, before the screen is taken
    app = make_app(
        args.model,
        args.messages,
        seed=args.seed,
        temperature=args.temperature,
        hardware=args.hardware,
        max_tokens=args.max_tokens,
        draft=draft,
        template=args.template,
        template_name=args.template_name,
        autoplay=args.autoplay,
        exit_at_end=args.exit_at_end,
        screenshots=args.screenshots,
        pace=args.pace,
        engine=args.engine,
    )
    if args.screenshots is not None and args.format == "png":
        from walkthrough.pictures import chromium

        chromium()  # missing: one line now, before the walk
    # q on a terminal ends the process at once (WalkthroughApp._end_process_now); elsewhere (textual-serve's
    # pipes) Textual closes the app in order.
    app.end_process_on_quit = sys.stdin.isatty() and sys.__stderr__ is not None and sys.__stderr__.isatty()
    loop = asyncio.new_event_loop()  # not asyncio.run: its shutdown waits for every worker thread to finish
    workers = ThreadPoolExecutor(thread_name_prefix=WORKER_THREADS)
    loop.set_default_executor(workers)  # where Textual runs thread workers
    app.run(loop=loop)
    workers.shutdown(wait=False, cancel_futures=True)  # idle threads end now; busy ones after their work
    _skip_the_last_collection()
    if args.screenshots is not None and args.format == "png" and not app.error:
        from walkthrough.pictures import svg_to_png

        for svg in app.walk.saved:
            svg_to_png(svg, svg.with_suffix(".png"))
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
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _skip_the_last_collection() -> None:
    """The app has ended: let the process end without the garbage collector walking the whole heap.

    Python's exit runs a full collection over everything the app made (the file's metadata, the
    tokenizer, every screen's widgets): measured with tests/bench/key_storm.py --keys 0 on the tiny
    model, 1.0-1.3 s of the 1.8-2.3 s from `q` to the process's end. Frozen objects are left out of
    collections (memory is returned to the system at exit all the same): 0.3-0.4 s.
    """
    import gc

    gc.disable()
    gc.freeze()


def without_record(argv: list[str]) -> list[str]:
    """The app's arguments as typed, less `--record FILE` (the child process runs the rest)."""
    kept, skip = [], False
    for word in argv:
        if skip:
            skip = False
        elif word == "--record":
            skip = True
        elif not word.startswith("--record="):
            kept.append(word)
    return kept


def _record(args: argparse.Namespace) -> int:
    """Run the app in a child process on a pseudo-terminal and record it to `args.record`."""
    from pathlib import Path

    from walkthrough.errors import WalkthroughError
    from walkthrough.inspect.locate import model_path
    from walkthrough.recording import record

    model_path(args.model)
    path = Path(args.record)
    if path.is_dir() or not path.parent.is_dir():
        raise WalkthroughError(f"--record {args.record}: name a file in an existing folder, e.g. walk.cast")
    argv = getattr(args, "argv", None) or []
    return record(without_record(argv), path)
