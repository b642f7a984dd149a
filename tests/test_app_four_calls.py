"""The four-calls screen: the worker posts each call and the measured starts; the screen shows what they say."""

from __future__ import annotations

from textual.app import App

from walkthrough.engine.sampler import SamplerSettings
from walkthrough.inspect.gguf import open_gguf
from walkthrough.inspect.locate import BUNDLED_MODEL, DEFAULT_REQUEST
from walkthrough.inspect.template import load_messages, select_template
from walkthrough.inspect.tokenizer import GGUFTokenizer
from walkthrough.screens.four_calls import CallsInput, FourCallsScreen


def _calls() -> CallsInput:
    """The default request's system prompt and a short record (a short prompt keeps the test quick)."""
    f = open_gguf(BUNDLED_MODEL)
    system = load_messages(DEFAULT_REQUEST)[0]
    user = {"role": "user", "content": "Record:\n1. Medication: simvastatin 20 mg at night\n\nQuestion: We plan to add "
                                       "clarithromycin 250 mg twice daily. Any interaction with the current medications?"}
    return CallsInput(BUNDLED_MODEL, f, GGUFTokenizer.from_gguf(f), select_template(f), [system, user],
                      SamplerSettings(), chunk=512, max_tokens=3)


async def test_the_four_calls_play_and_are_measured():
    seen: list = []
    app = App()
    async with app.run_test(size=(80, 24), message_hook=seen.append) as pilot:
        screen = FourCallsScreen(_calls())
        await app.push_screen(screen)
        await app.workers.wait_for_complete()
        await pilot.pause()
        played = [m.turn for m in seen if isinstance(m, FourCallsScreen.Played)]
        assert [t.label for t in played] == ["request", "follow-up", "edit", "new chat"]
        assert played[1].reuse.reused == len(played[0].chat.ids) + len(played[0].answer) - 1
        assert played[2].cause is not None and played[2].cause.cause == "edited"
        finished = [m for m in seen if isinstance(m, FourCallsScreen.Finished)]
        assert len(finished) == 1 and finished[0].summary.turns == 4
        for turn in played:
            assert f"{turn.label}: {turn.reuse.reused} of {turn.reuse.prompt} prompt tokens reused" in screen.shown
        await pilot.press("c")
        await app.workers.wait_for_complete()
        await pilot.pause()
        started = [m for m in seen if isinstance(m, FourCallsScreen.Started)]
        cold, warm, kept = started[0].starts
        assert cold.first_token > cold.passes > 0 and warm.first_token > 0 and kept.first_token > 0
        assert "cold, a fresh process" in screen.shown and "keep-alive" in screen.shown
