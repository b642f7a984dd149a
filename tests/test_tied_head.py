"""A tied output head is its own row of the bytes-by-group table (File stage and `inspect`), so reads add up.

Issue 13 item 8: with tied embeddings the head reads the whole token embedding each token, but that
read had no row, so the read-per-token column did not add up to its total. The expected figures here
are summed from the tensors the test builds (tests/gguf_builder.py), not from the card under test.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from app_support import SIZES, app_for, settle, widget_text
from gguf.constants import GGML_QUANT_SIZES
from gguf.constants import GGMLQuantizationType as Q
from test_card import build, dense_block, head
from textual.widgets import Static

from walkthrough.cli import main
from walkthrough.inspect.card import build_card
from walkthrough.inspect.locate import BUNDLED_MODEL
from walkthrough.render.format import human_bytes

WIDTH, VOCAB = 64, 100
HPARAMS = {"block_count": 1, "embedding_length": WIDTH, "attention.head_count": 4,
           "attention.head_count_kv": 2, "context_length": 128}


def stored(t) -> int:
    block, size = GGML_QUANT_SIZES[Q(t.ggml_type)]
    return math.prod(t.shape) // block * size


def model(tmp_path: Path, tied: bool):
    """A one-layer llama file, its tensors, and what one decoded token reads (summed from the tensors)."""
    tensors = head(WIDTH, VOCAB, tied=tied) + dense_block(0, WIDTH, 32, 128)
    embd = stored(tensors[0])
    row = embd // VOCAB
    # Every tensor is read in full, except the embedding lookup (one row) when the head has its own matrix.
    read = sum(stored(t) for t in tensors) - (0 if tied else embd - row)
    f = build(tmp_path, "llama", HPARAMS, tensors, name=f"{'tied' if tied else 'untied'}.gguf")
    return f, tensors, read, embd - row


@pytest.mark.parametrize("tied", [True, False], ids=["tied", "output.weight"])
def test_rows_add_up_to_the_totals(tmp_path: Path, tied: bool) -> None:
    f, tensors, read, head_read = model(tmp_path, tied)
    card = build_card(f)
    rows = card.group_rows()
    assert sum(r.read_per_token for r in rows) == card.bytes_per_token == read
    assert sum(r.params for r in rows) == card.n_params == sum(math.prod(t.shape) for t in tensors)
    assert sum(r.nbytes for r in rows) == sum(stored(t) for t in tensors)
    output = next(r for r in rows if r.group == "output")
    assert output.reads == ("token_embd.weight" if tied else None)
    if tied:
        assert (output.params, output.nbytes, output.read_per_token) == (0, 0, head_read)


def test_bundled_model_rows_add_up() -> None:
    from walkthrough.inspect.gguf import open_gguf

    with open_gguf(BUNDLED_MODEL) as f:
        card = build_card(f)
    rows = card.group_rows()
    assert sum(r.read_per_token for r in rows) == card.bytes_per_token
    assert sum(r.params for r in rows) == card.n_params


@pytest.mark.parametrize("tied", [True, False], ids=["tied", "output.weight"])
def test_inspect_prints_the_tied_head_row(tmp_path: Path, tied: bool, capsys) -> None:
    f, _, _, head_read = model(tmp_path, tied)
    assert main(["inspect", str(f.path)]) == 0
    out = capsys.readouterr().out
    lines = [line.split() for line in out.splitlines()]
    tied_rows = [words for words in lines if words[:2] == ["output", "(tied)"]]
    if tied:
        assert len(tied_rows) == 1 and " ".join(tied_rows[0][-2:]) == human_bytes(head_read)
        assert "token_embd.weight" in out
    else:
        assert not tied_rows


@pytest.mark.parametrize("size", SIZES.values(), ids=SIZES.keys())
async def test_file_stage_shows_the_tied_head_row(tmp_path: Path, size) -> None:
    f, _, _, head_read = model(tmp_path, tied=True)
    app = app_for(f.path)
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        overview = app.screen.query_one("#overview-text", Static)
        text = widget_text(overview, width=overview.size.width)
    row = next(line for line in text.splitlines() if "output (tied)" in line)
    assert row.split()[-2:] == human_bytes(head_read).split()
