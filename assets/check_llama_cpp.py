"""Check the tiny GGUF against llama.cpp itself (via llama-cpp-python; a script, not a project dependency).

1. Tokenize the rendered default request with llama.cpp and with the training tokenizer
   (assets/build/tokenizer.json) and compare ids.
2. Greedy-decode the default request's answer with llama.cpp.
3. Greedy-decode 20 records from a seed never used in training and count answers that name a
   drug from their record, and answers that name a drug not in it.

Usage: /work/llamavenv/bin/python assets/check_llama_cpp.py [--model FILE] [--records N]

On this machine ggml's AMX weight repacking dies with SIGILL (the sandbox does not grant AMX
tiles), so the model is loaded with `use_extra_bufts = False`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import llama_cpp
import llama_cpp.llama_cpp as llama_c

ASSETS = Path(__file__).parent
sys.path.insert(0, str(ASSETS))
from corpus import EVAL_SEED, IM_END, drugs_named, load_facts, make_examples, render_chat

MAX_NEW = 160


def load(model: Path) -> llama_cpp.Llama:
    """Load the GGUF without extra (repacking) buffer types."""
    default_params = llama_c.llama_model_default_params

    def params():
        p = default_params()
        p.use_extra_bufts = False
        return p

    llama_c.llama_model_default_params = params
    try:
        return llama_cpp.Llama(model_path=str(model), n_ctx=2048, logits_all=True, verbose=False)
    finally:
        llama_c.llama_model_default_params = default_params


def greedy(llm: llama_cpp.Llama, prompt: str) -> tuple[str, int, bool]:
    """Greedy answer text, its token count and whether it ended with <|im_end|>."""
    ids = llm.tokenize(prompt.encode(), add_bos=False, special=True)
    llm.reset()
    out: list[int] = []
    eos = llm.token_eos()
    for tok in llm.generate(ids, temp=0.0, top_k=1, reset=True):
        out.append(tok)
        if tok == eos or len(out) >= MAX_NEW:
            break
    text = llm.detokenize(out, special=True).decode("utf-8", errors="replace")
    return text, len(out), bool(out) and out[-1] == eos


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=ASSETS / "tiny-clinical-moe.gguf")
    ap.add_argument("--tokenizer", type=Path, default=ASSETS / "build" / "tokenizer.json")
    ap.add_argument("--records", type=int, default=20)
    args = ap.parse_args(argv)
    llm = load(args.model)
    messages = json.loads((ASSETS / "default_request.json").read_text(encoding="utf-8"))
    prompt = render_chat(messages)
    facts = load_facts()
    examples = make_examples(EVAL_SEED, args.records, facts)
    ids = llm.tokenize(prompt.encode(), add_bos=False, special=True)
    print(f"default request: {len(ids)} tokens")
    if args.tokenizer.exists():
        from tokenizers import Tokenizer

        ours = Tokenizer.from_file(str(args.tokenizer))
        texts = [prompt] + [render_chat(e.messages) + e.answer for e in examples]
        same = sum(ours.encode(t).ids == llm.tokenize(t.encode(), add_bos=False, special=True)
                   for t in texts)
        print(f"llama.cpp ids == training tokenizer ids on {same}/{len(texts)} texts")
    else:
        print(f"{args.tokenizer} missing: token ids not compared")
    text, n, stopped = greedy(llm, prompt)
    print(f"answer ({n} tokens, ended with {IM_END}: {stopped}):\n{text}\n")

    named_ok = wrong = 0
    for i, ex in enumerate(examples):
        answer, _, _ = greedy(llm, render_chat(ex.messages))
        in_record = drugs_named(ex.messages[1]["content"], facts)
        named = drugs_named(answer, facts)
        named_ok += bool(named & in_record)
        wrong += bool(named - in_record)
        hit = set(ex.interacting) <= named
        print(f"{i:2d} new={ex.new_drug} expect={ex.interacting} named={sorted(named)} "
              f"{'ok' if hit and not named - in_record else 'MISS'}")
    print(f"named a drug from the record: {named_ok}/{args.records}; "
          f"named a drug not in the record: {wrong}/{args.records}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
