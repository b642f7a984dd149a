"""Benchmark: how fast our GGUF reader opens the vocabulary fixtures, against gguf.GGUFReader.

Not a test (tests/conftest.py keeps pytest out of `tests/bench`). Run from the repo root:

    python tests/bench/bench_gguf_open.py [--repeat 5] [--ggml-lib PATH/libggml-base.so]

For each `../shared/fixtures/vocab/*.gguf` it prints, all measured in this run:
- `open`: our `open_gguf` (header, every key, the tensor table, every count checked), best of N;
- `strings`: decoding every string array (tokens, merges) with `.get` after opening, best of N;
- `GGUFReader`: the gguf package's reader opening the same file, once (it is slow);
- `x faster`: GGUFReader time / our open time (the target is at least 100x);
- `ggml C` and `ours/C` (with `--ggml-lib`): ggml's own `gguf_init_from_file`, loaded
  with ctypes from a llama.cpp build, best of N (the target is at most about 2x);
- `peak RSS`: a fresh Python process's peak resident memory (VmHWM, Linux) after
  opening the file, and in brackets how much opening added to the peak after imports.
A last row opens a sparse header-only file describing a ~20 GB model (built with
tests/gguf_builder.py in a temporary folder) to show that tensor data is never read.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TESTS_DIR = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS_DIR))

from conftest import FIXTURES_DIR
from gguf.constants import GGUFValueType
from gguf_builder import llama_shaped_tensors, write_gguf

from walkthrough.inspect.gguf import open_gguf


def best_of(repeat: int, fn) -> float:
    """Smallest wall time of `repeat` calls, in seconds."""
    times = []
    for _ in range(repeat):
        gc.collect()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def decode_seconds(path: Path, repeat: int) -> float:
    """Best time to decode every string array (tokens, merges) of a freshly opened file."""
    times = []
    for _ in range(repeat):
        f = open_gguf(path)
        keys = [
            k
            for k, fl in f.fields.items()
            if fl.is_array and fl.element_type == GGUFValueType.STRING
        ]
        gc.collect()
        start = time.perf_counter()
        for key in keys:
            f.get(key)
        times.append(time.perf_counter() - start)
    return min(times)


def gguf_reader_seconds(path: Path) -> float:
    from gguf import GGUFReader

    start = time.perf_counter()
    GGUFReader(path)
    return time.perf_counter() - start


class _GGUFInitParams(ctypes.Structure):
    # struct gguf_init_params { bool no_alloc; struct ggml_context ** ctx; } (ggml/include/gguf.h)
    _fields_ = [("no_alloc", ctypes.c_bool), ("ctx", ctypes.c_void_p)]


def ggml_opener(lib_path: str):
    """A function opening and freeing a GGUF with ggml's C parser (metadata only)."""
    lib = ctypes.CDLL(lib_path)
    lib.gguf_init_from_file.restype = ctypes.c_void_p
    lib.gguf_init_from_file.argtypes = [ctypes.c_char_p, _GGUFInitParams]
    lib.gguf_free.argtypes = [ctypes.c_void_p]

    def open_and_free(path: Path) -> None:
        ctx = lib.gguf_init_from_file(str(path).encode(), _GGUFInitParams(True, None))
        if not ctx:
            raise RuntimeError(f"ggml could not open {path}")
        lib.gguf_free(ctx)

    return open_and_free


def _peak_rss_bytes() -> int:
    """This process's peak resident set size (VmHWM in /proc: unlike ru_maxrss, not inherited)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def peak_rss_child(path: Path) -> None:
    """(Child process) print peak RSS in bytes after imports and after opening `path`."""
    before = _peak_rss_bytes()
    f = open_gguf(path)
    after = _peak_rss_bytes()
    print(json.dumps({"before": before, "after": after, "tensors": len(f.tensors)}))


def peak_rss(path: Path) -> tuple[int, int]:
    out = subprocess.run(
        [sys.executable, __file__, "--rss-child", str(path)],
        check=True,
        capture_output=True,
        text=True,
    )
    result = json.loads(out.stdout)
    return result["before"], result["after"]


def mib(n: float) -> str:
    return f"{n / 2**20:.0f} MiB"


def row(path: Path, repeat: int, ggml, with_reader: bool) -> str:
    ours = best_of(repeat, lambda: open_gguf(path))
    strings = decode_seconds(path, repeat)
    cells = [f"{path.name:28}", f"{path.stat().st_size / 1e6:9.1f} MB", f"{ours * 1e3:8.1f} ms"]
    cells.append(f"{strings * 1e3:8.1f} ms")
    if with_reader:
        reader = gguf_reader_seconds(path)
        cells += [f"{reader * 1e3:10.0f} ms", f"{reader / ours:8.0f}x"]
    else:
        cells += [f"{'-':>13}", f"{'-':>9}"]
    if ggml is not None:
        c_time = best_of(repeat, lambda: ggml(path))
        cells += [f"{c_time * 1e3:8.1f} ms", f"{ours / c_time:6.2f}"]
    before, after = peak_rss(path)
    cells.append(f"{mib(after):>8} (+{mib(after - before)})")
    return " ".join(cells)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--repeat", type=int, default=5, help="timed runs per measurement (best is kept)"
    )
    parser.add_argument(
        "--ggml-lib", help="path to a built libggml-base.so to time ggml's C parser too"
    )
    parser.add_argument("--rss-child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.rss_child:
        peak_rss_child(Path(args.rss_child))
        return 0

    ggml = ggml_opener(args.ggml_lib) if args.ggml_lib else None
    header = (
        f"{'file':28} {'size':>12} {'open':>11} {'strings':>11} {'GGUFReader':>13} {'x faster':>9}"
    )
    if ggml is not None:
        header += f" {'ggml C':>11} {'ours/C':>6}"
    print(header + f" {'peak RSS (open)':>20}")
    for path in sorted((FIXTURES_DIR / "vocab").glob("*.gguf")):
        print(row(path, args.repeat, ggml, with_reader=True), flush=True)

    with tempfile.TemporaryDirectory() as tmp:
        meta = {"general.architecture": (GGUFValueType.STRING, "llama")}
        big = write_gguf(Path(tmp) / "sparse-20GB.gguf", meta, llama_shaped_tensors(), sparse=True)
        print(row(big, args.repeat, ggml, with_reader=False))
        print(
            f"({big.name}: {big.stat().st_size / 1e9:.1f} GB, {big.stat().st_blocks * 512 / 2**10:.0f} KiB on disk)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
