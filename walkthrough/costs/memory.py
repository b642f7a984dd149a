"""What an engine will hold in memory for a request, beside what this machine has free, and the budget that
bounds the numpy engine's dequantized weights.

The numpy engine multiplies float weights: each matrix is dequantized once and
kept in its weight cache (float32, or float64 for an F32 file's matrices, which
`ops.linear` multiplies in float64), so a 4-bit file takes about 8 times its size
if nothing bounds it. `Holding.numpy` counts that from the
tensor table, the KV cache as the numpy engine stores it (float32), and one
pass's activations (`budget.compute_buffer_bytes`, at the pass's chunk);
`Holding.llama_cpp` counts llama.cpp's: the file's bytes (memory-mapped, as
stored), its F16 KV cache and compute buffer. The weight cache is bounded by
`--max-memory` (`parse_size`), by default `DEFAULT_SHARE` of the memory free
when the engine is made (`default_budget`); a matrix larger than a share of the
budget is never held whole but multiplied a block of rows at a time
(`weights.Weights.row_blocks`), so a model larger than the budget still runs.

Free memory is the kernel's MemAvailable, lowered to what the cgroup still allows
(`memory.max` - `memory.current`) inside a container.

Example: SmolLM2-135M Q4_1 (92 MiB of weights) -> numpy holds 526 MiB of float32 weights at most (`dequantized_bytes`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from walkthrough.costs.budget import compute_buffer_bytes
from walkthrough.errors import WalkthroughError
from walkthrough.inspect.card import ModelCard
from walkthrough.inspect.gguf import GGUFFile
from walkthrough.units import binary_bytes

DEFAULT_SHARE = 0.5  # of the free memory: the numpy engine's default budget for dequantized weights
MIN_BUDGET = 64 << 20  # a budget below 64 MiB is refused (every pass would decode every weight)
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(text: str) -> int:
    """Bytes from "512M", "2G", "1.5GiB", "800000000" (binary units: 1G = 2^30 bytes).

    Raises:
        WalkthroughError: not a size, or under `MIN_BUDGET`.
    """
    match = _SIZE.match(text)
    if match is None:
        raise WalkthroughError(f"--max-memory {text!r}: give a size such as 512M, 2G or 1.5GiB")
    value = int(float(match[1]) * _UNITS[match[2].lower()])
    if value < MIN_BUDGET:
        raise WalkthroughError(f"--max-memory {text}: at least {binary_bytes(MIN_BUDGET)}, or every pass "
                               "dequantizes every weight again")
    return value


def free_memory() -> int | None:
    """Bytes this process could still use: MemAvailable, capped by the cgroup's limit; None if unknown."""
    free = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                free = int(line.split()[1]) * 1024
                break
    except (OSError, ValueError, IndexError):
        return None
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        used = int(Path("/sys/fs/cgroup/memory.current").read_text().strip())
        if limit != "max" and free is not None:
            free = min(free, max(0, int(limit) - used))
    except (OSError, ValueError):
        pass
    return free


def default_budget(free: int | None = None) -> int:
    """The numpy engine's weight budget when none is given: `DEFAULT_SHARE` of the free memory."""
    free = free_memory() if free is None else free
    from walkthrough.engine.glassbox.weights import DEFAULT_CACHE_BYTES

    return max(MIN_BUDGET, int(free * DEFAULT_SHARE)) if free is not None else DEFAULT_CACHE_BYTES


def dequantized_bytes(f: GGUFFile) -> int:
    """Bytes of every weight as the numpy engine holds it once used: each matrix in `weights.product_dtype` (float32,
    float64 for F32 matrices), other tensors in float32, plus the block offsets of Q4_1/Q5_1 matrices
    (`quantdot.block_offsets`, float32, one per 32 weights). A token embedding that is not also the output head is
    read a row at a time and never held; a float32 matrix held by columns (the output head, and any with
    `ops.tall`'s shape) has its outputs padded to a whole number of `ops.COLUMN_GROUP` (`Weights.columns`)."""
    import numpy as np

    from walkthrough.engine.glassbox.ops import padded_columns, tall
    from walkthrough.engine.glassbox.quantdot import WITH_OFFSET
    from walkthrough.engine.glassbox.weights import product_dtype

    head = "output.weight" if "output.weight" in f.tensors else "token_embd.weight"
    total = 0
    for t in f.tensors.values():
        if t.name == "token_embd.weight" and head != t.name:
            continue
        dtype = product_dtype(t)
        width = t.shape[0] + (t.shape[0] // 32 if len(t.shape) >= 2 and t.ggml_type in WITH_OFFSET else 0)
        if len(t.shape) == 2 and dtype is np.float32 and (t.name == head or tall(t.shape[1], t.shape[0])):
            total += width * padded_columns(t.shape[1]) * 4
            continue
        total += t.n_elements * np.dtype(dtype).itemsize
        if len(t.shape) >= 2 and t.ggml_type in WITH_OFFSET:
            total += t.n_elements // 32 * 4
    return total


# matrices a layer multiplies as one where they stack (`layers.project_qkv`, `layers.dense_ffn`: `Meter.linears`)
STACKS = (("attn_q", "attn_k", "attn_v"), ("ffn_gate", "ffn_up"))


def lane_copy_bytes(f: GGUFFile) -> int:
    """Bytes of the lane copies the numpy engine keeps for passes of `ops.LANE_ROWS` rows or more, when its budget
    holds them (`Weights.lanes`): one per float32 matrix multiplied by rows, [8, k, d_out] with 8 k its inputs (block
    offsets included) cut to a multiple of 4, plus 4 when that leaves a 4-wide head (`lane_products.lane_matrix`).
    A matrix is taken with the others a layer stacks it with (`STACKS`, `weights.stack_heights`), and the stack
    or the matrix alone takes lanes only with more than `ops.ROW_SLAB` outputs and not held by columns (`ops.tall`);
    never the output head or a routed expert. At most: a shape this machine's BLAS gives no lane plan, and a last
    layer's products after attention where the pass keeps only the rows the logits need, take none (SmolLM2-135M:
    208.5 MiB counted, 205.0 held after a 128-token prefill, the last FFN down multiplied by one row)."""
    import numpy as np

    from walkthrough.engine.glassbox.ops import ROW_SLAB, tall
    from walkthrough.engine.glassbox.quantdot import WITH_OFFSET
    from walkthrough.engine.glassbox.weights import product_dtype, stack_heights

    def lanes(t) -> int:  # [8, k, d_out] float32
        whole = (t.shape[0] + (t.shape[0] // 32 if t.ggml_type in WITH_OFFSET else 0)) & -4
        return t.shape[1] * (whole + 4 if whole % 8 else whole) * 4

    units, stacked = [], set()  # the matrices multiplied as one
    for layer in {m.group(0) for name in f.tensors if (m := re.match(r"blk\.\d+\.", name))}:
        for stack in STACKS:
            infos = [f.tensors.get(f"{layer}{part}.weight") for part in stack]
            if stack_heights(infos, ROW_SLAB) is not None:
                units.append(infos)
                stacked.update(t.name for t in infos)
    units += [[t] for t in f.tensors.values() if t.name not in stacked]
    head = "output.weight" if "output.weight" in f.tensors else "token_embd.weight"
    total = 0
    for unit in units:
        first = unit[0]
        if len(first.shape) != 2 or first.name in (head, "token_embd.weight") or product_dtype(first) is not np.float32:
            continue
        d_out = sum(t.shape[1] for t in unit)
        if d_out > ROW_SLAB and not tall(d_out, first.shape[0]):
            total += sum(lanes(t) for t in unit)
    return total


def lane_copies_fit(f: GGUFFile, budget: int) -> bool:
    """Whether a weight budget holds every weight of `f` and every lane copy together (`dequantized_bytes` +
    `lane_copy_bytes`): only then does the numpy engine keep the copies (`Weights.lanes`), so none takes the room a
    weight needs."""
    return dequantized_bytes(f) + lane_copy_bytes(f) <= budget


@dataclass(frozen=True)
class Holding:
    """What one engine will hold for a request, in bytes."""

    engine: str
    weights: int  # resident weights: dequantized (numpy, at most the budget) or the file's bytes (llama.cpp)
    weights_all: int  # the weights without a budget (numpy: every weight dequantized)
    kv: int  # KV cache at the request's length
    activations: int  # one pass's activations (estimate)
    budget: int | None  # numpy's weight budget
    lane_copies: int = 0  # numpy: the lane copies kept for long passes (`lane_copy_bytes`) where the budget holds them

    @property
    def total(self) -> int:
        return self.weights + self.lane_copies + self.kv + self.activations

    @classmethod
    def numpy(cls, f: GGUFFile, card: ModelCard, positions: int, chunk: int, budget: int,
              prompt: int | None = None) -> Holding:
        """`prompt`: the tokens the first pass prefills (at most `chunk` a pass); None for all `positions`."""
        from walkthrough.engine.glassbox.ops import LANE_ROWS

        every = dequantized_bytes(f)
        longest = min(positions if prompt is None else prompt, chunk)  # the longest pass's rows
        kept = lane_copy_bytes(f) if longest >= LANE_ROWS and lane_copies_fit(f, budget) else 0  # `Weights.lanes`
        return cls("numpy", min(every, budget), every, card.kv_bytes(positions, "f32") or 0,
                   int(compute_buffer_bytes(card, chunk).value), budget, kept)

    @classmethod
    def llama_cpp(cls, f: GGUFFile, card: ModelCard, positions: int, chunk: int) -> Holding:
        return cls("llama.cpp", f.data_bytes, f.data_bytes, card.kv_bytes(positions, "f16") or 0,
                   int(compute_buffer_bytes(card, chunk).value), None)

    def line(self, free: int | None) -> str:
        """One line: what the engine holds, split, beside the free memory."""
        if self.engine == "numpy":
            bound = (f"{binary_bytes(self.weights)} of weights dequantized"
                     + (f" (all {binary_bytes(self.weights_all)} would not fit the --max-memory budget of "
                        f"{binary_bytes(self.budget)}: the rest is decoded again on use)"
                        if self.weights_all > self.weights else "")
                     + (f" and {binary_bytes(self.lane_copies)} of lane copies for passes of many tokens"
                        if self.lane_copies else ""))
        else:
            bound = f"{binary_bytes(self.weights)} of weights mapped as stored"
        room = f"; {binary_bytes(free)} free" if free is not None else ""
        return (f"the {self.engine} engine will hold {binary_bytes(self.total)}: {bound}, KV cache "
                f"{binary_bytes(self.kv)}, activations {binary_bytes(self.activations)}{room}")

    def warning(self, free: int | None, other: Holding | None = None) -> str | None:
        """Why this will not fit the free memory (and whether llama.cpp would), or None."""
        if free is None or self.total <= free:
            return None
        advice = ""
        if other is not None and self.engine == "numpy" and other.total < self.total:
            advice = (f"; llama.cpp would hold {binary_bytes(other.total)} (--engine llama.cpp), or lower "
                      "--max-memory")
        return (f"the {self.engine} engine needs {binary_bytes(self.total)} but only {binary_bytes(free)} "
                f"is free{advice}")


def report(f: GGUFFile, card: ModelCard, engine: str, positions: int, chunk: int,
           budget: int | None = None, prompt: int | None = None) -> tuple[str, str | None]:
    """What `engine` will hold for a request of `positions` in passes of `chunk` tokens beside the free
    memory (`Holding.line`), and why it will not fit, if so (`Holding.warning`, naming llama.cpp's figure).
    `budget`: the numpy engine's (default `default_budget`); `prompt`: the tokens prefilled (`Holding.numpy`)."""
    free = free_memory()
    other = Holding.llama_cpp(f, card, positions, chunk)
    if engine != "numpy":
        return other.line(free), other.warning(free)
    mine = Holding.numpy(f, card, positions, chunk, budget or default_budget(free), prompt)
    return mine.line(free), mine.warning(free, other)
