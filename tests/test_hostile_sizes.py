"""Hostile sizes (issue 20): memory follows what a file really holds, not what its length prefixes claim.

A sparse file can claim four 1 GiB metadata strings in a few hundred KB of disk; reading
them whole took 9.5 GB. A file of many tiny tensors must cost memory in proportion to them.
Each command runs in a fresh process whose peak resident memory is measured
(`hostile_support.run_cli_measured`). Timings are not asserted here:
tests/bench/bench_hostile_sizes.py prints them.
"""

from __future__ import annotations

import json

import pytest
from hostile_support import (
    LLAMA,
    raw_controls,
    run_cli_measured,
    with_many_keys,
    with_many_tensors,
    with_sparse_strings,
)

GIB = 1 << 30
PEAK_BOUND = 400 << 20  # bytes: the commands need about 60 MB here; one 1 GiB string read whole would pass this
MANY_TENSORS_PEAK = 200 << 20  # bytes: about 55 MB measured for 30,000 tensors
MANY_KEYS_PEAK = 100 << 20  # bytes: about 55 MB measured for 30,000 keys (the Rich table this replaced: 135 MB)


@pytest.fixture(scope="module")
def sparse_files(tmp_path_factory):
    """Two sparse files with four 1 GiB strings each: keys the commands need, and keys nobody reads."""
    folder = tmp_path_factory.mktemp("sparse")
    needed = with_sparse_strings(folder, "needed.gguf", {"general.name": GIB, "tokenizer.chat_template": GIB,
                                                         "hostile.a": GIB, "hostile.b": GIB})
    unread = with_sparse_strings(folder, "unread.gguf", {f"hostile.{c}": GIB for c in "abcd"})
    if needed.stat().st_blocks * 512 > 64 << 20:
        pytest.skip("the temporary folder's file system does not keep sparse files sparse")
    messages = folder / "m.json"
    messages.write_text(json.dumps([{"role": "user", "content": "hi"}]), encoding="utf-8")
    return needed, unread, messages


def _assert_clear_line(result: dict, *needles: str) -> None:
    err = result["err"]
    assert result["code"] == 2, err[-500:]
    assert "Traceback" not in err and err.count("\n") == 1 and err.startswith("walkthrough: error: "), err[-500:]
    for needle in needles:
        assert needle in err, err


def test_huge_strings_are_shown_by_size_and_head_and_refused_where_needed(sparse_files):
    needed, unread, messages = sparse_files
    results, peak = run_cli_measured([
        ["inspect", needed, "--metadata"],
        ["inspect", needed, "--json"],
        ["template", needed, "--messages", messages],
        ["tokenize", needed, "--text", "hi"],
        ["tokenize", needed, "--text", "hi", "--raw", "--json"],
        ["trace", needed, "--ids", "1,2,3", "--steps", "2", "--json"],
        ["template", unread, "--messages", messages],
        ["template", LLAMA, "--messages", messages],
    ])
    shown, as_json, template, tokenize, raw, trace, template_unread, template_plain = results
    assert peak < PEAK_BOUND, f"peak {peak / 2**20:.0f} MiB"

    assert shown["code"] == 0, shown["err"]
    assert shown["out"].count("1,073,741,824 bytes") == 4  # general.name, the template and the two others
    assert not raw_controls(shown["out"])
    summary = json.loads(as_json["out"])["metadata"]
    assert all(summary[k]["bytes"] == GIB for k in ("general.name", "tokenizer.chat_template", "hostile.a"))
    assert summary["hostile.a"]["first"].startswith("\x00" * 100)

    _assert_clear_line(template, "tokenizer.chat_template", "1,073,741,824 bytes", "needed.gguf")
    _assert_clear_line(tokenize, "tokenizer.chat_template")
    assert raw["code"] == trace["code"] == 0, raw["err"] + trace["err"]
    assert json.loads(raw["out"])["tokens"]

    # Keys nobody reads cost nothing: the template renders as from the plain file.
    assert template_unread["code"] == 0, template_unread["err"]
    assert template_unread["out"] == template_plain["out"] != ""


def _listed(path, option: str, bound: int) -> tuple[list[str], dict]:
    """`inspect PATH OPTION` and `inspect PATH --json` in one fresh process, its peak memory under `bound`:
    the first word of each listed `extra.` row, and the JSON document."""
    (listing, as_json), peak = run_cli_measured([["inspect", path, option], ["inspect", path, "--json"]])
    assert peak < bound, f"peak {peak / 2**20:.0f} MiB"
    assert listing["code"] == as_json["code"] == 0, listing["err"] + as_json["err"]
    listed = [line.split()[0] for line in listing["out"].splitlines() if line.startswith("  extra.")]
    return listed, json.loads(as_json["out"])


def test_many_tiny_tensors_are_listed_in_memory_linear_in_them(tmp_path):
    """30,000 tensors of 32 bytes: every one listed, by text and JSON, in bounded memory (the
    300,000 of issue 20, and the time per tensor, are in tests/bench/bench_hostile_sizes.py)."""
    n = 30_000
    names, document = _listed(with_many_tensors(tmp_path, "many.gguf", n), "--tensors", MANY_TENSORS_PEAK)
    assert names == [f"extra.{i}.weight" for i in range(n)]
    assert len(document["tensors"]) == n + 21  # and the reference model's own 21


def test_many_metadata_keys_are_listed_in_memory_linear_in_them(tmp_path):
    """30,000 keys: every one listed, by text and JSON, in file order, in bounded memory (300,000, and the time
    per key, are in tests/bench/bench_hostile_sizes.py)."""
    n = 30_000
    keys, document = _listed(with_many_keys(tmp_path, "keys.gguf", n), "--metadata", MANY_KEYS_PEAK)
    assert keys == [f"extra.{i}.value" for i in range(n)]
    metadata = document["metadata"]
    assert [k for k in metadata if k.startswith("extra.")] == keys
    assert metadata["extra.7.value"] == "text 7" and metadata["extra.8.value"] == 8


async def test_the_app_shows_huge_strings_by_their_head_and_names_the_template_it_cannot_read(sparse_files):
    from app_support import app_for, settle, shown_text

    needed, _, _ = sparse_files
    app = app_for(needed)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        assert "\\x00\\x00\\x00" in shown_text(app)  # the name's head, made visible
        problem = app.state.unavailable.get("template", "")
        assert "tokenizer.chat_template holds 1,073,741,824 bytes" in problem, problem
        assert app.error is None
