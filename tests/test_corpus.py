"""The corpus of measured runs: its coverage, and a malformed file named row by row."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from walkthrough.costs import corpus
from walkthrough.costs.corpus import COLUMNS, CorpusError


def test_bundled_corpus_covers_what_the_fit_needs() -> None:
    c = corpus.load()
    assert len(c.runs) >= 120
    assert len({r.machine.id for r in c.runs}) >= 25
    assert {r.family for r in c.runs} == set(corpus.FAMILIES)
    assert any(r.model.expert_calls for r in c.runs) and any(not r.model.expert_calls for r in c.runs)
    quants = {r.quant for r in c.runs}
    assert {"Q4_K_M", "Q8_0", "F16"} <= quants
    assert any(r.depth >= 16384 for r in c.runs) and any(r.depth == 0 and r.n <= 512 for r in c.runs)
    for r in c.runs:
        assert r.source and r.date
        # a measured decode never reads faster than the spec sheet allows
        if r.test == "tg":
            assert r.tokens_per_s * r.bytes_per_token <= r.machine.bandwidth, r


def test_every_machine_figure_has_a_source() -> None:
    for m in corpus.load().machines.values():
        assert m.sources["bandwidth_gbs"] and m.sources["memory_gib"]
        if m.compute_tflops is not None:
            assert m.sources["compute_tflops"]


def test_bytes_per_token_left_blank_is_computed_from_the_shape() -> None:
    run = next(r for r in corpus.load().runs if r.machine.id == "rtx-4090" and r.model.id == "llama3-8b"
               and r.quant == "Q4_K_M")
    # 4.58 GiB over 8.03e9 parameters, 8.03e9 - 128256 x 4096 of them read per token
    expected = round(4.58 * (1 << 30)) / 8.03e9 * (8.03e9 - 128256 * 4096)
    assert run.bytes_per_token == pytest.approx(expected)


def _copy(tmp_path: Path, edit_row=None, edit_specs=None) -> tuple[Path, Path]:
    runs, specs = tmp_path / "runs.csv", tmp_path / "specs.json"
    src = corpus._data_path("measured_runs.csv").read_text(encoding="utf-8").splitlines(keepends=True)
    rows = list(csv.DictReader(src))
    if edit_row:
        edit_row(rows[0])
    with runs.open("w", encoding="utf-8", newline="") as f:
        w = csv.DictWriter(f, COLUMNS)
        w.writeheader()
        w.writerows(rows)
    data = json.loads(corpus._data_path("corpus.json").read_text(encoding="utf-8"))
    if edit_specs:
        edit_specs(data)
    specs.write_text(json.dumps(data), encoding="utf-8")
    return runs, specs


@pytest.mark.parametrize("field, value, says", [
    ("backend", "Metal", "'backend' is Metal but machine"),
    ("machine", "no-such-box", "names no machine"),
    ("source", "a forum somewhere", "'source' must be a URL"),
    ("date", "last year", "'date' must be"),
    ("tokens_per_s", "-3", "must be positive"),
    ("test", "bench", "'test' must be pp or tg"),
])
def test_a_malformed_row_is_named(tmp_path: Path, field: str, value: str, says: str) -> None:
    runs, specs = _copy(tmp_path, edit_row=lambda row: row.__setitem__(field, value))
    with pytest.raises(CorpusError, match="row 2") as err:
        corpus.load(runs, specs)
    assert says in str(err.value)


def test_a_machine_figure_without_source_is_refused(tmp_path: Path) -> None:
    runs, specs = _copy(tmp_path, edit_specs=lambda d: d["machines"][0]["sources"].pop("bandwidth_gbs"))
    with pytest.raises(CorpusError, match="lacks bandwidth_gbs"):
        corpus.load(runs, specs)
