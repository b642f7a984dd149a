"""`walkthrough worker`: ggml's RPC server on localhost, its one-line errors, and HELLO probes of addresses."""

from __future__ import annotations

import socket
import struct
import subprocess
import sys
import threading

import pytest
from rpc_support import REPO, free_port, needs_rpc, workers

from walkthrough.engine.llama import rpc
from walkthrough.errors import WalkthroughError


def _cli(*argv: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "walkthrough", *argv], check=False, capture_output=True,
                          text=True,
                          timeout=timeout, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
                          start_new_session=True)


def test_parse_endpoints():
    assert [str(e) for e in rpc.parse_endpoints("127.0.0.1:50052, 10.0.0.2:1")] == ["127.0.0.1:50052", "10.0.0.2:1"]
    for bad in ("127.0.0.1", "h:0", "h:70000", ":5", "h:x", "a:1,a:1"):
        with pytest.raises(WalkthroughError, match="--rpc"):
            rpc.parse_endpoints(bad)


@needs_rpc
def test_worker_answers_hello_and_a_busy_port_is_one_line():
    with workers(1) as started:
        endpoint, _ = started[0]
        assert rpc.probe(endpoint)[0] == rpc.PROTOCOL_MAJOR
        busy = _cli("worker", "--port", str(endpoint.port))
    assert busy.returncode == 2
    assert busy.stderr.count("\n") == 1 and "Address already in use" in busy.stderr, busy.stderr


def test_worker_refuses_a_host_that_is_not_ipv4():
    done = _cli("worker", "--host", "example.invalid")
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "IPv4" in done.stderr, done.stderr


def test_probe_names_an_unreachable_worker():
    with pytest.raises(WalkthroughError, match="cannot reach worker 127.0.0.1:.*walkthrough worker"):
        rpc.probe(rpc.Endpoint("127.0.0.1", free_port()), timeout=2.0)


def _fake_server(reply: bytes) -> tuple[socket.socket, int]:
    """A listener that answers one connection's HELLO with `reply` (another protocol version), then closes."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)

    def answer():
        conn, _ = s.accept()
        with conn:
            conn.recv(64)
            conn.sendall(reply)

    threading.Thread(target=answer, daemon=True).start()
    return s, s.getsockname()[1]


def test_probe_refuses_another_protocol_version():
    s, port = _fake_server((28).to_bytes(8, "little") + bytes([6, 1, 0, 0]) + bytes(24))
    with s, pytest.raises(WalkthroughError, match=r"speaks RPC protocol 6\.1\.0, this llama.cpp 7\.x"):
        rpc.probe(rpc.Endpoint("127.0.0.1", port), timeout=5.0)


def test_probe_bounds_a_silent_server():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)  # accepts into the backlog, never answers
        with pytest.raises(WalkthroughError, match="did not answer within 1 s"):
            rpc.probe(rpc.Endpoint("127.0.0.1", s.getsockname()[1]), timeout=1.0)


@needs_rpc
def test_a_build_without_rpc_says_how_to_install(monkeypatch, tmp_path):
    import llama_cpp

    (tmp_path / "llama_cpp" / "lib").mkdir(parents=True)  # a library folder without libggml-rpc.so
    monkeypatch.setattr(llama_cpp, "__file__", str(tmp_path / "llama_cpp" / "__init__.py"))
    monkeypatch.setattr(rpc, "_libs", {})
    with pytest.raises(rpc.RpcUnavailable, match=r"without ggml's RPC backend; install with `CMAKE_ARGS=-DGGML_RPC=ON"):
        rpc.libraries()


def test_a_missing_extra_says_how_to_install_with_rpc(monkeypatch):
    from walkthrough.engine.llama import model as llama_model

    def missing():
        raise llama_model.LlamaUnavailable(f"the llama.cpp engine needs llama-cpp-python: {llama_model.INSTALL_HINT}")

    monkeypatch.setattr(llama_model, "bindings", missing)
    monkeypatch.setattr(rpc, "_libs", {})
    with pytest.raises(rpc.RpcUnavailable, match=r"needs llama-cpp-python.*with RPC: install with `CMAKE_ARGS"):
        rpc.libraries()


def _hello_as(endpoint: rpc.Endpoint, request_size: int, command: int = rpc.HELLO) -> bytes:
    """Send one first command as another protocol's client would (a HELLO of another size, or no HELLO) to a
    real worker; what it answers before closing the connection (closed with bytes unread: reset)."""
    reply = b""
    with socket.create_connection((endpoint.host, endpoint.port), timeout=10) as s:
        try:
            s.sendall(struct.pack("<BQ", command, request_size) + bytes(request_size))
            while chunk := s.recv(4096):
                reply += chunk
        except ConnectionResetError:
            pass
    return reply


@needs_rpc
def test_a_real_worker_refuses_clients_of_other_protocols_and_keeps_serving():
    """A real `walkthrough worker` (ggml's server): a client of another protocol version (its HELLO request
    of another size, or a first command that is not HELLO, as clients before the handshake sent) is answered
    with nothing and the connection closed; the worker still answers this llama.cpp's HELLO after each."""
    with workers(1) as started:
        endpoint, proc = started[0]
        assert _hello_as(endpoint, 0) == b""  # an older protocol's HELLO: no capabilities in its request
        assert _hello_as(endpoint, rpc.CAPS_SIZE + 8) == b""  # a newer one's, longer
        assert _hello_as(endpoint, 0, command=0) == b""  # ALLOC_BUFFER before any HELLO
        assert rpc.probe(endpoint)[0] == rpc.PROTOCOL_MAJOR
        assert proc.poll() is None


@needs_rpc
def test_a_real_worker_of_another_major_version_is_one_line(monkeypatch):
    """This side expecting another major version than the real worker answers (as after upgrading
    llama-cpp-python on one host only): probe reads the worker's real version and refuses in one line."""
    with workers(1) as started:
        endpoint, _ = started[0]
        major, minor, patch = rpc.probe(endpoint)
        monkeypatch.setattr(rpc, "PROTOCOL_MAJOR", major + 1)
        with pytest.raises(WalkthroughError) as caught:
            rpc.probe(endpoint)
    text = str(caught.value)
    assert text == (f"worker {endpoint} speaks RPC protocol {major}.{minor}.{patch}, this llama.cpp {major + 1}.x: "
                    "install the same llama-cpp-python on both hosts")
