"""`walkthrough bench`, `estimate --measure`, and `--engine llama.cpp` without the extra installed."""

from __future__ import annotations

import json
import sys

import pytest
from llama_support import needs_llama

from walkthrough.cli import main
from walkthrough.engine.llama import model as llama_model


@pytest.mark.parametrize("engine", ["numpy", pytest.param("llama.cpp", marks=needs_llama)])
def test_bench_times_one_request(engine: str, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))  # only the bundled profiles
    assert main(["bench", "--engine", engine, "--prompt-tokens", "12", "--output-tokens", "4", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)
    m = record["measured"]
    assert record["engine"] == m["engine"] == engine and record["hardware"] == "cpu-here"
    assert m["prompt_tokens"] == 12 and m["decode_passes"] == 3  # the prefill picks the first of 4 tokens
    assert m["decode_tokens_per_s"] == pytest.approx(m["decode_passes"] / m["decode_seconds"])
    assert m["bandwidth_bytes_per_s"] == pytest.approx(m["decode_bytes"] / m["decode_seconds"])
    assert [row["label"] for row in record["rows"]] == ["prefill", "first token", "decode", "bandwidth"]


def test_estimate_measure_adds_the_run_beside_every_profile(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert main(["estimate", "--hardware", "cpu-here", "--prompt-tokens", "8", "--output-tokens", "3",
                 "--measure", "--json"]) == 0
    (record,) = json.loads(capsys.readouterr().out)
    assert record["measured"]["engine"] == "numpy" and record["measured"]["decode_passes"] == 2
    decode = next(r for r in record["measured"]["rows"] if r["label"] == "decode")
    assert decode["ceiling"].endswith("tokens/s") and decode["measured"].endswith("tokens/s")


def test_llama_engine_without_the_extra_is_one_line(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "llama_cpp", None)  # import llama_cpp raises ImportError
    monkeypatch.setitem(sys.modules, "llama_cpp.llama_cpp", None)
    monkeypatch.setattr(llama_model, "_state", {})
    for argv in (["trace", "--engine", "llama.cpp", "--ids", "1,2"], ["bench", "--engine", "llama.cpp"],
                 ["--engine", "llama.cpp"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "pip install 'walkthrough[llama]'" in err, argv
    assert not llama_model.llama_available()
