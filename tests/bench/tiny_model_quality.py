"""Answer quality of the bundled tiny model on any number of generated records, with our engine.

Run from the repository root:

    python tests/bench/tiny_model_quality.py [--seed 4242] [--records 100] [--model FILE] [--show]

Greedy-decodes each record's question (the corpus generator of `assets/corpus.py`, the seed given;
`TRAIN_SEED` is refused) and prints how many answers name a drug from their record, how many name a
drug that is not in it, how many interactions cite the right record line, and how many answers are
word for word the corpus answer. `--show` prints every answer that differs. The quality tests
(`tests/test_tiny_model.py`) check 20 records of `EVAL_SEED`; this script measures the same rates on
larger or other samples.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for tiny_model_support
from tiny_model_support import (
    MAX_NEW_HELD_OUT,
    MODEL_PATH,
    Runner,
    cited_lines,
    corpus,
    record_line,
)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=4242)
    ap.add_argument("--records", type=int, default=100)
    ap.add_argument("--model", type=Path, default=MODEL_PATH)
    ap.add_argument("--show", action="store_true", help="print every answer that differs")
    args = ap.parse_args(argv)
    if args.seed == corpus.TRAIN_SEED:
        ap.error(f"seed {args.seed} is the training seed; pick another")
    runner = Runner(args.model)
    facts = corpus.load_facts()
    named_ok = named_wrong = exact = cited = cited_right = 0
    for i, ex in enumerate(corpus.make_examples(args.seed, args.records, facts)):
        text, _ = runner.answer(ex.messages, MAX_NEW_HELD_OUT)
        user = ex.messages[1]["content"]
        named = corpus.drugs_named(text, facts)
        in_record = corpus.drugs_named(user, facts)
        named_ok += bool(named & in_record)
        named_wrong += bool(named - in_record)
        exact += text == ex.answer
        for drug, line in cited_lines(text):
            cited += 1
            cited_right += record_line(user, drug) == line
        if args.show and text != ex.answer:
            print(f"record {i}: not in record {sorted(named - in_record)}\n  got:  {text}\n"
                  f"  want: {ex.answer}")
    n = args.records
    print(f"{args.model.name}, seed {args.seed}, {n} records, greedy")
    print(f"named a drug from the record:      {named_ok}/{n}")
    print(f"named a drug not in the record:    {named_wrong}/{n}")
    print(f"interactions citing the right line: {cited_right}/{cited}")
    print(f"word for word the corpus answer:   {exact}/{n}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
