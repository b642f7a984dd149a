"""One request over several hosts, beside one box and beside "how many of each machine hold it" (the chips view).

What the Costs stage's hosts view shows, computed here from the card, the
profiles and a link:

- `Hosts.split`: `costs.pipeline.model` for N hosts of the chosen profile over
  the link (each host's part of a decoded token, the hops, the prompt in chunks,
  each host's layers and bytes), with one box's own estimate as its time where
  one box holds the model;
- `Hosts.one_box`: that one box (`costs.estimate`: fits, offloads or does not fit);
- `Hosts.units`: for every profile, the fewest units that hold the request (SRAM
  chips as `costs.sram` counts them, other machines as hosts of a layer split)
  and the decode speed of that many units (the SRAM pipeline's fitted figure, or
  the layer split over the link).

Example: SmolLM2 on rtx-4090 over 10gbe with 2 hosts -> split.segments() ==
[('host 1', ...), ('hop 1-2', ...), ('host 2', ...), ('logits home', ...)].
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from walkthrough.costs.estimate import Estimate
from walkthrough.costs.hardware import Profile
from walkthrough.costs.host_shares import hosts_needed
from walkthrough.costs.pipeline import Link, Pipeline, box_of, load_links, model
from walkthrough.costs.request_size import RequestSize, estimate_for
from walkthrough.costs.sram import is_sram
from walkthrough.inspect.card import ModelCard

MAX_HOSTS = 64
LINK_ORDER = ("1gbe", "10gbe", "25gbe", "thunderbolt", "pcie4", "nvlink")


@dataclass(frozen=True)
class Units:
    """How many of one machine hold the request, and how fast that many decode."""

    id: str
    name: str
    unit_bytes: float  # usable memory of one unit (one chip's SRAM for SRAM profiles)
    kind: str  # "chips" (SRAM) or "hosts" (a layer split over the link)
    count: int | None  # None: no number of units holds it
    tokens_per_s: float | None  # decode at that count; None when no count holds it


@dataclass(frozen=True)
class Hosts:
    """The hosts view's figures for one request size."""

    split: Pipeline
    one_box: Estimate
    units: tuple[Units, ...]


def links() -> list[Link]:
    """The bundled links, slowest first."""
    known = load_links()
    return [known[k] for k in LINK_ORDER if k in known] + [v for k, v in known.items() if k not in LINK_ORDER]


def several(card: ModelCard, hw: Profile, profiles: Iterable[Profile], link: Link, hosts: int,
            size: RequestSize) -> Hosts:
    """The split over `hosts` hosts of `hw`, one box of `hw`, and every profile's units (see the docstring)."""
    e = estimate_for(card, hw, size)
    split = model(card, hw, link, hosts, size.context, size.prompt_tokens, size.cache_type, box=box_of(e))
    return Hosts(split, e, tuple(units(card, p, link, size) for p in profiles))


def units(card: ModelCard, hw: Profile, link: Link, size: RequestSize) -> Units:
    """The fewest units of `hw` that hold the request and their decode speed."""
    e = estimate_for(card, hw, size)
    if is_sram(hw):
        n = int(e.chips.value) if e.chips is not None else None
        rate = e.decode.tokens_per_s.value if e.decode is not None else None
        return Units(hw.id, hw.name, float(hw.usable_bytes), "chips", n, rate)
    n = hosts_needed(card, float(hw.usable_bytes), size.context, size.cache_type)
    if n is None or n > MAX_HOSTS:
        return Units(hw.id, hw.name, float(hw.usable_bytes), "hosts", None, None)
    split = model(card, hw, link, n, size.context, size.prompt_tokens, size.cache_type, box=box_of(e))
    return Units(hw.id, hw.name, float(hw.usable_bytes), "hosts", n, 1 / split.token_seconds)
