"""`walkthrough inspect`: JSON fields on every fixture, the human tables, hostile text, and one-line errors.

The JSON tensor table is checked against `gguf.GGUFReader` (an independent
reader); card numbers are checked in test_card.py, so here the human output
only has to show the card's numbers, and file text has to come out literally.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import FIXTURES_DIR
from gguf import GGUFReader
from gguf.constants import GGMLQuantizationType as Q
from gguf.constants import GGUFValueType as V
from gguf_builder import Tensor, write_gguf

from walkthrough.cli import main
from walkthrough.commands.inspect_view import MAX_KEY_WIDTH
from walkthrough.inspect.card import build_card
from walkthrough.inspect.gguf import open_gguf
from walkthrough.render.format import human_bytes, human_count

REFERENCE = sorted((FIXTURES_DIR / "reference").glob("*.gguf"))
VOCAB = sorted((FIXTURES_DIR / "vocab").glob("*.gguf"))
REQUIRED = (
    "file", "file_size", "gguf_version", "architecture", "name", "n_tensors", "n_params", "n_params_active",
    "bits_per_weight", "bytes_per_token", "kv_bytes_per_token", "context_length", "n_layers", "layer_kinds",
    "n_experts", "n_experts_used", "quant_mix", "metadata", "tensors",
)
HOSTILE_NAME = "\x1b]0;x\x07[bold]pwned[/bold] :smile: \u202e"


def inspect(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["inspect", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def inspect_json(capsys, path: Path) -> dict:
    code, out, err = inspect(capsys, path, "--json")
    assert code == 0 and err == ""
    return json.loads(out)


def test_fixture_models_are_present(fixtures_dir: Path) -> None:
    assert len(REFERENCE) >= 7 and len(VOCAB) >= 5


@pytest.mark.parametrize("path", REFERENCE + VOCAB, ids=lambda p: p.name)
def test_json_fields_on_every_fixture(path: Path, capsys) -> None:
    data = inspect_json(capsys, path)
    assert set(REQUIRED) <= set(data)
    with open_gguf(path) as f:
        card = build_card(f)
        keys = list(f.fields)
        version = f.version
    assert data["file_size"] == path.stat().st_size and data["gguf_version"] == version
    assert data["n_params"] == card.n_params and data["n_params_active"] == card.n_params_active
    assert data["kv_bytes_per_token"] == card.kv_bytes_per_token
    for group, bits in data["bits_per_weight_by_group"].items():
        assert bits == pytest.approx(8 * data["bytes_by_group"][group] / data["params_by_group"][group])
    assert len(data["layer_kinds"]) == len(card.layers)
    assert list(data["metadata"]) == keys
    assert data["n_tensors"] == len(data["tensors"])
    assert sum(data["quant_mix"].values()) == sum(t["nbytes"] for t in data["tensors"])
    for value in data["metadata"].values():  # long arrays are summarised, never dumped whole
        assert not isinstance(value, list) or len(value) <= 16


@pytest.mark.parametrize("path", REFERENCE, ids=lambda p: p.name)
def test_json_tensor_table_matches_gguf_reader(path: Path, capsys) -> None:
    data = inspect_json(capsys, path)
    reader = GGUFReader(path)
    expected = [
        {"name": t.name, "shape": [int(d) for d in t.shape], "type": t.tensor_type.name,
         "offset": int(t.data_offset), "nbytes": int(t.n_bytes)}
        for t in reader.tensors
    ]
    assert [{k: t[k] for k in ("name", "shape", "type", "offset", "nbytes")} for t in data["tensors"]] == expected


def test_json_summarises_long_arrays_as_count_and_first_items(capsys, fixtures_dir: Path) -> None:
    path = fixtures_dir / "vocab/ggml-vocab-llama-spm.gguf"
    data = inspect_json(capsys, path)
    reader_tokens = open_gguf(path).get("tokenizer.ggml.tokens")
    tokens = data["metadata"]["tokenizer.ggml.tokens"]
    assert tokens["count"] == len(reader_tokens) and tokens["type"] == "array[string]"
    assert tokens["first"] == reader_tokens[: len(tokens["first"])] and len(tokens["first"]) > 0
    scores = data["metadata"]["tokenizer.ggml.scores"]
    assert scores["first"] == [float(x) for x in open_gguf(path).get("tokenizer.ggml.scores")[: len(scores["first"])]]


@pytest.mark.parametrize("name", ["ref-qwen2moe-f32.gguf", "ref-qwen35moe-f32.gguf", "ref-llama-q4_0.gguf"])
def test_human_output_shows_the_card_numbers(name: str, capsys, fixtures_dir: Path) -> None:
    path = fixtures_dir / "reference" / name
    code, out, err = inspect(capsys, path)
    assert code == 0 and err == ""
    with open_gguf(path) as f:
        card = build_card(f)
    for expected in (
        card.architecture,
        f"{card.n_params:,}",
        human_count(card.n_params_active),
        f"{card.bits_per_weight:.2f}",
        human_bytes(card.bytes_per_token),
        human_bytes(card.kv_bytes_per_token["f16"]),
        f"{card.context_length:,} tokens",
        *card.bytes_by_type,
    ):
        assert expected in out
    if card.linear_layers:
        assert human_bytes(card.state_bytes) in out
    assert "\x1b" not in out


def test_tensors_and_metadata_listings(capsys, fixtures_dir: Path) -> None:
    path = fixtures_dir / "reference/ref-qwen35moe-f32.gguf"
    code, out, _ = inspect(capsys, path, "--tensors", "--metadata")
    assert code == 0
    f = open_gguf(path)
    assert all(t.name.split(".", 2)[-1] in out for t in f.tensors.values())
    assert "layer 3" in out and "model-wide" in out
    assert all(key in out for key in f.fields if len(key) <= 36)
    template_first_line = f.get("tokenizer.chat_template").splitlines()[0]
    assert template_first_line in out


def hostile_file(tmp_path: Path) -> Path:
    metadata = {
        "general.architecture": (V.STRING, "llama"),
        "general.name": (V.STRING, HOSTILE_NAME),
        "llama.block_count": (V.UINT32, 1),
        "note.[red]key\x1b[2J": (V.STRING, "[link=http://x]click[/link]\r\n"),
        "tokenizer.chat_template": (V.STRING, "{{ bos }}\x1b[31m[b]red[/b]\n"),
        "tokenizer.ggml.tokens": (V.ARRAY, V.STRING, [f"\x1b[{i}m" for i in range(40)]),
    }
    tensors = [Tensor("token_embd.weight", (32, 40), Q.F32), Tensor("blk.0.[i]x\x07.weight", (32,), Q.F32)]
    return write_gguf(tmp_path / "hostile.gguf", metadata, tensors)


def test_hostile_text_is_shown_literally(tmp_path: Path, capsys) -> None:
    code, out, err = inspect(capsys, hostile_file(tmp_path), "--tensors", "--metadata")
    assert code == 0 and err == ""
    assert "\x1b" not in out and "\x07" not in out and "\r" not in out and "\u202e" not in out
    assert "\\x1b]0;x\\x07[bold]pwned[/bold] :smile: \\u202e" in out  # markup and emoji codes stay text
    assert "[link=http://x]click[/link]\\r\\n" in out
    assert "note.[red]key\\x1b[2J" in out
    assert "[i]x\\x07.weight" in out
    assert "{{ bos }}\\x1b[31m[b]red[/b]" in out


def test_hostile_text_in_json_is_escaped(tmp_path: Path, capsys) -> None:
    code, out, _ = inspect(capsys, hostile_file(tmp_path), "--json")
    assert code == 0 and "\x1b" not in out and "\u202e" not in out
    data = json.loads(out)
    assert data["name"] == HOSTILE_NAME
    assert data["metadata"]["tokenizer.ggml.tokens"]["count"] == 40


@pytest.mark.parametrize("make", ["missing", "not_gguf", "cut", "folder", "implausible"])
def test_errors_are_one_line_and_exit_2(make: str, tmp_path: Path, capsys, fixtures_dir: Path) -> None:
    path = tmp_path / "model.gguf"
    if make == "not_gguf":
        path.write_bytes(b"PK\x03\x04 not a gguf at all" * 4)
    elif make == "cut":  # inside the header (cut after it, a file opens: tests/test_partial_download.py)
        path.write_bytes((fixtures_dir / "reference/ref-llama-f32.gguf").read_bytes()[:3000])
    elif make == "folder":
        path = tmp_path
    elif make == "implausible":
        write_gguf(path, {"general.architecture": (V.STRING, "llama"), "llama.block_count": (V.UINT32, 2**32 - 1)})
    for extra in ([], ["--json"]):
        code, out, err = inspect(capsys, path, *extra)
        assert code == 2 and out == ""
        assert err.count("\n") == 1 and err.startswith("walkthrough: error:")


def test_folder_ollama_and_hf_specs_are_located(monkeypatch, tmp_path: Path, capsys, fixtures_dir: Path) -> None:
    model = (fixtures_dir / "reference/ref-qwen3-f16.gguf").read_bytes()
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "only.gguf").write_bytes(model)
    digest = "ab" * 32  # a fake Ollama store: manifest -> model layer -> blob
    store = tmp_path / "ollama"
    manifest = store / "manifests/registry.ollama.ai/library/tiny/latest"
    manifest.parent.mkdir(parents=True)
    layer = {"mediaType": "application/vnd.ollama.image.model", "digest": f"sha256:{digest}"}
    manifest.write_text(json.dumps({"layers": [layer]}))
    (store / "blobs").mkdir()
    (store / "blobs" / f"sha256-{digest}").write_bytes(model)
    monkeypatch.setenv("OLLAMA_MODELS", str(store))
    snapshot = tmp_path / "hub/models--org--repo/snapshots/0123abc"  # a fake Hugging Face cache
    snapshot.mkdir(parents=True)
    (snapshot / "m.gguf").write_bytes(model)
    (tmp_path / "hub/models--org--repo/refs").mkdir()
    (tmp_path / "hub/models--org--repo/refs/main").write_text("0123abc")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    for spec in (folder, "ollama:tiny", "hf:org/repo/m.gguf"):
        assert inspect_json(capsys, spec)["name"] == "ref-qwen3"
    code, out, err = inspect(capsys, "ollama:absent")
    assert code == 2 and out == "" and err.count("\n") == 1 and "tiny" in err  # lists what is installed


def test_no_file_means_the_bundled_model(monkeypatch, tmp_path: Path, capsys, fixtures_dir: Path) -> None:
    from walkthrough.inspect import locate

    monkeypatch.setattr(locate, "BUNDLED_MODEL", tmp_path / "tiny-clinical-moe.gguf")
    code, out, err = inspect(capsys)
    assert code == 2 and out == "" and err.count("\n") == 1 and "bundled model" in err
    monkeypatch.setattr(locate, "BUNDLED_MODEL", fixtures_dir / "reference/ref-qwen2moe-f32.gguf")
    code, out, err = inspect(capsys, "--json")
    assert code == 0 and json.loads(out)["name"] == "ref-qwen2moe"


def test_a_long_tensor_name_folds_and_no_figure_is_cut(tmp_path: Path, capsys, monkeypatch) -> None:
    name = "ffn_" + "x" * 48 + ".w"  # blk.0.<name> is 60 bytes, under ggml's 64
    path = write_gguf(tmp_path / "long.gguf", {"general.architecture": (V.STRING, "llama")},
                      [Tensor("token_embd.weight", (32, 40), Q.F32), Tensor("blk.0." + name, (32, 1000), Q.F32)])
    offset = open_gguf(path).tensors["blk.0." + name].offset
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = inspect(capsys, path, "--tensors")
    assert code == 0
    table = out[out.index("Tensors"):].splitlines()
    row = next(i for i, line in enumerate(table) if line.startswith("  " + name[:20]))
    for figure in (human_count(32_000), human_bytes(32_000 * 4), f"{offset:,}"):
        assert f" {figure} " in table[row]
    assert table[row].split()[0] + table[row + 1].strip() == name  # folded onto the next line, nothing lost
    assert len(table[row].split()[0]) == MAX_KEY_WIDTH  # 80 columns: the name gives way down to this width


def test_metadata_never_splits_a_number_at_80_columns(tmp_path: Path, capsys, monkeypatch) -> None:
    """A float under a long key beside an array[float32] type (Gemma 3's layout: the value column is left
    20 cells, and '9.999999974752427e-07' is 21) stays on one line; a long text still wraps."""
    import re

    monkeypatch.setenv("COLUMNS", "80")
    eps = "gemma3.attention.layer_norm_rms_epsilon"
    metadata = {
        "general.architecture": (V.STRING, "llama"),
        "general.name": (V.STRING, "a name long enough to wrap in a narrow value column, twice over"),
        "llama.block_count": (V.UINT32, 1),
        eps: (V.FLOAT32, 1e-6),
        "tokenizer.ggml.scores": (V.ARRAY, V.FLOAT32, [-1234.5678, 0.25, -0.000123]),
    }
    path = write_gguf(tmp_path / "numbers.gguf", metadata, [Tensor("token_embd.weight", (32, 4), Q.F32)])
    code, out, _ = inspect(capsys, path, "--metadata")
    assert code == 0
    table = out[out.index("\nMetadata"):]
    numbers = re.findall(r"-?\d+\.\d+(?:e-\d+)?", table)
    assert "9.999999974752427e-07" in numbers and "-1234.5677490234375" in numbers
    assert "a name long enough" in table and "a name long enough to wrap in a narrow value column, twice over" \
        not in table  # the text did wrap


def test_the_card_writes_counts_one_way(capsys) -> None:
    """Issue 28, item 11: the card wrote 'context 32768 tokens', 'vocabulary 262144 tokens' and 'RoPE base 1e+06'
    beside '103.5 MiB at F16 for 32,768 tokens'; every count now has its thousands separators and no exponent."""
    path = Path(__file__).parent / "fixtures" / "arch" / "ref-gemma3-f32.gguf"
    code, out, _ = inspect(capsys, path)
    with open_gguf(path) as f:
        card = build_card(f)
    assert code == 0 and card.rope_base == 1e6 and card.vocab_size == 268
    assert "base 1,000,000," in out and "e+0" not in out and f"{card.context_length:,} tokens" in out
