"""Per-token time of llama.cpp on this host alone and split over 2 and 3 RPC workers on localhost, beside
the pipeline model's prediction for a localhost link measured in the same run.

Workers (`walkthrough worker`) start on free ports, each in its own process group, and are always killed at
the end. MODELs by default: the tiny model, Qwen3.6-35B-A3B's structure at narrow widths (`qwen36_shaped.py
--scaled`, written first if missing: the 21 GB file itself would go over loopback to every worker at each
load), and SmolLM2 when SMOLLM2_GGUF names it. Each request runs --rounds times; the median run is shown.
For each:

- local: the llama.cpp engine on this host (`costs.measured.time_request`: the same spread prompt ids,
  greedy, `--tokens` decoded);
- split over N workers (N = 2, 3): every layer on the workers, evenly, this host embedding the tokens (as
  llama.cpp's default split does); per decoded token, the time, the bytes each boundary carries (computed,
  n_embd x 4) and the bytes on each worker's connection (measured, TCP counters);
- modelled: `costs.pipeline.model` with one box = the local run's own time per token and prompt time,
  N + 1 hosts (the bench's split: none here, the rest even) over a `localhost` link whose bandwidth and
  latency are measured here first (a 64 MiB transfer and 2,000 one-byte round trips over loopback TCP),
  with the graph llama.cpp sends each worker every pass (`costs.rpc_graph`); each worker's sent bytes
  modelled beside measured.

The ratio is measured / modelled: above 1, the split costs more than the activations and graphs over the
link explain (ggml's RPC commands' round trips, each worker building the graph it receives). The runs ask
llama.cpp for nothing but the hosts' boundaries (no expert reads: each would split the graph again and
ggml would resend its ancestors). Figures are from this run only.

    python tests/bench/bench_rpc.py [MODEL ...] [--prompt 32] [--tokens 16] [--rounds 3]
    python tests/bench/bench_rpc.py --derive MODEL ...    # rpc_graph.json's figures for MODEL's architecture
"""

from __future__ import annotations

import argparse
import gc
import os
import socket
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import qwen36_shaped
from rpc_support import free_llama_objects, workers

from walkthrough.costs.measured import Measured, time_request
from walkthrough.costs.pipeline import Link, model
from walkthrough.costs.rpc_graph import for_card
from walkthrough.engine.llama.model import LlamaModel
from walkthrough.engine.llama.session import LlamaSession
from walkthrough.inspect.card import build_card
from walkthrough.inspect.gguf import open_gguf
from walkthrough.inspect.locate import BUNDLED_MODEL

TRANSFER = 64 << 20  # bytes for the loopback bandwidth
ROUND_TRIPS = 2000


def loopback_link() -> Link:
    """A `localhost` link measured now: TCP bandwidth one way, and half a one-byte round trip."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]

    def sink() -> None:
        conn, _ = server.accept()
        with conn:
            got = 0
            while got < TRANSFER:
                got += len(conn.recv(1 << 20))
            conn.sendall(b"k")
            for _ in range(ROUND_TRIPS):
                conn.sendall(conn.recv(1))

    thread = threading.Thread(target=sink, daemon=True)
    thread.start()
    with socket.create_connection(("127.0.0.1", port), timeout=60) as c:
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        block = bytes(1 << 20)
        began = time.perf_counter()
        for _ in range(TRANSFER // len(block)):
            c.sendall(block)
        c.recv(1)
        bandwidth = TRANSFER / (time.perf_counter() - began)
        began = time.perf_counter()
        for _ in range(ROUND_TRIPS):
            c.sendall(b"x")
            c.recv(1)
        latency = (time.perf_counter() - began) / ROUND_TRIPS / 2
    thread.join(timeout=10)
    server.close()
    return Link("localhost", "loopback TCP, measured here", bandwidth, latency, "measured",
                {"bandwidth_gbs": f"{TRANSFER >> 20} MiB sent over loopback TCP in this run",
                 "latency_us": f"half of {ROUND_TRIPS} one-byte round trips in this run"})


def even(n_layers: int, workers_: int) -> list[int]:
    """[0, a, b, ...]: no layer here, the rest as even as whole layers allow."""
    return [0] + [n_layers // workers_ + (1 if i < n_layers % workers_ else 0) for i in range(workers_)]


def run(model_: LlamaModel, args: argparse.Namespace) -> Measured:
    """One request on llama.cpp's own graph splits (no expert reads asked: each would split the graph again)."""
    return time_request(model_, args.prompt, args.tokens,
                        LlamaSession(model_, n_ctx=args.prompt + args.tokens, experts=False))


def rounds(model_: LlamaModel, args: argparse.Namespace) -> tuple[Measured, list[float]]:
    """--rounds runs; the one of median time per token, and every run's seconds per token."""
    runs = sorted((run(model_, args) for _ in range(args.rounds)), key=lambda m: m.seconds_per_token)
    return runs[len(runs) // 2], [m.seconds_per_token for m in runs]


def spread(times: list[float]) -> str:
    return f"median of {len(times)}, {min(times) * 1000:.2f}-{max(times) * 1000:.2f}" if len(times) > 1 else "1 run"


def worker_bytes(card, split: list[int], measured: dict) -> list[tuple[str, int, int]]:
    """(worker, sent measured, sent modelled) on the last decode pass, in --rpc order."""
    g = for_card(card)
    last = max(i for i, n in enumerate(split) if n)
    return [(name, m["sent"], g.sent(split[i], i == last, card.n_embd))
            for i, (name, m) in enumerate(measured.items(), start=1)]


def bench(path: Path, link: Link, args: argparse.Namespace) -> None:
    f = open_gguf(path)
    card = build_card(f)
    local_model = LlamaModel(f, card=card, n_threads=1)
    local, local_times = rounds(local_model, args)
    free_llama_objects()
    box = (local.seconds_per_token, local.prefill_seconds)
    print(f"\n{card.name or path.name}: {card.n_layers} layers, n_embd {card.n_embd}, vocab {card.vocab_size}, "
          f"graph bytes per layer {for_card(card).per_layer:,} ({for_card(card).basis})")
    print(f"  local            {local.seconds_per_token * 1000:8.2f} ms/token ({spread(local_times)})")
    for n in (2, 3):
        with workers(n) as started:
            endpoints = [e for e, _ in started]
            split = even(card.n_layers, n)
            split_model = LlamaModel(f, card=card, n_threads=1, rpc=endpoints, split=split)
            measured, times = rounds(split_model, args)
            decode = measured.split["decode"]
            predicted = model(card, _profile(), link, n + 1, args.prompt + args.tokens, args.prompt, box=box,
                              split=split)
            bare = predicted.token_seconds - predicted.graph_seconds
            print(f"  {n} workers        {measured.seconds_per_token * 1000:8.2f} ms/token ({spread(times)})   "
                  f"modelled {predicted.token_seconds * 1000:.2f} (without the graph {bare * 1000:.2f})   "
                  f"measured / modelled {measured.seconds_per_token / predicted.token_seconds:5.2f}   "
                  f"local x{measured.seconds_per_token / local.seconds_per_token:5.2f}")
            crossing = decode["crossings"][0]["bytes"]
            print(f"    per boundary {crossing} B of activations (n_embd x 4); hops modelled "
                  f"{predicted.hop_seconds * 1000:.3f} ms, graphs {predicted.graph_seconds * 1000:.3f} ms")
            for name, sent, modelled in worker_bytes(card, split, decode["measured"]):
                print(f"    {name}: sent per decoded token {sent:,} B measured, {modelled:,} B modelled "
                      f"(graph + activations), ratio {sent / modelled:.3f}")
            del split_model, measured
            gc.collect()


def derive(path: Path, args: argparse.Namespace) -> None:
    """Fit sent = fixed + activations + per_layer x layers + head x [holds the head] on one worker's decode
    passes over several splits (rpc_graph.json's figures), and print the fit and what each split sent."""
    f = open_gguf(path)
    card = build_card(f)
    n = card.n_layers
    splits = [[0, n], [0, n // 2, n - n // 2], [0, max(n // 4, 1), n - max(n // 4, 1)],
              [0, n - max(n // 4, 1), max(n // 4, 1)]]
    rows, sent = [], []
    for split in splits:
        with workers(len(split) - 1) as started:
            split_model = LlamaModel(f, card=card, n_threads=1, rpc=[e for e, _ in started], split=split)
            measured = run(split_model, args).split["decode"]["measured"]
            for i, (name, m) in enumerate(measured.items(), start=1):
                rows.append([1.0, split[i], 1.0 if i == len(split) - 1 else 0.0])
                sent.append(m["sent"] - card.n_embd * 4)
                print(f"  split {','.join(map(str, split))}: {name} ({split[i]} layers"
                      f"{' + head' if i == len(split) - 1 else ''}) sent {m['sent']:,} B")
            del split_model
            gc.collect()
    a, b = np.array(rows), np.array(sent, dtype=float)
    fit = np.linalg.lstsq(a, b, rcond=None)[0]
    worst = float(np.max(np.abs(a @ np.round(fit) / b - 1)))
    print(f"{card.architecture} ({path.name}): fixed {fit[0]:,.0f} B, per layer {fit[1]:,.0f} B, head {fit[2]:,.0f} B"
          f" (activations n_embd x 4 = {card.n_embd * 4} B taken out first); worst error {worst:.2%}")


def _profile():
    from walkthrough.costs.hardware import load_profiles

    return load_profiles()["cpu-here"]  # only its memory is read when `box` gives the times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="*", type=Path)
    parser.add_argument("--prompt", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3, help="runs of each request; the median is shown")
    parser.add_argument("--derive", action="store_true",
                        help="fit the graph's bytes per layer (rpc_graph.json) on MODEL's decode passes")
    args = parser.parse_args()
    models = args.models or [BUNDLED_MODEL, qwen36_shaped.SCALED_PATH,
                             *([Path(os.environ["SMOLLM2_GGUF"])] if os.environ.get("SMOLLM2_GGUF") else [])]
    if qwen36_shaped.SCALED_PATH in models and not qwen36_shaped.SCALED_PATH.exists():
        qwen36_shaped.write(qwen36_shaped.SCALED_PATH, scaled=True)
    if args.derive:
        for path in models:
            derive(path, args)
        return 0
    link = loopback_link()
    print(f"localhost link, measured: {link.bandwidth / 1e9:.2f} GB/s, {link.latency * 1e6:.1f} us per hop")
    for path in models:
        bench(path, link, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
