"""The pipeline split model (`costs.pipeline`) and `estimate --hosts N --link NAME`."""

from __future__ import annotations

import json

import pytest
from conftest import REPO_ROOT

from walkthrough.cli import main
from walkthrough.costs.hardware import load_profiles
from walkthrough.costs.pipeline import load_links, model, pick_link
from walkthrough.errors import WalkthroughError
from walkthrough.inspect.card import build_card
from walkthrough.inspect.gguf import open_gguf

TINY = REPO_ROOT / "walkthrough" / "assets" / "tiny-clinical-moe.gguf"


def test_every_link_figure_has_a_source():
    links = load_links()
    assert {"1gbe", "10gbe", "25gbe", "thunderbolt", "nvlink", "pcie4"} <= set(links)
    for link in links.values():
        assert link.bandwidth > 0 and link.latency > 0 and link.basis in ("measured", "assumed")
        assert set(link.sources) == {"bandwidth_gbs", "latency_us"} and "http" in link.sources["bandwidth_gbs"]


def test_hops_add_latency_and_bytes_over_the_link_per_boundary():
    card = build_card(open_gguf(TINY))
    hw = load_profiles()["desktop-ddr5"]
    link = pick_link("1gbe")
    one = model(card, hw, link, 1, 256, 64, box=(0.01, 0.5))
    three = model(card, hw, link, 3, 256, 64, box=(0.01, 0.5))
    assert one.hop_seconds == 0 and one.token_seconds == 0.01
    boundary = card.n_embd * 4
    expected = 2 * (link.latency + boundary / link.bandwidth) + link.latency + card.vocab_size * 4 / link.bandwidth
    assert three.hop_seconds == pytest.approx(expected) and three.boundary_bytes == boundary
    assert three.read_seconds == one.read_seconds  # every host reads its share in turn: the same bytes in all
    # one chunk of 64 tokens: no overlap to gain, so pipelined equals one split at a time
    assert three.prefill_pipelined == pytest.approx(three.prefill_sequential)
    long = model(card, hw, link, 3, 4096, 2048, box=(0.01, 16.0))  # 4 chunks of 512: overlap pays
    assert long.prefill_pipelined < long.prefill_sequential
    assert three.per_host_bytes == pytest.approx(one.per_host_bytes / 3)


def test_an_unknown_link_lists_the_known_ones():
    with pytest.raises(WalkthroughError, match="unknown link 'wifi'; choose one of: 1gbe"):
        pick_link("wifi")


def test_estimate_hosts_json_and_table(capsys):
    assert main(["estimate", str(TINY), "--hardware", "rtx-4090", "--hosts", "3", "--link", "10gbe", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)[0]["hosts"]
    assert record["hosts"] == 3 and record["link"] == "10gbe" and record["fits"]
    assert record["token_seconds"] == pytest.approx(record["read_seconds"] + record["hop_seconds"])
    assert main(["estimate", str(TINY), "--hardware", "rtx-4090", "--hosts", "2", "--link", "1gbe"]) == 0
    out = capsys.readouterr().out
    assert "one box beside 2 hosts over 1 Gigabit Ethernet" in out and "appneta.com" in out.replace("\n", "")
