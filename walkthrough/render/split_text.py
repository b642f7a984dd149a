"""A run split over RPC workers, summed up and put in words: where the layers are, what a pass cost per host.

Shared by `trace`, `bench` / `estimate --measure` (through `Measured.split`) and the app's live panel; the
figures come from `LlamaModel.placement` and each pass's `Step.split` record (`llama_session`).

    placement_lines(placement) ->
        ["this host: input embedding + layer 0; 749.3 KiB of weights; llama.cpp there: model 747.5 KiB", ...]
    pass_lines(summary(steps)) ->
        ["decode, per pass on each host (...): this host 2.5 ms, 127.0.0.1:50052 5.2 ms", ...]
"""

from __future__ import annotations

from collections.abc import Iterable

from walkthrough.engine.llama.placement import Placement
from walkthrough.engine.steps import Step
from walkthrough.units import binary_bytes


def placement_lines(placement: Placement) -> list[str]:
    """One line per host: what it holds (llama.cpp's assignment) and its memory."""
    lines = []
    for h in placement.hosts:
        there = ", ".join(f"{kind} {binary_bytes(n)}" for kind, n in h.buffers.items())
        lines.append(f"{h.name}: {h.layer_text() or 'nothing'}; {binary_bytes(h.weight_bytes)} of weights"
                     + (f"; llama.cpp there: {there}" if there else ""))
    return lines


def summary(steps: Iterable[Step]) -> dict | None:
    """Per phase: mean seconds per pass on each host, and the last pass's crossings and measured bytes.

    None when no pass ran split. Example: {"decode": {"passes": 3, "host_seconds": {"this host": 0.0025, ...},
    "crossings": [...], "measured": {"127.0.0.1:50052": {"sent": 142234, "received": 584}}}}
    """
    out = {}
    steps = list(steps)
    for phase in ("prefill", "decode"):
        split = [s.split for s in steps if s.phase == phase and s.split is not None]
        if not split:
            continue
        hosts: dict[str, float] = {}
        for record in split:
            for h in record["hosts"]:
                hosts[h["host"]] = hosts.get(h["host"], 0.0) + h["seconds"] / len(split)
        out[phase] = {"passes": len(split), "host_seconds": hosts, "crossings": split[-1]["crossings"],
                      "measured": split[-1]["measured"]}
    return out or None


def pass_lines(split: dict | None) -> list[str]:
    """`summary` in words: measured times, computed boundary bytes, measured connection bytes."""
    lines = []
    for phase, s in (split or {}).items():
        times = ", ".join(f"{name} {seconds * 1000:.1f} ms" for name, seconds in s["host_seconds"].items())
        lines.append(f"{phase}, per pass on each host (measured at its last layer's output, so it includes "
                     f"receiving the activations): {times}")
        crossings = "; ".join(f"{c['from']} -> {c['to']} {c['where']}: {binary_bytes(c['bytes'])}"
                              for c in s["crossings"])
        lines.append(f"{phase}, last pass, computed (n_tokens x n_embd x 4): {crossings}")
        moved = "; ".join(f"{name} sent {binary_bytes(m['sent'])}, received {binary_bytes(m['received'])}"
                          for name, m in s["measured"].items())
        if moved:
            lines.append(f"{phase}, last pass, measured on each worker's connection (graph, tensors, "
                         f"reads): {moved}")
    return lines
