"""Benchmark the GGUF tokenizer: build time and tokenizing speed, against llama.cpp measured in the same run.

Prints figures, asserts nothing. Targets from issue 3: building the tokenizer of
the 152k-token Qwen3.5 vocabulary in about 1 s (llama.cpp's vocab-only load is
the reference), tokenizing a 6,500-token patient history in under 50 ms.

llama.cpp is timed through llama-cpp-python in another interpreter
(`--llama-python`, default /work/llamavenv/bin/python; skipped when absent),
which also tokenizes the same text so the ids can be compared.

    python tests/bench/bench_tokenizer.py [--vocab PATH ...] [--repeat N]

With `--agreement DIR`, every `ggml-vocab-*.gguf` in DIR (llama.cpp's models/
folder, say) is also checked: ids against its `.inp`/`.out` pair when present,
and against llama.cpp itself on those strings plus `--random N` seeded random
strings (mixed scripts, whitespace runs, digits, contractions, special-token
texts), with and without special parsing.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from walkthrough.inspect.gguf import open_gguf
from walkthrough.inspect.tokenizer import GGUFTokenizer
from walkthrough.inspect.vocab import read_vocab

ROOT = Path(__file__).resolve().parents[2]
VOCAB_DIR = ROOT.parent / "shared" / "fixtures" / "vocab"
DEFAULT_VOCABS = [VOCAB_DIR / "ggml-vocab-qwen35.gguf", VOCAB_DIR / "ggml-vocab-llama-spm.gguf"]
LLAMA_PYTHON = Path("/work/llamavenv/bin/python")
SEPARATOR = "\n__ggml_vocab_test__\n"
TARGET_TOKENS = 6500

# Run by the llama-cpp-python interpreter: load the vocabulary `repeat` times, then
# tokenize every (text, parse_special) case, timing the first text's tokenization.
LLAMA_SCRIPT = r"""
import json, sys, time, statistics
import llama_cpp
path, cases_path, repeat = sys.argv[1], sys.argv[2], int(sys.argv[3])
cases = json.load(open(cases_path, encoding="utf-8"))
loads = []
for _ in range(repeat):
    t = time.perf_counter()
    llm = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
    loads.append(time.perf_counter() - t)
text = cases[0][0].encode()
runs = []
for _ in range(repeat):
    t = time.perf_counter()
    llm.tokenize(text, add_bos=False, special=False)
    runs.append(time.perf_counter() - t)
ids = [llm.tokenize(t.encode(), add_bos=False, special=s) for t, s in cases]
json.dump({"load": statistics.median(loads), "tokenize": statistics.median(runs), "ids": ids},
          sys.stdout)
"""


def patient_history(tok: GGUFTokenizer, target: int, seed: int = 7) -> str:
    """A synthetic numbered patient history grown line by line until it is `target` tokens long."""
    rng = random.Random(seed)
    drugs = [
        "ramipril",
        "pregabalin",
        "simvastatin",
        "spironolactone",
        "mesalazine",
        "metformin",
        "warfarin",
        "amiodarone",
        "levothyroxine",
        "omeprazole",
        "citalopram",
        "furosemide",
    ]
    problems = [
        "heart failure",
        "type 2 diabetes",
        "atrial fibrillation",
        "migraine",
        "gout",
        "ulcerative colitis",
        "rheumatoid arthritis",
        "chronic kidney disease stage 3a",
    ]
    labs = [
        ("creatinine", "µmol/L", 60, 190),
        ("haemoglobin", "g/L", 90, 160),
        ("potassium", "mmol/L", 3, 6),
        ("HbA1c", "mmol/mol", 40, 90),
        ("TSH", "mU/L", 0, 6),
    ]
    notes = [
        "lives alone, independent",
        "daughter visits daily",
        "reports dizziness on standing",
        "temperature 37.8 °C",
        "seen by Dr. Müller (cardiology)",
        "declines flu vaccine",
        'patient says: "I don\'t take the evening dose"',
        "BP 145/62 mmHg, pulse 88/min",
    ]
    lines: list[str] = []
    n_tokens = 0
    while n_tokens < target:
        day = f"2025-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
        kind = rng.randrange(4)
        if kind == 0:
            entry = (
                f"Medication: {rng.choice(drugs)} {rng.choice([5, 10, 20, 40, 150, 500])} mg daily"
            )
        elif kind == 1:
            entry = f"Problem: {rng.choice(problems)}"
        elif kind == 2:
            name, unit, lo, hi = rng.choice(labs)
            entry = f"Lab: {name} {rng.uniform(lo, hi):.1f} {unit}"
        else:
            entry = f"Note: {rng.choice(notes)}"
        line = f"{len(lines) + 1}. {day} {entry}\n"
        lines.append(line)
        n_tokens += len(tok.encode(line))
    return "".join(lines)


def median_time(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def run_llama(python: Path, vocab: Path, cases: list, repeat: int) -> dict | None:
    if not python.exists():
        return None
    with tempfile.NamedTemporaryFile("w", suffix=".json", encoding="utf-8", delete=False) as fh:
        json.dump(cases, fh)
    proc = subprocess.run(
        [str(python), "-c", LLAMA_SCRIPT, str(vocab), fh.name, str(repeat)],
        check=False,
        capture_output=True,
        text=True,
    )
    Path(fh.name).unlink()
    if proc.returncode:
        print(f"  llama.cpp failed: {proc.stderr.strip().splitlines()[-1:]}")
        return None
    return json.loads(proc.stdout)


def bench_vocab(path: Path, repeat: int, llama_python: Path) -> None:
    print(f"\n{path.name}")
    f = open_gguf(path)
    tok = GGUFTokenizer.from_gguf(f)
    print(f"  {tok.vocab_size} tokens, model {tok.model}, pre {tok.pre}")

    def read_only():
        read_vocab(open_gguf(path))

    def build():
        GGUFTokenizer.from_gguf(open_gguf(path))

    t_read = median_time(read_only, repeat)
    t_build = median_time(build, repeat)
    text = patient_history(tok, TARGET_TOKENS)
    ids = tok.encode(text)
    t_encode = median_time(lambda: tok.encode(text), repeat * 4)
    t_tokenize = median_time(lambda: tok.tokenize(text), repeat * 4)
    ref = run_llama(llama_python, path, [[text, False]], repeat)
    print(
        f"  build: {t_build * 1e3:7.1f} ms (reading and checking the metadata {t_read * 1e3:.1f} ms)"
    )
    if ref:
        print(
            f"  llama.cpp vocab-only load: {ref['load'] * 1e3:7.1f} ms   ratio {t_build / ref['load']:.2f}"
        )
    print(f"  text: {len(text)} characters, {len(ids)} tokens")
    print(
        f"  encode:   {t_encode * 1e3:6.2f} ms   tokenize (pieces, spans): {t_tokenize * 1e3:6.2f} ms"
    )
    if ref:
        same = "identical" if ref["ids"][0] == ids else "DIFFERENT"
        print(
            f"  llama.cpp tokenize: {ref['tokenize'] * 1e3:6.2f} ms   ratio {t_encode / ref['tokenize']:.2f}"
            f"   ids {same}"
        )


ALPHABET = [*"aAbZz09 '\t\n\r.,!?-_/<>|()[]{}\"$+=^~`@#%&*;:", *"éÄöß½²³µ°€£¥", *"нещоБългарски",
            *"我想在工作天～、。，", *"\u3000\u00a0\u2003\u200b\u2028", *"กขค", "🦙", "😀", "👍🏽",
            "\u0301", "\u0308", "\u2115", "\u216b", "\u0663", "\u07c0", "\ufb01", "\u212a",
            "\u017f", "\u0130", "\x00"]
PIECES = ["'s", "'S", "'ll", "'LL", "'re", "'ve", "'d", "'t", "'m", " hello", "Hello", "HELLO", "  ",
          "   ", "\n\n", " \n", "123456", "3.14", "don't", "<|im_start|>", "<|im_end|>", "<s>", "</s>",
          "<|endoftext|>", "<|end|>", "<unk>", "<|eot_id|>", "<|begin_of_text|>", "<eos>", "<bos>",
          "<start_of_turn>", "<|turn>", "<turn|>", "[PAD151650]", "<tool_call>", "<think>", "<0x41>",
          "\u2581", "\u2581\u2581hi", "\u0120", "\n\n\n\n", "\t\t"]


def random_texts(n: int, seed: int = 1) -> list[str]:
    """Seeded strings built from ALPHABET characters and PIECES, 1 to 12 parts each."""
    rng = random.Random(seed)
    texts = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(1, 12)):
            if rng.random() < 0.4:
                parts.append(rng.choice(PIECES))
            else:
                parts.append("".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 8))))
        texts.append("".join(parts))
    return texts


def agreement(folder: Path, llama_python: Path, n_random: int) -> None:
    """Pass counts per vocabulary: against the .out file, and against llama.cpp (special off / on)."""
    standard = (VOCAB_DIR / "ggml-vocab-qwen35.gguf.inp").read_text(encoding="utf-8").split(SEPARATOR)
    extra = random_texts(n_random)
    print(f"\nagreement on {folder}")
    for path in sorted(folder.glob("ggml-vocab-*.gguf")):
        try:
            tok = GGUFTokenizer.from_gguf(open_gguf(path))
        except Exception as exc:  # noqa: BLE001 - report and go on
            print(f"  {path.name}: not loaded ({exc})")
            continue
        inp = path.with_name(path.name + ".inp")
        texts = inp.read_text(encoding="utf-8").split(SEPARATOR) if inp.exists() else standard
        line = f"  {path.name} ({tok.model}, pre {tok.pre}):"
        out = path.with_name(path.name + ".out")
        if inp.exists() and out.exists():
            expected = [
                [int(x) for x in s.split()] for s in out.read_text(encoding="utf-8").split("\n")
            ]
            ok = sum(tok.encode(t) == e for t, e in zip(texts, expected))
            line += f" .out {ok}/{len(texts)}"
        texts = texts + extra
        cases = [[t, s] for s in (False, True) for t in texts]
        ref = run_llama(llama_python, path, cases, 1)
        if ref:
            got = [tok.encode(t, parse_special=s) for t, s in cases]
            off = sum(g == r for g, r, (_, s) in zip(got, ref["ids"], cases) if not s)
            on = sum(g == r for g, r, (_, s) in zip(got, ref["ids"], cases) if s)
            line += f"  llama.cpp: special off {off}/{len(texts)}, on {on}/{len(texts)}"
        if tok.warnings:
            line += f"  [{len(tok.warnings)} warning(s)]"
        print(line)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=Path, action="append", help="GGUF file(s) to time")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--llama-python", type=Path, default=LLAMA_PYTHON)
    parser.add_argument("--agreement", type=Path, help="folder of ggml-vocab-*.gguf files to check")
    parser.add_argument("--random", type=int, default=500, help="random strings for --agreement")
    args = parser.parse_args(argv)
    for path in args.vocab or DEFAULT_VOCABS:
        bench_vocab(path, args.repeat, args.llama_python)
    if args.agreement:
        agreement(args.agreement, args.llama_python, args.random)
    return 0


if __name__ == "__main__":
    sys.exit(main())
