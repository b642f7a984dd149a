"""Compare the chat path's token ids with llama.cpp's on every template fixture and vocabulary.

Run from the repository root with the project's Python:

    python tests/bench/check_chat_llama_cpp.py [--llama-python /work/llamavenv/bin/python]

For every rendered case in `../shared/fixtures/templates/` and each vocabulary
(the `vocab/` files and the qwen2 reference model), `walkthrough.inspect.chat`
renders and tokenizes the messages; a second Python with llama-cpp-python then
tokenizes the same rendered text as llama.cpp's chat path does
(`common_chat_templates_apply_jinja` drops a leading BOS text when the vocabulary
adds BOS, then `llama_tokenize(add_special=true, parse_special=true)`).

Expected: identical ids on every case whose messages hold no special-token text;
on the `injection` cases llama.cpp turns the user's `<|im_end|>` into a special
token wherever the vocabulary has one, and we do not, so those differ by design.
Nothing is asserted: the script prints the counts (llama-cpp-python is not a
dependency of the project).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[3] / "shared" / "fixtures"
VOCABS = [
    "vocab/ggml-vocab-qwen35.gguf",
    "vocab/ggml-vocab-llama-bpe.gguf",
    "vocab/ggml-vocab-phi-3.gguf",
    "vocab/ggml-vocab-llama-spm.gguf",
    "vocab/ggml-vocab-gpt-2.gguf",
    "reference/ref-qwen2-f32.gguf",
]

LLAMA_SIDE = """
import json, sys, llama_cpp
rows = json.load(sys.stdin)
models, out = {}, []
for r in rows:
    if r["vocab"] not in models:
        models[r["vocab"]] = llama_cpp.Llama(model_path=r["vocab"], vocab_only=True, verbose=False)
    text = r["text"]
    if r["add_bos"] and r["bos"] and text.startswith(r["bos"]):
        text = text[len(r["bos"]):]
    out.append(models[r["vocab"]].tokenize(text.encode(), add_bos=True, special=True))
json.dump(out, sys.stdout)
"""


def ours() -> list[dict]:
    from walkthrough.inspect.chat import chat_tokens, special_token_text
    from walkthrough.inspect.gguf import open_gguf
    from walkthrough.inspect.template import load_template_file
    from walkthrough.inspect.tokenizer import GGUFTokenizer

    rows = []
    for vocab in VOCABS:
        with open_gguf(FIXTURES / vocab) as f:
            tokenizer = GGUFTokenizer.from_gguf(f)
        for path in sorted((FIXTURES / "templates").glob("*.expected.json")):
            doc = json.loads(path.read_text(encoding="utf-8"))
            source = load_template_file(FIXTURES / "templates" / doc["template"])
            for name, case in doc["cases"].items():
                if "text" not in case:
                    continue
                result = chat_tokens(
                    tokenizer,
                    source,
                    case["messages"],
                    add_generation_prompt=case["add_generation_prompt"],
                )
                rows.append(
                    {
                        "vocab": str(FIXTURES / vocab),
                        "template": doc["template"],
                        "case": name,
                        "text": result.text,
                        "ids": result.ids,
                        "add_bos": tokenizer.add_bos,
                        "bos": special_token_text(tokenizer, tokenizer.bos_id),
                        "specials_from_messages": sum(
                            t.special and t.message is not None for t in result.tokens
                        ),
                    }
                )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--llama-python",
        default="/work/llamavenv/bin/python",
        help="a Python with llama-cpp-python installed",
    )
    args = parser.parse_args()
    rows = ours()
    done = subprocess.run(
        [args.llama_python, "-c", LLAMA_SIDE],
        input=json.dumps(rows),
        capture_output=True,
        text=True,
        check=True,
    )
    theirs = json.loads(done.stdout)
    plain = [(r, t) for r, t in zip(rows, theirs) if r["case"] != "injection"]
    injected = [(r, t) for r, t in zip(rows, theirs) if r["case"] == "injection"]
    same = sum(r["ids"] == t for r, t in plain)
    print(
        f"cases without special text in messages: {same} of {len(plain)} identical to llama.cpp's chat path"
    )
    for r, t in plain:
        if r["ids"] != t:
            print(f"  differs: {Path(r['vocab']).name} {r['template']} {r['case']}")
    obeyed = sum(r["ids"] != t for r, t in injected)
    ours_obeyed = sum(r["specials_from_messages"] > 0 for r, _ in injected)
    print(
        f"injection cases: ids differ from llama.cpp's in {obeyed} of {len(injected)} (llama.cpp parses the "
        f"user's special-token text); cases where ours made a special token from message text: {ours_obeyed}"
    )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
