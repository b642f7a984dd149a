"""The pipeline split model (`costs.pipeline`) and `estimate --hosts N --link NAME`."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest
from conftest import REPO_ROOT

from walkthrough.cli import main
from walkthrough.costs.hardware import GIB, load_profiles
from walkthrough.costs.host_shares import deal, hosts_needed, shares
from walkthrough.costs.pipeline import load_links, model, pick_link
from walkthrough.costs.request_size import RequestSize, estimate_for
from walkthrough.costs.rpc_graph import for_card
from walkthrough.costs.rpc_graph import load as load_graph
from walkthrough.costs.several_hosts import several
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
    assert one.hop_seconds == 0 and one.graph_seconds == 0 and one.token_seconds == 0.01
    boundary = card.n_embd * 4
    expected = 2 * (link.latency + boundary / link.bandwidth) + link.latency + card.vocab_size * 4 / link.bandwidth
    assert three.hop_seconds == pytest.approx(expected) and three.boundary_bytes == boundary
    assert three.token_seconds == pytest.approx(0.01 + expected + sum(three.graph_bytes) / link.bandwidth)
    assert three.read_seconds == one.read_seconds  # every host reads its share in turn: the same bytes in all
    # one chunk of 64 tokens: no overlap to gain, so pipelined equals one split at a time
    assert three.prefill_pipelined == pytest.approx(three.prefill_sequential)
    long = model(card, hw, link, 3, 4096, 2048, box=(0.01, 16.0))  # 4 chunks of 512: overlap pays
    assert long.prefill_pipelined < long.prefill_sequential
    assert three.per_host_bytes == max(s.kept_bytes for s in three.shares) < one.per_host_bytes


def test_an_unknown_link_lists_the_known_ones():
    with pytest.raises(WalkthroughError, match="unknown link 'wifi'; choose one of: 1gbe"):
        pick_link("wifi")


def test_estimate_hosts_json_and_table(capsys):
    assert main(["estimate", str(TINY), "--hardware", "rtx-4090", "--hosts", "3", "--link", "10gbe", "--json"]) == 0
    record = json.loads(capsys.readouterr().out)[0]["hosts"]
    assert record["hosts"] == 3 and record["link"] == "10gbe" and record["fits"]
    assert record["token_seconds"] == pytest.approx(record["read_seconds"] + record["hop_seconds"]
                                                    + record["graph_seconds"])
    assert record["graph_bytes"][0] == 0 and record["graph_basis"] == "measured on qwen2moe"
    assert main(["estimate", str(TINY), "--hardware", "rtx-4090", "--hosts", "2", "--link", "1gbe"]) == 0
    out = capsys.readouterr().out
    assert "one box beside 2 hosts over 1 Gigabit Ethernet" in out and "appneta.com" in out.replace("\n", "")


def test_layers_are_dealt_in_order_with_the_embedding_first_and_the_head_last():
    assert deal(4, 3) == [(0, 1), (2,), (3,)] and deal(2, 3) == [(0,), (1,), ()]
    card = build_card(open_gguf(TINY))
    parts = shares(card, 3, 256, 64)
    assert [s.describe() for s in parts] == ["L0-1 +embedding", "L2", "L3 +head"]
    weights = sum(card.bytes_by_type.values())
    kv = card.kv_bytes(256)
    assert sum(s.kept_bytes for s in parts) == pytest.approx(weights + kv, rel=0.02)  # less the MTP/norm remainder
    # reads add up to one box's: the trunk's, each layer's KV at the prompt's depth, the embedding row and the head
    assert sum(s.read_bytes for s in parts) == pytest.approx(card.bytes_per_token + card.kv_bytes(64))
    assert parts[2].read_bytes > parts[1].read_bytes  # the last host reads the whole output head


def test_fewest_hosts_follow_the_fullest_host_and_a_layer_too_big_for_any_host():
    card = build_card(open_gguf(TINY))
    hw = load_profiles()["desktop-ddr5"]
    parts = shares(card, 2, 256, 64)
    roomy = max(s.kept_bytes for s in parts)
    small = replace(hw, memory_gib=roomy / GIB, reserved_gib=0.0)
    assert hosts_needed(card, float(small.usable_bytes), 256) == 2
    split = model(card, small, pick_link("10gbe"), 1, 256, 64, box=(0.01, 0.5))
    assert not split.fits and split.hosts_needed == 2
    assert hosts_needed(card, 1000.0, 256) is None  # not even one layer per host


def test_a_token_is_each_host_then_each_hop_adding_up_to_the_token_time():
    card = build_card(open_gguf(TINY))
    split = model(card, load_profiles()["rtx-4090"], pick_link("1gbe"), 3, 256, 64, box=(0.01, 0.5))
    parts = split.segments()
    assert [p.label for p in parts] == ["host 1", "hop 1-2", "graph to host 2", "host 2", "hop 2-3",
                                        "graph to host 3", "host 3", "logits home"]
    assert sum(p.seconds for p in parts) == pytest.approx(split.token_seconds)
    hosts = [p.seconds for p in parts if p.label.startswith("host")]
    assert hosts == pytest.approx([0.01 * s.read_bytes / sum(x.read_bytes for x in split.shares)
                                   for s in split.shares])


def test_every_machine_gets_a_count_sram_as_chips_and_the_rest_as_hosts():
    card = build_card(open_gguf(TINY))
    profiles = load_profiles()
    size = RequestSize(None, 64, 64)
    h = several(card, profiles["rtx-4090"], profiles.values(), pick_link("10gbe"), 2, size)
    by_id = {u.id: u for u in h.units}
    assert by_id["groq-lpu"].kind == "chips" and by_id["rtx-4090"].kind == "hosts"
    e = estimate_for(card, profiles["groq-lpu"], size)
    assert by_id["groq-lpu"].count == int(e.chips.value)
    assert by_id["groq-lpu"].tokens_per_s == pytest.approx(e.decode.tokens_per_s.value)
    assert by_id["rtx-4090"].count == 1 and h.split.hosts == 2 and h.one_box.hardware.id == "rtx-4090"


def test_the_graph_resend_is_the_measured_bytes_per_layer_and_the_head_on_the_last_worker():
    card = build_card(open_gguf(TINY))  # qwen2moe: measured in rpc_graph.json
    g = for_card(card)
    raw = {r["architecture"]: r for r in load_graph()["per_layer"]}
    assert g.per_layer == raw["qwen2moe"]["bytes"] and "measured on qwen2moe" in g.basis
    # the measurement it was fitted on: 1, 2, 3 layers without the head, 1..4 with it (rpc_graph.json's source)
    measured = [int(n.replace(",", "")) for n in re.findall(r"\d{1,3}(?:,\d{3})+", raw["qwen2moe"]["source"])]
    assert [g.sent(k, False, card.n_embd) for k in (1, 2, 3)] + [g.sent(k, True, card.n_embd)
                                                                for k in (1, 2, 3, 4)] == measured
    split = model(card, load_profiles()["rtx-4090"], pick_link("1gbe"), 3, 256, 64, box=(0.01, 0.5))
    assert split.graph_bytes == (0, g.graph(1, False), g.graph(1, True))  # layers 0-1 here, 2, 3 + head
    other = replace(card, architecture="gemma3", n_experts=0)  # not measured: the dense figure, said so
    assert "not measured" in for_card(other).basis and for_card(other).per_layer == raw["llama"]["bytes"]
