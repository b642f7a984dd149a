"""Fuzz the GGUF reader: damaged copies of real files either open or raise GGUFError, nothing else.

Seeds are the small reference models (whole) and the first 64 KiB of each
vocabulary file (real metadata, cut mid-array). Damage is random byte flips,
"interesting" integers written over a count or length, truncations, and
splices of bytes from another seed. Edits land in the header region most of
the time, since tensor data is never parsed. When a damaged file opens,
every metadata value is decoded and every tensor's bytes are viewed.
"""

from __future__ import annotations

import itertools
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from walkthrough.inspect.gguf import GGUFError, open_gguf

VOCAB_PREFIX = 64 * 1024
INTERESTING = [
    0,
    1,
    7,
    8,
    31,
    32,
    63,
    64,
    255,
    256,
    0x7FFFFFFF,
    0xFFFFFFFF,
    1 << 31,
    1 << 62,
    1 << 63,
]
HEADER_REGION = 8 * 1024  # most edits land in the first bytes, where the header lives


@pytest.fixture(scope="module")
def seeds(fixtures_dir: Path) -> list[bytes]:
    reference = [p.read_bytes() for p in sorted((fixtures_dir / "reference").glob("*.gguf"))]
    vocab = [p.read_bytes()[:VOCAB_PREFIX] for p in sorted((fixtures_dir / "vocab").glob("*.gguf"))]
    assert reference and vocab
    return reference + vocab


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


_names = itertools.count()


# A position: taken modulo the length of the bytes it edits.
POSITIONS = st.one_of(st.integers(4, HEADER_REGION), st.integers(4, 1 << 22))  # past the magic


@st.composite
def damaged(draw, seeds: list[bytes]) -> bytes:
    """A seed with a few random edits applied."""
    pick = st.integers(0, len(seeds) - 1)  # indices, so a failure report does not print the seeds
    blob = bytearray(seeds[draw(pick)])
    for _ in range(draw(st.integers(1, 4))):
        if not blob:
            break
        at = draw(POSITIONS) % len(blob)
        kind = draw(st.sampled_from(["flip", "byte", "u32", "u64", "truncate", "splice"]))
        if kind == "flip":
            blob[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "byte":
            blob[at] = draw(st.integers(0, 255))
        elif kind in ("u32", "u64"):
            fmt = "<I" if kind == "u32" else "<Q"
            value = draw(st.sampled_from(INTERESTING)) % (1 << (8 * struct.calcsize(fmt)))
            blob[at : at + struct.calcsize(fmt)] = struct.pack(fmt, value)
        elif kind == "truncate":
            del blob[at:]
        else:
            donor = seeds[draw(pick)]
            start = draw(POSITIONS) % len(donor)
            piece = donor[start : start + draw(st.integers(1, 256))]
            if draw(st.booleans()):
                blob[at:at] = piece  # insert
            else:
                blob[at : at + len(piece)] = piece  # overwrite
    return bytes(blob)


def _exercise(path: Path) -> None:
    """Open `path`; if it opens, decode every value and view every tensor's bytes (those past the end of a
    partial download are refused)."""
    try:
        f = open_gguf(path)
    except GGUFError as exc:
        assert "\n" not in str(exc)
        return
    for key in f.fields:
        f.get(key)
    absent = set(f.missing.tensors) if f.missing else set()  # a cut file opens as a partial download
    for name, t in f.tensors.items():
        if name in absent:
            try:
                f.tensor_bytes(name)
            except GGUFError as exc:
                assert "partial download" in str(exc)
            else:
                raise AssertionError(f"{name}'s data is past the end, yet it was read")
        else:
            assert t.offset + t.nbytes <= path.stat().st_size and len(f.tensor_bytes(name)) == t.nbytes
    f.close()


@pytest.mark.app  # slow: every fixture, damaged many ways
def test_damaged_fixtures_open_or_raise_gguf_error(seeds, scratch):
    @settings(
        max_examples=300,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(st.data())
    def check(data):
        blob = data.draw(damaged(seeds))
        path = scratch / f"fuzz{next(_names)}.gguf"
        path.write_bytes(blob)
        try:
            _exercise(path)
        finally:
            path.unlink()

    check()


def test_seeds_themselves_open_or_are_refused_cleanly(seeds, scratch):
    """The undamaged seeds: reference models open; the cut vocab prefixes are refused as cut."""
    outcomes = []
    for i, blob in enumerate(seeds):
        path = scratch / f"seed{i}.gguf"
        path.write_bytes(blob)
        try:
            open_gguf(path).close()
            outcomes.append("open")
        except GGUFError as exc:
            assert "left" in str(exc)
            outcomes.append("refused")
    assert "open" in outcomes and "refused" in outcomes
