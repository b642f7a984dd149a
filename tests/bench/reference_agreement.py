"""How closely the engine follows llama.cpp on every stored reference model, one line per file.

For each `ref-*.gguf` with its `.logits.json` (../shared/fixtures/reference and tests/fixtures/arch), the
engine is fed the reference's prompt in one prefill and then llama.cpp's 16 greedy tokens (F32 KV cache, as
the references were made), and the script prints the largest absolute logit difference over the 40 rows, the
top-1 agreement over rows, and whether the engine's own greedy choices equal llama.cpp's.

    python tests/bench/reference_agreement.py [FILE.gguf ...]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from walkthrough.engine.glassbox.model import Model
from walkthrough.engine.glassbox.session import Session

FOLDERS = (ROOT.parent / "shared" / "fixtures" / "reference", ROOT / "tests" / "fixtures" / "arch")


def agreement(path: Path) -> str:
    ref = json.loads(path.with_suffix(".logits.json").read_text())
    model = Model.open(path)
    session = Session(model, kv_type="f32")
    steps = list(session.prefill(ref["prompt_ids"], all_logits=True))
    ours = [np.concatenate([s.all_logits for s in steps])]
    for token in ref["greedy_ids"]:
        ours.append(session.feed([token], phase="decode").logits[None, :])
    rows = np.concatenate(ours)
    theirs = np.concatenate([np.asarray(ref["prefill_logits"]), np.asarray(ref["decode_logits"])])
    greedy = [int(np.argmax(r)) for r in rows[len(ref["prompt_ids"]) - 1 : -1]]
    types = ", ".join(sorted(model.card.bytes_by_type))
    return (f"{path.name} ({model.card.architecture}; {types}): max |diff| {np.abs(rows - theirs).max():.2g}, "
            f"top-1 {np.mean(rows.argmax(1) == theirs.argmax(1)):.1%}, greedy identical: {greedy == ref['greedy_ids']}")


def main(argv: list[str]) -> int:
    paths = [Path(a) for a in argv] or sorted(
        p for folder in FOLDERS for p in folder.glob("ref-*.gguf") if p.with_suffix(".logits.json").exists())
    for path in paths:
        print(agreement(path), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
