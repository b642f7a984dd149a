"""A partial download (header whole, tensor data cut short) opens: the header commands and stages work with
one warning line; whatever needs the weights says so in one line; nothing reads past the end.

The partial files are real files cut: a reference fixture and, when it is on this machine, SmolLM2 cut
just after its header (as a download of a few MB of a big model leaves it).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from app_support import SIZES, app_for, settle, widget_text
from conftest import FIXTURES_DIR
from real_weights_support import find_smollm2
from test_cli_errors import (
    MODEL_COMMANDS,
    assert_one_line_error,
    command_argv,
    run_cli,
    serve_without_serving,
)

from walkthrough.inspect.card import build_card
from walkthrough.inspect.gguf import GGUFError, open_gguf
from walkthrough.inspect.tokenizer import GGUFTokenizer
from walkthrough.units import exact_bytes

REFERENCE = FIXTURES_DIR / "reference" / "ref-qwen2moe-f32.gguf"
RUNS = {"trace", "compare", "bench", "calibrate", "abliterate"}  # commands that run the model: refused in one line
KEPT = 1000  # bytes of tensor data left after the header


def cut_after_header(source: Path, target: Path, kept: int = KEPT) -> Path:
    """`source`'s header and the first `kept` bytes of its tensor data, as a cut download leaves it."""
    with open_gguf(source) as f:
        end = f.header_bytes + kept
    with open(source, "rb") as src:
        target.write_bytes(src.read(end))
    return target


@pytest.fixture
def cut(tmp_path) -> Path:
    return cut_after_header(REFERENCE, tmp_path / "ref-cut.gguf")


def test_the_record_says_how_much_and_which(cut):
    whole, f = open_gguf(REFERENCE), open_gguf(cut)
    names = list(whole.tensors)
    first = next(i for i, t in enumerate(whole.tensors.values()) if t.offset + t.nbytes > cut.stat().st_size)
    assert f.missing.tensors == tuple(names[first:])
    assert f.missing.missing_bytes == whole.file_size - cut.stat().st_size
    assert f.missing.data_bytes == whole.data_bytes
    warning = f.missing.warning()
    assert f"{len(names) - first} of {len(names)} tensors: {names[first]}" in warning
    assert "fetch the file again" in warning
    assert f"{exact_bytes(f.missing.missing_bytes)} of the" in warning  # the count a download is checked by
    for name in names[:first]:  # the tensors wholly in the file read as before
        assert (f.tensor_bytes(name) == whole.tensor_bytes(name)).all()
    for name in names[first:]:
        with pytest.raises(GGUFError, match="partial download"):
            f.tensor_bytes(name)


def test_the_header_gives_the_same_card_and_tokens(cut):
    whole, f = open_gguf(REFERENCE), open_gguf(cut)
    a, b = build_card(whole), build_card(f)
    assert (b.n_params, b.bytes_per_token, b.kv_bytes_per_token) == (a.n_params, a.bytes_per_token,
                                                                     a.kv_bytes_per_token)
    text = "Hello, world: a partial download still tokenizes."
    assert GGUFTokenizer.from_gguf(f).encode(text) == GGUFTokenizer.from_gguf(whole).encode(text)


@pytest.mark.parametrize("command", MODEL_COMMANDS)
def test_every_command_opens_it_or_says_it_needs_the_weights(command, cut, tmp_path, capsys, monkeypatch):
    if command == "serve":
        serve_without_serving(monkeypatch)
    argv = [*command_argv(command, tmp_path), cut]
    if command == "compare":
        argv.insert(-1, REFERENCE)  # A whole, B cut: either missing is refused
    code, out, err = run_cli(capsys, argv)
    if command in RUNS:
        assert_one_line_error(code, out, err, f"{command} needs every weight", "partial download",
                              "fetch the file again")
        return
    assert code == 0, err
    assert err.count("\n") == 1 and err.startswith("walkthrough: warning: ref-cut.gguf: partial download:"), err
    assert "missing" in err and "tensors:" in err


def test_inspect_json_lists_what_is_missing(cut, capsys):
    code, out, _ = run_cli(capsys, ["inspect", cut, "--json"])
    assert code == 0
    with open_gguf(cut) as f:
        expected = f.missing
    missing = json.loads(out)["missing"]
    assert missing == {"bytes": expected.missing_bytes, "data_bytes": expected.data_bytes,
                       "tensors": list(expected.tensors)}
    code, out, _ = run_cli(capsys, ["inspect", REFERENCE, "--json"])
    assert json.loads(out)["missing"] is None


def test_inspect_block_of_a_missing_tensor_is_one_line(cut, capsys):
    with open_gguf(cut) as f:
        name = f.missing.tensors[-1]
    code, out, err = run_cli(capsys, ["inspect", cut, "--block", name])
    assert code == 2 and out == ""
    assert err.splitlines()[-1].startswith("walkthrough: error: ") and "partial download" in err


@pytest.mark.app  # slow: a real trained model's file, cut and opened
def test_smollm2_cut_after_its_header(tmp_path, capsys):
    """The real file's first megabytes: its card, vocabulary, template and estimate."""
    source = find_smollm2()
    if source is None:
        pytest.skip("SmolLM2 is not on this machine (set SMOLLM2_GGUF)")
    cut = cut_after_header(source, tmp_path / "smol-cut.gguf", kept=0)
    whole, f = open_gguf(source), open_gguf(cut)
    assert f.missing.tensors == tuple(whole.tensors) and not f.missing.first_cut
    text = "The capital of France is"
    assert GGUFTokenizer.from_gguf(f).encode(text) == GGUFTokenizer.from_gguf(whole).encode(text)
    for argv in (["inspect"], ["estimate", "--hardware", "cpu-here"], ["tokenize", "--text", text]):
        code, out, err = run_cli(capsys, [*argv, cut])
        assert code == 0 and out and err.count("\n") == 1 and "partial download" in err, (argv, err)


@pytest.mark.parametrize("size", SIZES.values())
async def test_the_app_shows_the_file_and_says_the_engine_needs_the_weights(cut, size):
    from textual.widgets import Static

    app = app_for(cut)
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        overview = widget_text(app.screen.query_one("#overview-text", Static))
        state = app.state
        assert state.chat is not None and len(state.chat.ids) > 0  # the tokens need no weights
        assert "partial download" in state.unavailable["engine"]
    assert "partial download:" in overview and "fetch the file again" in overview
    assert "The engine cannot run this file: ref-cut.gguf: the numpy engine needs every weight" in overview
