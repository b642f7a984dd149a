"""Abliteration: the direction from two prompt sets, the edit that removes it from every matrix writing into
the residual stream, the written file (loaded and run by llama.cpp), and the behaviour change.

Nothing here is assumed: the projection on the direction of the edited file's residual stream is measured
by running it (the numpy engine, and llama.cpp's own `l_out` tensors), and what its writers can still add
along the direction is read back from the written bytes.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from app_support import SIZES, press_stage, reference_app, settle, shown_text
from llama_support import needs_llama
from real_weights_support import find_smollm2

from walkthrough.cli import main
from walkthrough.engine.abliterate import run as abl
from walkthrough.engine.abliterate.collect import prompt_ids
from walkthrough.engine.abliterate.direction import find_direction
from walkthrough.engine.abliterate.edit import EMBEDDING, project_out, residual_writers
from walkthrough.engine.abliterate.prompts import load_prompt_sets
from walkthrough.engine.glassbox.model import Model
from walkthrough.inspect.gguf import open_gguf
from walkthrough.inspect.locate import bundled_model
from walkthrough.inspect.template import choose_template
from walkthrough.inspect.tokenizer import GGUFTokenizer

QUESTIONS = ["what colour is the sky?", "how do I boil an egg?", "what is a good breakfast?"]
SMALL = {"behaviour": "answer in French", "with": [f"Answer in French: {q}" for q in QUESTIONS],
         "without": [f"Answer in English: {q}" for q in QUESTIONS], "held_out": 1}


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _small_sets(tmp_path: Path):
    path = tmp_path / "sets.json"
    path.write_text(json.dumps(SMALL))
    return path, load_prompt_sets(path)


def test_difference_of_means_as_in_the_docstring() -> None:
    with_ = np.array([[[2.0, 0.0]], [[4.0, 0.0]]])  # [n, n_layers, d]
    without = np.array([[[0.0, 0.0]], [[0.0, 2.0]]])
    d = find_direction(with_, without)
    assert d.layer == 0 and d.gap == pytest.approx(np.sqrt(10))
    np.testing.assert_allclose(d.unit, np.array([3.0, -1.0]) / np.sqrt(10))
    np.testing.assert_allclose(d.project(with_[:, 0]), [6 / np.sqrt(10), 12 / np.sqrt(10)])


@pytest.mark.parametrize("name, shape", [("blk.0.attn_output.weight", (6, 5)), ("blk.0.ffn_down_exps.weight", (3, 6, 4)),
                                         (EMBEDDING, (9, 6)), ("blk.0.attn_output.bias", (6,))])
def test_projecting_out_leaves_nothing_written_along_the_direction(name: str, shape: tuple) -> None:
    rng = np.random.default_rng(0)
    w = rng.standard_normal(shape)
    u = rng.standard_normal(6)
    u /= np.linalg.norm(u)
    edited = project_out(w, u, name)
    if name == EMBEDDING:
        written, before = edited, w  # rows are stream vectors
    elif name.endswith(".bias"):
        written, before = edited[None], w[None]
    else:  # W x for random inputs x: the stream's width is the second to last axis
        x = rng.standard_normal((shape[-1], 7))
        written, before = np.moveaxis(edited @ x, -2, -1), np.moveaxis(w @ x, -2, -1)
    assert np.max(np.abs(written @ u)) < 1e-12 < np.max(np.abs(before @ u))
    # only the component along u changed
    np.testing.assert_allclose(written - (written @ u)[..., None] * u, before - (before @ u)[..., None] * u,
                               atol=1e-12)


def test_bundled_prompt_sets_differ_in_one_instruction() -> None:
    sets = load_prompt_sets()
    assert len(sets.with_) == len(sets.without) >= 8 and sets.held_out >= 1
    assert [p.replace("French", "English") for p in sets.with_] == sets.without


@pytest.mark.parametrize("doc, words", [({"with": ["a"]}, "'without'"), ({"with": [], "without": ["b"]}, "'with'"),
                                        ({"with": ["a"], "without": ["b"], "held_out": 1}, "held_out")])
def test_bad_prompt_sets_are_one_line_errors(tmp_path, capsys, doc, words) -> None:
    path = tmp_path / "p.json"
    path.write_text(json.dumps(doc))
    assert main(["abliterate", "--prompts", str(path), "--out", str(tmp_path / "o.gguf")]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1 and not (tmp_path / "o.gguf").exists()


def test_the_model_and_files_it_did_not_make_are_never_replaced(tmp_path, capsys) -> None:
    model = bundled_model()
    assert main(["abliterate", "--out", str(model)]) == 2
    assert "the model" in capsys.readouterr().err
    taken = tmp_path / "taken.gguf"
    taken.write_bytes(b"mine")
    assert main(["abliterate", "--out", str(taken)]) == 2
    assert "--overwrite" in capsys.readouterr().err and taken.read_bytes() == b"mine"


def _edit_tiny(tmp_path: Path):
    _, sets = _small_sets(tmp_path)
    model = Model.open(bundled_model())
    found = abl.find(model, sets)
    out = tmp_path / "edited.gguf"

    from contextlib import contextmanager

    @contextmanager
    def open_out():
        with open(out, "wb") as stream:
            yield out, stream

    return model, found, abl.edit(model, found, open_out, tokens=8)


def test_the_edited_tiny_model_writes_nothing_along_the_direction(tmp_path) -> None:
    original = _digest(bundled_model())
    model, found, edited = _edit_tiny(tmp_path)
    f = open_gguf(edited.path)
    n_layers = model.config.n_layers
    for i in range(n_layers):  # every matrix writing into the stream, in every layer
        for kind in ("attn_output", "ffn_down_exps", "ffn_down_shexp"):
            assert f"blk.{i}.{kind}.weight" in edited.tensors
    assert EMBEDDING in edited.tensors and set(edited.tensors) == set(residual_writers(model.file))
    assert f.get("walkthrough.abliteration.layer") == found.layer
    # measured: read back from the file, and the residual stream of every prompt at every layer
    assert edited.writers_after < 1e-6 and edited.writers_before > 0.01
    assert edited.stream_after < 1e-6 and edited.stream_before > 0.01
    before_with, _ = found.projections()
    assert np.max(np.abs(edited.after_with)) < 1e-5 * np.max(np.abs(before_with))
    # the behaviour changed: compare's figures on the held-out prompt
    assert edited.comparison.kl_stats()["max"] > 0 and len(edited.answers) == 2
    assert _digest(bundled_model()) == original  # the model file is untouched


@needs_llama
def test_llama_cpp_loads_the_edited_file_and_its_stream_has_nothing_along_the_direction(tmp_path) -> None:
    from walkthrough.engine.llama.model import LlamaModel
    from walkthrough.engine.llama.session import LlamaSession

    model, found, edited = _edit_tiny(tmp_path)
    tok = GGUFTokenizer.from_gguf(model.file)
    ids = prompt_ids(tok, choose_template(model.file), found.sets.with_[-1])
    u, d = found.direction.unit, model.config.n_embd
    shares = {}
    for name, path in (("original", bundled_model()), ("edited", edited.path)):
        llm = LlamaModel.open(path, n_threads=1)
        session = LlamaSession(llm, kv_type="f32", flash_attention=False, named=frozenset({"l_out"}), n_ctx=256)
        step = session.feed(ids, phase="prefill")
        assert np.all(np.isfinite(step.logits))
        rows = [np.asarray(session.capture.tensors[f"l_out-{i}"][-1], np.float64).reshape(-1, d)[-1]
                for i in range(model.config.n_layers)]
        shares[name] = max(abs(r @ u) / np.linalg.norm(r) for r in rows)
        session.close()
        llm.close()
    assert shares["edited"] < 1e-4 and shares["original"] > 0.01


@pytest.mark.app  # SmolLM2 through the numpy engine, in a fresh process (one BLAS thread): a few minutes
@needs_llama
def test_smollm2_edited_answers_change_and_llama_cpp_runs_the_file(tmp_path) -> None:
    path = find_smollm2()
    if path is None:
        pytest.skip("SmolLM2 not found (SMOLLM2_GGUF)")
    import os
    import subprocess
    import sys

    import llama_cpp

    prompts, sets = _small_sets(tmp_path)
    out = tmp_path / "smol-abliterated.gguf"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = subprocess.run([sys.executable, "-m", "walkthrough", "abliterate", str(path), "--prompts", str(prompts),
                           "--out", str(out), "--store", "f16", "--tokens", "8", "--json"],
                          check=False, capture_output=True, text=True, env=env, timeout=1800)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["stream_along"]["after"] < 1e-3 * doc["stream_along"]["before"]  # F16: rounding is what is left
    assert doc["compare"]["kl"]["max"] > 0
    llm = llama_cpp.Llama(model_path=str(out), n_ctx=256, verbose=False, use_extra_bufts=False, n_threads=1)
    reply = llm.create_chat_completion(messages=[{"role": "user", "content": sets.with_[-1]}], max_tokens=8,
                                       temperature=0)
    llm.close()
    assert reply["choices"][0]["message"]["content"]
    f = open_gguf(out)
    assert "output.weight" in f.tensors  # the tied head keeps reading the original embedding
    u = np.asarray(f.get("walkthrough.abliteration.direction"))
    assert u.shape == (576,) and abs(np.linalg.norm(u) - 1) < 1e-6


@pytest.mark.app
@pytest.mark.parametrize("size", ["small", "large"])
async def test_abliteration_view_from_the_prefill_stage(size, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # `w` writes into the current folder
    app = reference_app()
    async with app.run_test(size=SIZES[size]) as pilot:
        await settle(pilot)
        await press_stage(pilot, "prefill", "x")
        await settle(pilot)
        screen = app.screen
        found = screen.found
        assert found is not None
        text = shown_text(app)
        assert f"Projection on the direction at layer {found.layer}" in text
        assert f"{found.projections()[0][0]:.3f}" in text
        await pilot.press("w")
        await settle(pilot)
        edited = screen.edited
        assert edited is not None and edited.path.exists() and edited.stream_after < 1e-6
        text = shown_text(app)
        assert "Edited file:" in text and "Greedy answers" in text
        assert f"{edited.stream_before:.3g} before" in text
        await pilot.press("escape")
        assert app.screen.__class__.__name__ == "PrefillScreen"
