"""Renders run in a helper process that is killed on time, memory or cancel; `{% generation %}` renders its body."""

from __future__ import annotations

import json
import threading
import time

import pytest
from conftest import FIXTURES_DIR
from hostile_support import HOSTILE_TEMPLATES as HOSTILE

from walkthrough.inspect import render_process
from walkthrough.inspect.template import Limits, TemplateError, load_template_file, render

HI = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize("source", list(HOSTILE.values()), ids=list(HOSTILE))
def test_hostile_template_ends_with_one_error(source):
    with pytest.raises(TemplateError) as info:
        render(source, HI, limits=Limits(seconds=0.5))
    assert "\n" not in str(info.value)


def test_helper_survives_a_killed_render():
    with pytest.raises(TemplateError, match="ran longer than"):
        render(HOSTILE["one endless comparison"], HI)
    assert render("{{ messages[0].content }}", HI) == "hi"


def test_cancel_kills_a_render_that_never_checks():
    cancel = threading.Event()
    timer = threading.Timer(0.5, cancel.set)
    timer.start()
    with pytest.raises(TemplateError, match="cancelled"):
        render(HOSTILE["one endless comparison"], HI, cancel=cancel, limits=Limits(seconds=60))
    timer.join()


def test_stop_all_cancels_a_waiting_render():
    errors: list[str] = []

    def worker():
        try:
            render(HOSTILE["one endless comparison"], HI, limits=Limits(seconds=60))
        except TemplateError as exc:
            errors.append(str(exc))

    thread = threading.Thread(target=worker)
    thread.start()
    threading.Timer(0.5, render_process.stop_all).start()
    thread.join(30)
    assert not thread.is_alive()
    assert errors and "cancelled" in errors[0]


def test_stop_all_while_a_new_helper_is_still_starting_reports_a_cancel():
    """stop_all kills a helper before it has said it is ready: the render says cancelled, not that it could not
    start (a CI run under load saw that message)."""
    render_process.stop_all()  # no idle helper: the render below starts a new one
    errors: list[str] = []

    def worker():
        try:
            render("{{ messages[0].content }}", HI)
        except TemplateError as exc:
            errors.append(str(exc))

    thread = threading.Thread(target=worker)
    thread.start()
    deadline = time.monotonic() + 10
    while not any(not h.ready for h in list(render_process._POOL.busy)) and time.monotonic() < deadline:
        time.sleep(0.001)  # until the new helper exists and has not yet said it is ready
    assert any(not h.ready for h in list(render_process._POOL.busy))
    render_process.stop_all()
    thread.join(30)
    assert not thread.is_alive()
    assert errors and "cancelled" in errors[0], errors


def test_memory_cap_turns_growth_into_an_error():
    with pytest.raises(TemplateError, match="memory"):
        render("{{ ('\\t'*500).expandtabs(16000000) }}", HI, limits=Limits(memory_bytes=256 << 20))


def test_lone_surrogates_and_controls_travel_unchanged():
    text = "\ud800 \x1b]0;x\x07 \u202e \U000e0041"
    assert render("{{ messages[0].content }}", [{"role": "user", "content": text}]) == text


def _with_generation_blocks(source: str) -> str:
    # Mark each turn's text as transformers' assistant-mask templates do.
    start, end = "{{ '<start_of_turn>' + role", "<end_of_turn>\n' }}"
    assert source.count(start) == 1 and source.count(end) == 1
    return source.replace(start, "{% generation %}" + start).replace(end, end + "{% endgeneration %}")


def _gemma_cases():
    path = FIXTURES_DIR / "templates" / "google-gemma-2-2b-it.expected.json"
    if not path.is_file():  # the fixtures_dir fixture then fails with its clear message, not collection
        return None, [pytest.param("fixtures missing", id="fixtures-missing")]
    doc = json.loads(path.read_text("utf-8"))
    return doc, [pytest.param(name, id=name) for name in doc["cases"]]


@pytest.mark.parametrize("case_name", _gemma_cases()[1])
def test_generation_block_renders_its_body_as_transformers(fixtures_dir, case_name):
    doc, _ = _gemma_cases()
    case = doc["cases"][case_name]
    source = _with_generation_blocks(load_template_file(fixtures_dir / "templates" / doc["template"]))
    kwargs = {"bos_token": doc["bos_token"], "eos_token": doc["eos_token"],
              "add_generation_prompt": case["add_generation_prompt"]}
    if "error" in case:
        with pytest.raises(TemplateError, match=case["message"]):
            render(source, case["messages"], **kwargs)
    else:
        assert render(source, case["messages"], **kwargs) == case["text"]


def test_generation_block_unclosed_is_a_syntax_error():
    with pytest.raises(TemplateError, match="line 1"):
        render("{% generation %}{{ messages[0].content }}", HI)


def test_generation_block_body_is_still_bounded():
    loop = "{% generation %}{% for i in range(10**5) %}{% for j in range(10**5) %}{% endfor %}{% endfor %}{% endgeneration %}"
    with pytest.raises(TemplateError, match="ran longer than"):
        render(loop, HI, limits=Limits(seconds=0.3))
