"""Where llama.cpp put a model's layers over this host and RPC workers, and what one pass sends between them.

llama.cpp decides the placement (src/llama-model.cpp, `load_tensors`): layers
below `n_layer + 1 - n_gpu_layers` stay on this host's CPU, the rest (the output
head counting as layer n_layer) go to the devices in proportion to
`tensor_split`, or to each device's free memory when no split is given. The
input embedding always stays on this host. This module asks for a split
(`split_params`) and then reads what llama.cpp did from its own log lines
("layer N assigned to device RPC0", "RPC0[...] model buffer size = ..."), so
what is shown is what llama.cpp did, not a re-derivation.

Per pass, the residual stream crosses each boundary between hosts once:
n_tokens x n_embd x 4 bytes (ggml's activations are F32), computed here; the
logits of the kept rows come back to this host (rows x n_vocab x 4).
What llama.cpp actually sends (its graph, tensors, the stages' reads) is
measured per worker from the kernel's TCP counters (`rpc_traffic`).

    hosts 0: this host  layers -      input embedding
          1: 127.0.0.1:50052 layers 0-3
          2: 127.0.0.1:50053 layers 4-7 + output head
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from walkthrough.engine.layer_groups import ranges_text

THIS_HOST = "this host"
F32_BYTES = 4  # ggml's activations between layers are F32
_ASSIGNED = re.compile(r"layer\s+(\d+) assigned to device (\S+?),")
_BUFFER = re.compile(r"(\S+) (model|KV|compute) buffer size =\s*([\d.]+) MiB")
_LAYER_TENSOR = re.compile(r"^blk\.(\d+)\.")


@dataclass
class Host:
    """One machine of the split: its name, llama.cpp's device there, and what it holds."""

    name: str  # THIS_HOST or "HOST:PORT"
    device: str  # llama.cpp's device name: "CPU", "RPC0", ...
    layers: list[int] = field(default_factory=list)  # repeating layers it holds
    output: bool = False  # holds the output head (computes the logits)
    weight_bytes: int = 0  # stored bytes of the weights it holds, from the file's tensor table
    buffers: dict[str, int] = field(default_factory=dict)  # llama.cpp's buffers there: "model"/"KV"/"compute"

    def layer_text(self) -> str:
        """'0-3', '0-3 + output head', 'input embedding' ..."""
        parts = []
        if self.name == THIS_HOST:
            parts.append("input embedding")
        if self.layers:
            parts.append(("layer " if len(self.layers) == 1 else "layers ") + ranges_text(self.layers))
        if self.output:
            parts.append("output head")
        return " + ".join(parts)

    def to_json(self) -> dict:
        return {"host": self.name, "device": self.device, "layers": list(self.layers), "output": self.output,
                "weight_bytes": self.weight_bytes, "buffers": dict(self.buffers)}


@dataclass
class Placement:
    """The hosts in pass order, and the device of each layer (`order`: input, layers..., output)."""

    hosts: list[Host]
    order: list[str]  # device per stop: [input, layer 0 .. layer n-1, output]
    n_embd: int
    n_vocab: int

    def host_of(self, device: str) -> Host:
        return next(h for h in self.hosts if h.device == device)

    def boundaries(self) -> list[tuple[int, str, str]]:
        """(stop, from host, to host) where the pass moves to another host; stop 1 + i is layer i."""
        return [(i, self.host_of(a).name, self.host_of(b).name)
                for i, (a, b) in enumerate(zip(self.order, self.order[1:]), start=1) if a != b]

    def crossings(self, n_tokens: int, rows: int) -> list[dict]:
        """The bytes each boundary carries in a pass of n_tokens (computed, not measured), then the logits home."""
        out = []
        n_layers = len(self.order) - 2
        for stop, src, dst in self.boundaries():
            where = f"before layer {stop - 1}" if stop <= n_layers else "before the output head"
            out.append({"where": where, "from": src, "to": dst, "bytes": n_tokens * self.n_embd * F32_BYTES})
        if self.order[-1] != self.order[0]:
            out.append({"where": "logits", "from": self.host_of(self.order[-1]).name, "to": THIS_HOST,
                        "bytes": rows * self.n_vocab * F32_BYTES})
        return out

    def segments(self) -> list[tuple[str, int]]:
        """(host, last layer) of each run of consecutive layers on one host, in pass order (-1: no layer)."""
        out: list[tuple[str, int]] = []
        for i, device in enumerate(self.order[1:-1]):
            name = self.host_of(device).name
            if out and out[-1][0] == name:
                out[-1] = (name, i)
            else:
                out.append((name, i))
        return out

    def to_json(self) -> list[dict]:
        return [h.to_json() for h in self.hosts]


def split_params(n_layers: int, counts: list[int]) -> tuple[int, list[float]]:
    """(n_gpu_layers, tensor_split) that place counts[0] layers here and counts[1:] on the workers, in order.

    The output head goes with the last worker. Example: 8 layers, counts [2, 3, 3] -> (7, [3, 4]): layers
    0-1 here, 2-4 on the first worker, 5-7 and the head on the second.
    """
    if len(counts) < 2 or sum(counts) != n_layers or min(counts) < 0:
        raise ValueError(f"the split {counts} must give all {n_layers} layers to this host and the workers")
    shares = [float(c) for c in counts[1:]]
    shares[-1] += 1  # the output head
    return n_layers + 1 - counts[0], shares


def from_log(lines: list[str], devices: dict[str, str], n_layers: int, n_embd: int, n_vocab: int,
             tensors: list) -> Placement:
    """The placement llama.cpp logged while loading; `devices` maps its device names to host names.

    `tensors`: the file's tensor table (name, nbytes), to count each host's weight bytes.
    """
    order = ["CPU"] * (n_layers + 2)
    for line in lines:
        m = _ASSIGNED.search(line)
        if m and int(m.group(1)) <= n_layers:
            order[int(m.group(1)) + 1] = m.group(2)
    hosts = [Host(THIS_HOST, "CPU")] + [Host(name, dev) for dev, name in devices.items()]
    by_device = {h.device: h for h in hosts}
    for i, device in enumerate(order[1:-1]):
        by_device[device].layers.append(i)
    by_device[order[-1]].output = True
    for line in lines:
        m = _BUFFER.search(line)
        if m:
            name = m.group(1)
            # an RPC buffer is named "RPC<device on that worker>[HOST:PORT]" (ggml-rpc.cpp)
            device = next((d for d, host in devices.items() if name.endswith(f"[{host}]")), "CPU")
            host = by_device[device]
            host.buffers[m.group(2)] = host.buffers.get(m.group(2), 0) + round(float(m.group(3)) * 2**20)
    for t in tensors:
        m = _LAYER_TENSOR.match(t.name)
        if m and int(m.group(1)) < n_layers:
            device = order[int(m.group(1)) + 1]
        elif t.name.startswith("token_embd"):
            device = order[0]
        else:
            device = order[-1]  # output, output_norm, and anything outside the layers
        by_device[device].weight_bytes += t.nbytes
    return Placement(hosts, order, n_embd, n_vocab)
