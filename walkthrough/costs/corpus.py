"""The corpus of measured runs the timing model is fitted on: published llama.cpp runs, each with its source.

Two data files beside this module:
- `measured_runs.csv`: one row per measurement: machine, backend, model, quant,
  file bytes, bytes read per token (blank: computed from the model's shape),
  test ("pp" = prompt processing of n tokens, "tg" = generating n tokens, both
  after `depth` tokens already in the cache), micro-batch, tokens/s, source, date.
- `corpus.json`: the machines (spec bandwidth, compute at the backend's precision,
  memory and what the OS lets the accelerator use, each with a source) and the
  models (parameters, layers, KV and attention sizes, expert calls per token).

`load()` reads and checks both; a malformed row raises `CorpusError` naming the
file, the row and the field. Bytes read per token, when a row leaves it blank,
is the file's mean bytes per parameter times the parameters a token touches
(active parameters, less the embedding table unless it is tied to the output
head, since decoding reads one row of it): a uniform-bits approximation.

Example: Llama 3 8B Q4_K_M, 4.58 GiB = 4.92e9 B over 8.03e9 parameters, 7.50e9
touched per token (8.03e9 - 0.525e9 embedding) -> 4.59e9 B read per token.
"""

from __future__ import annotations

import csv
import json
import math
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

from walkthrough.errors import WalkthroughError

FAMILIES = ("CUDA", "Metal", "ROCm/Vulkan", "CPU")
BACKEND_FAMILY = {"CUDA": "CUDA", "Metal": "Metal", "ROCm": "ROCm/Vulkan", "Vulkan": "ROCm/Vulkan",
                  "ROCm/Vulkan": "ROCm/Vulkan", "CPU": "CPU"}
TESTS = ("pp", "tg")
COLUMNS = ("machine", "backend", "model", "quant", "file_bytes", "bytes_per_token", "test", "n", "depth",
           "ubatch", "tokens_per_s", "source", "date")
_DATE = re.compile(r"^\d{4}(-\d{2}(-\d{2})?)?$")
_SOURCE = re.compile(r"^(https://\S+|seed:\S+|measured here: .+)")


class CorpusError(WalkthroughError):
    """A corpus file that cannot be used; the message names the file, the row and the field."""


@dataclass(frozen=True)
class Machine:
    """One measured machine: spec figures at the precision its backend uses, with their sources."""

    id: str
    name: str
    family: str  # one of FAMILIES
    memory_gib: float
    accelerator_gib: float | None  # what the OS lets the accelerator use by default; None: all of it
    bandwidth_gbs: float  # spec-sheet peak, 1e9 B/s
    compute_tflops: float | None  # peak at the backend's precision; None: no sourced figure
    compute_precision: str
    sources: dict[str, str]

    @property
    def bandwidth(self) -> float:
        return self.bandwidth_gbs * 1e9

    @property
    def compute(self) -> float | None:
        return None if self.compute_tflops is None else self.compute_tflops * 1e12


@dataclass(frozen=True)
class Model:
    """The shape of a measured model: what a token reads and computes."""

    id: str
    name: str
    params: float
    params_active: float
    embedding_params: float
    tied_embeddings: bool
    layers: int
    kv_layers: int  # layers keeping a full-context KV cache
    kv_dim: int  # K + V values per token per KV layer
    attn_dim: int  # query heads x head size
    expert_calls: int  # routed (+ shared) expert matmuls per token, all layers
    experts: int  # experts (+ shared) of all layers: the expert matmuls a prompt micro-batch may run
    source: str
    recurrent_layers: int = 0  # linear-attention (Gated DeltaNet) layers: a fixed state, no KV cache
    n_embd: int = 0  # hidden size: the width of every layer's input and output

    def touched_params(self) -> float:
        """Parameters one decoded token reads: active ones, less the embedding table unless tied."""
        return self.params_active - (0.0 if self.tied_embeddings else self.embedding_params)


@dataclass(frozen=True)
class Run:
    """One measurement of the corpus."""

    machine: Machine
    backend: str
    model: Model
    quant: str
    file_bytes: int
    bytes_per_token: float  # given by the source, or computed (see the module docstring)
    test: str  # "pp" or "tg"
    n: int  # tokens processed or generated
    depth: int  # tokens already in the cache when the test starts
    ubatch: int  # prompt tokens per pass
    tokens_per_s: float
    source: str
    date: str

    @property
    def family(self) -> str:
        return BACKEND_FAMILY[self.backend]

    @property
    def seconds(self) -> float:
        """Wall time of the whole test."""
        return self.n / self.tokens_per_s


@dataclass(frozen=True)
class Corpus:
    machines: dict[str, Machine]
    models: dict[str, Model]
    runs: list[Run]

    def family_runs(self, family: str) -> list[Run]:
        return [r for r in self.runs if r.family == family]


def _data_path(name: str) -> Path:
    return Path(str(resources.files("walkthrough.costs").joinpath(name)))


def _number(value: object, where: str, name: str, *, allow_none: bool = False) -> float | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise CorpusError(f"{where}: '{name}' must be a positive number; fix the file")
    return float(value)


def _machine(entry: dict, where: str) -> Machine:
    where = f"{where} ({entry.get('id', '?')})"
    if entry.get("family") not in FAMILIES:
        raise CorpusError(f"{where}: 'family' must be one of {', '.join(FAMILIES)}; fix the file")
    sources = entry.get("sources") or {}
    needed = ["memory_gib", "bandwidth_gbs"] + (["compute_tflops"] if entry.get("compute_tflops") else []) + (
        ["accelerator_gib"] if entry.get("accelerator_gib") else [])
    missing = [n for n in needed if not sources.get(n)]
    if missing:
        raise CorpusError(f"{where}: 'sources' lacks {', '.join(missing)}; every figure needs its source")
    return Machine(
        id=entry["id"], name=entry["name"], family=entry["family"],
        memory_gib=_number(entry.get("memory_gib"), where, "memory_gib"),
        accelerator_gib=_number(entry.get("accelerator_gib"), where, "accelerator_gib", allow_none=True),
        bandwidth_gbs=_number(entry.get("bandwidth_gbs"), where, "bandwidth_gbs"),
        compute_tflops=_number(entry.get("compute_tflops"), where, "compute_tflops", allow_none=True),
        compute_precision=str(entry.get("compute_precision", "")), sources=dict(sources))


def _model(entry: dict, where: str) -> Model:
    where = f"{where} ({entry.get('id', '?')})"
    ints = {}
    for name in ("layers", "kv_layers", "kv_dim", "attn_dim", "expert_calls", "experts", "recurrent_layers", "n_embd"):
        value = entry.get(name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise CorpusError(f"{where}: '{name}' must be a whole number >= 0; fix the file")
        ints[name] = value
    if ints["kv_layers"] + ints["recurrent_layers"] > ints["layers"]:
        raise CorpusError(f"{where}: 'kv_layers' + 'recurrent_layers' exceed 'layers'; fix the file")
    if not entry.get("source"):
        raise CorpusError(f"{where}: 'source' is missing; every model shape needs its source")
    params = _number(entry.get("params"), where, "params")
    active = _number(entry.get("params_active"), where, "params_active")
    if active > params:
        raise CorpusError(f"{where}: 'params_active' exceeds 'params'; fix the file")
    return Model(id=entry["id"], name=entry["name"], params=params, params_active=active,
                 embedding_params=float(entry.get("embedding_params", 0)),
                 tied_embeddings=bool(entry.get("tied_embeddings")), source=entry["source"], **ints)


def _run(row: dict[str, str], where: str, machines: dict[str, Machine], models: dict[str, Model]) -> Run:
    def fail(name: str, what: str) -> CorpusError:
        return CorpusError(f"{where}: '{name}' {what}; fix the file")

    machine = machines.get(row["machine"])
    if machine is None:
        raise fail("machine", f"names no machine of corpus.json ({row['machine']!r})")
    model = models.get(row["model"])
    if model is None:
        raise fail("model", f"names no model of corpus.json ({row['model']!r})")
    if row["backend"] not in BACKEND_FAMILY:
        raise fail("backend", f"must be one of {', '.join(BACKEND_FAMILY)}")
    if BACKEND_FAMILY[row["backend"]] != machine.family:
        raise fail("backend", f"is {row['backend']} but machine {machine.id} is a {machine.family} machine")
    if row["test"] not in TESTS:
        raise fail("test", "must be pp or tg")
    try:
        file_bytes = int(row["file_bytes"])
        n, depth, ubatch = int(row["n"]), int(row["depth"]), int(row["ubatch"])
        value = float(row["tokens_per_s"])
        bpt = float(row["bytes_per_token"]) if row["bytes_per_token"] else None
    except ValueError as exc:
        raise CorpusError(f"{where}: a number does not parse ({exc}); fix the file") from None
    if file_bytes <= 0 or n <= 0 or depth < 0 or ubatch <= 0 or not value > 0 or not math.isfinite(value):
        raise fail("file_bytes/n/depth/ubatch/tokens_per_s", "must be positive (depth >= 0)")
    if bpt is None:
        bpt = file_bytes / model.params * model.touched_params()
    if not _SOURCE.match(row["source"]):
        raise fail("source", "must be a URL (https://...), a seed file (seed:NAME) or 'measured here: ...'")
    if not _DATE.match(row["date"]):
        raise fail("date", "must be YYYY, YYYY-MM or YYYY-MM-DD")
    return Run(machine, row["backend"], model, row["quant"], file_bytes, bpt, row["test"], n, depth, ubatch, value,
               row["source"], row["date"])


def load(runs_path: Path | None = None, specs_path: Path | None = None) -> Corpus:
    """Read and check the corpus (the bundled files unless paths are given).

    Raises:
        CorpusError: a file is unreadable or a row or entry is malformed.
    """
    specs_path = specs_path or _data_path("corpus.json")
    runs_path = runs_path or _data_path("measured_runs.csv")
    try:
        specs = json.loads(specs_path.read_text(encoding="utf-8"))
        with runs_path.open(encoding="utf-8", newline="") as f:
            rows = list(csv.DictReader(f))
            header = tuple(rows[0].keys()) if rows else ()
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, csv.Error) as exc:
        raise CorpusError(f"corpus files {specs_path.name}, {runs_path.name}: cannot be read ({exc})") from None
    if header != COLUMNS:
        raise CorpusError(f"{runs_path.name}: columns must be {', '.join(COLUMNS)}; fix the header")
    machines = {e["id"]: _machine(e, f"{specs_path.name}: machine") for e in specs.get("machines", [])}
    models = {e["id"]: _model(e, f"{specs_path.name}: model") for e in specs.get("models", [])}
    runs = [_run(row, f"{runs_path.name}: row {i}", machines, models) for i, row in enumerate(rows, 2)]
    return Corpus(machines, models, runs)


@lru_cache(maxsize=1)
def bundled() -> Corpus:
    """The shipped corpus, read once."""
    return load()
