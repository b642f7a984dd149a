"""Choosing an engine: numpy (always there, the glass box) or llama.cpp (the optional extra, real speed).

Both give a model that is an `Engine` and a session that is a `Session`
(`engine.protocol`: the same `prefill` / `decode` / `feed` and the same `Step`
records), so callers pick an engine once:

    model = load_model("llama.cpp", f, card)      # WalkthroughError with the install line if it is missing
    session = new_session(model, record_attention=True, n_ctx=len(ids) + 120)

`advice(card)` is the one line the app shows when a file is big enough that the
numpy engine would take seconds per token and llama.cpp is installed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from walkthrough.errors import WalkthroughError
from walkthrough.units import binary_bytes

if TYPE_CHECKING:  # kept light: the CLI's parser reads ENGINES
    from walkthrough.engine.llama.rpc import Endpoint
    from walkthrough.engine.protocol import Engine, Session
    from walkthrough.inspect.card import ModelCard
    from walkthrough.inspect.gguf import GGUFFile

ENGINES = ("numpy", "llama.cpp")
# Above this many weight bytes read per decoded token the numpy engine takes seconds per token (it dequantizes
# every weight it reads in Python; issue 14 measured 31-42 s a token on a 21.8 GB Qwen3.6-35B-A3B-shaped file).
LARGE_READ_PER_TOKEN = 256 << 20


def check_engine(name: str) -> str:
    """The engine name, or a one-line error listing the known ones."""
    if name not in ENGINES:
        raise WalkthroughError(f"unknown engine {name!r}: choose {' or '.join(ENGINES)}")
    return name


_workers: dict[str, list] = {}  # the app's --rpc/--split, for every model it loads (`use_workers`)


def use_workers(rpc: list[Endpoint] | None, split: list[int] | None) -> None:
    """Place the layers of every llama.cpp model this process loads from now on over these workers (the app's
    --rpc and --split; its models are loaded deep inside, on each file or engine change)."""
    _workers.clear()
    if rpc:
        _workers.update(rpc=list(rpc), split=list(split) if split is not None else None)


def load_model(name: str, f: GGUFFile, card: ModelCard | None = None, max_memory: int | None = None,
               rpc: list[Endpoint] | None = None, split: list[int] | None = None, *,
               exact_products: bool = False) -> Engine:
    """The file prepared by the named engine (numpy: header only; llama.cpp: loaded, weights mmapped).

    `max_memory` bounds the numpy engine's dequantized weights (default: `memory.default_budget`, a share
    of the free memory); llama.cpp maps the file as stored and ignores it. `rpc` (workers) and `split`
    (layers per host) place llama.cpp's layers over this host and the workers (`llama_placement`).
    `exact_products`: the numpy engine multiplies as ggml's CPU kernels do (`Model(exact_products=True)`).

    Raises:
        WalkthroughError: the engine cannot run the file, or llama.cpp is not installed (says how to install).
    """
    if rpc is None and name == "llama.cpp" and _workers:
        rpc, split = _workers["rpc"], _workers["split"]
    if split is not None and not rpc:
        raise WalkthroughError("--split says how many layers each host of --rpc holds: give --rpc too")
    if check_engine(name) == "llama.cpp":
        from walkthrough.engine.llama.model import LlamaModel

        return LlamaModel(f, card=card, rpc=rpc, split=split)
    if rpc:
        raise WalkthroughError("--rpc places llama.cpp's layers on workers: add --engine llama.cpp")
    from walkthrough.costs.memory import default_budget
    from walkthrough.engine.glassbox.model import Model

    return Model(f, card=card, max_cache_bytes=max_memory or default_budget(), exact_products=exact_products)


def new_session(model: Engine, *, kv_type: str = "f16", record_attention: bool = False, n_ctx: int | None = None,
                auto_checkpoints: bool = True, measure_surprisal: bool = False,
                attention_rows: bool = False) -> Session:
    """A fresh session on the model's engine.

    `n_ctx` (positions) sizes llama.cpp's context (numpy's cache grows); `auto_checkpoints` is the numpy
    session's (llama.cpp's takes none: a hybrid model's state rewinds to the start). `measure_surprisal`
    (every prompt token's surprisal) and `attention_rows` (every row of the attention weights) work on both.
    """
    from walkthrough.engine.glassbox.model import Model
    from walkthrough.engine.llama.model import LlamaModel

    if isinstance(model, LlamaModel):
        from walkthrough.engine.llama.session import LlamaSession

        return LlamaSession(model, kv_type=kv_type, record_attention=record_attention, n_ctx=n_ctx,
                            measure_surprisal=measure_surprisal, attention_rows=attention_rows)
    if isinstance(model, Model):
        from walkthrough.engine.glassbox.session import Session as NumpySession

        return NumpySession(model, kv_type=kv_type, record_attention=record_attention,
                            auto_checkpoints=auto_checkpoints, measure_surprisal=measure_surprisal,
                            attention_rows=attention_rows)
    raise TypeError(f"no engine runs a {type(model).__name__}")


def advice(card: ModelCard, engine: str) -> str | None:
    """Why to switch to llama.cpp for this file (on numpy, for a large file, llama.cpp installed), else None."""
    from walkthrough.engine.llama.model import llama_available

    per_token = card.bytes_per_token or 0
    if engine != "numpy" or per_token < LARGE_READ_PER_TOKEN or not llama_available():
        return None
    return (f"each token reads {binary_bytes(per_token)} of weights, which the numpy engine dequantizes in Python: "
            "seconds per token; llama.cpp is installed and runs it at full speed (--engine llama.cpp)")
