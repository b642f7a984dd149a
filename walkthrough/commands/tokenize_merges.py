"""`walkthrough tokenize ... --merges` and `--learn-merges [N]`: BPE step by step, from the command line.

`--merges` replays the file's own `tokenizer.ggml.merges` on the tokenized text
(chat or `--raw`), prints every step (the pair joined, its rank in the file, how
often it was applied), the pieces before and after, and whether the last step's
ids are the tokenizer's. `--learn-merges N` trains N merges on the bundled
paragraph and cuts the same text with them (outside special tokens). With `--json`, one object:
`steps` (left, right, rank, joins as the vocabulary stores them), `start_pieces`,
`final_ids`, `tokenizer_ids`, `agrees`; `learned` for `--learn-merges`.
The computation is `walkthrough.inspect.bpe_replay` / `bpe_train`'s; the tables
are `walkthrough.render.bpe_view`'s.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, TextIO

from walkthrough.textsafe import json_visible

if TYPE_CHECKING:  # the parser loads this module: Rich and the tokenizer load when the command runs
    from walkthrough.inspect.chat import ChatTokens


def add_arguments(p) -> None:
    """The options on the `tokenize` parser."""
    p.add_argument("--merges", action="store_true",
                   help="replay the file's BPE merges on the text, one step per merge rule")
    p.add_argument("--learn-merges", metavar="N", type=int, nargs="?", const=120, default=None,
                   help="train N merges (default 120) on a bundled paragraph and cut the text with them")


def wanted(args) -> bool:
    return bool(args.merges or args.learn_merges is not None)


def run(args, tokenizer, result: ChatTokens, out: TextIO) -> int:
    """Print the replay and/or the trained BPE for `result` (the tokenized text)."""
    from walkthrough.errors import WalkthroughError
    from walkthrough.inspect import bpe_train
    from walkthrough.inspect.bpe_replay import ordinary_text, replay
    from walkthrough.render.bpe_view import replay_view, steps_table, trained_view

    if args.learn_merges is not None and not 1 <= args.learn_merges <= 10_000:
        raise WalkthroughError(f"--learn-merges {args.learn_merges}: give a count from 1 to 10000")
    doc: dict[str, Any] = {}
    from rich.console import Console

    console = Console(file=out, markup=False, highlight=False, emoji=False)
    if args.merges:
        r = replay(tokenizer, result)
        if args.json:
            doc.update(steps=[{"left": s.left, "right": s.right, "rank": s.rank, "joins": s.joins}
                              for s in r.steps],
                       start_pieces=len(r.pieces_at(0)), final_ids=r.final_ids, tokenizer_ids=r.expected,
                       agrees=r.agrees)
        else:
            console.print(replay_view(r, 0))
            console.print(steps_table(r))
            console.print(replay_view(r, len(r.steps)))
    if args.learn_merges is not None:
        trained = bpe_train.train(bpe_train.paragraph(), args.learn_merges)
        plain, ordinary = ordinary_text(result)
        pieces, _ = bpe_train.cut(trained, plain)
        if args.json:
            doc["learned"] = {"merges": [{"left": bpe_train.shown(m.left), "right": bpe_train.shown(m.right),
                                          "count": m.count} for m in trained.merges],
                              "pieces": pieces, "tokenizer_tokens": ordinary}
        else:
            if args.merges:
                console.print()
            console.print(trained_view(trained, pieces, ordinary))
    if args.json:
        print(json_visible(json.dumps(doc, ensure_ascii=False)), file=out)
    return 0 if not args.merges or doc.get("agrees", True) else 1
