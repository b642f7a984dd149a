"""The llama.cpp engine's model: a GGUF loaded by llama.cpp itself (llama-cpp-python's low-level API).

The second engine behind the `Session` / `Step` interface (`llama_session`):
llama.cpp computes every pass at its own speed, and what the stages show is
read from its graph as it runs (`llama_capture`). This module only loads: the
optional extra (`pip install 'walkthrough[llama]'`), the model weights
(memory-mapped, CPU backend), the vocabulary's end-of-generation ids as
llama.cpp decides them, and the layer kinds from the model card.

    model = LlamaModel.open("model.gguf")          # WalkthroughError if the extra is missing
    session = LlamaSession(model)                  # walkthrough.engine.llama.session

llama.cpp's own log lines are kept (the last few, to explain a failed load)
instead of printed, so they never land on the app's screen.

With `rpc` (workers' addresses, `walkthrough worker` on each), llama.cpp places
layers on the workers too (`llama_placement`; `split` chooses how many where)
and `placement` says what it did.

Not handled: GPU offload (every local layer runs on the CPU backend),
LoRA adapters, multi-sequence batches.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import threading
from collections import deque
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING

from walkthrough.engine.llama.pass_cost import PassCounter
from walkthrough.engine.llama.placement import Placement, from_log, split_params
from walkthrough.errors import WalkthroughError
from walkthrough.inspect.card import ModelCard, build_card
from walkthrough.inspect.gguf import GGUFFile, open_gguf

if TYPE_CHECKING:
    from walkthrough.engine.llama.rpc import Endpoint

INSTALL_HINT = "pip install 'walkthrough[llama]'"
_LOG_LINES = 20  # llama.cpp log lines kept to explain a failure

_lock = threading.Lock()
_state: dict[str, object] = {}  # the loaded bindings, the log callback (kept alive) and the recent log lines


class LlamaUnavailable(WalkthroughError):
    """llama-cpp-python is not installed (or its library does not load)."""


def llama_available() -> bool:
    """True when llama-cpp-python can be imported (the `[llama]` extra is installed)."""
    try:
        bindings()
    except LlamaUnavailable:
        return False
    return True


def bindings() -> ModuleType:
    """llama-cpp-python's low-level module, its backend initialised and its log captured (once per process).

    Raises:
        LlamaUnavailable: the extra is not installed; the message says how to install it.
    """
    with _lock:
        if "lib" in _state:
            return _state["lib"]  # type: ignore[return-value]
        try:
            import llama_cpp.llama_cpp as lib
        except ImportError:
            raise LlamaUnavailable(
                f"the llama.cpp engine needs llama-cpp-python, which is not installed: {INSTALL_HINT}"
            ) from None
        except OSError as exc:  # installed, but its shared library does not load
            raise LlamaUnavailable(f"llama-cpp-python's library does not load ({exc}); "
                                   f"reinstall it: {INSTALL_HINT}") from None
        lines: deque[str] = deque(maxlen=_LOG_LINES)

        @lib.llama_log_callback
        def keep_log(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
            line = text.decode("utf-8", errors="replace")
            lines.append(line)
            sink = _state.get("sink")
            if sink is not None:
                sink.append(line)  # type: ignore[attr-defined]

        lib.llama_log_set(keep_log, ctypes.c_void_p(0))
        lib.llama_backend_init()
        _state.update(lib=lib, log=keep_log, lines=lines)
        return lib


def recent_log() -> str:
    """llama.cpp's last error-looking log line (or its last line), for a one-line failure message."""
    lines = [line.strip() for line in _state.get("lines", ()) if line.strip()]  # type: ignore[union-attr]
    errors = [line for line in lines if "error" in line.lower() or "failed" in line.lower()]
    return (errors or lines or ["no log"])[-1]


def default_threads() -> int:
    """Half the CPUs, as llama-cpp-python's `Llama` does (llama.py: multiprocessing.cpu_count() // 2).

    ggml's threads wait for each other at every graph node by spinning: on a busy machine a thread that
    loses its core stalls the rest. The 35B-shaped file on this 2-core machine under load: 1.2-2.1 s per
    decoded token with 1 thread, 22-41 s with 2 (tests/bench/bench_llama_engine.py --threads).
    """
    return max((os.cpu_count() or 2) // 2, 1)


@dataclass(frozen=True)
class Layout:
    """What a session needs to know of the model's layers and vocabulary (the numpy engine's `Config` subset)."""

    arch: str
    n_layers: int
    n_vocab: int
    n_experts: int
    n_head: int  # query heads (the card's largest over layers)
    n_head_kv: tuple[int, ...]  # per layer
    mixers: tuple[str, ...]  # per layer, the card's attention kind: "full", "sliding", "linear", ...
    ffns: tuple[str, ...]  # per layer: "dense", "moe" or "none"
    end_ids: frozenset[int]  # llama_vocab_is_eog: the ids that end a generation


class LlamaModel:
    """A file loaded by llama.cpp (weights memory-mapped); holds no per-request state (that is the session's)."""

    engine = "llama.cpp"

    def __init__(self, f: GGUFFile, *, card: ModelCard | None = None, n_threads: int | None = None,
                 rpc: list[Endpoint] | None = None, split: list[int] | None = None):
        f.require_whole("the llama.cpp engine")
        self.lib = lib = bindings()
        self.file = f
        self.card = card or build_card(f)
        self.n_threads = max(1, n_threads or default_threads())
        self.rpc = list(rpc or [])
        self.placement: Placement | None = None  # where llama.cpp put the layers, with --rpc
        params = lib.llama_model_default_params()
        params.n_gpu_layers = 0  # CPU backend: the eval callback reads tensors in place
        # ggml's AMX weight repacking (an "extra" buffer type) dies with SIGILL where the OS does not grant AMX
        # tiles (this project's sandbox); without it the CPU backend runs the stored formats directly.
        params.use_extra_bufts = False
        devices = self._place(params, split) if self.rpc else {}
        if not self.rpc:  # this host's CPU only, whatever devices this process registered
            self._devices = (ctypes.c_void_p * 1)(None)
            params.devices = ctypes.cast(self._devices, ctypes.c_void_p)
        log: list[str] = []
        _state["sink"] = log
        try:
            self.ptr = lib.llama_model_load_from_file(str(f.path).encode(), params)
        finally:
            _state.pop("sink", None)
        if not self.ptr:
            raise WalkthroughError(f"llama.cpp could not load {f.path.name}: {recent_log()}")
        self.counter = PassCounter(f, self.card)  # bytes and FLOPs of each pass
        self.vocab = lib.llama_model_get_vocab(self.ptr)
        n_vocab = int(lib.llama_vocab_n_tokens(self.vocab))
        n_layers = int(lib.llama_model_n_layer(self.ptr))
        layers = self.card.layers[:n_layers]
        self.config = Layout(
            arch=self.card.architecture,
            n_layers=n_layers,
            n_vocab=n_vocab,
            n_experts=self.card.n_experts,
            n_head=self.card.n_head or 0,
            n_head_kv=tuple(layer.n_head_kv or self.card.n_head_kv or 0 for layer in layers)
            + (self.card.n_head_kv or 0,) * (n_layers - len(layers)),
            mixers=tuple(layer.attention for layer in layers) + ("full",) * (n_layers - len(layers)),
            ffns=tuple(layer.ffn for layer in layers) + ("dense",) * (n_layers - len(layers)),
            end_ids=frozenset(i for i in range(n_vocab) if lib.llama_vocab_is_eog(self.vocab, i)),
        )

        if self.rpc:
            self.placement = from_log(log, devices, n_layers, self.card.n_embd or 0, n_vocab,
                                      list(f.tensors.values()))

    def _place(self, params, split: list[int] | None) -> dict[str, str]:
        """Register the workers and ask llama.cpp to place layers on them; {device name: "HOST:PORT"}.

        Without `split`, every layer goes to the workers in proportion to their free memory (llama.cpp's
        default); with it, split[0] layers stay here and split[1:] go to the workers in order.
        """
        from walkthrough.engine.llama import rpc as ggml_rpc

        devices = ggml_rpc.add_servers(self.rpc)
        n_layers = self.card.n_layers or len(self.card.layers)
        if split is not None:
            if len(split) != len(self.rpc) + 1 or sum(split) != n_layers or min(split) < 0:
                raise WalkthroughError(f"--split {','.join(map(str, split))}: give {len(self.rpc) + 1} layer counts "
                                       f"(this host, then each worker) that add up to the model's {n_layers} layers")
            params.n_gpu_layers, shares = split_params(n_layers, split)
            self._shares = (ctypes.c_float * self.lib.LLAMA_MAX_DEVICES)(*shares)
            params.tensor_split = self._shares
        else:
            params.n_gpu_layers = n_layers + 1  # all, the output head too
        self._devices = (ctypes.c_void_p * (len(devices) + 1))(*devices, None)  # NULL-terminated, kept alive
        params.devices = ctypes.cast(self._devices, ctypes.c_void_p)
        base = ggml_rpc.libraries()["base"]
        base.ggml_backend_dev_name.argtypes = [ctypes.c_void_p]
        base.ggml_backend_dev_name.restype = ctypes.c_char_p
        return {base.ggml_backend_dev_name(d).decode(): str(e) for d, e in zip(devices, self.rpc)}

    @classmethod
    def open(cls, path: str | os.PathLike, **kwargs) -> LlamaModel:
        """Load a GGUF file with llama.cpp."""
        return cls(open_gguf(path), **kwargs)

    def check_ids(self, ids: list[int]) -> None:
        bad = [i for i in ids if not 0 <= i < self.config.n_vocab]
        if bad:
            raise WalkthroughError(
                f"token id {bad[0]} is outside this model's vocabulary (0..{self.config.n_vocab - 1})"
            )

    def close(self) -> None:
        """Free llama.cpp's model (sessions made from it must be closed first)."""
        if self.ptr:
            self.lib.llama_model_free(self.ptr)
            self.ptr = None

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # interpreter shutdown: the library may be gone already
            self.close()
