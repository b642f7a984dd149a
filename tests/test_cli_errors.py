"""Every command's bad-input paths: one line on stderr, exit status 2, never a traceback; and a lean `--help`.

Bad MODELs (missing, an empty folder, a folder of two models, not GGUF, a
pipe, a missing bundled model), files the engine cannot run, and malformed
messages files go through `walkthrough.cli.main`; one case runs the real
`python -m walkthrough` to see what a user sees, and one closes the pipe early.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import ClassVar

import pytest
from conftest import FIXTURES_DIR, REPO_ROOT

from walkthrough.cli import BLAS_THREAD_VARIABLES, EXIT_BROKEN_PIPE, EXIT_USAGE, SUBCOMMANDS, main
from walkthrough.inspect import locate

REFERENCE = FIXTURES_DIR / "reference" / "ref-qwen2moe-f32.gguf"  # runs in the engine, has a chat template
VOCAB_ONLY = FIXTURES_DIR / "vocab" / "ggml-vocab-llama-bpe.gguf"  # an architecture the engine runs, no tensors
OTHER_ARCH = FIXTURES_DIR / "vocab" / "ggml-vocab-gpt-2.gguf"  # an architecture the engine does not run
MODEL_COMMANDS = tuple(c for c in SUBCOMMANDS if c != "worker")  # worker serves this host's CPU, no file
HEAVY_MODULES = ("numpy", "textual", "rich", "tokenizers", "jinja2", "gguf")


def messages_file(tmp_path: Path) -> Path:
    path = tmp_path / "ok.json"
    path.write_text(json.dumps([{"role": "user", "content": "hello"}]), encoding="utf-8")
    return path


def command_argv(name: str, tmp_path: Path) -> list[str]:
    """The smallest valid use of each subcommand, without its MODEL."""
    return {
        "inspect": ["inspect"],
        "estimate": ["estimate", "--hardware", "cpu-here"],
        "tokenize": ["tokenize", "--text", "hello"],
        "template": ["template", "--messages", str(messages_file(tmp_path))],
        "trace": ["trace", "--prompt", "hello", "--steps", "1"],
        "compare": ["compare", "--prompt", "hello", "--steps", "1"],
        "abliterate": ["abliterate", "--tokens", "1", "--out", str(tmp_path / "abliterated.gguf")],
        "serve": ["serve", "--port", str(free_port())],
        "bench": ["bench", "--prompt-tokens", "4", "--output-tokens", "1"],
        "calibrate": ["calibrate", "--prompt-tokens", "4", "--output-tokens", "2", "--out",
                      str(tmp_path / "calibrated.json")],
    }[name]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RecordingServer:
    """Stands in for serve's GuardedServer: records what would be served instead of serving forever."""

    started: ClassVar[list[tuple[str, str, int]]] = []
    options: ClassVar[list[dict]] = []  # loopback, token, max_visitors of each server started

    def __init__(self, command: str, *, host: str, port: int, **options) -> None:
        self.command, self.host, self.port, self.server_options = command, host, port, options

    def serve(self) -> None:
        RecordingServer.started.append((self.command, self.host, self.port))
        RecordingServer.options.append(self.server_options)


def serve_without_serving(monkeypatch) -> None:
    """`walkthrough serve` in this test records what it would serve instead of serving forever."""
    monkeypatch.setattr("walkthrough.serving_web.server.GuardedServer", RecordingServer)


def run_cli(capsys, argv: list[str]) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(code: int, out: str, err: str, *needles: str) -> None:
    assert code == EXIT_USAGE, err
    assert out == ""
    assert err.startswith("walkthrough: error: ") and err.endswith("\n") and err.count("\n") == 1, err
    for needle in needles:
        assert needle in err, (needle, err)


def bad_model(kind: str, tmp_path: Path) -> tuple[Path, str]:
    """A MODEL that names nothing usable, and a word its error must contain."""
    if kind == "missing":
        return tmp_path / "absent.gguf", "absent.gguf"
    if kind == "empty folder":
        (tmp_path / "empty").mkdir()
        return tmp_path / "empty", "no .gguf file"
    if kind == "two models":
        folder = tmp_path / "two"
        folder.mkdir()
        for name in ("a.gguf", "b.gguf"):
            (folder / name).write_bytes(REFERENCE.read_bytes())
        return folder, "holds 2 GGUF models"
    if kind == "text file":
        path = tmp_path / "notes.gguf"
        path.write_text("these are notes, not a model\n" * 4, encoding="utf-8")
        return path, "not a GGUF file"
    if kind == "too short":
        path = tmp_path / "short.gguf"
        path.write_bytes(b"GGUF")
        return path, "too short"
    if kind == "cut":  # inside the header (a file cut after its header opens: tests/test_partial_download.py)
        path = tmp_path / "cut.gguf"
        data = REFERENCE.read_bytes()
        path.write_bytes(data[:3700])
        return path, "bytes are left"
    if kind == "pipe":
        path = tmp_path / "pipe.gguf"
        os.mkfifo(path)
        return path, "neither a file nor a folder"
    raise AssertionError(kind)


BAD_MODELS = ["missing", "empty folder", "two models", "text file", "too short", "cut"]
if hasattr(os, "mkfifo"):
    BAD_MODELS.append("pipe")


@pytest.mark.parametrize("kind", BAD_MODELS)
@pytest.mark.parametrize("command", MODEL_COMMANDS)
def test_a_bad_model_is_one_line(command, kind, tmp_path, capsys):
    model, needle = bad_model(kind, tmp_path)
    code, out, err = run_cli(capsys, [*command_argv(command, tmp_path), model])
    assert_one_line_error(code, out, err, needle)


@pytest.mark.parametrize("command", MODEL_COMMANDS)
def test_a_missing_bundled_model_is_one_line(command, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(locate, "BUNDLED_MODEL", tmp_path / "tiny-clinical-moe.gguf")
    code, out, err = run_cli(capsys, command_argv(command, tmp_path))
    assert_one_line_error(code, out, err, "bundled model", "tiny-clinical-moe.gguf", "name a MODEL")


@pytest.mark.parametrize("command", MODEL_COMMANDS)
def test_no_model_means_the_bundled_one(command, tmp_path, capsys, monkeypatch):
    """Every command opens the same file for a missing MODEL (a fixture stands in for the tiny model)."""
    monkeypatch.setattr(locate, "BUNDLED_MODEL", REFERENCE)
    if command == "serve":
        serve_without_serving(monkeypatch)
    code, out, err = run_cli(capsys, command_argv(command, tmp_path))
    assert code == 0, err
    if command == "inspect":
        assert "ref-qwen2moe" in out


@pytest.mark.parametrize("source", [["--prompt", "hello"], ["--ids", "1,2,3"]])
@pytest.mark.parametrize(
    ("model", "needle"),
    [(VOCAB_ONLY, "no tensor token_embd.weight"), (OTHER_ARCH, "cannot run architecture 'gpt2'")],
)
def test_trace_on_a_file_the_engine_cannot_run(model, needle, source, capsys):
    code, out, err = run_cli(capsys, ["trace", model, *source])
    assert_one_line_error(code, out, err, needle, "inspect")


MALFORMED_MESSAGES = {
    "not json": ('[{"role": "user",', "not valid JSON"),
    "not a list": ('{"role": "user", "content": "hi"}', "expected a JSON list"),
    "empty list": ("[]", "empty"),
    "no content": ('[{"role": "user"}]', "has no 'content'"),
    "not text": (b"\xff\xfe[]", "not UTF-8"),
}


@pytest.mark.parametrize("kind", [*MALFORMED_MESSAGES, "missing", "folder"])
@pytest.mark.parametrize("command", ["trace", "tokenize", "template"])
def test_malformed_messages_are_one_line(command, kind, tmp_path, capsys):
    path = tmp_path / "messages.json"
    needle = path.name
    if kind in MALFORMED_MESSAGES:
        content, needle = MALFORMED_MESSAGES[kind]
        path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    elif kind == "folder":
        path.mkdir()
    argv = [command, REFERENCE, "--messages", path]
    code, out, err = run_cli(capsys, argv)
    assert_one_line_error(code, out, err, needle)


@pytest.mark.app  # slow: a fresh process per command
def test_the_console_script_prints_one_line_not_a_traceback(tmp_path):
    """`python -m walkthrough`, as a user runs it, on a file that is not a model."""
    model, needle = bad_model("text file", tmp_path)
    for command in MODEL_COMMANDS:
        argv = [*command_argv(command, tmp_path), str(model)]
        done = subprocess.run(
            [sys.executable, "-m", "walkthrough", *argv],
            check=False,
            capture_output=True,
            text=True,
            cwd=tmp_path,
        )
        assert done.returncode == EXIT_USAGE, (command, done.stderr)
        assert done.stdout == "" and "Traceback" not in done.stderr
        assert done.stderr.count("\n") == 1 and needle in done.stderr


@pytest.mark.app  # slow: a fresh process and a pipe
def test_a_reader_that_leaves_early_stops_the_output_quietly(tmp_path):
    """`walkthrough tokenize --batch F | head -1`: no error message, no traceback."""
    batch = tmp_path / "texts.jsonl"
    batch.write_text("\n".join(json.dumps(f"text number {i}") for i in range(5000)), encoding="utf-8")
    argv = [sys.executable, "-m", "walkthrough", "tokenize", str(REFERENCE), "--raw", "--batch", str(batch)]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path) as proc:
        first = proc.stdout.readline()
        proc.stdout.close()  # the pipe buffer is far smaller than 5,000 results: later writes fail
        err = proc.stderr.read()
        code = proc.wait()
    assert json.loads(first)["tokens"] > 0
    assert err == b"" and code == EXIT_BROKEN_PIPE


def test_help_imports_nothing_heavy():
    """The parser (and so `--help`) loads no numpy, Rich, Textual, tokenizers, jinja2 or gguf: that is
    what keeps `walkthrough --help` instant and lets `main` set BLAS threads before numpy loads."""
    code = (
        "import sys\n"
        "from walkthrough.cli import build_parser\n"
        "build_parser().format_help()\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {HEAVY_MODULES!r}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, cwd=REPO_ROOT
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_blas_threads_default_to_one_but_the_user_decides(capsys, monkeypatch):
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    monkeypatch.setenv("MKL_NUM_THREADS", "3")
    assert main(["inspect", "--json", str(REFERENCE)]) == 0
    capsys.readouterr()
    assert set(BLAS_THREAD_VARIABLES) == {"OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"}
    assert os.environ["OPENBLAS_NUM_THREADS"] == "1" and os.environ["MKL_NUM_THREADS"] == "3"


ISSUE_OPTIONS = {  # the options each issue's usage line names
    "inspect": ["MODEL", "--json", "--tensors", "--metadata"],
    "tokenize": ["MODEL", "--text", "--text-file", "--messages", "--template", "--raw", "--json", "--batch"],
    "template": ["MODEL", "--messages", "--template", "--no-generation-prompt", "--bos-token", "--eos-token"],
    "trace": ["MODEL", "--prompt", "--messages", "--ids", "--steps", "--temperature", "--top-k", "--top-p",
              "--min-p", "--seed", "--chunk", "--json", "--logits"],
    "estimate": ["MODEL", "--hardware", "--context", "--prompt-tokens", "--output-tokens", "--kv-type",
                 "--users", "--json"],
    "compare": ["[A] B", "--messages", "--json"],
    "abliterate": ["MODEL", "--prompts", "--layer", "--out", "--store", "--overwrite", "--json"],
    "serve": ["MODEL", "--host", "--port"],
    "bench": ["MODEL", "--engine", "--prompt-tokens", "--output-tokens", "--json", "--rpc", "--split"],
    "worker": ["--host", "--port", "--threads"],
    "calibrate": ["MODEL", "--engine", "--prompt-tokens", "--output-tokens", "--id", "--out"],
}


@pytest.mark.parametrize("command", SUBCOMMANDS)
def test_each_help_lists_its_options(command, capsys):
    with pytest.raises(SystemExit) as stop:
        main([command, "--help"])
    out = capsys.readouterr().out
    assert stop.value.code == 0
    for option in ISSUE_OPTIONS[command]:
        assert option in out, (command, option)


def test_top_level_help_lists_the_commands_and_the_app_options(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["--help"])
    out = capsys.readouterr().out
    assert stop.value.code == 0
    for word in [*SUBCOMMANDS, "MODEL", "--messages", "--seed", "--hardware", "--autoplay", "--exit",
                 "--screenshots"]:
        assert word in out, word


@pytest.mark.parametrize(
    ("argv", "needle"),
    [(["--template", "missing.jinja"], "missing.jinja"),
     (["--template", "t.jinja", "--template-name", "tool_use"], "give one of them"),
     (["--exact-products", "--engine", "llama.cpp"], "numpy engine's")],
)
def test_the_apps_options_are_checked_before_the_screen_is_taken(argv, needle, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.jinja").write_text("{{ messages }}")
    code, out, err = run_cli(capsys, [REFERENCE, *argv])
    assert_one_line_error(code, out, err, needle)


def test_max_tokens_below_one_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exited:
        run_cli(capsys, [REFERENCE, "--max-tokens", "0"])
    assert exited.value.code == 2 and "--max-tokens: 0 is below 1" in capsys.readouterr().err
