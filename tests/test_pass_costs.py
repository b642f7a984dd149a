"""`tests/bench/pass_costs.py`: its split of a pass into parts, and the budget it reports for issue 29's goals.

The benchmark wraps engine functions to time them, so these check that the wrappers count real calls, go away
afterwards (even when a pass fails), and leave the engine giving the numbers it gave before.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from bench.pass_costs import PARTS, TIMED, report, split_passes, timed_parts
from tiny_model_support import MODEL_PATH

from walkthrough.engine.glassbox import ops
from walkthrough.engine.glassbox.model import Model
from walkthrough.engine.glassbox.session import Session
from walkthrough.inspect.gguf import open_gguf


def test_timed_parts_count_calls_and_put_the_functions_back_even_on_failure():
    originals = {key: getattr(*key) for key in TIMED}
    spent = Counter()
    with pytest.raises(ZeroDivisionError), timed_parts(spent):
        assert ops.linear is not originals[ops, "linear"]
        ops.linear(np.ones((2, 3), np.float32), np.ones((4, 3), np.float32))
        1 / 0  # noqa: B018  (a pass that fails inside)
    assert spent["products"] > 0 and set(spent) == {"products"}
    assert {key: getattr(*key) for key in TIMED} == originals


def test_split_passes_times_every_part_and_leaves_the_engine_as_it_was():
    model = Model(open_gguf(MODEL_PATH))
    ids = list(range(1, 13))
    plain = Session(model, kv_type="f32")
    plain.feed(ids, phase="prefill")
    prefill, decode = split_passes(model, ids, 2)
    for phase in (prefill, decode):
        assert set(phase) == {*PARTS, "total"}
        assert phase["products"] > 0 and phase["softmax"] > 0 and phase["rest"] > 0
        assert phase["total"] >= phase["products"] + phase["softmax"] + phase["rounding"]
    after = Session(model, kv_type="f32")  # the wrappers are gone and the engine gives the same logits
    after.feed(ids, phase="prefill")
    assert np.array_equal(after.last_logits, plain.last_logits)


def test_report_says_what_is_left_for_all_but_the_products():
    split = ({"products": 1.0, "attention": 0.1, "softmax": 0.1, "rounding": 0.1, "rest": 0.2, "total": 1.5},
             {"products": 0.9, "attention": 0.1, "softmax": 0.1, "rounding": 0.2, "rest": 0.7, "total": 2.0})
    # Prefill: 128 tokens at 1.0 x 100 tok/s take 1.28 s, so 0.28 s are left beside the products' 1.0 s (the rest
    # takes 0.5 s). Decode: 10 passes at 0.3 x 40 tok/s take 0.833 s, less than the products' 0.9 s alone.
    lines = report("m.gguf", 128, 10, (100.0, 40.0), (85.0, 5.0), split)
    assert lines[-2] == ("  prefill at 1.0x llama.cpp leaves 280.0 ms the prompt for all but the products; "
                         "they take 500.0 ms")
    assert lines[-1] == ("  decode at 0.3x llama.cpp leaves -6.7 ms a pass for all but the products; they take "
                         "110.0 ms (no change outside the products can meet this goal)")
    assert "128.0 tok/s = 1.28x" in lines[-3] and "11.1 tok/s = 0.28x" in lines[-3]
