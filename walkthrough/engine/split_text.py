"""Plain-text lines about a run split over RPC workers: where the layers are, and what one pass cost per host.

Shared by `trace`'s table, `bench` and the app's live panel; the figures come from
`LlamaModel.placement` and each pass's `Step.split` record (`llama_session`).

    placement_lines(placement) ->
        ["this host: input embedding; 16.2 MiB of weights",
         "127.0.0.1:50052: layers 0-2; 1.4 MiB of weights; llama.cpp there: model 1.4 MiB, KV 0.1 MiB", ...]
"""

from __future__ import annotations

from collections.abc import Iterable

from walkthrough.engine.llama_placement import Placement
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


def pass_lines(steps: Iterable[Step]) -> list[str]:
    """Per phase, the mean per-host time and the bytes per boundary of the passes that ran split."""
    lines = []
    for phase in ("prefill", "decode"):
        split = [s for s in steps if s.phase == phase and s.split is not None]
        if not split:
            continue
        n = len(split)
        hosts: dict[str, float] = {}
        for s in split:
            for h in s.split["hosts"]:
                hosts[h["host"]] = hosts.get(h["host"], 0.0) + h["seconds"] / n
        times = ", ".join(f"{name} {seconds * 1000:.1f} ms" for name, seconds in hosts.items())
        lines.append(f"{phase}, per pass on each host (measured at its last layer's output, so it includes "
                     f"receiving the activations): {times}")
        last = split[-1].split
        crossings = "; ".join(f"{c['from']} -> {c['to']} {c['where']}: {binary_bytes(c['bytes'])}"
                              for c in last["crossings"])
        lines.append(f"{phase}, last pass, computed (n_tokens x n_embd x 4): {crossings}")
        moved = "; ".join(f"{name} sent {binary_bytes(m['sent'])}, received {binary_bytes(m['received'])}"
                          for name, m in last["measured"].items())
        if moved:
            lines.append(f"{phase}, last pass, measured on each worker's connection (graph, tensors, "
                         f"reads): {moved}")
    return lines
