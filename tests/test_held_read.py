"""Held versus read per token at other quant types (costs.held_read): against files really requantized, in
`walkthrough inspect --held-read`, and on the Costs stage (e, b) at 80x24 and 120x40."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from app_support import MESSAGES, SIZES, app_for, settle, stage_key, widget_text
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
from requantize import requantize
from textual.widgets import Static

from walkthrough.cli import main
from walkthrough.costs.held_read import TYPES, at_index, bits_per_weight, held_read, quant_label
from walkthrough.inspect.card import build_card
from walkthrough.inspect.gguf import open_gguf
from walkthrough.inspect.locate import BUNDLED_MODEL
from walkthrough.units import fmt


def _card(path):
    with open_gguf(path) as f:
        return build_card(f)


def _file(path):
    """(card, tensor infos) of a file."""
    with open_gguf(path) as f:
        return build_card(f), list(f.tensors.values())


def test_bits_per_weight_are_ggmls_block_sizes():
    for t in TYPES:
        values, nbytes = GGML_QUANT_SIZES[t]
        assert bits_per_weight(t) == 8 * nbytes / values
    assert bits_per_weight(GGMLQuantizationType.Q4_K) == 4.5 and bits_per_weight(GGMLQuantizationType.Q8_0) == 8.5
    assert [quant_label(i) for i in range(len(TYPES) + 2)] == ["as stored", *(t.name for t in TYPES), "as stored"]


def test_as_stored_is_the_cards_bytes():
    card, tensors = _file(BUNDLED_MODEL)
    r = held_read(card, tensors, "tiny")
    assert r.moe and r.held == sum(card.bytes_by_type.values()) and r.read == card.bytes_per_token
    assert r.read < r.held  # a mixture of experts reads its used experts only
    assert r.bits == pytest.approx(card.bits_per_weight)


@pytest.mark.parametrize("qtype", [GGMLQuantizationType.Q4_0, GGMLQuantizationType.F16])
def test_recosting_from_the_header_is_the_requantized_files_bytes(tmp_path, qtype):
    """The tiny model requantized for real (tests/requantize.py: the tensors llama.cpp's quantizer converts,
    its 128-wide rows split into the blocks): the figures at that type are that file's held bytes and bytes
    read per token, exactly."""
    out = tmp_path / f"tiny-{qtype.name}.gguf"
    requantize(BUNDLED_MODEL, out, qtype)
    real = _card(out)
    got = held_read(*_file(BUNDLED_MODEL), "tiny", qtype)
    assert got.held == sum(real.bytes_by_type.values())
    assert got.read == pytest.approx(real.bytes_per_token, abs=1)
    assert real.bytes_by_type["F32"] == _card(BUNDLED_MODEL).bytes_by_type["F32"]  # norms, biases, router kept


@pytest.mark.skipif(not os.environ.get("SMOLLM2_GGUF"), reason="SMOLLM2_GGUF is not set")
def test_rows_that_do_not_split_into_256_value_blocks_fall_back_as_llama_cpp_does():
    from walkthrough.inspect.requant import converted_type

    _, tensors = _file(Path(os.environ["SMOLLM2_GGUF"]))
    q = next(t for t in tensors if t.name == "blk.0.attn_q.weight")  # 576 values a row
    assert converted_type(q, GGMLQuantizationType.Q4_K) == GGMLQuantizationType.Q5_0
    assert converted_type(q, GGMLQuantizationType.Q6_K) == GGMLQuantizationType.Q8_0
    assert converted_type(q, GGMLQuantizationType.Q4_0) == GGMLQuantizationType.Q4_0
    norm = next(t for t in tensors if t.name == "blk.0.attn_norm.weight")
    assert converted_type(norm, GGMLQuantizationType.Q4_0) is None


@pytest.mark.skipif(not os.environ.get("SMOLLM2_GGUF"), reason="SMOLLM2_GGUF is not set")
def test_a_dense_file_reads_what_it_holds_at_every_type():
    card, tensors = _file(Path(os.environ["SMOLLM2_GGUF"]))
    for i in range(len(TYPES) + 1):
        r = at_index(card, tensors, "smol", i)
        assert not r.moe and r.read == pytest.approx(r.held, rel=1e-3)  # the tied head reads the embedding
    f16, stored, q2k = (at_index(card, tensors, "smol", i).held for i in (1, 0, len(TYPES)))
    assert f16 > stored > q2k


def test_inspect_prints_both_files_at_every_type(capsys):
    assert main(["inspect", str(BUNDLED_MODEL), "--held-read", str(BUNDLED_MODEL), "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    card, tensors = _file(BUNDLED_MODEL)
    assert len(rows) == 2 * (len(TYPES) + 1)
    for row, i in zip(rows, list(range(len(TYPES) + 1)) * 2):
        want = at_index(card, tensors, row["file"], i)
        assert (row["quant"], row["held_bytes"], row["read_bytes_per_token"]) == (want.quant, want.held, want.read)
    assert main(["inspect", str(BUNDLED_MODEL), "--held-read"]) == 0
    out = capsys.readouterr().out
    q4k = held_read(card, tensors, "", GGMLQuantizationType.Q4_K)
    assert "Q4_K" in out and fmt(q4k.held, "B") in out and fmt(q4k.read, "B") in out
    assert main(["inspect", str(BUNDLED_MODEL), "--held-read", "/no/such.gguf"]) == 2


@pytest.mark.app
@pytest.mark.parametrize("size", SIZES.values(), ids=SIZES.keys())
async def test_costs_stage_shows_both_files_and_b_switches_the_type(fixtures_dir, size):
    path = fixtures_dir / "reference" / "ref-qwen3-f16.gguf"  # dense, beside the bundled tiny model (MoE)
    app = app_for(path, MESSAGES)
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        await pilot.press(stage_key("costs"))
        await settle(pilot)
        screen, state = app.screen, app.state
        await pilot.press("e")
        await settle(pilot)
        assert screen.view == "held"
        tiny, tiny_tensors = _file(BUNDLED_MODEL)
        files = ((state.card.name or path.name, state.card, list(state.file.tensors.values())),
                 (tiny.name or "tiny", tiny, tiny_tensors))
        for presses, index in (((), 0), (("b",) * 5, 5), (("B",), 4)):
            await pilot.press(*presses)
            await settle(pilot)
            shown = " ".join(widget_text(screen.query_one("#costs-held", Static), 400).split())
            for name, card, tensors in files:
                r = at_index(card, tensors, name, index)
                assert f"({'mixture of experts' if r.moe else 'dense'}) {r.quant}, {r.bits:.2f} bits" in shown
                assert f"{fmt(r.held, 'B')}" in shown and f"{fmt(r.read, 'B')}" in shown
        await pilot.press("e")
        await settle(pilot)
        assert screen.view == "table"


@pytest.mark.app
async def test_beside_names_the_second_file_and_a_bad_one_is_one_line(fixtures_dir):
    path = fixtures_dir / "reference" / "ref-qwen3-f16.gguf"
    assert main(["--beside", "/no/such.gguf", str(path)]) == 2  # refused before the screen is taken
    app = app_for(BUNDLED_MODEL, MESSAGES, beside=str(path))
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press(stage_key("costs"), "e")
        await settle(pilot)
        shown = " ".join(widget_text(app.screen.query_one("#costs-held", Static), 400).split())
        other = _card(path)
        assert f"{other.name or path.name} (dense) as stored" in shown
        assert "(mixture of experts) as stored" in shown
