"""Chat templates render byte-identical to transformers, and hostile templates stop with a clear error."""

from __future__ import annotations

import calendar
import json
import threading
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

import jinja2
import jinja2.ext
import pytest
from conftest import FIXTURES_DIR
from gguf.constants import GGUFValueType as V
from gguf_builder import write_gguf

from walkthrough.errors import WalkthroughError
from walkthrough.inspect.gguf import open_gguf
from walkthrough.inspect.template import (
    Limits,
    MessagesError,
    TemplateError,
    chat_templates,
    load_messages,
    load_template_file,
    render,
    select_template,
)

HI = [{"role": "user", "content": "hi"}]


def _fixture_cases():
    for path in sorted((FIXTURES_DIR / "templates").glob("*.expected.json")):
        doc = json.loads(path.read_text(encoding="utf-8"))
        for name in doc["cases"]:
            yield pytest.param(
                path.name, name, id=f"{path.name.removesuffix('.expected.json')}:{name}"
            )


def _epoch_of(day: str) -> int:
    return calendar.timegm(date.fromisoformat(day).timetuple())


@pytest.mark.parametrize(("fixture", "case_name"), list(_fixture_cases()))
def test_fixture_case_matches_transformers(fixtures_dir, monkeypatch, fixture, case_name):
    doc = json.loads((fixtures_dir / "templates" / fixture).read_text(encoding="utf-8"))
    case = doc["cases"][case_name]
    source = load_template_file(fixtures_dir / "templates" / doc["template"])
    monkeypatch.setenv("SOURCE_DATE_EPOCH", str(_epoch_of(doc["date"])))
    kwargs = {"bos_token": doc["bos_token"], "eos_token": doc["eos_token"]}
    kwargs["add_generation_prompt"] = case["add_generation_prompt"]
    if "error" in case:
        with pytest.raises(TemplateError) as info:
            render(source, case["messages"], **kwargs)
        assert case["message"] in str(info.value)
    else:
        assert render(source, case["messages"], **kwargs) == case["text"]


def test_every_fixture_template_has_cases(fixtures_dir):
    cases = list(_fixture_cases())
    assert len(cases) >= 4 * len(list((fixtures_dir / "templates").glob("*.jinja")))


# ---- the clock --------------------------------------------------------------------------
def test_source_date_epoch_changes_the_rendered_date(fixtures_dir, monkeypatch):
    doc = json.loads(
        (fixtures_dir / "templates" / "openai-gpt-oss-120b.expected.json").read_text("utf-8")
    )
    source = load_template_file(fixtures_dir / "templates" / doc["template"])
    case = doc["cases"]["user1"]
    next_day = date.fromisoformat(doc["date"]) + timedelta(days=1)
    monkeypatch.setenv("SOURCE_DATE_EPOCH", str(_epoch_of(next_day.isoformat())))
    text = render(source, case["messages"], bos_token=doc["bos_token"], eos_token=doc["eos_token"])
    assert text != case["text"]
    assert text == case["text"].replace(doc["date"], next_day.isoformat())


def test_strftime_now_reads_source_date_epoch_as_utc(monkeypatch):
    stamp = 1_700_000_000
    monkeypatch.setenv("SOURCE_DATE_EPOCH", str(stamp))
    expected = datetime.fromtimestamp(stamp, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
    assert render("{{ strftime_now('%Y-%m-%d %H:%M:%S') }}", HI) == expected


def test_now_parameter_wins_over_the_environment(monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "0")
    assert render("{{ strftime_now('%d %b %Y') }}", HI, now=datetime(2030, 2, 3)) == "03 Feb 2030"


@pytest.mark.parametrize("bad", ["yesterday", "1.5", "99999999999999999999"])
def test_bad_source_date_epoch_is_a_clear_error(monkeypatch, bad):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", bad)
    with pytest.raises(TemplateError, match="SOURCE_DATE_EPOCH"):
        render("{{ strftime_now('%Y') }}", HI)


# ---- transformers' variables and filters -------------------------------------------------------
def test_tojson_does_not_escape_html_or_unicode():
    value = {"b": "<tag> & 'é' ✓", "a": [1, None]}
    assert render("{{ x|tojson }}", HI, x=value) == json.dumps(value, ensure_ascii=False)
    assert render("{{ x|tojson(indent=2, sort_keys=true) }}", HI, x=value) == json.dumps(
        value, ensure_ascii=False, indent=2, sort_keys=True
    )


def test_default_and_extra_variables():
    assert (
        render("{{ tools is none }}|{{ documents is none }}|{{ add_generation_prompt }}", HI)
        == "True|True|True"
    )
    assert render("{{ enable_thinking }}", HI, enable_thinking=False) == "False"
    assert (
        render("{{ bos_token }}{{ eos_token }}", HI, bos_token="<B>", eos_token="<E>") == "<B><E>"
    )


def test_trim_and_lstrip_blocks_and_loop_controls():
    source = "  {% for m in [1, 2, 3, 4] %}\n  {% if m == 2 %}{% continue %}{% endif %}\n{{ m }}\n{% if m == 3 %}{% break %}{% endif %}\n{% endfor %}\n"
    configured = jinja2.Environment(
        trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols]
    )
    expected = configured.from_string(source).render()
    assert render(source, HI) == expected
    assert (
        expected
        != jinja2.Environment(extensions=[jinja2.ext.loopcontrols]).from_string(source).render()
    )


def test_raise_exception_becomes_a_template_error():
    with pytest.raises(TemplateError, match="refused the messages: no system role") as info:
        render("{{ raise_exception('no system role') }}", HI)
    assert isinstance(info.value, WalkthroughError)


def test_error_messages_name_the_line_and_show_control_characters():
    with pytest.raises(TemplateError) as info:
        render("ok\n{{ raise_exception('bad\x1b[2Jthing') }}", HI, origin="chat template of x.gguf")
    message = str(info.value)
    assert "chat template of x.gguf" in message and "\x1b" not in message and "\\x1b" in message
    with pytest.raises(TemplateError, match=r"line 3: .*has no attribute 'nothing'"):
        render("a\nb\n{{ messages[0].nothing.deeper }}", HI)
    with pytest.raises(TemplateError, match="line 2"):
        render("fine\n{% for %}", HI)


# ---- sandbox: internals and files ------------------------------------------------------------
@pytest.mark.parametrize(
    "source",
    [
        "{{ cycler.__init__.__globals__ }}",
        "{{ ''.__class__.__mro__ }}",
        "{{ ''.__class__ }}",
        "{{ ''|attr('__class__') }}",
        "{{ '{0.__class__}'.format('') }}",
        "{{ ['a']|map(attribute='__class__')|list }}",
        "{{ namespace.__init__ }}",
        "{{ raise_exception.__globals__ }}",
        "{{ messages[0]['content'].__class__.__base__.__subclasses__() }}",
    ],
)
def test_python_internals_are_refused(source):
    with pytest.raises(TemplateError, match="template tried to access"):
        render(source, HI)


def test_inputs_cannot_be_changed():
    messages = [{"role": "user", "content": "hi"}]
    with pytest.raises(TemplateError, match="may not change their inputs"):
        render("{{ messages.append(1) }}", messages)
    with pytest.raises(TemplateError, match="may not change their inputs"):
        render("{{ messages[0].update({'role': 'system'}) }}", messages)
    assert messages == [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(
    "source", ["{% include '/etc/passwd' %}", "{% import 'os' as os %}", "{% extends 'base' %}"]
)
def test_templates_cannot_read_files(source):
    with pytest.raises(TemplateError, match="may not read files"):
        render(source, HI)


# ---- sandbox: time -------------------------------------------------------------------------------
def _render_in_thread(source: str, **kwargs) -> tuple[threading.Thread, list]:
    outcome: list = []

    def work():
        try:
            outcome.append(render(source, HI, **kwargs))
        except TemplateError as exc:
            outcome.append(exc)

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    return thread, outcome


@pytest.mark.parametrize(
    "source",
    [
        # nested ranges: each range is within jinja's MAX_RANGE, the product is 10**10
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
        # no call at all inside the loops
        "{% set r = range(100000)|list %}{% for i in r %}{% for j in r %}{% endfor %}{% endfor %}",
        # a macro fanning out: 10**10 calls, ten deep
        "{% macro fan(n) %}{% if n %}{% for i in range(10) %}{{ fan(n - 1) }}{% endfor %}{% endif %}{% endmacro %}{{ fan(10) }}",
    ],
)
def test_endless_loops_stop_at_the_deadline(source):
    thread, outcome = _render_in_thread(source, limits=Limits(seconds=0.3))
    thread.join(timeout=30)  # the render must end by itself; 30 s is far beyond the 0.3 s asked
    assert not thread.is_alive()
    assert isinstance(outcome[0], TemplateError)
    assert "ran longer than 0.3 s" in str(outcome[0])


def test_a_single_huge_range_is_refused():
    with pytest.raises(TemplateError, match="passed the number 10,000,000,000 to range"):
        render("{% for i in range(10**10) %}{% endfor %}", HI)


@pytest.mark.app  # slow: a render process started, then killed
def test_cancel_stops_a_running_render():
    cancel = threading.Event()
    source = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
    thread, outcome = _render_in_thread(source, limits=Limits(seconds=600), cancel=cancel)
    cancel.set()
    thread.join(timeout=30)
    assert not thread.is_alive()
    assert "cancelled" in str(outcome[0])


def test_a_stopped_render_leaves_the_thread_untraced():
    import sys

    before = sys.gettrace()
    with pytest.raises(TemplateError):
        render(
            "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
            HI,
            limits=Limits(seconds=0.05),
        )
    assert sys.gettrace() is before
    assert render("{{ 6 * 7 }}", HI) == "42"


# ---- sandbox: size ----------------------------------------------------------------------------------
SMALL = Limits(seconds=10, max_chars=10_000)


@pytest.mark.parametrize(
    "source",
    [
        "{% for i in range(100000) %}{{ 'x' * 100 }}{% endfor %}",  # output
        "{{ 'a' * 10**10 }}",
        "{{ 'a' * 10000000000 }}",  # a literal number, not folded at compile time
        "{{ 'a'|center(10000000000) }}",
        "{{ 'a'.ljust(10000000000) }}",
        "{{ ('a' * 5000)|replace('a', 'bbbb') }}",
        "{{ range(1000)|map('string')|join('x' * 5000) }}",
        "{{ '%9999999999d' % 1 }}",
        "{{ '{:>9999999999}'.format(1) }}",
        "{{ lipsum(n=100000000) }}",
        "{{ 2 ** 100000000 }}",
        "{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
        "{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s %}{{ ns.s }}{{ ns.s }}{% endset %}{% endfor %}",
        "{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
        "{% set a = 'x' * 5000 %}{% set b = a ~ a %}{% set c = b ~ b %}{{ c|length }}",
    ],
)
def test_growth_is_stopped_before_it_gets_big(source):
    with pytest.raises(TemplateError) as info:
        render(source, HI, limits=SMALL)
    message = str(info.value)
    assert any(word in message for word in ("limit", "refused")), message


def test_output_just_under_the_limit_is_fine():
    assert render("{{ 'x' * 9000 }}", HI, limits=SMALL) == "x" * 9000


def test_recursion_is_a_clear_error():
    with pytest.raises(TemplateError, match="recursed too deeply"):
        render("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", HI)


def test_oversized_template_source_is_refused():
    with pytest.raises(TemplateError, match="characters long"):
        render("x" * 1_000_001, HI)


# ---- named templates in a GGUF ------------------------------------------------------------------
def test_named_templates_are_listed_and_selectable(tmp_path):
    path = write_gguf(
        tmp_path / "named.gguf",
        {
            "general.architecture": (V.STRING, "llama"),
            "tokenizer.chat_template": (V.STRING, "default:{{ messages[0].content }}"),
            "tokenizer.chat_template.tool_use": (V.STRING, "tools:{{ tools|length }}"),
            "tokenizer.chat_template.rag": (V.STRING, "rag"),
        },
    )
    with open_gguf(path) as f:
        templates = chat_templates(f)
        assert list(templates) == ["default", "rag", "tool_use"]
        assert render(select_template(f), HI) == "default:hi"
        assert render(select_template(f, "tool_use"), HI, tools=[1, 2]) == "tools:2"
        with pytest.raises(
            TemplateError, match="no chat template named 'nope'; it has: default, rag, tool_use"
        ):
            select_template(f, "nope")


def test_missing_and_non_text_templates(tmp_path):
    bare = write_gguf(tmp_path / "bare.gguf", {"general.architecture": (V.STRING, "llama")})
    with open_gguf(bare) as f:
        assert chat_templates(f) == {}
        with pytest.raises(TemplateError, match="has no chat template .*--template"):
            select_template(f)
    odd = write_gguf(tmp_path / "odd.gguf", {"tokenizer.chat_template": (V.UINT32, 7)})
    with open_gguf(odd) as f, pytest.raises(TemplateError, match="not template text"):
        chat_templates(f)


def test_reference_model_template(fixtures_dir):
    with open_gguf(fixtures_dir / "reference" / "ref-qwen2-f32.gguf") as f:
        source = select_template(f)
    assert render(source, HI) == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


# ---- messages files --------------------------------------------------------------------------------
def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "messages.json"
    path.write_text(text, encoding="utf-8")
    return path


def test_load_messages_reads_a_good_file(tmp_path):
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hi", "name": "x"},
        {"role": "assistant", "content": None, "tool_calls": []},
        {"role": "user", "content": [{"type": "text", "text": "part"}]},
    ]
    assert load_messages(_write(tmp_path, json.dumps(messages))) == messages


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            '{"role": "user"}',
            'expected a JSON list of {"role", "content"} objects, found an object',
        ),
        ("[]", "the list of messages is empty"),
        ('[{"role": "user", "content": "a"}, "hi"]', "item 2 is a string, not an object"),
        ('[{"content": "a"}]', "item 1 has no 'role'"),
        ('[{"role": 3, "content": "a"}]', "item 1 has a 'role' that is a number"),
        ('[{"role": "user", "content": "a"}, {"role": "user"}]', "item 2 has no 'content'"),
        ('[{"role": "user", "content": 12}]', "item 1 has a 'content' that is a number"),
        ('[{"role": "user", "content": ["x"]}]', "item 1, content part 1 is a string"),
        ('[{"role": "user", "content": "a"},\n  {"role": }]', "not valid JSON at line 2 column"),
    ],
)
def test_malformed_messages_name_what_and_where(tmp_path, text, expected):
    path = _write(tmp_path, text)
    with pytest.raises(MessagesError) as info:
        load_messages(path)
    message = str(info.value)
    assert message.startswith(str(path) + ": ")
    assert expected in message
    assert "\n" not in message


def test_unreadable_messages_files(tmp_path):
    with pytest.raises(MessagesError, match="cannot read"):
        load_messages(tmp_path / "absent.json")
    bad = tmp_path / "latin1.json"
    bad.write_bytes(b'[{"role": "user", "content": "caf\xe9"}]')
    with pytest.raises(MessagesError, match="not UTF-8"):
        load_messages(bad)
