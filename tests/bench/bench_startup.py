"""Startup benchmark: seconds from launching `walkthrough` to its first screen showing the opened file.

Each run is a fresh process that builds the app with `make_app`, runs it headless
and exits once the File stage has drawn the file's numbers (what `walkthrough
FILE --exit` does); the figure is the wall-clock time from launching the process
to that first drawing (`WalkthroughApp.first_screen_at`), so work that goes on in
the background afterwards (building a 150k-token tokenizer) is not counted.
References measured in the same run, on the same machine: a bare Python start,
and a Python start that only imports Textual's App (the floor any Textual app
pays). The target in issue 6 is under 1.5 s.

Usage:
    python tests/bench/bench_startup.py [MODEL ...] [--runs N]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_MODELS = [
    ROOT / "assets" / "tiny-clinical-moe.gguf",
    ROOT.parent / "shared" / "fixtures" / "reference" / "ref-qwen2moe-f32.gguf",
    ROOT.parent / "shared" / "fixtures" / "vocab" / "ggml-vocab-qwen35.gguf",
]
TARGET_SECONDS = 1.5

APP_RUN = """
import sys
from pathlib import Path
from walkthrough.app import make_app
app = make_app(sys.argv[1], [{"role": "user", "content": "hello"}], exit_at_end=True)
app.run(headless=True, size=(80, 24))
Path(sys.argv[2]).write_text(repr(app.first_screen_at))
sys.exit(app.return_code or 0)
"""


def wall(code: str, *args: str) -> float:
    """Seconds for `python -c code args` to start, run and exit."""
    began = time.perf_counter()
    subprocess.run([sys.executable, "-c", code, *args], check=True, cwd=ROOT)
    return time.perf_counter() - began


def median_of(runs: int, code: str, *args: str) -> float:
    return statistics.median(wall(code, *args) for _ in range(runs))


def first_screen(model: Path) -> float:
    """Seconds from launching the app on `model` to its first screen with the file's numbers."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "drawn"
        launched = time.time()
        subprocess.run([sys.executable, "-c", APP_RUN, str(model), str(out)], check=True, cwd=ROOT)
        return float(out.read_text()) - launched


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", type=Path)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    models = [m for m in (args.models or DEFAULT_MODELS) if m.is_file()]
    python = median_of(args.runs, "pass")
    textual = median_of(args.runs, "import textual.app, textual.widgets")
    print(f"python start:            {python:.3f} s (median of {args.runs})")
    print(f"python + import textual: {textual:.3f} s")
    for model in models:
        app = statistics.median(first_screen(model) for _ in range(args.runs))
        verdict = "under" if app < TARGET_SECONDS else "OVER"
        print(f"{model.name}: first screen {app:.3f} s ({app / textual:.2f} x the Textual import alone, "
              f"{verdict} the {TARGET_SECONDS} s target)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
