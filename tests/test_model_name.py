"""Decoding a model's name (issue 31, item 4): the parser on published names, the claims checked against the card
of the tiny model, the reference fixtures and SmolLM2, and the decode shown by `inspect` and the File stage."""

from __future__ import annotations

import io
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from walkthrough.commands.inspect_view import render
from walkthrough.inspect.card import build_card
from walkthrough.inspect.gguf import open_gguf
from walkthrough.inspect.model_name import check_claims, parse_name
from walkthrough.render.name_view import name_lines

TINY = Path(__file__).parents[1] / "walkthrough" / "assets" / "tiny-clinical-moe.gguf"
REFERENCE = Path("/work/shared/fixtures/reference")

# Names as published on Hugging Face (file names of GGUF repositories, or model ids):
# name -> family, size, experts, active, tuning, version, quant.
PUBLISHED = {
    "Qwen3.6-35B-A3B-Instruct-Q4_K_M.gguf": ("Qwen3.6", 35e9, None, 3e9, "Instruct", None, "Q4_K_M"),
    "Qwen3-30B-A3B-Thinking-2507-Q8_0.gguf": ("Qwen3", 30e9, None, 3e9, "Thinking", None, "Q8_0"),
    "SmolLM2-135M-Instruct.Q4_1.gguf": ("SmolLM2", 135e6, None, None, "Instruct", None, "Q4_1"),
    "Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf": ("Meta-Llama-3.1", 8e9, None, None, "Instruct", None, "Q4_K_M"),
    "Mixtral-8x7B-Instruct-v0.1-Q5_K_M.gguf": ("Mixtral", 56e9, 8, None, "Instruct", "v0.1", "Q5_K_M"),
    "gemma-3-4b-it-Q4_K_M.gguf": ("gemma-3", 4e9, None, None, "it (instruction-tuned)", None, "Q4_K_M"),
    "tinyllama-1.1b-chat-v1.0.Q4_K_M.gguf": ("tinyllama", 1.1e9, None, None, "Chat", "v1.0", "Q4_K_M"),
    "gpt-oss-20b-MXFP4.gguf": ("gpt-oss", 20e9, None, None, None, None, "MXFP4"),
    "Llama-3.2-1B-Instruct-f16.gguf": ("Llama-3.2", 1e9, None, None, "Instruct", None, "F16"),
    "Qwen2.5-0.5B-Instruct-IQ4_XS.gguf": ("Qwen2.5", 0.5e9, None, None, "Instruct", None, "IQ4_XS"),
    "Qwen3-235B-A22B-Instruct-2507-UD-Q2_K_XL-00001-of-00002.gguf":
        ("Qwen3", 235e9, None, 22e9, "Instruct", None, "UD-Q2_K_XL"),
    "Mistral-7B-v0.3": ("Mistral", 7e9, None, None, None, "v0.3", None),
    "DeepSeek-R1-Distill-Qwen-7B-Q4_K_M.gguf": ("DeepSeek-R1-Distill-Qwen", 7e9, None, None, None, None, "Q4_K_M"),
    "Smollm2 135M 8k Lc100K Mix1 Ep2": ("Smollm2", 135e6, None, None, None, None, None),
    "ref-qwen3moe-q8_0.gguf": ("ref-qwen3moe", None, None, None, None, None, "Q8_0"),
}


@pytest.mark.parametrize("name", PUBLISHED)
def test_published_names_parse(name):
    c = parse_name(name)
    assert (c.family, c.size, c.experts, c.active, c.tuning, c.version, c.quant) == pytest.approx(PUBLISHED[name])


def test_a_name_is_text_not_numbers():
    c = parse_name("\x1b]0;x\x07" + "9" * 5000 + ".gguf")
    assert c.size is None and c.quant is None and len(c.text) <= 256


def _card(n_params, active, types, experts=0):
    return SimpleNamespace(n_params=n_params, n_params_active=active, bytes_by_type=types, n_experts=experts)


def test_the_article_example_against_its_counts():
    """Counts as a card gives them for a 35B-A3B: the claim is set beside the count, and agreement is within 10%."""
    claims = parse_name("Qwen3.6-35B-A3B-Instruct-Q4_K_M.gguf")
    checks = check_claims(claims, _card(35_500_000_000, 2_900_000_000, {"Q4_K": 800, "Q6_K": 150, "F32": 50}))
    assert [(c.claim, c.stated, c.counted, c.agrees) for c in checks] == [
        ("size", "35B", "35.5 B counted", True),
        ("active", "A3B", "2.9 B active", True),
        ("quant", "Q4_K_M", "most weight bytes in Q4_K (80%)", True),
    ]
    wrong = check_claims(claims, _card(20e9, 5e9, {"Q8_0": 10}))
    assert [c.agrees for c in wrong] == [False, False, False]


def test_reference_fixtures_quant_claims_match_their_files():
    paths = sorted(REFERENCE.glob("ref-*.gguf"))
    if not paths:
        pytest.skip("no reference fixtures")
    for path in paths:
        card = build_card(open_gguf(path))
        checks = check_claims(parse_name(path.name), card)
        assert [c.claim for c in checks] == ["quant"], path.name  # "ref-llama-q4_0": no size in these names
        main = max(card.bytes_by_type, key=lambda t: (t != "F32", card.bytes_by_type[t]))
        assert checks[0].agrees is True and main in checks[0].counted, (path.name, checks)


def test_tiny_model_claims_nothing_it_cannot_back():
    f = open_gguf(TINY)
    card = build_card(f)
    claims = parse_name(TINY.name)
    assert claims.family == "tiny-clinical-moe" and claims.size is None and claims.quant is None
    assert check_claims(claims, card) == []
    assert name_lines(TINY.name, card.name, card).plain == "file name tiny-clinical-moe: family tiny-clinical-moe"


def test_smollm2_claims_agree_with_its_card():
    path = os.environ.get("SMOLLM2_GGUF")
    if not path or not Path(path).exists():
        pytest.skip("SMOLLM2_GGUF not set")
    f = open_gguf(path)
    card = build_card(f)
    checks = {c.claim: c for c in check_claims(parse_name(Path(path).name), card)}
    assert checks["size"].agrees and f"{card.n_params / 1e6:.3g} M counted" == checks["size"].counted
    assert checks["quant"].agrees is (Path(path).name.split(".")[-2].upper() == checks["quant"].counted.split()[4])
    out = io.StringIO()
    render(f, card, tensors=False, metadata=False, out=out)
    assert "135M claimed, 135 M counted: agrees" in out.getvalue()
    assert "general.name" in out.getvalue()  # its general.name ("Smollm2 135M ...") is decoded too


def test_inspect_shows_the_decode_on_a_reference_fixture():
    path = REFERENCE / "ref-qwen3moe-q8_0.gguf"
    if not path.exists():
        pytest.skip("no reference fixtures")
    f = open_gguf(path)
    out = io.StringIO()
    render(f, build_card(f), tensors=False, metadata=False, out=out)
    assert "Q8_0 claimed, most weight bytes in Q8_0" in out.getvalue()


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
async def test_file_stage_overview_decodes_the_name(size):
    from app_support import app_for, screen_text, settle

    path = REFERENCE / "ref-qwen3moe-q8_0.gguf"
    if not path.exists():
        pytest.skip("no reference fixtures")
    app = app_for(path)
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        text = " ".join(screen_text(app).split())
    assert "Name decoded" in text
    assert "Q8_0 claimed, most weight bytes in Q8_0" in text


def test_inspect_json_decodes_the_name_and_checks_it(tmp_path, capsys):
    import json
    import shutil

    from walkthrough.cli import main

    # The tiny model under a big model's name: every claim the card can answer is checked, and fails.
    path = tmp_path / "Qwen3.6-35B-A3B-Instruct-Q4_K_M.gguf"
    shutil.copyfile(TINY, path)
    assert main(["inspect", str(path), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    decoded = document["name_decoded"]
    assert [d["source"] for d in decoded] == ["file name", "general.name"]  # the tiny model's own name differs
    first = decoded[0]
    assert (first["family"], first["size"], first["active"], first["tuning"], first["quant"]) == \
        ("Qwen3.6", 35e9, 3e9, "Instruct", "Q4_K_M")
    card = build_card(open_gguf(path))
    checks = {c["claim"]: c for c in first["checks"]}
    assert checks == {c.claim: vars(c) for c in check_claims(parse_name(path.name), card)}
    assert set(checks) == {"size", "active", "quant"}
    assert not checks["size"]["agrees"] and checks["size"]["counted"].startswith(f"{card.n_params / 1e6:.3g} M")
    assert not checks["active"]["agrees"] and not checks["quant"]["agrees"]
    assert decoded[1]["text"] == card.name  # the file's text, as it is
