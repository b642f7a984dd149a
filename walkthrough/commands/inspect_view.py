"""Rich tables for `walkthrough inspect`: summary, quant mix, groups, layers, and optionally tensors and metadata.

Presentation only: every figure comes from the model card or the reader. Text
from the file (names, keys, values, the chat template) goes through
`walkthrough.textsafe.safe_text`, and the console interprets no markup, emoji
codes or highlighting, so a `general.name` of "\\x1b]0;x\\x07[bold]" prints as
those visible characters.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, TextIO

from gguf.constants import GGUFValueType
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from walkthrough.commands.listings import print_metadata_table, print_tensor_table
from walkthrough.inspect.card import ModelCard, type_bytes_per_value
from walkthrough.inspect.gguf import GGUFFile
from walkthrough.render.file_view import params_table, quant_mix_table
from walkthrough.render.format import human_bytes, human_count, show
from walkthrough.render.name_view import name_lines
from walkthrough.textsafe import safe_text
from walkthrough.words import count

if TYPE_CHECKING:
    from walkthrough.inspect.projector import MediaTokens, Projector

MAX_VALUE_CHARS = 120  # metadata values are cut to this in the table (chat templates are printed whole)
MAX_KEY_WIDTH = 36  # metadata keys and tensor names up to this long stay on one line


def render(f: GGUFFile, card: ModelCard, *, tensors: bool, metadata: bool, out: TextIO,
           media: tuple[Projector, MediaTokens] | None = None) -> None:
    """Print the card of an opened file, plus the tensor table and the metadata when asked, and what --mmproj's
    projector makes of --images."""
    console = Console(file=out, markup=False, emoji=False, highlight=False)
    console.print(summary_table(f, card))
    console.print(_heading("The name decoded (what it claims, what the file holds)"))
    console.print(name_lines(f.path.name, card.name, card))
    projector = projector_lines(f)
    if projector is not None:
        console.print(_heading("Image tokens (multimodal projector)"))
        console.print(projector)
    if media is not None:
        from walkthrough.render.media_view import media_lines

        console.print(_heading("Images and video (--mmproj)"))
        console.print(media_lines(*media))
    console.print(_heading("Quant mix (bytes per stored type)"))
    console.print(quant_mix_table(card))
    console.print(_heading("Parameters and bytes by tensor group"))
    console.print(params_table(card))
    console.print(layers_table(card))
    if tensors:
        print_tensor_table(f, console, MAX_KEY_WIDTH)
    if metadata:
        templates = chat_templates(f)
        print_metadata_table(f, console, MAX_KEY_WIDTH, MAX_VALUE_CHARS, templates)
        for key, text in templates:
            console.print(_heading(Text.assemble(safe_text(key), f" ({len(text):,} characters)")))
            console.print(safe_text(text, keep_newlines=True), soft_wrap=True)


def _heading(title: str | Text) -> Text:
    """A bold heading after a blank line (a Text part keeps its own escaping)."""
    return Text.assemble("\n", title, style="bold")


def _layer_mix(card: ModelCard) -> str:
    """ "3 x linear attention + MoE, 1 x full attention + MoE" over the trunk layers."""
    kinds = Counter(
        f"{x.attention} attention + " + ("MoE" if x.ffn == "moe" else f"{x.ffn} FFN") for x in card.layers if not x.mtp
    )
    return ", ".join(f"{n} x {kind}" for kind, n in kinds.items())


def _kv_line(card: ModelCard) -> str:
    per_type = [f"{human_bytes(b)} at {t.upper()}" for t, b in card.kv_bytes_per_token.items()]
    line = f"{', '.join(per_type)} per token ({len(card.kv_layers)} of {card.n_layers or 0} layers keep K and V)"
    if card.context_length and card.kv_bytes_per_token["f16"] is not None:
        line += f"; {human_bytes(card.kv_bytes(card.context_length))} at F16 for {card.context_length:,} tokens"
    return line


def summary_table(f: GGUFFile, card: ModelCard) -> Table:
    """Architecture, parameters total/active, size, bits per weight, KV per token, context, shapes."""
    table = Table(title="Model card", title_justify="left", show_header=False, padding=(0, 1))
    table.add_column(style="bold", no_wrap=True)
    table.add_column()
    shards = f" in {len(f.paths)} shards" if len(f.paths) > 1 else ""
    table.add_row("file", safe_text(str(f.path)))
    table.add_row("size", f"{human_bytes(f.file_size)} ({f.file_size:,} bytes){shards}, GGUF v{f.version}, "
                          f"{count(len(f.fields), 'metadata key')}, {count(card.n_tensors, 'tensor')}")
    if f.missing is not None:
        table.add_row("missing", safe_text(f.missing.summary()))
    table.add_row("architecture", safe_text(card.architecture))
    table.add_row("name", safe_text(card.name) if card.name is not None else "?")
    share = f" ({card.active_share:.1%})" if card.active_share is not None else ""
    table.add_row("parameters", f"{human_count(card.n_params)} total ({card.n_params:,}), "
                                f"{human_count(card.n_params_active)} active per token{share}")
    table.add_row("bits per weight", f"{card.bits_per_weight:.2f}" if card.n_params else "- (no tensors)")
    table.add_row("read per token", f"{human_bytes(card.bytes_per_token)} of weights in their stored types")
    table.add_row("KV cache", _kv_line(card))
    if card.linear_layers:
        per_layer = {x.state_bytes for x in card.layers if x.attention == "linear" and not x.mtp}
        each = human_bytes(per_layer.pop()) if len(per_layer) == 1 else "varies"
        table.add_row("fixed state", f"{human_bytes(card.state_bytes)} ({len(card.linear_layers)} linear-attention "
                                     f"layers x {each}, F32), whatever the context length")
    table.add_row("context", f"{show(card.context_length)} tokens")
    mtp = f" + {card.n_mtp_layers} multi-token-prediction" if card.n_mtp_layers else ""
    table.add_row("layers", f"{show(card.n_layers)}{mtp}: {_layer_mix(card)}")
    table.add_row("width, heads", f"{show(card.n_embd)} wide; {show(card.n_head)} query heads, "
                                  f"{show(card.n_head_kv)} KV heads; head size {show(card.head_dim_k)}")
    if card.is_moe:
        table.add_row("experts", f"{card.n_experts} routed, {show(card.n_experts_used)} used per token, "
                                 f"{card.n_shared_experts} shared; expert FFN {show(card.expert_ff)}")
    else:
        table.add_row("FFN width", show(card.n_ff))
    table.add_row("RoPE", f"base {show(card.rope_base)}, {show(card.rope_dims)} dims")
    table.add_row("vocabulary", f"{show(card.vocab_size)} tokens" + (", tied to the output head"
                                                                     if card.tied_embeddings else ""))
    if card.unknown:
        table.add_row("not in the file", safe_text(", ".join(card.unknown)))
    return table


def layers_table(card: ModelCard) -> Table:
    """One row per layer: what it does, what it keeps per token (F16 KV) or in fixed state, and its size."""
    table = Table(title="\nLayers", title_justify="left", box=box.SIMPLE_HEAD, padding=(0, 1))
    for name in ("layer", "attention", "FFN", "KV heads", "KV/token", "state", "bytes"):
        table.add_column(name, justify="left" if name in ("attention", "FFN") else "right", no_wrap=True)
    f16 = type_bytes_per_value("f16")
    for x in card.layers:
        kv = "-" if not x.keeps_kv else human_bytes(None if x.kv_values_per_token is None
                                                    else x.kv_values_per_token * f16)
        attention = x.attention + (f" ({x.sliding_window})" if x.sliding_window else "")
        table.add_row(
            f"{x.index}" + (" MTP" if x.mtp else ""),
            attention,
            x.ffn + ("+shared" if x.shared_expert else ""),
            show(x.n_head_kv) if x.keeps_kv else "-",
            kv,
            human_bytes(x.state_bytes) if x.attention == "linear" else "-",
            human_bytes(x.nbytes),
        )
    return table


def chat_templates(f: GGUFFile) -> list[tuple[str, str]]:
    """(key, template) for each string key holding a chat template small enough to read (see `GGUFFile.too_big`);
    a bigger one is left to the metadata table, which shows its size and first bytes."""
    return [(k, f.get(k)) for k, field in f.fields.items()
            if "chat_template" in k and field.type == GGUFValueType.STRING and f.too_big(k) is None]


def projector_lines(f: GGUFFile) -> Text | None:
    """For an mmproj file: its projector and how many prompt tokens an image becomes."""
    from walkthrough.inspect.projector import (
        DEFAULT_IMAGE,
        ProjectorError,
        image_tokens,
        read_projector,
    )

    try:
        projector = read_projector(f)
    except ProjectorError as exc:  # the card still prints; the projector's keys are what is wrong
        return safe_text(str(exc))
    if projector is None:
        return None
    lines = Text()
    lines.append_text(safe_text(f"projector {projector.projector_type}, images {projector.image_size} px, "
                                f"patches {projector.patch_size} px, merge {projector.merge}"))
    lines.append("\n")
    try:
        shot = image_tokens(projector, *DEFAULT_IMAGE)
    except ProjectorError as exc:
        return lines + safe_text(str(exc))
    lines.append(f"a {shot.width}x{shot.height} image: {shot.tokens:,} tokens ({shot.formula}"
                 + (f", + {shot.markers} begin/end markers" if shot.markers else "") + ")")
    return lines
