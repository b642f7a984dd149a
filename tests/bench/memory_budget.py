"""Benchmark of the numpy engine's weight budget (--max-memory): decode tokens/s and peak resident memory of
one request, unbounded and at a quarter (and a half) of the model's dequantized size.

Run from the repository root:

    python tests/bench/memory_budget.py [MODEL.gguf] [--prompt 16] [--decode 8]

MODEL defaults to SmolLM2 (SMOLLM2_GGUF, see tests/real_weights_support.py). Each budget runs in a fresh
process (`walkthrough bench --json --max-memory ...`), so its peak resident memory (the child's ru_maxrss)
is its own; the unbounded run is the reference measured in the same run, and every other row prints its
ratios against it. Nothing is asserted (tests never time things).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO), str(REPO / "tests")]  # this tree first, then the test helpers

_CHILD = """
import json, resource, sys
from contextlib import redirect_stdout
from io import StringIO
from walkthrough.cli import main
out = StringIO()
with redirect_stdout(out):
    code = main(sys.argv[1:])
record = json.loads(out.getvalue())
record["peak_rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps(record))
"""


def run(model: Path, budget: int | None, prompt: int, decode: int) -> dict:
    """One request in a fresh process: bench's JSON record plus the process's peak resident bytes."""
    argv = ["bench", str(model), "--json", "--prompt-tokens", str(prompt), "--output-tokens", str(decode)]
    if budget is not None:
        argv += ["--max-memory", f"{budget >> 20}M"]
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    done = subprocess.run([sys.executable, "-c", _CHILD, *argv], capture_output=True, text=True, env=env,
                          check=True)
    return json.loads(done.stdout)


def main() -> None:
    from real_weights_support import find_smollm2

    from walkthrough.costs.memory import dequantized_bytes
    from walkthrough.inspect.gguf import open_gguf

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", type=Path, default=find_smollm2())
    parser.add_argument("--prompt", type=int, default=16)
    parser.add_argument("--decode", type=int, default=8)
    args = parser.parse_args()
    if args.model is None:
        sys.exit("no model: name one, or set SMOLLM2_GGUF")
    with open_gguf(args.model) as f:
        everything = dequantized_bytes(f)
        file_bytes = f.file_size
    print(f"{args.model.name}: {file_bytes / 2**20:.1f} MiB on disk, {everything / 2**20:.1f} MiB dequantized "
          f"(float32; float64 for an F32 file's matrices)")
    rows = [("unbounded", None), ("1/2 of dequantized", everything // 2), ("1/4 of dequantized", everything // 4)]
    reference = None
    print(f"{'budget':<22}{'MiB':>8}{'decode tok/s':>14}{'x ref':>7}{'prefill tok/s':>15}{'peak RSS MiB':>14}"
          f"{'x ref':>7}")
    for label, budget in rows:
        r = run(args.model, budget or 64 * everything, args.prompt, args.decode)  # "unbounded": room for all
        m = r["measured"]
        reference = reference or r
        ref = reference["measured"]
        print(f"{label:<22}{(budget or 64 * everything) / 2**20:>8.0f}{m['decode_tokens_per_s']:>14.2f}"
              f"{m['decode_tokens_per_s'] / ref['decode_tokens_per_s']:>7.2f}{m['prefill_tokens_per_s']:>15.1f}"
              f"{r['peak_rss'] / 2**20:>14.0f}{r['peak_rss'] / reference['peak_rss']:>7.2f}")
        print(f"{'':<22}{r['memory']}")


if __name__ == "__main__":
    main()
