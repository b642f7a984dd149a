"""`walkthrough serve`: what each visitor's process runs, and bad arguments as one line (no server started).

serve's `GuardedServer` is replaced by `RecordingServer`, so these tests check
the command, address and guards handed to it; tests/test_serve_guard.py and
tests/test_serve_browser.py serve for real.
"""

from __future__ import annotations

import shlex
import socket
import sys

import pytest
from conftest import FIXTURES_DIR
from test_cli_errors import (
    RecordingServer,
    assert_one_line_error,
    free_port,
    run_cli,
    serve_without_serving,
)

from walkthrough.commands.serve import is_loopback

REFERENCE = FIXTURES_DIR / "reference" / "ref-qwen2moe-f32.gguf"


@pytest.fixture(autouse=True)
def recording(monkeypatch):
    pytest.importorskip("textual_serve", reason="textual-serve is not installed (pip install '.[test]')")
    RecordingServer.started.clear()
    RecordingServer.options.clear()
    serve_without_serving(monkeypatch)
    return RecordingServer.started


def test_each_visitor_runs_this_python_on_the_model_with_the_options(recording, capsys):
    port = free_port()
    code, _out, err = run_cli(capsys, ["serve", REFERENCE, "--port", port, "--seed", "7", "--hardware", "cpu-here"])
    assert code == 0 and err == "", err
    [(command, host, served_port)] = recording
    assert (host, served_port) == ("localhost", port)
    words = shlex.split(command)
    assert words[:3] == [sys.executable, "-m", "walkthrough"]
    assert words[3] == str(REFERENCE)
    assert words[words.index("--seed") + 1] == "7" and words[words.index("--hardware") + 1] == "cpu-here"


def test_a_busy_port_is_one_line(recording, capsys):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        code, out, err = run_cli(capsys, ["serve", "--host", "127.0.0.1", "--port", port])
    assert_one_line_error(code, out, err, f"127.0.0.1:{port}", "--port")
    assert recording == []


@pytest.mark.parametrize(("argv", "needle"), [
    (["--port", "70000"], "from 1 to 65535"),
    (["--port", "0"], "from 1 to 65535"),
    (["--host", "no-such-host.invalid"], "cannot resolve"),
    (["--hardware", "no-such-machine"], "no-such-machine"),
    (["--max-visitors", "0"], "--max-visitors 0"),
])
def test_bad_arguments_are_one_line(argv, needle, recording, capsys):
    code, out, err = run_cli(capsys, ["serve", *argv])
    assert_one_line_error(code, out, err, needle)
    assert recording == []


def test_missing_textual_serve_says_how_to_install(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "textual_serve.server", None)  # import fails as if not installed
    code, out, err = run_cli(capsys, ["serve", "--port", free_port()])
    assert_one_line_error(code, out, err, "pip install 'walkthrough[serve]'")


def test_another_address_is_served_only_when_named_with_a_warning_and_a_token(recording, capsys):
    code, _out, err = run_cli(capsys, ["serve", "--host", "0.0.0.0", "--port", free_port()])
    assert code == 0
    assert recording[0][1] == "0.0.0.0"
    assert err.startswith("walkthrough: warning: listening on 0.0.0.0") and err.count("\n") == 1
    [first] = RecordingServer.options
    assert first["loopback"] is False and len(first["token"]) >= 32
    run_cli(capsys, ["serve", "--host", "0.0.0.0", "--port", free_port()])
    assert RecordingServer.options[1]["token"] != first["token"]  # made anew for each launch


def test_localhost_needs_no_token_and_the_free_memory_sets_the_cap_and_each_apps_budget(
        recording, capsys, monkeypatch):
    from walkthrough.costs.memory import MIN_BUDGET, dequantized_bytes
    from walkthrough.inspect.gguf import open_gguf
    from walkthrough.serving_web.capacity import APP_ALLOWANCE

    with open_gguf(REFERENCE) as gguf:
        weights = dequantized_bytes(gguf)
    monkeypatch.setattr("walkthrough.costs.memory.free_memory", lambda: 7 * (APP_ALLOWANCE + weights) + 5)
    run_cli(capsys, ["serve", REFERENCE, "--port", free_port()])
    run_cli(capsys, ["serve", REFERENCE, "--port", free_port(), "--max-visitors", "3"])
    default, given = RecordingServer.options
    assert default["loopback"] is True and default["token"] is None
    assert default["max_visitors"] == 7  # room for 7 visitors' apps with all their weights
    assert given["max_visitors"] == 3
    for (command, _, _), options in zip(recording, RecordingServer.options, strict=True):
        words = shlex.split(command)
        assert int(words[words.index("--max-memory") + 1]) == options["weight_budget"] == max(MIN_BUDGET, weights)


@pytest.mark.parametrize(("host", "local"), [
    ("localhost", True), ("127.0.0.1", True), ("127.8.0.1", True), ("::1", True), ("[::1]", True),
    ("0.0.0.0", False), ("192.168.1.5", False), ("example.org", False),
])
def test_loopback_addresses(host, local):
    assert is_loopback(host) is local
