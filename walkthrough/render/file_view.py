"""Rich renderables for the File stage: the GGUF layout, the architecture, parameters and the quant mix.

Pure presentation of a `GGUFFile` and its `ModelCard`: every figure comes from
the card or the reader; this module only lays them out.
"""

from __future__ import annotations

from collections import Counter

from rich.console import Group
from rich.table import Table
from rich.text import Text

from walkthrough.render.format import bar, human_bytes, human_count, show
from walkthrough.render.name_view import name_lines
from walkthrough.textsafe import safe_text
from walkthrough.words import count

LAYOUT_LABELS = {
    "header": "fixed header",
    "metadata": "metadata",
    "tensor_table": "tensor table",
    "padding": "alignment padding",
    "data": "tensor data",
}


def _section(title: str) -> Text:
    return Text(f"\n{title}", style="bold underline")


def layout_table(f) -> Table:
    """The file's regions (first shard) with their sizes and share of the file."""
    layout = f.layout()
    total = sum(max(v, 0) for v in layout.values()) or 1
    table = Table.grid(padding=(0, 1))
    table.add_column()
    table.add_column(justify="right")
    table.add_column()
    for region, size in layout.items():
        table.add_row(LAYOUT_LABELS.get(region, region), human_bytes(size), bar(max(size, 0) / total, 20))
    return table


def _layer_kinds(card) -> str:
    """ "3 x full attention + MoE, 1 x linear attention + MoE" from the card's layers."""
    kinds = Counter(
        f"{layer.attention} attention + {layer.ffn} FFN" if layer.ffn != "moe" else f"{layer.attention} attention + MoE"
        for layer in card.layers
        if not layer.mtp
    )
    return ", ".join(f"{n} x {kind}" for kind, n in kinds.items()) or "?"


def architecture_table(card) -> Table:
    """The hyperparameters in plain words."""
    table = Table.grid(padding=(0, 1))
    table.add_column(style="bold")
    table.add_column()
    table.add_row("architecture", safe_text(card.architecture))
    table.add_row("name", safe_text(card.name) if card.name else Text("?"))
    table.add_row("layers", f"{show(card.n_layers)}: {_layer_kinds(card)}")
    table.add_row("embedding width", show(card.n_embd))
    table.add_row("attention heads", f"{show(card.n_head)} query, {show(card.n_head_kv)} key/value (GQA)")
    table.add_row("head size", f"{show(card.head_dim_k)} (keys), {show(card.head_dim_v)} (values)")
    table.add_row("context length", show(card.context_length))
    table.add_row("RoPE", f"base {show(card.rope_base)}, {show(card.rope_dims)} dims")
    table.add_row("vocabulary", show(card.vocab_size))
    if card.is_moe:
        shared = f", {card.n_shared_experts} shared" if card.n_shared_experts else ""
        table.add_row("experts", f"{card.n_experts} routed, {card.n_experts_used} used per token{shared}")
        table.add_row("expert FFN width", show(card.expert_ff))
    else:
        table.add_row("FFN width", show(card.n_ff))
    kv = ", ".join(f"{t} {human_bytes(b)}" for t, b in card.kv_bytes_per_token.items())
    table.add_row("KV per token", kv or "?")
    if card.state_bytes:
        table.add_row("fixed state", human_bytes(card.state_bytes))
    if card.unknown:
        table.add_row("not in file", safe_text(", ".join(card.unknown)))
    return table


def params_table(card) -> Table:
    """Parameters and bytes per tensor group, with bits per weight; a tied output head is its own row (it
    stores nothing and reads the token embedding), so the read column adds up to its total."""
    table = Table(box=None, padding=(0, 1), show_edge=False)
    table.add_column("group")
    table.add_column("params", justify="right")
    table.add_column("bytes", justify="right")
    table.add_column("bits/w", justify="right")
    table.add_column("read/token", justify="right")
    bpw = card.bits_per_weight_by_group()
    tied = None
    for row in card.group_rows():
        if row.reads is not None:
            tied = row
            table.add_row(f"{row.group} (tied)", "-", "-", "", human_bytes(row.read_per_token))
            continue
        table.add_row(
            row.group,
            human_count(row.params),
            human_bytes(row.nbytes),
            f"{bpw[row.group]:.2f}" if row.group in bpw else "",
            human_bytes(row.read_per_token),
        )
    table.add_row(
        Text("total", style="bold"),
        human_count(card.n_params),
        human_bytes(sum(card.bytes_by_group.values())),
        f"{card.bits_per_weight:.2f}",
        human_bytes(card.bytes_per_token),
    )
    if tied is not None:
        table.caption = f"(tied): the output head reads {tied.reads}, whose bytes embedding holds"
        table.caption_justify = "left"
    return table


def quant_mix_table(card) -> Table:
    """Bytes and parameters per stored type (the quant mix)."""
    table = Table.grid(padding=(0, 1))
    table.add_column()
    table.add_column(justify="right")
    table.add_column(justify="right")
    table.add_column()
    total = sum(card.bytes_by_type.values()) or 1
    for type_name, nbytes in sorted(card.bytes_by_type.items(), key=lambda kv: -kv[1]):
        params = card.params_by_type.get(type_name, 0)
        table.add_row(type_name, human_bytes(nbytes), f"{human_count(params)} params", bar(nbytes / total, 16))
    return table


def overview(f, card, engine_note: Text, media: Text | None = None) -> Group:
    """The File stage's overview: file, layout, architecture, parameters, quant mix, engine support, and the
    images or video the projector (--mmproj) turns into prompt tokens, when there is one."""
    head = Text()
    head.append_text(safe_text(f.path.name, "bold"))
    shards = f" in {len(f.paths)} shards" if len(f.paths) > 1 else ""
    head.append(
        f"  {human_bytes(f.file_size)}{shards}, GGUF v{f.version}, "
        f"{count(len(f.fields), 'metadata key')}, {count(len(f.tensors), 'tensor')}, alignment {f.alignment}"
    )
    if f.missing is not None:
        head.append("\n")
        head.append_text(safe_text(f.missing.warning(), "bold yellow"))
    share = f" ({card.active_share:.0%})" if card.active_share is not None else ""
    params = Text()
    params.append(f"{human_count(card.n_params)} parameters", style="bold")
    params.append(f", {human_count(card.n_params_active)} active per token{share}")
    params.append(f", {card.bits_per_weight:.2f} bits per weight")
    params.append(f", {human_bytes(card.bytes_per_token)} read per token")
    return Group(
        head,
        params,
        engine_note,
        _section("Name decoded"),
        name_lines(f.path.name, card.name, card),
        _section("Layout on disk"),
        layout_table(f),
        _section("Architecture"),
        architecture_table(card),
        _section("Parameters by group"),
        params_table(card),
        _section("Quant mix"),
        quant_mix_table(card),
        *((_section("Images and video (--mmproj)"), media) if media is not None else ()),
    )
