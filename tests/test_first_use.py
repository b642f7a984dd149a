"""One-time work apart from the pass: weights produced the first time they are used are timed on their own."""

from __future__ import annotations

import time

import numpy as np
from conftest import FIXTURES_DIR

from walkthrough.cli import main
from walkthrough.costs.measured import first_use_line, measure
from walkthrough.engine.glassbox.model import Model
from walkthrough.engine.glassbox.session import Session
from walkthrough.engine.sampler import Sampler

QWEN2 = FIXTURES_DIR / "reference" / "ref-qwen2-f32.gguf"


def _run(model: Model) -> list:
    session = Session(model)
    steps = list(session.prefill([5, 6, 7, 8], sampler=Sampler.greedy()))
    return steps + list(session.decode(Sampler.greedy(), 2, stop_ids=[]))


def test_the_first_pass_carries_the_one_time_work_and_its_time_is_apart() -> None:
    model = Model.open(QWEN2)
    _, at_open, _ = model.weights.first_use()  # opening checks the small norm vectors (load work)
    began = time.perf_counter()
    first = _run(model)
    wall = time.perf_counter() - began
    assert first[0].first_use_bytes > 0 and first[0].first_use_seconds > 0
    once, total, tensors = model.weights.first_use()
    assert sum(s.first_use_bytes for s in first) == total - at_open and tensors > 0
    assert sum(s.seconds + s.first_use_seconds for s in first) <= wall
    # the same request again: nothing is produced for the first time, every pass is the pass alone
    again = _run(model)
    assert all(s.first_use_bytes == 0 and s.first_use_seconds == 0 for s in again)
    assert model.weights.first_use() == (once, total, tensors)


def test_a_weight_not_kept_and_made_again_is_the_passs_own_work() -> None:
    model = Model.open(QWEN2, max_cache_bytes=1)  # nothing stays cached
    _run(model)
    seen = model.weights.first_use()
    produced = model.weights.dequantized_bytes
    again = _run(model)
    assert model.weights.dequantized_bytes > produced  # it did the work again...
    assert model.weights.first_use() == seen  # ...but not for the first time
    assert all(s.first_use_bytes == 0 for s in again)


def test_measured_figures_and_the_line_report_it_once() -> None:
    steps = _run(Model.open(QWEN2))
    m = measure(steps)
    assert m.first_use_bytes == sum(s.first_use_bytes for s in steps) > 0
    assert m.prefill_seconds == sum(s.seconds for s in steps if s.phase == "prefill")
    line = first_use_line(steps)
    assert line.startswith("first use: dequantized ") and line.endswith("(not in the prefill and decode times)")
    assert first_use_line(_run(Model.open(QWEN2))[:0]) is None
    assert np.isfinite(m.first_use_seconds)


def test_trace_reports_first_use_on_its_own_line(capsys) -> None:
    assert main(["trace", str(QWEN2), "--ids", "5,6,7,8,9", "--steps", "3"]) == 0
    out = capsys.readouterr().out
    assert sum(line.startswith("first use: dequantized") for line in out.splitlines()) == 1


def test_the_lane_products_shape_checks_are_one_time_work(tmp_path, monkeypatch) -> None:
    """A first pass of LANE_ROWS rows checks its matrix shapes for the lane products: counted and timed with the
    first-use work, apart from the pass; the same pass again checks nothing."""
    from gguf.constants import GGMLQuantizationType
    from llama_support import write_llama_blocks

    from walkthrough.engine.glassbox import lane_products, ops

    monkeypatch.setattr(lane_products, "_plans", {})
    model = Model.open(write_llama_blocks(tmp_path / "q4.gguf", GGMLQuantizationType.Q4_0, n_layers=1))
    ids = list(range(5, 5 + ops.LANE_ROWS))
    shapes, seconds = lane_products.checked()
    first = list(Session(model).prefill(ids, sampler=Sampler.greedy()))
    assert sum(s.first_use_checks for s in first) == lane_products.checked()[0] - shapes > 0
    assert sum(s.first_use_seconds for s in first) >= lane_products.checked()[1] - seconds > 0
    again = list(Session(model).prefill(ids, sampler=Sampler.greedy()))
    assert all(s.first_use_checks == 0 and s.first_use_seconds == 0 for s in again)
    assert f"checked {sum(s.first_use_checks for s in first)} product shape" in first_use_line(first)
    assert measure(first).first_use_checks == sum(s.first_use_checks for s in first)


def test_lane_copies_are_held_only_where_the_budget_holds_them_and_every_weight(tmp_path) -> None:
    """A pass of LANE_ROWS rows keeps its matrices' lane copies in the weight cache (`Weights.lanes`) when the budget
    holds every weight and every lane copy together (`dequantized_bytes` + `lane_copy_bytes`); one byte less and it
    makes them each pass and keeps the weights alone. The logits are the same bits either way, a second pass makes
    no lane copy again, and the memory line counts the copies where they are kept."""
    from gguf.constants import GGMLQuantizationType
    from llama_support import write_llama_blocks

    from walkthrough.costs.memory import Holding, dequantized_bytes, lane_copy_bytes
    from walkthrough.engine.glassbox import ops
    from walkthrough.inspect.card import build_card

    path = write_llama_blocks(tmp_path / "q4.gguf", GGMLQuantizationType.Q4_0, n_layers=2)
    ids = list(range(5, 5 + ops.LANE_ROWS))

    def lane_bytes(model: Model) -> int:
        return sum(v.nbytes for k, v in model.weights.cached().items() if isinstance(k, tuple) and k[0] == "lanes")

    roomy = Model.open(path)
    first = list(Session(roomy).prefill(ids, sampler=Sampler.greedy()))
    every, lanes = dequantized_bytes(roomy.file), lane_copy_bytes(roomy.file)
    assert 0 < lane_bytes(roomy) <= lanes and roomy.weights.cached_bytes == every + lane_bytes(roomy)
    produced = roomy.weights.dequantized_bytes
    again = list(Session(roomy).prefill(ids, sampler=Sampler.greedy()))
    assert roomy.weights.dequantized_bytes == produced
    tight = Model.open(path, max_cache_bytes=every + lanes - 1)
    weights_only = list(Session(tight).prefill(ids, sampler=Sampler.greedy()))
    assert lane_bytes(tight) == 0 and tight.weights.cached_bytes == every  # every weight still kept
    # the copies' time is first-use time; their bytes are not counted as dequantized
    assert sum(s.first_use_bytes for s in first) == sum(s.first_use_bytes for s in weights_only) > 0
    for a, b, c in zip(first, again, weights_only):
        assert np.array_equal(a.logits, b.logits) and np.array_equal(a.logits, c.logits)
    card = build_card(roomy.file)
    assert Holding.numpy(roomy.file, card, 64, 64, every + lanes).lane_copies == lanes
    assert Holding.numpy(roomy.file, card, 64, 64, every + lanes - 1).lane_copies == 0
    assert Holding.numpy(roomy.file, card, 64, ops.LANE_ROWS - 1, every + lanes).lane_copies == 0  # short passes
    assert Holding.numpy(roomy.file, card, 64, 64, every + lanes, prompt=ops.LANE_ROWS - 1).lane_copies == 0
