"""Benchmark: time and peak memory on files with many tiny tensors, many metadata keys and huge sparse strings,
and the tensor filter's cost per keystroke (issue 20).

Not a test (tests/conftest.py keeps pytest out of `tests/bench`). Run from the repo root:

    python tests/bench/bench_hostile_sizes.py [--counts 30000,100000,300000] [--keys 30000,300000] [--no-app]

Files are built in a temporary folder and deleted at the end: copies of the
reference llama model with N extra tensors of 8 F32 values (300,000 make 25 MB),
with N extra metadata keys (strings and uint32 in turn: 300,000 make 12 MB), and a
sparse copy holding four 1 GiB metadata strings (a few hundred KB on disk).
Each measurement runs in a fresh process (`hostile_support.run_script_measured`):
- `open`: `open_gguf` plus `build_card` (what every command does first);
- `inspect`: `walkthrough inspect FILE`, and `--tensors`, or `--json` and `--metadata` (output to a temporary
  file);
- `app`: the app under Pilot at 80x24, until the File stage has settled.
For each it prints wall seconds, CPU seconds and peak resident MiB, then, against
the smallest count measured in the same run, the extra CPU time and memory per extra
tensor or key (µs and bytes): equal figures down the column mean time and memory are
linear in them. CPU time is the figure to compare: wall time on a shared machine
swings with its load (printed first). The first row (the reference model itself) is
the fixed cost: imports and start-up.

The filter, on the largest tensor file: milliseconds per keystroke of the plain scan
(every name lowered and searched: what the filter did before) and of
`tensor_pages.TensorFilter` (names lowered once, typing on scans only the previous
matches), over typed needles, in the same process; their results are checked equal.
Then the app's CPU seconds per keystroke, typing one key at a time and waiting for
the filter each time, with the plain scan and a table filled on every keystroke
(before) and as it is now; and the CPU seconds for the same needle typed as one burst.
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

from hostile_support import (
    LLAMA,
    run_script_measured,
    with_many_keys,
    with_many_tensors,
    with_sparse_strings,
)

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

# The filter's cost per keystroke, without the app: the plain scan against TensorFilter, for each prefix of needles.
FILTER = """
import json, sys, time
from walkthrough.inspect.gguf import open_gguf
from walkthrough.render.tensor_pages import TensorFilter, ordered_rows

def plain(rows, needle):
    needle = needle.lower().strip()
    if not needle:
        return rows
    return [r for r in rows if needle in r.tensor.name.lower() or needle in r.group
            or needle in r.tensor.type_name.lower()]

rows = ordered_rows(open_gguf(sys.argv[1]))
start = time.process_time()
search = TensorFilter(rows)
index = time.process_time() - start
before, after = [], []
for typed in json.loads(sys.argv[2]):
    for i in range(1, len(typed) + 1):
        start = time.process_time()
        expected = plain(rows, typed[:i])
        before.append(time.process_time() - start)
        start = time.process_time()
        kept = search.matching(typed[:i])
        after.append(time.process_time() - start)
        assert kept == expected, typed[:i]
print(json.dumps({"index": index, "before": before, "after": after}))
"""
# The app's CPU per keystroke in the tensor filter: one key at a time (waiting for the filter each time), then a
# burst. argv: file, tests folder, needle, "before" (plain scan, table filled every time) or "after".
APP_FILTER = """
import asyncio, json, sys, time
sys.path.insert(0, sys.argv[2])
from app_support import app_for, open_tensor_table
from walkthrough.screens import table_pages
from walkthrough.render import tensor_pages

if sys.argv[4] == "before":
    def plain(self, needle):
        needle = needle.lower().strip()
        if not needle:
            return self.rows
        return [r for r in self.rows if needle in r.tensor.name.lower() or needle in r.group
                or needle in r.tensor.type_name.lower()]
    tensor_pages.TensorFilter.matching = plain
    start = table_pages.Pages.start
    table_pages.Pages.start = lambda self, *a, **k: start(self, *a, **k) or True

async def applied(pilot):
    while pilot.app.screen._typing is not None:
        await pilot.pause(0.02)
    await pilot.pause()

async def typing():
    app = app_for(sys.argv[1])
    needle = sys.argv[3]
    async with app.run_test(size=(80, 24)) as pilot:
        table = await open_tensor_table(pilot)
        await pilot.press("slash")
        keys = []
        for ch in needle:
            start = time.process_time()
            await pilot.press(ch)
            await applied(pilot)
            keys.append(time.process_time() - start)
        rows = table.row_count
        await pilot.press(*["backspace"] * len(needle))
        await applied(pilot)
        start = time.process_time()
        await pilot.press(*needle)
        await applied(pilot)
        burst = time.process_time() - start
        assert table.row_count == rows
    print(json.dumps({"keys": keys, "burst": burst, "rows": rows}))

asyncio.run(typing())
"""
NEEDLES = ["extra.12345", "blk.0.attn", "weight", "f32"]  # typed one character at a time


def measure(script: str, *args: str) -> tuple[float, float, int]:
    """(wall seconds the script reports, CPU seconds of its process, its peak resident bytes)."""
    out, peak, cpu = run_script_measured(script, list(args), timeout=1800)
    return float(out.strip().splitlines()[-1]), cpu, peak


def runs(path: Path, scratch: Path, app: bool, options: tuple[str, ...] = ("--tensors",)
         ) -> dict[str, tuple[float, float, int]]:
    listing = str(scratch / "listing.txt")
    results = {
        "open": measure(OPEN, str(path)),
        "inspect": measure(CLI, str(path), listing, "inspect"),
    }
    for option in options:
        results[f"inspect {option}"] = measure(CLI, str(path), listing, "inspect", option)
    if app:
        results["app"] = measure(APP, str(path), str(TESTS_DIR))
    return results


def print_figures(measured: dict[int, dict[str, tuple[float, float, int]]], noun: str) -> None:
    """Each measurement's rows, one per count, with the extra CPU and memory per extra tensor or key."""
    counts = [n for n in measured if n]
    base = counts[0]
    for name in measured[0]:
        print(f"\n{name}\n{noun + ' added':>14}  {'wall':>8}  {'CPU':>8}  {'peak':>8}  "
              f"{'CPU/' + noun[:-1]:>10}  {'memory/' + noun[:-1]:>13}")
        for n, results in measured.items():
            seconds, cpu, peak = results[name]
            line = f"{n:>14,}  {seconds:6.2f} s  {cpu:6.2f} s  {peak / 2**20:4.0f} MiB"
            if n > base:
                _, cpu0, peak0 = measured[base][name]
                line += f"  {(cpu - cpu0) / (n - base) * 1e6:7.1f} µs  {(peak - peak0) / (n - base):11.0f} B"
            print(line)
    print(f"(per extra {noun[:-1]}: against the {base:,}-{noun[:-1]} file)")


def filter_figures(path: Path, app: bool) -> None:
    """The tensor filter's cost per keystroke, before and after, on one file."""
    import json

    out, _, _ = run_script_measured(FILTER, [str(path), json.dumps(NEEDLES)], timeout=1800)
    scan = json.loads(out)
    n = len(scan["before"])
    print(f"\ntensor filter on {path.name}: {n} keystrokes typing {', '.join(NEEDLES)} "
          f"(lowering the names once: {scan['index'] * 1e3:.0f} ms)")
    for name in ("before", "after"):
        times = sorted(scan[name])
        print(f"  scan {name:6}  mean {sum(times) / n * 1e3:6.1f} ms  median {times[n // 2] * 1e3:6.1f} ms  "
              f"max {times[-1] * 1e3:6.1f} ms per keystroke")
    if not app:
        return
    needle = NEEDLES[0]
    for name in ("before", "after"):
        out, _, _ = run_script_measured(APP_FILTER, [str(path), str(TESTS_DIR), needle, name], timeout=1800)
        typed = json.loads(out)
        keys = typed["keys"]
        print(f"  app {name:6}  typing {needle!r} one key at a time: {sum(keys) / len(keys):5.2f} s CPU a key "
              f"(max {max(keys):5.2f} s); as one burst: {typed['burst']:5.2f} s CPU in all ({typed['rows']} rows kept)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", default="30000,100000,300000", help="extra tensors per file, comma-separated")
    parser.add_argument("--keys", default="30000,300000", help="extra metadata keys per file, comma-separated")
    parser.add_argument("--no-app", action="store_true", help="skip the app (the slowest part)")
    args = parser.parse_args()
    counts = [int(c) for c in args.counts.split(",")]
    key_counts = [int(c) for c in args.keys.split(",")]
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; {time.strftime('%Y-%m-%d %H:%M')}")
    with tempfile.TemporaryDirectory() as folder:
        scratch = Path(folder)
        measured: dict[int, dict[str, tuple[float, float, int]]] = {0: runs(LLAMA, scratch, not args.no_app)}
        for n in counts:
            path = with_many_tensors(scratch, f"many-{n}.gguf", n)
            measured[n] = runs(path, scratch, not args.no_app)
            if n < max(counts):
                path.unlink()
        print_figures(measured, "tensors")
        filter_figures(path, not args.no_app)
        path.unlink()

        key_options = ("--json", "--metadata")
        measured = {0: runs(LLAMA, scratch, not args.no_app, key_options)}
        for n in key_counts:
            path = with_many_keys(scratch, f"keys-{n}.gguf", n)
            measured[n] = runs(path, scratch, not args.no_app, key_options)
            path.unlink()
        print_figures(measured, "keys")

        sparse = with_sparse_strings(scratch, "sparse.gguf", {"general.name": GIB, "tokenizer.chat_template": GIB,
                                                              "hostile.a": GIB, "hostile.b": GIB})
        print(f"\nfour 1 GiB strings: {sparse.stat().st_size / GIB:.1f} GiB apparent, "
              f"{sparse.stat().st_blocks * 512 / 2**20:.1f} MiB on disk")
        for name, (seconds, cpu, peak) in runs(sparse, scratch, not args.no_app).items():
            print(f"  {name:18} {seconds:6.2f} s wall  {cpu:6.2f} s CPU  {peak / 2**20:4.0f} MiB")


if __name__ == "__main__":
    main()
