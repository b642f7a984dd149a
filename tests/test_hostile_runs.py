"""Hostile runs (issue 20): files that parse but poison, hostile texts, options, messages, hardware files, stores.

Each case goes through the real command line (`walkthrough.cli.main`) and asserts
what a user must see: one clear line and exit status 2 (or a normal result), no
traceback, and no raw control or invisible character from the file in the output.
Templates that slip the sandbox are in test_template_isolation.py; the app's
stages in test_hostile_app.py.
"""

from __future__ import annotations

import json
import math

import pytest
from gguf.constants import GGUFValueType as V
from hostile_support import (
    ARCH,
    BAD_FLOATS,
    BAD_WEIGHTS,
    HOSTILE_TEMPLATES,
    HOSTILE_TEXT,
    LLAMA,
    TEMPLATE_CLASSES,
    assert_one_clear_line,
    raw_controls,
    run_cli,
    run_cli_measured,
    with_metadata,
    with_weight,
)

TRACE = ["trace", "--ids", "1,2,3", "--steps", "2"]


# ---- numbers that poison the engine ----------------------------------------------------------
@pytest.mark.parametrize(("suffix", "value"), BAD_FLOATS, ids=[f"{k}={v[-1]!r}" for k, v in BAD_FLOATS])
def test_bad_float_hyperparameter_is_refused_before_the_run(tmp_path, capsys, suffix, value):
    path = with_metadata(tmp_path, "bad.gguf", {f"{ARCH}.{suffix}": value})
    code, out, err = run_cli([*TRACE[:1], path, *TRACE[1:]], capsys)
    assert_one_clear_line(code, err, f"{ARCH}.{suffix}", "bad.gguf")
    assert out == ""  # refused before the first pass


@pytest.mark.parametrize(("suffix", "value"), BAD_FLOATS[:2], ids=["nan", "negative"])
def test_bad_float_hyperparameter_still_inspects(tmp_path, capsys, suffix, value):
    path = with_metadata(tmp_path, "bad.gguf", {f"{ARCH}.{suffix}": value})
    for argv in (["inspect", path], ["inspect", path, "--json"], ["estimate", path, "--hardware", "cpu-here"]):
        code, _out, err = run_cli(argv, capsys)
        assert code == 0, err
        assert "Traceback" not in err


@pytest.mark.parametrize(("tensor", "value"), BAD_WEIGHTS, ids=[f"{t}={v}" for t, v in BAD_WEIGHTS])
def test_poisoned_norm_weight_is_refused_before_the_run(tmp_path, capsys, tensor, value):
    path = with_weight(tmp_path, "poisoned.gguf", tensor, value)
    code, out, err = run_cli([TRACE[0], path, *TRACE[1:]], capsys)
    assert_one_clear_line(code, err, tensor)
    assert out == ""


def test_a_zero_scaling_factor_means_none_as_in_llama_cpp(tmp_path, capsys):
    plain = run_cli([TRACE[0], LLAMA, *TRACE[1:], "--json"], capsys)
    zero = run_cli([TRACE[0], with_metadata(tmp_path, "z.gguf", {f"{ARCH}.rope.scaling.factor": (V.FLOAT32, 0.0)}),
                    *TRACE[1:], "--json"], capsys)
    assert zero[0] == plain[0] == 0
    ids = [[json.loads(line)["chosen"] for line in run[1].splitlines()] for run in (plain, zero)]
    assert ids[0] == ids[1]


# ---- option values -------------------------------------------------------------------------------
@pytest.mark.parametrize("option", [["--seed", "-1"], ["--min-p", "inf"], ["--min-p", "nan"], ["--top-p", "nan"],
                                    ["--temperature", "nan"], ["--seed", "x"]])
def test_bad_trace_option_is_one_usage_line(capsys, option):
    with pytest.raises(SystemExit) as exit_:
        run_cli([*TRACE, *option], capsys)
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    assert option[0] in err.splitlines()[-1]


@pytest.mark.parametrize("option", [["--seed", "-1"], ["--pace", "-1"], ["--pace", "nan"], ["--pace", "0"],
                                    ["--temperature", "inf"]])
def test_bad_app_option_is_one_usage_line_before_the_screen(capsys, option):
    with pytest.raises(SystemExit) as exit_:
        run_cli(["--autoplay", *option], capsys)
    assert exit_.value.code == 2
    assert option[0] in capsys.readouterr().err.splitlines()[-1]


def test_min_p_above_one_keeps_the_best_token_as_llama_cpp(capsys):
    greedy = run_cli([*TRACE, "--json"], capsys)
    strict = run_cli([*TRACE, "--json", "--temperature", "1", "--min-p", "2"], capsys)
    assert greedy[0] == strict[0] == 0, strict[2]
    chosen = [[json.loads(line)["chosen"] for line in run[1].splitlines()] for run in (greedy, strict)]
    assert chosen[0] == chosen[1]  # only the best token survives min-p, so sampling is greedy


# ---- text from the file reaches no terminal raw ---------------------------------------------
def test_hostile_text_fields_are_shown_literally(tmp_path, capsys):
    path = with_metadata(tmp_path, "text.gguf", {"general.name": (V.STRING, HOSTILE_TEXT),
                                                 "general.author": (V.STRING, HOSTILE_TEXT)})
    for argv in (["inspect", path], ["inspect", path, "--metadata"], ["inspect", path, "--json"],
                 ["estimate", path, "--hardware", "cpu-here"], ["estimate", path, "--json"],
                 [TRACE[0], path, *TRACE[1:]], [TRACE[0], path, *TRACE[1:], "--json"],
                 ["tokenize", path, "--text", HOSTILE_TEXT], ["tokenize", path, "--text", HOSTILE_TEXT, "--json"]):
        code, out, err = run_cli(argv, capsys)
        assert code == 0, err
        assert not raw_controls(out + err), (argv, raw_controls(out + err))


def test_hostile_architecture_name_is_shown_literally(tmp_path, capsys):
    path = with_metadata(tmp_path, "arch.gguf", {"general.architecture": (V.STRING, "x\x1b]0;t\x07"),
                                                 "general.name": (V.STRING, HOSTILE_TEXT)})
    for argv in (["inspect", path], ["estimate", path, "--hardware", "cpu-here"], [TRACE[0], path, *TRACE[1:]]):
        _code, out, err = run_cli(argv, capsys)
        assert "Traceback" not in err
        assert not raw_controls(out + err), (argv, raw_controls(out + err))


def test_hostile_file_name_is_shown_literally(tmp_path, capsys):
    folder = tmp_path / "models"
    folder.mkdir()
    good = (folder / "a\x1b]0;t\x07\u202e.gguf")
    good.write_bytes(LLAMA.read_bytes())
    (folder / "b\x1b[31m.gguf").write_bytes(b"GGUF\x03\x00\x00\x00broken")
    for argv in (["inspect", folder], ["inspect", good], ["inspect", folder / "b\x1b[31m.gguf"],
                 ["estimate", good, "--hardware", "cpu-here"]):
        _code, out, err = run_cli(argv, capsys)
        assert "Traceback" not in err
        assert not raw_controls(out + err), (argv, raw_controls(out + err))


def test_template_output_is_exact_in_a_pipe(tmp_path, capsys):
    messages = tmp_path / "m.json"
    messages.write_text(json.dumps([{"role": "user", "content": HOSTILE_TEXT}]), encoding="utf-8")
    template = tmp_path / "t.jinja"
    template.write_text("{{ messages[0].content }}", encoding="utf-8")
    code, out, err = run_cli(["template", "--template", template, "--messages", messages], capsys)
    assert code == 0, err
    assert out == HOSTILE_TEXT  # capsys is not a terminal: the bytes as rendered


def test_template_output_is_visible_on_a_terminal(tmp_path, capsys, monkeypatch):
    import sys

    messages = tmp_path / "m.json"
    messages.write_text(json.dumps([{"role": "user", "content": HOSTILE_TEXT + "\nline two"}]), encoding="utf-8")
    template = tmp_path / "t.jinja"
    template.write_text("{{ messages[0].content }}", encoding="utf-8")
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True, raising=False)
    code, out, err = run_cli(["template", "--template", template, "--messages", messages], capsys)
    assert code == 0, err
    assert not raw_controls(out)
    assert "\\x1b]0;pwned\\x07" in out and out.endswith("\nline two")


# ---- messages the checker accepts -------------------------------------------------------------------
@pytest.mark.parametrize("content", [[{"type": "text", "text": "hi"}], None, "\ud800", "a\x1b[31m\u202e"],
                         ids=["parts", "null", "lone-surrogate", "escapes"])
def test_unusual_message_content_renders_or_is_one_line(tmp_path, capsys, content):
    messages = tmp_path / "m.json"
    messages.write_text(json.dumps([{"role": "user", "content": content}]), encoding="utf-8")
    for argv in (["template", LLAMA, "--messages", messages], ["tokenize", LLAMA, "--messages", messages, "--json"],
                 ["trace", LLAMA, "--messages", messages, "--steps", "1"]):
        code, out, err = run_cli(argv, capsys)
        assert code in (0, 2), err
        assert "Traceback" not in err
        if argv[0] != "template":
            assert not raw_controls(out + err), (argv, raw_controls(out + err))


def test_deeply_nested_json_is_one_line(tmp_path, capsys):
    deep = "[" * 100_000 + "]" * 100_000
    batch = tmp_path / "deep.jsonl"
    batch.write_text(deep + "\n", encoding="utf-8")
    messages = tmp_path / "deep.json"
    messages.write_text(deep, encoding="utf-8")
    for argv in (["tokenize", LLAMA, "--batch", batch], ["template", LLAMA, "--messages", messages]):
        code, _out, err = run_cli(argv, capsys)
        assert_one_clear_line(code, err, "nested too deeply")


# ---- user hardware files ------------------------------------------------------------------------------
def _profile(**fields) -> dict:
    base = {"name": "mine", "memory_gib": 16, "bandwidth_gbs": 100, "compute_tflops": 1, "efficiency": 0.8,
            "source": "test"}
    return {**base, **fields}


@pytest.mark.parametrize("fields", [{"memory_gib": math.inf}, {"memory_gib": 1e308}, {"memory_gib": 10**400},
                                    {"bandwidth_gbs": 1e-320}, {"compute_tflops": 1e-320}, {"efficiency": 1e-320},
                                    {"memory_gib": math.nan}, {"bandwidth_gbs": "fast"}],
                         ids=["inf", "1e308", "10**400", "bw-denormal", "tflops-denormal", "eff-denormal", "nan",
                              "text"])
def test_hostile_hardware_file_is_one_line(tmp_path, capsys, fields):
    path = tmp_path / "hw.json"
    text = json.dumps([_profile(**fields)]).replace("NaN", "NaN").replace("Infinity", "Infinity")
    path.write_text(text, encoding="utf-8")
    code, _out, err = run_cli(["estimate", LLAMA, "--hardware-file", path, "--hardware", "mine"], capsys)
    assert_one_clear_line(code, err, "hw.json")


def test_deeply_nested_hardware_file_is_one_line(tmp_path, capsys):
    path = tmp_path / "hw.json"
    path.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    code, _out, err = run_cli(["estimate", LLAMA, "--hardware-file", path], capsys)
    assert_one_clear_line(code, err, "hw.json")


# ---- split names ---------------------------------------------------------------------------------------
def test_a_split_name_with_many_missing_shards_is_one_short_line(tmp_path, capsys):
    path = tmp_path / "x-00001-of-99999.gguf"
    path.write_bytes(LLAMA.read_bytes())
    code, _out, err = run_cli(["inspect", path], capsys)
    assert_one_clear_line(code, err, "99,998")
    assert len(err) < 1000


# ---- model stores ------------------------------------------------------------------------------------
def test_deeply_nested_ollama_manifest_is_one_line(tmp_path, capsys, monkeypatch):
    store = tmp_path / "ollama"
    monkeypatch.setenv("OLLAMA_MODELS", str(store))
    manifest = store / "manifests" / "registry.ollama.ai" / "library" / "deep" / "latest"
    manifest.parent.mkdir(parents=True)
    manifest.write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    code, _out, err = run_cli(["inspect", "ollama:deep"], capsys)
    assert_one_clear_line(code, err, "nested too deeply")


def test_hostile_names_in_an_ollama_listing_are_shown_literally(tmp_path, capsys, monkeypatch):
    from test_locate import install_ollama

    store = tmp_path / "ollama"
    monkeypatch.setenv("OLLAMA_MODELS", str(store))
    install_ollama(store, "registry.ollama.ai/library/evil\x1b]0;t\x07\u202e/latest", LLAMA.read_bytes())
    code, _out, err = run_cli(["inspect", "ollama:absent"], capsys)
    assert_one_clear_line(code, err, "\\x1b]0;t\\x07\\u202e")


def _hf_repo(tmp_path, monkeypatch, ref: bytes):
    from test_locate import cache_repo

    cache = tmp_path / "hub"
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    snapshot = cache_repo(cache, "org/Repo", {"m.gguf": LLAMA.read_bytes()})
    (snapshot.parent.parent / "refs" / "main").write_bytes(ref)
    return snapshot


@pytest.mark.parametrize("ref", [b"\xff\xfe\x80abc", b"../../../outside", b"/etc", b".."],
                         ids=["not-utf8", "traversal", "absolute", "dotdot"])
def test_a_hostile_refs_main_never_leaves_the_cache(tmp_path, capsys, monkeypatch, ref):
    snapshot = _hf_repo(tmp_path, monkeypatch, ref)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "m.gguf").write_bytes(b"GGUF-not-really")  # what a traversal would open
    code, out, err = run_cli(["inspect", "hf:org/Repo/m.gguf", "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["file"].startswith(str(snapshot))


# ---- templates that slip the sandbox, through every command -----------------------------------------------
TEMPLATE_PEAK = 1536 << 20  # bytes: the render helper is capped at 1 GiB of address space; the spikes were 4-8 GB


def test_hostile_templates_end_every_command_with_one_line(tmp_path):
    """A template of each hostile class, stored in a file, through `template`, `tokenize` and `trace`: exit 2,
    one line naming the template, no traceback, in one process whose peak memory (render helpers included)
    stays bounded."""
    messages = tmp_path / "m.json"
    messages.write_text(json.dumps([{"role": "user", "content": "hi"}]), encoding="utf-8")
    argvs = []
    for i, name in enumerate(TEMPLATE_CLASSES):
        source = HOSTILE_TEMPLATES[name]
        path = with_metadata(tmp_path, f"t{i}.gguf", {"tokenizer.chat_template": (V.STRING, source)})
        argvs += [["template", path, "--messages", messages], ["tokenize", path, "--messages", messages],
                  ["trace", path, "--messages", messages, "--steps", "1"]]
    results, peak = run_cli_measured(argvs, timeout=600)  # a hang fails the test instead of stalling the suite
    assert peak < TEMPLATE_PEAK, f"peak {peak / 2**20:.0f} MiB"
    for name, (template, tokenize, trace) in zip(TEMPLATE_CLASSES, zip(*[iter(results)] * 3)):
        for command, result in (("template", template), ("tokenize", tokenize), ("trace", trace)):
            err = result["err"]
            assert result["code"] == 2 and result["out"] == "", (name, command, err[-300:])
            assert "Traceback" not in err and err.count("\n") == 1, (name, command, err[-300:])
            assert err.startswith("walkthrough: error: ") and "template" in err, (name, command, err)
            assert not raw_controls(err), (name, command)
