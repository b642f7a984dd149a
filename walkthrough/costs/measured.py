"""Measured speed beside the roofline: what a run's passes took, next to what `costs.estimate` predicts.

A run's `Step` records carry the seconds each pass took (measured around the
engine's forward pass) and the bytes it read (the engine's count of weights and
KV entries touched). From them:

- prefill tokens/s = prompt tokens / seconds of the prefill passes; the time to
  first token is those seconds (the first token is picked at their end);
- decode tokens/s = decode passes / their seconds;
- achieved bandwidth = bytes the decode passes read / their seconds, also as a
  share of the profile's bandwidth.

`time_request` runs one such request for `walkthrough bench` (and `estimate
--measure`): a prompt of spread-out token ids, greedy, never stopping early.

`compare(estimate, measured)` lines these up with the estimate's ceiling and
realistic figures, row by row, for the Costs stage and `walkthrough estimate` /
`walkthrough bench`. Example: 3 decode passes of 0.5 s reading 1 GB each ->
2 tokens/s and 2 GB/s, 25% of an 8 GB/s profile.

Where measured and modelled figures meet they say whose they are, in the words of
`measured_here` (the engine that ran the passes, from the Steps) and
`modelled_for` (the hardware profile): "measured here, numpy engine",
"modelled for cpu-here".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from walkthrough.units import binary_bytes, fmt

if TYPE_CHECKING:
    from walkthrough.costs.estimate import Estimate
    from walkthrough.costs.hardware import Profile
    from walkthrough.engine.protocol import Engine, Session
    from walkthrough.engine.steps import Step

PREFILL_CHUNK = 512  # llama.cpp's default n_ubatch: prompt tokens per pass
PROMPT_STRIDE = 7919  # a prime: successive prompt ids land far apart in the vocabulary


@dataclass(frozen=True)
class Measured:
    """What one run's passes took on this machine."""

    engine: str  # "numpy" or "llama.cpp"
    prompt_tokens: int
    prefill_seconds: float
    decode_passes: int
    decode_seconds: float
    decode_bytes: int  # bytes read by the decode passes (weights, KV cache, states)
    first_use_seconds: float = 0.0  # one-time work apart from the passes' seconds (weights produced on first use)
    first_use_bytes: int = 0
    first_use_checks: int = 0  # matrix shapes checked for the lane products, part of first_use_seconds
    split: dict | None = None  # llama.cpp over RPC workers: per host and boundary (`split_text.summary`)

    @property
    def prefill_tokens_per_s(self) -> float | None:
        return self.prompt_tokens / self.prefill_seconds if self.prefill_seconds > 0 else None

    @property
    def decode_tokens_per_s(self) -> float | None:
        return self.decode_passes / self.decode_seconds if self.decode_seconds > 0 else None

    @property
    def seconds_per_token(self) -> float | None:
        return self.decode_seconds / self.decode_passes if self.decode_passes else None

    @property
    def bandwidth(self) -> float | None:
        """Bytes per second the decode passes achieved."""
        return self.decode_bytes / self.decode_seconds if self.decode_seconds > 0 else None

    def to_json(self) -> dict[str, Any]:
        return {"engine": self.engine, "prompt_tokens": self.prompt_tokens, "ttft_s": self.prefill_seconds,
                "prefill_tokens_per_s": self.prefill_tokens_per_s, "decode_passes": self.decode_passes,
                "decode_seconds": self.decode_seconds, "decode_tokens_per_s": self.decode_tokens_per_s,
                "seconds_per_token": self.seconds_per_token, "decode_bytes": self.decode_bytes,
                "bandwidth_bytes_per_s": self.bandwidth, "first_use_seconds": self.first_use_seconds,
                "first_use_bytes": self.first_use_bytes, "first_use_checks": self.first_use_checks,
                **({"split": self.split} if self.split else {})}


def measure(steps: Sequence[Step]) -> Measured | None:
    """The measured figures of a run's Steps, on the engine that ran them (None before its prefill has finished)."""
    prefill = [s for s in steps if s.phase == "prefill"]
    if not prefill or prefill[-1].sample is None:
        return None
    from walkthrough.render.split_text import summary

    decode = [s for s in steps if s.phase == "decode"]
    return Measured(
        engine=prefill[0].engine,
        prompt_tokens=sum(s.end - s.start for s in prefill),
        prefill_seconds=sum(s.seconds for s in prefill),
        decode_passes=len(decode),
        decode_seconds=sum(s.seconds for s in decode),
        decode_bytes=sum(s.bytes_read.get("total", 0) for s in decode),
        first_use_seconds=sum(s.first_use_seconds for s in steps),
        first_use_bytes=sum(s.first_use_bytes for s in steps),
        first_use_checks=sum(s.first_use_checks for s in steps),
        split=summary(steps),
    )


def first_use_line(steps: Sequence[Step]) -> str | None:
    """One line for the one-time work the passes did apart from their own time, or None if they did none.

    Example: 241 MiB produced in 19.6 s -> "first use: dequantized 241 MiB in 19.6 s, once (not in the
    prefill and decode times)"; with 3 matrix shapes checked for the lane products, "first use: dequantized
    241 MiB, checked 3 product shapes in 19.7 s, once (...)". The time also covers the lane copies a long pass
    makes of its matrices where the weight budget keeps them (`Weights.lanes`), whose bytes are not dequantized.
    """
    seconds = sum(s.first_use_seconds for s in steps)
    nbytes = sum(s.first_use_bytes for s in steps)
    checks = sum(s.first_use_checks for s in steps)
    if not nbytes and not checks:
        return None
    return (f"first use: {first_use_work(nbytes, checks)} in {fmt(seconds, 's')}, once "
            "(not in the prefill and decode times)")


def first_use_work(nbytes: int, checks: int) -> str:
    """What one-time work did: "dequantized 241 MiB", ", checked 3 product shapes" after it when there were any."""
    work = [f"dequantized {binary_bytes(nbytes)}"] if nbytes else []
    if checks:
        work.append(f"checked {checks} product shape{'s' if checks != 1 else ''}")
    return ", ".join(work)


def spread_ids(n: int, n_vocab: int, end_ids: frozenset[int]) -> list[int]:
    """n token ids spread over the vocabulary (i x PROMPT_STRIDE mod n_vocab), skipping end-of-generation ids.

    Example: n=3, n_vocab=10, no end ids -> [1, 0, 9] (1, 7920, 15839 mod 10).
    """
    ids, i = [], 1
    while len(ids) < n:
        if i % n_vocab not in end_ids:
            ids.append(i % n_vocab)
        i += PROMPT_STRIDE
    return ids


def time_request(model: Engine, prompt_tokens: int, output_tokens: int,
                 session: Session | None = None) -> Measured:
    """Run one request on a loaded model (either engine) and measure it: greedy, exactly `output_tokens` picked.

    `session`: a fresh session of `model` made with other options (default: `new_session`'s, n_ctx the request's).
    """
    from walkthrough.engine.engines import new_session
    from walkthrough.engine.sampler import Sampler

    c = model.config
    ids = spread_ids(prompt_tokens, c.n_vocab, c.end_ids)
    session = session or new_session(model, n_ctx=prompt_tokens + output_tokens)
    sampler = Sampler.greedy()
    steps = list(session.prefill(ids, chunk=PREFILL_CHUNK, sampler=sampler))
    steps += list(session.decode(sampler, output_tokens - 1, stop_ids=[]))
    return measure(steps)


def measured_here(engine: str) -> str:
    """How a figure this machine measured is labelled, naming the engine that ran the passes."""
    return f"measured here, {engine} engine"


def modelled_for(hw: Profile) -> str:
    """How a figure the roofline predicts for a hardware profile (`hardware.Profile`) is labelled."""
    return f"modelled for {hw.id}"


def comparison_title(hw: Profile, m: Measured) -> str:
    """The title over `compare`'s rows: which machine the model is for, which engine was measured."""
    return f"{modelled_for(hw)} (ceiling, realistic) beside {measured_here(m.engine)}"


class Comparison(NamedTuple):
    """One row: a figure as the roofline models it (ceiling, realistic) and as measured."""

    label: str
    ceiling: str
    realistic: str
    measured: str


def _or_dash(value: float | None, unit: str) -> str:
    return "-" if value is None else fmt(value, unit)


def compare(e: Estimate, m: Measured) -> list[Comparison]:
    """Modelled beside measured for an estimate (`costs.Estimate`) of the same request sizes on the profile."""
    hw = e.hardware
    rows = []
    if e.fits:
        share = None if m.bandwidth is None else m.bandwidth / hw.bandwidth
        rows += [
            Comparison("prefill", "-", fmt(e.prefill.tokens_per_s.value, "tokens/s"),
                       _or_dash(m.prefill_tokens_per_s, "tokens/s")),
            Comparison("first token", "-",
                       fmt(e.prefill.seconds.value, "s") if e.prompt_tokens == m.prompt_tokens else "-",
                       fmt(m.prefill_seconds, "s")),
            Comparison("decode", fmt(e.decode.ceiling.value, "tokens/s"), fmt(e.decode.tokens_per_s.value, "tokens/s"),
                       _or_dash(m.decode_tokens_per_s, "tokens/s")),
            Comparison("bandwidth", fmt(hw.bandwidth, "B/s"), fmt(hw.bandwidth * hw.decode_efficiency, "B/s"),
                       "-" if share is None else f"{fmt(m.bandwidth, 'B/s')} ({share:.0%} of the profile)"),
        ]
    return rows
