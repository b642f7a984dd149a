"""A model split over N identical hosts joined by a link: llama.cpp's RPC layer split, as a pipeline.

Each host holds 1/N of the layers (and of the KV cache). A decoded token passes
every host in turn, so per token:

    t = sum over hosts (bytes it reads / (bandwidth x decode efficiency))          # = one box's time
      + (N - 1) x (latency + n_embd x 4 / link bandwidth)                          # residual at each boundary
      + (latency + n_vocab x 4 / link bandwidth)                                   # the logits home (N > 1)
      + sum over hosts 2..N (graph bytes / link bandwidth)                          # llama.cpp's graph resend

The graph: ggml's RPC client sends each worker its part of the graph with every
pass (`costs.rpc_graph`, measured bytes per layer); it travels right behind the
activations on the same connection, so it adds its bytes over the bandwidth and
no latency of its own.

Prefill in chunks of `chunk` tokens (llama.cpp's micro-batch): each host
computes its share of a chunk, sends chunk x n_embd x 4 bytes on, and takes
the next chunk. Pipelined, the hosts overlap: first chunk through all stages,
then one chunk per slowest stage. llama.cpp's RPC backend runs its graph splits
one after another, so `prefill_sequential` (every chunk through every stage,
no overlap) is what it does today; both are given.

What fits where: each host's layers, embedding or head and KV cache
(`costs.host_shares`) within its usable memory (`Profile.usable_bytes`);
`hosts_needed` is the fewest hosts of this profile that hold the model. Each
host's part of the reads is its share of the bytes read per token. Links are
data (links.json, a source per figure); machines are `costs.hardware` profiles.

Not handled: hosts of different profiles, tensor (row) split, ggml's RPC commands'
round trips and the workers' work on each graph they receive (besides its bytes).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from walkthrough.costs.budget import kv_cache_bytes
from walkthrough.costs.estimate import Estimate
from walkthrough.costs.hardware import Profile
from walkthrough.costs.host_shares import HostShare, hosts_needed, shares
from walkthrough.costs.rpc_graph import for_card
from walkthrough.errors import WalkthroughError
from walkthrough.inspect.card import ModelCard

F32_BYTES = 4  # activations between hosts
CHUNK = 512  # llama.cpp's default micro-batch (n_ubatch)


@dataclass(frozen=True)
class Link:
    """A connection between two hosts: one direction's bandwidth and one hop's latency."""

    id: str
    name: str
    bandwidth: float  # bytes/s, one direction
    latency: float  # seconds per hop
    basis: str  # "measured" or "assumed" latency (links.json)
    sources: dict[str, str] = field(default_factory=dict)

    def hop(self, nbytes: float) -> float:
        """Seconds to send nbytes one hop: latency + bytes / bandwidth."""
        return self.latency + nbytes / self.bandwidth


def load_links(path: Path | None = None) -> dict[str, Link]:
    """The bundled link profiles (links.json)."""
    raw = json.loads((path or Path(__file__).with_name("links.json")).read_text(encoding="utf-8"))
    return {d["id"]: Link(d["id"], d["name"], d["bandwidth_gbs"] * 1e9, d["latency_us"] * 1e-6, d["basis"],
                          d.get("sources", {})) for d in raw["links"]}


def pick_link(name: str) -> Link:
    links = load_links()
    if name not in links:
        raise WalkthroughError(f"unknown link {name!r}; choose one of: {', '.join(links)}")
    return links[name]


class Segment(NamedTuple):
    """One part of a decoded token's time: a host's reads, or what crosses the link."""

    label: str  # "host 2", "hop 1-2", "graph to host 2", "logits home"
    seconds: float
    sent: int  # bytes over the link (0 for a host's reads)


@dataclass(frozen=True)
class Pipeline:
    """The split's figures for one request size."""

    hosts: int
    link: Link
    per_host_bytes: float  # weights + KV cache the fullest host holds
    usable: float  # bytes each host can hold
    fits: bool
    hosts_needed: int | None  # fewest hosts of this profile that hold it; None: not even one layer each
    read_seconds: float  # per token: every host's reads, one after another
    hop_seconds: float  # per token: the boundaries and the logits home
    boundary_bytes: int  # per decoded token, at each boundary
    prefill_pipelined: float  # seconds for the prompt, chunks overlapping across hosts
    prefill_sequential: float  # seconds for the prompt, chunks one host at a time (llama.cpp's RPC today)
    shares: tuple[HostShare, ...] = ()  # each host's layers and bytes, host 1 first
    chunks: int = 1  # prompt chunks
    vocab_bytes: int = 0  # the logits a decoded token brings home (n_vocab x 4)
    graph_bytes: tuple[int, ...] = ()  # per pass, the graph sent to each host (0 for host 1, which holds it)
    graph_basis: str = ""  # which measurement the graph's bytes per layer come from

    @property
    def graph_seconds(self) -> float:
        """Per token: every worker's graph over the link."""
        return sum(self.graph_bytes) / self.link.bandwidth

    @property
    def token_seconds(self) -> float:
        return self.read_seconds + self.hop_seconds + self.graph_seconds

    def host_read_seconds(self) -> list[float]:
        """Each host's part of `read_seconds`: its share of the bytes read per token."""
        total = sum(s.read_bytes for s in self.shares)
        if not total:
            return [self.read_seconds / max(len(self.shares), 1)] * len(self.shares)
        return [self.read_seconds * s.read_bytes / total for s in self.shares]

    def segments(self) -> list[Segment]:
        """One decoded token's time in order: host 1, hop 1-2, graph to host 2, host 2, ..., logits home."""
        out: list[Segment] = []
        for i, seconds in enumerate(self.host_read_seconds()):
            if i:
                out.append(Segment(f"hop {i}-{i + 1}", self.link.hop(self.boundary_bytes), self.boundary_bytes))
                graph = self.graph_bytes[i] if i < len(self.graph_bytes) else 0
                out.append(Segment(f"graph to host {i + 1}", graph / self.link.bandwidth, graph))
            out.append(Segment(f"host {i + 1}", seconds, 0))
        if self.hosts > 1:
            out.append(Segment("logits home", self.link.hop(self.vocab_bytes), self.vocab_bytes))
        return out



def model(card: ModelCard, hw: Profile, link: Link, hosts: int, context: int, prompt_tokens: int,
          cache_type: str = "f16", chunk: int = CHUNK, box: tuple[float, float] | None = None,
          split: list[int] | None = None) -> Pipeline:
    """The pipeline split of this model over `hosts` hosts of profile `hw` joined by `link`.

    `box`: (seconds per decoded token, seconds for the prompt) of one box of this profile holding the
    whole model (the estimate's own figures, fitted where it has a fit); `split`: layers per host, host 1 first
    (default: even, `host_shares.deal`). The hosts' reads add up to the
    former and their shares of the prompt to the latter. Without it (the model does not fit one box):
    bytes per token / (bandwidth x decode efficiency), and 2 x active parameters per token / compute.
    """
    if hosts < 1:
        raise WalkthroughError(f"--hosts {hosts}: at least 1")
    weights = float(sum(card.bytes_by_type.values()))
    parts = shares(card, hosts, context, prompt_tokens, cache_type, split)
    per_host = max(s.kept_bytes for s in parts)
    usable = float(hw.usable_bytes)
    per_token = float(card.bytes_per_token or weights) + kv_cache_bytes(card, prompt_tokens, cache_type).value
    read = box[0] if box else per_token / (hw.bandwidth * hw.decode_efficiency)  # [s] all hosts, in turn
    n_embd, n_vocab = card.n_embd or 0, card.vocab_size or 0
    boundary = n_embd * F32_BYTES
    hops = 0.0 if hosts == 1 else (hosts - 1) * link.hop(boundary) + link.hop(n_vocab * F32_BYTES)
    active = float(card.n_params_active or card.n_params)
    chunks = max(1, math.ceil(prompt_tokens / chunk))
    size = min(chunk, prompt_tokens)
    whole = box[1] * size / prompt_tokens if box else 2 * active * size / (hw.compute_tflops * 1e12)
    stage = whole / hosts  # [s] one host's share of one chunk
    g = for_card(card)
    graphs = tuple(0 if i == 0 else g.graph(len(s.layers), s.head) for i, s in enumerate(parts))
    # one chunk across one boundary, and the receiving worker's graph (the largest: the head's)
    send = 0.0 if hosts == 1 else link.hop(size * n_embd * F32_BYTES) + max(graphs) / link.bandwidth
    through = hosts * stage + (hosts - 1) * send  # one chunk, first host to last
    pipelined = through + (chunks - 1) * max(stage, send)
    sequential = chunks * through
    return Pipeline(hosts, link, per_host, usable, per_host <= usable, hosts_needed(card, usable, context, cache_type),
                    read, hops, boundary, pipelined, sequential, tuple(parts), chunks, n_vocab * F32_BYTES, graphs,
                    g.basis)


def box_of(e: Estimate) -> tuple[float, float] | None:
    """One box's (seconds per token, prompt seconds) from an estimate that holds the whole model in fast memory
    (no offload, not an SRAM machine), else None (`model` then takes the roofline)."""
    if e.decode is None or e.prefill is None or e.decode.slow_share.value > 0 or e.chips is not None:
        return None
    return 1 / e.decode.tokens_per_s.value, e.prefill.seconds.value
