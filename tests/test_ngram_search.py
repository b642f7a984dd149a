"""n-grams as the drafter sees them: prompt lookup's search (drafters.search) and the Speculate stage's view of it."""

from __future__ import annotations

import json
import random

import pytest
from app_support import SIZES, settle, stage_key, widget_text
from textual.widgets import Static

from walkthrough.app import make_app
from walkthrough.engine.serving.drafters import NGRAM_MAX, NgramRow, lookup, search
from walkthrough.render.ngram_view import round_context
from walkthrough.request.state import load_messages


def _reference(context: list[int], k: int) -> tuple[dict[int, list[int]], list[int]]:
    """Every earlier start of each n's key, and the drafts, by plain loops (the latest match of the longest n)."""
    size = len(context)
    starts = {}
    for n in range(min(NGRAM_MAX, size - 1), 0, -1):
        key = context[size - n :]
        starts[n] = [j for j in range(size - n) if context[j : j + n] == key]
    for n, js in starts.items():
        if js:
            return starts, context[js[-1] + n : js[-1] + n + k]
    return starts, []


def test_the_worked_example():
    found = search([5, 6, 7, 8, 5, 6], 2)
    assert [row.n for row in found.rows] == [4, 3, 2, 1]
    assert found.rows[2] == NgramRow(2, (5, 6), (0,))
    assert found.rows[3] == NgramRow(1, (6,), (1,))
    assert (found.n, found.start, found.follows, found.draft) == (2, 0, 2, (7, 8))
    none = search([1, 2, 3], 3)
    assert none.n is None and none.draft == () and all(not row.starts for row in none.rows)
    assert search([9], 3).rows == ()


def test_search_is_the_plain_loops_and_lookup_drafts_its_match():
    rng = random.Random(31)
    for _ in range(300):
        context = [rng.randrange(4) for _ in range(rng.randrange(1, 40))]
        k = rng.randrange(0, 6)
        found = search(context, k)
        starts, drafts = _reference(context, k)
        assert {row.n: list(row.starts) for row in found.rows} == starts
        assert list(found.draft) == drafts == lookup(context, k)
        if found.n is not None:
            assert context[found.start : found.follows] == context[len(context) - found.n :]


@pytest.mark.app
@pytest.mark.parametrize("size", SIZES.values(), ids=SIZES.keys())
async def test_speculate_stage_shows_the_last_rounds_search_and_its_match(size):
    app = make_app(None, load_messages(None))  # the bundled tiny model and the default request
    async with app.run_test(size=size) as pilot:
        await settle(pilot)
        await pilot.press(stage_key("speculate"))
        await settle(pilot)
        for _ in range(4):  # the prompt, then three rounds
            await pilot.press("space")
            await settle(pilot)
        screen, state = app.screen, app.state
        s = state.speculation
        assert s.drafter == "lookup" and len(s.rounds) == 3
        last = s.rounds[-1]
        context = round_context(state.prompt_ids, s.answer(), last)
        assert context[-1] == last.input_ids[0]  # the round's pending token ends what the drafter saw
        found = search(context, last.draft.k)
        assert list(found.draft) == last.draft.tokens  # the view's search is the one the round drafted from
        shown = widget_text(screen.query_one("#speculate-ngrams", Static), 300)
        assert "prompt lookup's search" in shown and f"{len(context):,} tokens of context" in shown
        lines = shown.splitlines()
        for row in found.rows:
            line = next(line for line in lines if line.strip().startswith(f"{row.n} "))
            assert ("nowhere" in line) == (not row.starts)
            if row.starts:
                assert f"{row.starts[-1]} (" in line
        if found.n is not None:
            assert f"match at {found.start} (" in shown and "<- match: the latest" in shown
        else:
            assert "nothing drafted" in shown
        assert any(r.draft.tokens for r in s.rounds)  # the tiny model's answer drafts from its prompt


def test_trace_prints_the_last_rounds_search(capsys):
    from walkthrough.cli import main
    from walkthrough.inspect.locate import BUNDLED_MODEL

    args = ["trace", str(BUNDLED_MODEL), "--ids", "5,6,7,8,5,6,7,8,5,6", "--steps", "6", "--speculate", "lookup"]
    assert main([*args, "--json"]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    prompt = [t for r in records if r["phase"] == "prefill" for t in r["input_ids"]]
    rounds = [r for r in records if r["phase"] == "verify"]
    kept = [t for r in rounds[:-1] for t in r["input_ids"][: 1 + r["draft"]["accepted"]]]
    context = prompt + kept + rounds[-1]["input_ids"][:1]  # what the last round's drafter saw
    found = search(context, rounds[-1]["draft"]["k"])
    assert list(found.draft) == rounds[-1]["draft"]["tokens"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert f"prompt lookup's search (the last round, {len(context)} tokens of context" in out
    table = out[out.index("prompt lookup's search") :].splitlines()
    for row in found.rows:
        line = next(line for line in table if line.strip().startswith(f"{row.n} "))
        assert ("nowhere" in line) == (not row.starts)
        if row.starts:
            assert f"{row.starts[-1]} (" in line
    assert found.n is not None and f"match at {found.start} (" in out
