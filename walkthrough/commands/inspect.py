"""`walkthrough inspect [MODEL] [--json] [--tensors] [--metadata] [--block T[:I]]`: a GGUF's model card, from its header.

MODEL is a path, a folder, `ollama:NAME[:TAG]` or `hf:ORG/REPO[/FILE]` (resolved by
`walkthrough.inspect.locate`); without it, the bundled tiny model. Nothing but
the header is read, so a 20 GB file inspects as fast as a small one.
`--block TENSOR[:INDEX]` shows one stored block instead (`inspect_block`);
`--held-read [OTHER ...]` bytes held against bytes read per token of this file
and the others, as stored and at other ggml types (`costs.held_read`).

Human output is Rich tables (`inspect_view`); `--json` prints one JSON object
whose fields are documented in docs/inspect.md. Every number comes from the model
card (`walkthrough.inspect.card`); text from the file is shown literally.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TextIO

from walkthrough.commands.common import add_media_arguments, add_model_argument, open_model
from walkthrough.errors import WalkthroughError

if TYPE_CHECKING:
    from walkthrough.inspect.projector import MediaTokens, Projector


def add_parser(subparsers) -> None:
    """Register `inspect` and its options."""
    p = subparsers.add_parser(
        "inspect",
        help="show a GGUF file's model card: architecture, parameters, quant mix, KV cache, layers",
        description="Show a GGUF file's model card from its header: architecture, parameters total and "
        "active, size and bits per weight, KV cache per token, per-layer structure.",
    )
    add_model_argument(p)
    p.add_argument("--json", action="store_true",
                   help="print one JSON object (fields listed in docs/inspect.md)")
    p.add_argument("--tensors", action="store_true", help="also list every tensor, grouped by layer")
    p.add_argument("--metadata", action="store_true", help="also list every metadata key and the chat template")
    add_media_arguments(p, "how many prompt tokens --images become")
    p.add_argument("--block", metavar="TENSOR[:INDEX]",
                   help="show one stored block of a tensor (default the first): bytes, fields, values, "
                   "and the same values rounded to other types")
    p.add_argument("--held-read", nargs="*", metavar="OTHER",
                   help="bytes held against bytes read per token, as stored and at other ggml types, of this "
                   "file and any OTHER files (e.g. a mixture of experts beside a dense model)")


def _held_read(f, card, others: list[str], *, as_json: bool) -> int:
    """Every file's held and read bytes at each position of the view's cycle: a table, or JSON rows."""
    from walkthrough.costs.held_read import TYPES, at_index
    from walkthrough.inspect.card import build_card

    files = [(card.name or f.path.name, card, list(f.tensors.values()))]
    for spec in others:
        with open_model(spec) as other:
            other_card = build_card(other)
            files.append((other_card.name or other.path.name, other_card, list(other.tensors.values())))
    per_file = [[at_index(c, tensors, name, i) for i in range(len(TYPES) + 1)] for name, c, tensors in files]
    rows = [r for each in per_file for r in each]
    if as_json:
        write_json([{"file": r.name, "moe": r.moe, "quant": r.quant, "bits_per_weight": r.bits,
                     "held_bytes": r.held, "read_bytes_per_token": r.read} for r in rows], sys.stdout)
        return 0
    from rich.console import Console

    from walkthrough.render.held_read_view import held_read_table

    console = Console(highlight=False)
    for each in per_file:
        console.print(held_read_table(each))
    console.print("bits per weight from ggml's block sizes; norms and MoE routers keep their stored type, "
                  "as llama.cpp's quantizer leaves them", style="dim")
    return 0


def run(args: argparse.Namespace) -> int:
    """Open the file, build its card, print it; user errors propagate to the CLI as one line."""
    from walkthrough.inspect.card import build_card

    media = _media(args.mmproj, args.images)
    with open_model(args.model) as f:
        if args.block is not None:
            from walkthrough.commands.inspect_block import run_block

            return run_block(f, args.block, as_json=args.json, out=sys.stdout)
        card = build_card(f)
        if args.held_read is not None:
            return _held_read(f, card, args.held_read, as_json=args.json)
        if args.json:
            document = inspect_json(f, card)
            if media is not None:
                projector, tokens = media
                document["mmproj"] = {"file": args.mmproj, "type": projector.projector_type,
                                      "image_size": projector.image_size, "patch_size": projector.patch_size,
                                      "merge": projector.merge, "media": tokens.to_json(projector)}
            write_json(document, sys.stdout)
            return 0
        from walkthrough.commands.inspect_view import render

        render(f, card, tensors=args.tensors, metadata=args.metadata, out=sys.stdout, media=media)
    return 0


def _media(mmproj: str | None, images: str | None) -> tuple[Projector, MediaTokens] | None:
    """--mmproj's projector and what --images become with it; None without --mmproj.

    Raises:
        WalkthroughError: --images without --mmproj, an unusable projector or spec, one line.
    """
    if mmproj is None:
        if images is not None:
            raise WalkthroughError("--images needs the model's projector: add --mmproj mmproj-....gguf")
        return None
    from walkthrough.inspect.projector import media_tokens, open_projector, parse_media

    projector = open_projector(mmproj)
    return projector, media_tokens(projector, parse_media(images if images is not None else "1"))


def inspect_json(f, card) -> dict[str, Any]:
    """The `--json` object: the card's numbers, the layers, the quant mix, metadata and tensor table."""
    from walkthrough.inspect.metadata import json_scalar, summarize_metadata

    return {
        "file": str(f.path),
        "files": [str(p) for p in f.paths],
        "file_size": f.file_size,
        "missing": None if f.missing is None else {
            "bytes": f.missing.missing_bytes, "data_bytes": f.missing.data_bytes, "tensors": list(f.missing.tensors)},
        "gguf_version": f.version,
        "architecture": card.architecture,
        "name": card.name,
        "n_tensors": card.n_tensors,
        "n_params": card.n_params,
        "n_params_active": card.n_params_active,
        "bits_per_weight": card.bits_per_weight if card.n_params else None,
        "bits_per_weight_by_group": card.bits_per_weight_by_group(),
        "bytes_per_token": card.bytes_per_token,
        "kv_bytes_per_token": card.kv_bytes_per_token,
        "state_bytes": card.state_bytes,
        "context_length": card.context_length,
        "n_layers": card.n_layers,
        "n_mtp_layers": card.n_mtp_layers,
        "n_embd": card.n_embd,
        "n_head": card.n_head,
        "n_head_kv": card.n_head_kv,
        "head_dim_k": card.head_dim_k,
        "head_dim_v": card.head_dim_v,
        "rope_base": json_scalar(card.rope_base),
        "rope_dims": card.rope_dims,
        "vocab_size": card.vocab_size,
        "n_ff": card.n_ff,
        "n_experts": card.n_experts,
        "n_experts_used": card.n_experts_used,
        "n_shared_experts": card.n_shared_experts,
        "expert_ff": card.expert_ff,
        "shared_expert_ff": card.shared_expert_ff,
        "tied_embeddings": card.tied_embeddings,
        "layer_kinds": [
            {
                "layer": layer.index,
                "attention": layer.attention,
                "ffn": layer.ffn,
                "kv_heads": layer.n_head_kv,
                "keeps_kv": layer.keeps_kv,
                "kv_values_per_token": layer.kv_values_per_token,
                "sliding_window": layer.sliding_window,
                "state_bytes": layer.state_bytes,
                "mtp": layer.mtp,
                "n_params": layer.n_params,
                "nbytes": layer.nbytes,
            }
            for layer in card.layers
        ],
        "quant_mix": card.bytes_by_type,
        "params_by_type": card.params_by_type,
        "params_by_group": card.params_by_group,
        "bytes_by_group": card.bytes_by_group,
        "bytes_per_token_by_group": card.bytes_per_token_by_group,
        "unknown": list(card.unknown),
        "name_decoded": name_json(f.path.name, card),
        "projector": projector_json(f),
        "metadata": summarize_metadata(f),
        "tensors": _Streamed(len(f.tensors), lambda: (
            {"name": t.name, "shape": list(t.shape), "type": t.type_name, "offset": t.offset, "nbytes": t.nbytes,
             "shard": t.shard}
            for t in f.tensors.values())),
    }


def name_json(file_name: str, card) -> list[dict[str, Any]]:
    """The file name (and `general.name` when it differs) decoded, each claim checked against the card."""
    from dataclasses import asdict

    from walkthrough.inspect.model_name import check_claims, names_to_decode

    return [{"source": source, **asdict(claims), "checks": [asdict(c) for c in check_claims(claims, card)]}
            for source, claims in names_to_decode(file_name, card.name)]


class _Streamed(list):
    """A JSON array made one item at a time as it is written (300,000 tensors as dicts took 500 MB more).

    `json`'s Python encoder (the one `write_json` uses) asks only its length and iterates it.
    """

    def __init__(self, n: int, items: Callable[[], Iterator[Any]]):
        super().__init__()
        self._n, self._items = n, items

    def __len__(self) -> int:
        return self._n

    def __iter__(self) -> Iterator[Any]:
        return self._items()


def write_json(document: dict[str, Any], out: TextIO) -> None:
    """The document as indented JSON, written a batch of pieces at a time as it is encoded."""
    pieces: list[str] = []
    for piece in json.JSONEncoder(indent=2, allow_nan=False).iterencode(document):
        pieces.append(piece)
        if len(pieces) >= 8192:
            out.write("".join(pieces))
            pieces.clear()
    out.write("".join(pieces) + "\n")


def projector_json(f) -> dict[str, Any] | None:
    """An mmproj file's projector and the tokens of a 1024x768 image (null for other files)."""
    from walkthrough.inspect.projector import (
        DEFAULT_IMAGE,
        ProjectorError,
        image_tokens,
        read_projector,
    )

    try:
        projector = read_projector(f)
    except ProjectorError as exc:  # the card still prints; the projector's keys are what is wrong
        return {"error": str(exc)}
    if projector is None:
        return None
    out: dict[str, Any] = {"type": projector.projector_type, "image_size": projector.image_size,
                           "patch_size": projector.patch_size, "merge": projector.merge}
    try:
        shot = image_tokens(projector, *DEFAULT_IMAGE)
        out["image"] = {"width": shot.width, "height": shot.height, "resized": list(shot.resized),
                        "tokens": shot.tokens, "patches": shot.patches, "markers": shot.markers,
                        "formula": shot.formula}
    except ProjectorError as exc:
        out["image"] = None
        out["not_modelled"] = str(exc)
    return out
