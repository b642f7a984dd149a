"""ggml's RPC backend through llama-cpp-python's libraries: workers, their addresses, and reaching them.

llama.cpp built with `-DGGML_RPC=ON` ships `libggml-rpc.so` beside `libllama.so`
(ggml/include/ggml-rpc.h). A worker is `ggml_backend_rpc_start_server` on this
host's CPU device; the process that runs the model registers each worker with
`ggml_backend_rpc_add_server` (as llama.cpp's `--rpc` does in common/arg.cpp)
and llama.cpp places layers on the workers' devices (`llama_placement`).

ggml's RPC client aborts the whole process when a worker cannot be reached, does
not speak its protocol version, or stops answering mid-pass
(RPC_STATUS_ASSERT -> GGML_ABORT in ggml-rpc.cpp). So before handing an address
to llama.cpp, `probe` connects and says HELLO itself (the protocol's first
message: command 14, 24 bytes of capabilities; the reply starts with the
server's major, minor and patch version) and turns every failure into a
one-line error; and `on_abort` replaces ggml's abort with one line on stderr
and an exit status, for a worker that dies during a run.

    endpoints = parse_endpoints("127.0.0.1:50052,10.0.0.2:50052")
    for e in endpoints: probe(e)                 # WalkthroughError: unreachable, busy, other version
    devices = add_servers(endpoints)             # ggml_backend_dev_t of each worker, for llama_model_params

Not handled: several devices per worker (a worker here serves its CPU device);
RDMA transport; the server's tensor cache (`-c` of rpc-server).
"""

from __future__ import annotations

import ctypes
import os
import socket
import struct
import sys
from dataclasses import dataclass
from pathlib import Path

from walkthrough.errors import WalkthroughError

RPC_INSTALL_HINT = "install with `CMAKE_ARGS=-DGGML_RPC=ON pip install '.[llama]'`"
PROTOCOL_MAJOR = 7  # RPC_PROTO_MAJOR_VERSION of the vendored ggml-rpc.h (llama-cpp-python 0.3.36)
HELLO = 14  # RPC_CMD_HELLO, fixed across versions (static_assert in ggml-rpc.cpp)
CAPS_SIZE = 24  # RPC_CONN_CAPS_SIZE (ggml-rpc/transport.h)
DEFAULT_PORT = 50052  # rpc-server's default (tools/rpc/rpc-server.cpp)
PROBE_SECONDS = 5.0
GGML_BACKEND_DEVICE_TYPE_CPU = 0  # enum ggml_backend_dev_type (ggml-backend.h)

_libs: dict[str, ctypes.CDLL] = {}
_keep: list[object] = []  # ctypes callbacks that must outlive the call that installed them
_registered: set[Endpoint] = set()  # workers ggml holds a connection to in this process


class RpcUnavailable(WalkthroughError):
    """llama-cpp-python is missing, or was built without ggml's RPC backend."""


@dataclass(frozen=True)
class Endpoint:
    """One worker's address as the user typed it (host kept literally)."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


def parse_endpoints(text: str) -> list[Endpoint]:
    """`HOST:PORT[,HOST:PORT...]` -> endpoints; a one-line error names the bad part.

    Example: "127.0.0.1:50052, 10.0.0.2:50053" -> [127.0.0.1:50052, 10.0.0.2:50053].
    """
    endpoints = []
    for part in (p.strip() for p in text.split(",")):
        host, sep, port = part.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise WalkthroughError(f"--rpc: {part!r} is not HOST:PORT (e.g. 127.0.0.1:{DEFAULT_PORT})")
        endpoint = Endpoint(host.strip("[]"), int(port))
        if endpoint in endpoints:
            raise WalkthroughError(f"--rpc: {endpoint} is named twice")
        endpoints.append(endpoint)
    return endpoints


def libraries() -> dict[str, ctypes.CDLL]:
    """ggml's base, core and RPC libraries as llama-cpp-python loaded them (the same copies, same state).

    Raises:
        RpcUnavailable: the extra is missing, or its build has no RPC backend (says how to install).
    """
    if _libs:
        return _libs
    from walkthrough.engine.llama.model import LlamaUnavailable, bindings

    try:
        bindings()
    except LlamaUnavailable as exc:
        raise RpcUnavailable(f"{exc} (with RPC: {RPC_INSTALL_HINT})") from None
    import llama_cpp

    folder = Path(llama_cpp.__file__).parent / "lib"
    # The files libllama.so names (their sonames, "libggml-rpc.so.0"): a wheel holds plain copies under each
    # name, not symlinks, and loading "libggml-base.so" would give this process a second ggml with its own state.
    base, core, rpc = (_soname(folder, stem) for stem in ("libggml-base", "libggml", "libggml-rpc"))
    if rpc is None or base is None or core is None:
        raise RpcUnavailable(f"this llama-cpp-python was built without ggml's RPC backend; {RPC_INSTALL_HINT}")
    base, core, rpc_lib = (ctypes.CDLL(str(path)) for path in (base, core, rpc))
    vp, cp, sz = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t
    rpc_lib.ggml_backend_rpc_start_server.argtypes = [cp, cp, sz, sz, ctypes.POINTER(vp)]
    rpc_lib.ggml_backend_rpc_start_server.restype = None
    rpc_lib.ggml_backend_rpc_add_server.argtypes = [cp]
    rpc_lib.ggml_backend_rpc_add_server.restype = vp
    rpc_lib.ggml_backend_rpc_get_device_memory.argtypes = [cp, ctypes.c_uint32, ctypes.POINTER(sz),
                                                           ctypes.POINTER(sz)]
    core.ggml_backend_dev_by_type.argtypes = [ctypes.c_int]
    core.ggml_backend_dev_by_type.restype = vp
    base.ggml_backend_reg_dev_count.argtypes = [vp]
    base.ggml_backend_reg_dev_count.restype = sz
    base.ggml_backend_reg_dev_get.argtypes = [vp, sz]
    base.ggml_backend_reg_dev_get.restype = vp
    base.ggml_backend_buffer_is_host.argtypes = [vp]
    base.ggml_backend_buffer_is_host.restype = ctypes.c_bool
    base.ggml_backend_tensor_get.argtypes = [vp, vp, sz, sz]
    base.ggml_backend_tensor_get.restype = None
    base.ggml_set_abort_callback.argtypes = [vp]
    base.ggml_set_abort_callback.restype = vp
    _libs.update(base=base, core=core, rpc=rpc_lib)
    return _libs


def _soname(folder: Path, stem: str) -> Path | None:
    for name in (f"{stem}.so.0", f"{stem}.so"):
        if (folder / name).exists():
            return folder / name
    return None


def loaded(name: str) -> ctypes.CDLL | None:
    """One of ggml's libraries if `libraries()` loaded them in this process already, else None."""
    return _libs.get(name)


def serve(host: str, port: int, threads: int) -> None:
    """Run a ggml RPC server on this host's CPU device; returns only if ggml's server gives up."""
    libs = libraries()
    cpu = libs["core"].ggml_backend_dev_by_type(GGML_BACKEND_DEVICE_TYPE_CPU)
    if not cpu:
        raise RpcUnavailable("llama.cpp's build has no CPU device to serve")
    devices = (ctypes.c_void_p * 1)(cpu)
    libs["rpc"].ggml_backend_rpc_start_server(f"{host}:{port}".encode(), None, threads, 1, devices)


def probe(endpoint: Endpoint, timeout: float = PROBE_SECONDS) -> tuple[int, int, int]:
    """Connect to a worker and exchange HELLO; its protocol version (major, minor, patch).

    Raises:
        WalkthroughError: unreachable, silent (ggml's server serves one client at a time), not a ggml
            RPC server, or a protocol major version other than this llama.cpp's.
    """
    try:
        with socket.create_connection((endpoint.host, endpoint.port), timeout=timeout) as s:
            s.sendall(struct.pack("<BQ", HELLO, CAPS_SIZE) + bytes(CAPS_SIZE))
            head = _recv(s, 8)
            (size,) = struct.unpack("<Q", head)
            if size < 3 or size > 4096:
                raise WalkthroughError(f"worker {endpoint} answered HELLO with {size} bytes: not a ggml RPC "
                                       "server of a version this llama.cpp knows")
            major, minor, patch = _recv(s, size)[:3]
    except TimeoutError:
        raise WalkthroughError(f"worker {endpoint} did not answer within {timeout:g} s (a ggml RPC server serves "
                               "one client at a time: is another run using it?)") from None
    except ConnectionRefusedError as exc:
        raise WalkthroughError(f"cannot reach worker {endpoint}: {exc.strerror or exc}; start one there with "
                               f"`walkthrough worker --port {endpoint.port}`") from None
    except ConnectionError as exc:
        raise WalkthroughError(f"worker {endpoint} closed the connection ({exc.strerror or exc}): "
                               "not a ggml RPC server, or one of another protocol") from None
    except OSError as exc:
        raise WalkthroughError(f"cannot reach worker {endpoint}: {exc.strerror or exc}; start one there with "
                               f"`walkthrough worker --port {endpoint.port}`") from None
    if major != PROTOCOL_MAJOR:
        raise WalkthroughError(f"worker {endpoint} speaks RPC protocol {major}.{minor}.{patch}, this llama.cpp "
                               f"{PROTOCOL_MAJOR}.x: install the same llama-cpp-python on both hosts")
    return major, minor, patch


def _recv(s: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        if not chunk:
            raise ConnectionResetError(0, "closed before its reply")
        data += chunk
    return data


def add_servers(endpoints: list[Endpoint]) -> list[int]:
    """Probe each new worker and connect ggml to it; the device (ggml_backend_dev_t) of each, in order."""
    libs = libraries()
    for e in endpoints:
        if e not in _registered:  # ggml keeps its connection to a registered worker open, and a worker
            probe(e)  # serves one client at a time: only a new one can be probed
    on_abort(endpoints)
    devices = []
    for e in endpoints:
        reg = libs["rpc"].ggml_backend_rpc_add_server(str(e).encode())
        if not reg or libs["base"].ggml_backend_reg_dev_count(reg) < 1:
            raise WalkthroughError(f"worker {e} offers no device to llama.cpp")
        # Not ggml_backend_register'ed (llama.cpp's --rpc does): a registered worker would join the devices of
        # every later model of this process, even one meant to run here alone. The devices go to the model.
        devices.append(int(libs["base"].ggml_backend_reg_dev_get(reg, 0)))
        _registered.add(e)
    return devices


def device_memory(endpoint: Endpoint) -> tuple[int, int]:
    """(free, total) bytes of a registered worker's device, as the worker reports them."""
    free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
    libraries()["rpc"].ggml_backend_rpc_get_device_memory(str(endpoint).encode(), 0, ctypes.byref(free),
                                                          ctypes.byref(total))
    return int(free.value), int(total.value)


def on_abort(endpoints: list[Endpoint]) -> None:
    """Make ggml's fatal errors (a worker lost mid-run) one line on stderr and exit status 1, not a core dump.

    ggml calls abort() right after this callback, so the process cannot go on: the callback ends it itself.
    """
    libs = libraries()
    names = ", ".join(map(str, endpoints))

    @ctypes.CFUNCTYPE(None, ctypes.c_char_p)
    def fatal(message: bytes) -> None:
        text = message.decode("utf-8", "replace").split(": ", 1)[-1].strip()
        for hook in _fatal_hooks:
            hook()
        os.write(sys.stderr.fileno(), f"walkthrough: error: llama.cpp lost a worker ({names}): {text}; "
                 "the run cannot continue\n".encode())
        os._exit(1)

    _keep.append(fatal)
    libs["base"].ggml_set_abort_callback(ctypes.cast(fatal, ctypes.c_void_p))


_fatal_hooks: list = []  # called before the process ends on a lost worker (the app restores the terminal)


def on_fatal(hook) -> None:
    """Call `hook()` before a lost worker ends the process (the app leaves its screen modes)."""
    _fatal_hooks.append(hook)
