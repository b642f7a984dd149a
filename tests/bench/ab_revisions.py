"""The numpy engine of this checkout timed against another git revision's, in one process, pass by pass.

    python tests/bench/ab_revisions.py REV [MODEL.gguf] [--prompt 128] [--tokens 16] [--rounds 16]

With no MODEL, SmolLM2-135M-Instruct Q4_1 (SMOLLM2_GGUF). This machine's speed moves between runs by more than
most changes to the engine do (llama.cpp's own prefill ran at 80 to 137 tokens a second from one run of
`bench_numpy_speed.py` to the next), so two separate runs cannot tell a 5% change. Here REV's `walkthrough` package
is extracted (`git archive`) as `walkthrough_rev`, its imports renamed to match, and both engines open the same
file. Each round runs both, alternating which goes first: a prefill of the default request's first `--prompt`
tokens in one pass, then `--tokens` greedy decode passes (F32 KV cache, OpenBLAS held to one thread, CPU
time of this process), the two engines' passes interleaved one by one, so each pair meets the same spell of the
machine. The report gives the median of the pairs' ratios (this checkout over REV, so under 1 is faster), the best
prefill and decode pass of each, and whether the two gave the same logits bit for bit after every pass.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable
from io import BytesIO
from pathlib import Path

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy loads, as walkthrough.cli.main does
REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "tests" / "bench"))

import numpy as np
from bench_numpy_speed import cpu_seconds
from real_weights_support import find_smollm2, request_ids

from walkthrough.engine.glassbox.model import Model
from walkthrough.engine.glassbox.session import Session
from walkthrough.inspect.gguf import open_gguf

RENAMED = "walkthrough_rev"
_PACKAGE_NAME = re.compile(r"(?<![\w.])walkthrough(?=\.|\s+import\b|$)", re.MULTILINE)


def renamed_imports(source: str, name: str = RENAMED) -> str:
    """Python source with every dotted `walkthrough.` reference and `from walkthrough import` / `import walkthrough`
    renamed to package `name`, so a second copy of the package imports itself instead of this checkout."""
    return _PACKAGE_NAME.sub(name, source)


def extract(rev: str, into: Path, repo: Path = REPO) -> Path:
    """REV's `walkthrough` package as `into / RENAMED`, imports renamed (`renamed_imports`); returns that folder.

    Raises:
        subprocess.CalledProcessError: git cannot read REV.
    """
    archive = subprocess.run(["git", "-C", str(repo), "archive", "--format=tar", rev, "walkthrough"],
                             check=True, capture_output=True).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    package = into / RENAMED
    (into / "walkthrough").rename(package)
    for path in package.rglob("*.py"):
        path.write_text(renamed_imports(path.read_text(encoding="utf-8")), encoding="utf-8")
    return package


def load_revision(rev: str, into: Path) -> tuple[type, type, Callable]:
    """(Model, Session, open_gguf) of REV's engine, importable beside this checkout's."""
    extract(rev, into)
    sys.path.insert(0, str(into))
    importlib.invalidate_caches()
    model = importlib.import_module(f"{RENAMED}.engine.glassbox.model")
    session = importlib.import_module(f"{RENAMED}.engine.glassbox.session")
    gguf = importlib.import_module(f"{RENAMED}.inspect.gguf")
    return model.Model, session.Session, gguf.open_gguf


def compare(engines: dict[str, Callable[[], object]], ids: list[int], tokens: int, rounds: int) -> dict:
    """Time both engines ("rev" and "this") side by side, `rounds` times: each round a prefill of `ids` in each,
    then `tokens` greedy decode passes, the two engines' passes interleaved one by one (which goes first alternates),
    so both meet the same spell of the machine. Returns the median of the paired ratios this / rev (prefills over
    rounds, decode passes over every pass), the best prefill and decode pass of each, and whether the two gave the
    same logits bit for bit after every pass."""
    for new in engines.values():  # load, dequantize, pack, check and copy lanes: first-use work, not timed
        new().feed(ids, phase="prefill")
    names = list(engines)
    prefill: dict[str, list[float]] = {name: [] for name in names}
    decode: dict[str, list[float]] = {name: [] for name in names}
    same = True
    turn = 0
    for _ in range(rounds):
        sessions = {name: engines[name]() for name in names}
        for t in range(tokens + 1):  # the prefill, then the decode passes
            for name in (names if turn % 2 == 0 else names[::-1]):
                s = sessions[name]
                if t == 0:
                    prefill[name].append(cpu_seconds(lambda s=s: s.feed(ids, phase="prefill")))
                else:
                    token = [int(np.argmax(s.last_logits))]
                    decode[name].append(cpu_seconds(lambda s=s, token=token: s.feed(token, phase="decode")))
            turn += 1
            same = same and np.array_equal(np.asarray(sessions["rev"].last_logits).view(np.uint32),
                                           np.asarray(sessions["this"].last_logits).view(np.uint32))
    ratio = {phase: np.array(times["this"]) / np.array(times["rev"]) for phase, times in (("prefill", prefill),
                                                                                          ("decode", decode))}
    return {"prefill_ratio": float(np.median(ratio["prefill"])), "decode_ratio": float(np.median(ratio["decode"])),
            "best_rev": [min(prefill["rev"]), min(decode["rev"])], "best_this": [min(prefill["this"]), min(decode["this"])],
            "same_logits": same}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rev", help="a git revision of this repository (main, a commit)")
    ap.add_argument("model", nargs="?", type=Path)
    ap.add_argument("--prompt", type=int, default=128, help="prompt tokens prefilled in one pass")
    ap.add_argument("--tokens", type=int, default=16, help="decode passes a round")
    ap.add_argument("--rounds", type=int, default=16)
    args = ap.parse_args(argv)
    if args.tokens < 1 or args.rounds < 1 or args.prompt < 1:
        ap.error("--prompt, --tokens and --rounds need at least 1")
    path = args.model or find_smollm2()
    if path is None or not path.is_file():
        print("no model: give a GGUF or set SMOLLM2_GGUF", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="ab-revisions-") as tmp:
        try:
            RevModel, RevSession, rev_open = load_revision(args.rev, Path(tmp))
        except subprocess.CalledProcessError as e:
            print(f"git cannot read revision {args.rev!r}: {e.stderr.decode(errors='replace').strip()}", file=sys.stderr)
            return 2
        f = open_gguf(path)
        ids = request_ids(f)[: args.prompt]
        this, rev = Model(f), RevModel(rev_open(path))
        engines = {"rev": lambda: RevSession(rev, kv_type="f32"), "this": lambda: Session(this, kv_type="f32")}
        out = compare(engines, ids, args.tokens, args.rounds)
    print(f"{path.name}: this checkout against {args.rev}, {len(ids)} prompt tokens, {args.tokens} decode passes, "
          f"{args.rounds} rounds, passes interleaved, one thread, F32 KV cache, CPU time")
    print(f"  median of the paired ratios, this / {args.rev}: prefill {out['prefill_ratio']:.3f}, "
          f"decode {out['decode_ratio']:.3f} (under 1: faster)")
    (rp, rd), (tp, td) = out["best_rev"], out["best_this"]
    print(f"  best: prefill {rp * 1e3:,.0f} -> {tp * 1e3:,.0f} ms, decode {rd * 1e3:.1f} -> {td * 1e3:.1f} ms a pass")
    print("  logits: " + ("the same bits after every pass" if out["same_logits"] else "DIFFER between the two"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
