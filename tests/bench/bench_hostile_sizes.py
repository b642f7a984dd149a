"""Benchmark: time and peak memory on files with many tiny tensors and with huge sparse strings (issue 20).

Not a test (tests/conftest.py keeps pytest out of `tests/bench`). Run from the repo root:

    python tests/bench/bench_hostile_sizes.py [--counts 30000,100000,300000] [--no-app]

Files are built in a temporary folder and deleted at the end: copies of the
reference llama model with N extra tensors of 8 F32 values (300,000 make 25 MB),
and a sparse copy holding four 1 GiB metadata strings (a few hundred KB on disk).
Each measurement runs in a fresh process (`hostile_support.run_script_measured`):
- `open`: `open_gguf` plus `build_card` (what every command does first);
- `inspect`: `walkthrough inspect FILE`, and `--tensors` (output to a temporary file);
- `app`: the app under Pilot at 80x24, until the File stage has settled.
For each it prints wall seconds, CPU seconds and peak resident MiB, then, against
the smallest count measured in the same run, the extra CPU time and memory per extra
tensor (µs and bytes): equal figures down the column mean time and memory are linear
in the tensors. CPU time is the figure to compare: wall time on a shared machine
swings with its load (printed first). The first row (the reference model itself) is
the fixed cost: imports and start-up.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

TESTS_DIR = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS_DIR))

from hostile_support import LLAMA, run_script_measured, with_many_tensors, with_sparse_strings  # noqa: E402

GIB = 1 << 30

# Each script prints its own wall time (seconds, after imports are done counting from its start).
OPEN = """
import sys, time
start = time.perf_counter()
from walkthrough.inspect.card import build_card
from walkthrough.inspect.gguf import open_gguf
build_card(open_gguf(sys.argv[1]))
print(time.perf_counter() - start)
"""
CLI = """
import contextlib, sys, time
start = time.perf_counter()
from walkthrough.cli import main
with open(sys.argv[2], "w") as out, contextlib.redirect_stdout(out):
    code = main(sys.argv[3:] + [sys.argv[1]])
assert code == 0, code
print(time.perf_counter() - start)
"""
APP = """
import asyncio, sys, time
start = time.perf_counter()
sys.path.insert(0, sys.argv[2])
from app_support import app_for, settle

async def first_screen():
    app = app_for(sys.argv[1])
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        assert app.error is None, app.error

asyncio.run(first_screen())
print(time.perf_counter() - start)
"""


def measure(script: str, *args: str) -> tuple[float, float, int]:
    """(wall seconds the script reports, CPU seconds of its process, its peak resident bytes)."""
    out, peak, cpu = run_script_measured(script, list(args), timeout=1800)
    return float(out.strip().splitlines()[-1]), cpu, peak


def runs(path: Path, scratch: Path, app: bool) -> dict[str, tuple[float, float, int]]:
    listing = str(scratch / "listing.txt")
    results = {
        "open": measure(OPEN, str(path)),
        "inspect": measure(CLI, str(path), listing, "inspect"),
        "inspect --tensors": measure(CLI, str(path), listing, "inspect", "--tensors"),
    }
    if app:
        results["app"] = measure(APP, str(path), str(TESTS_DIR))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", default="30000,100000,300000", help="extra tensors per file, comma-separated")
    parser.add_argument("--no-app", action="store_true", help="skip the app's first screen (the slowest part)")
    args = parser.parse_args()
    counts = [int(c) for c in args.counts.split(",")]
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; {time.strftime('%Y-%m-%d %H:%M')}")
    with tempfile.TemporaryDirectory() as folder:
        scratch = Path(folder)
        measured: dict[int, dict[str, tuple[float, float, int]]] = {0: runs(LLAMA, scratch, not args.no_app)}
        for n in counts:
            path = with_many_tensors(scratch, f"many-{n}.gguf", n)
            measured[n] = runs(path, scratch, not args.no_app)
            path.unlink()
        names = list(measured[0])
        base = counts[0]
        for name in names:
            print(f"\n{name}\n{'tensors added':>14}  {'wall':>8}  {'CPU':>8}  {'peak':>8}  "
                  f"{'CPU/tensor':>10}  {'memory/tensor':>13}")
            for n, results in measured.items():
                seconds, cpu, peak = results[name]
                line = f"{n:>14,}  {seconds:6.2f} s  {cpu:6.2f} s  {peak / 2**20:4.0f} MiB"
                if n > base:
                    _, cpu0, peak0 = measured[base][name]
                    line += f"  {(cpu - cpu0) / (n - base) * 1e6:7.1f} µs  {(peak - peak0) / (n - base):11.0f} B"
                print(line)
        print(f"(per extra tensor: against the {base:,}-tensor file)")

        sparse = with_sparse_strings(scratch, "sparse.gguf", {"general.name": GIB, "tokenizer.chat_template": GIB,
                                                              "hostile.a": GIB, "hostile.b": GIB})
        print(f"\nfour 1 GiB strings: {sparse.stat().st_size / GIB:.1f} GiB apparent, "
              f"{sparse.stat().st_blocks * 512 / 2**20:.1f} MiB on disk")
        for name, (seconds, cpu, peak) in runs(sparse, scratch, not args.no_app).items():
            print(f"  {name:18} {seconds:6.2f} s wall  {cpu:6.2f} s CPU  {peak / 2**20:4.0f} MiB")


if __name__ == "__main__":
    main()
