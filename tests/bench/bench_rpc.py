"""Per-token time of llama.cpp on this host alone and split over 2 and 3 RPC workers on localhost, beside
the pipeline model's prediction for a localhost link measured in the same run.

Workers (`walkthrough worker`) start on free ports, each in its own process group, and are always killed at
the end. For each MODEL (default: the bundled tiny model, and SmolLM2 when SMOLLM2_GGUF names it):

- local: the llama.cpp engine on this host (`costs.measured.time_request`: the same spread prompt ids,
  greedy, `--tokens` decoded);
- split over N workers (N = 2, 3): every layer on the workers, evenly, this host embedding the tokens (as
  llama.cpp's default split does); per decoded token, the time, the bytes each boundary carries (computed,
  n_embd x 4) and the bytes on each worker's connection (measured, TCP counters);
- predicted: `costs.pipeline.model` with one box = the local run's own time per token and prompt time,
  N + 1 hosts (N boundaries and the logits home) over a `localhost` link whose bandwidth and latency are
  measured here first (a 64 MiB transfer and 2,000 one-byte round trips over loopback TCP).

The ratio is measured / predicted: above 1, the split costs more than activations over the link explain
(ggml sends the graph every pass, and each graph split synchronises). Figures are from this run only.

    python tests/bench/bench_rpc.py [MODEL ...] [--prompt 32] [--tokens 16]
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from rpc_support import free_llama_objects, workers

from walkthrough.costs.measured import time_request
from walkthrough.costs.pipeline import Link, model
from walkthrough.engine.llama.model import LlamaModel
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


def bench(path: Path, link: Link, args: argparse.Namespace) -> None:
    f = open_gguf(path)
    card = build_card(f)
    local_model = LlamaModel(f, card=card, n_threads=1)
    local = time_request(local_model, args.prompt, args.tokens)
    free_llama_objects()
    box = (local.seconds_per_token, local.prefill_seconds)
    print(f"\n{card.name or path.name}: {card.n_layers} layers, n_embd {card.n_embd}, vocab {card.vocab_size}")
    print(f"  local            {local.seconds_per_token * 1000:8.2f} ms/token")
    for n in (2, 3):
        with workers(n) as started:
            endpoints = [e for e, _ in started]
            split_model = LlamaModel(f, card=card, n_threads=1, rpc=endpoints, split=even(card.n_layers, n))
            measured = time_request(split_model, args.prompt, args.tokens)
            decode = measured.split["decode"]
            predicted = model(card, _profile(), link, n + 1, args.prompt + args.tokens, args.prompt, box=box)
            moved = sum(m["sent"] + m["received"] for m in decode["measured"].values())
            crossing = decode["crossings"][0]["bytes"]
            print(f"  {n} workers        {measured.seconds_per_token * 1000:8.2f} ms/token   predicted "
                  f"{predicted.token_seconds * 1000:8.2f} ms/token   ratio "
                  f"{measured.seconds_per_token / predicted.token_seconds:5.2f}   local x"
                  f"{measured.seconds_per_token / local.seconds_per_token:5.2f}")
            print(f"    per boundary {crossing} B computed (n_embd x 4); on the wire per decoded token "
                  f"{moved / 1024:.1f} KiB measured over {n} connections; hops predicted "
                  f"{predicted.hop_seconds * 1000:.3f} ms")
            del split_model, measured
            gc.collect()


def _profile():
    from walkthrough.costs.hardware import load_profiles

    return load_profiles()["cpu-here"]  # only its memory is read when `box` gives the times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="*", type=Path)
    parser.add_argument("--prompt", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=16)
    args = parser.parse_args()
    models = args.models or [BUNDLED_MODEL, *([Path(os.environ["SMOLLM2_GGUF"])]
                                              if os.environ.get("SMOLLM2_GGUF") else [])]
    link = loopback_link()
    print(f"localhost link, measured: {link.bandwidth / 1e9:.2f} GB/s, {link.latency * 1e6:.1f} us per hop")
    for path in models:
        bench(path, link, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
