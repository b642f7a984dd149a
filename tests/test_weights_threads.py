"""The numpy engine's weight cache stays whole when two threads reach it at once.

Only one pass runs on a model at a time (the run service holds its lock), but a `Weights` cache is
also safe on its own: its least-recently-used order, its evictions and its byte counters are changed
under a lock. Without it, a thread moving a key to the end while another evicted it raised KeyError,
and the cached-bytes counter lost updates.
"""

from __future__ import annotations

import sys
import threading

import numpy as np
import pytest
from conftest import FIXTURES_DIR

from walkthrough.engine.glassbox.weights import Weights
from walkthrough.inspect.gguf import open_gguf

QWEN2 = FIXTURES_DIR / "reference" / "ref-qwen2-f32.gguf"
THREADS = 4
ROUNDS = 1000


@pytest.fixture()
def fast_switching():
    """Let threads switch after every few bytecodes, so the interleavings a race needs come up
    often."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(before)


def test_threads_sharing_a_small_cache_raise_nothing_and_keep_its_counts(fast_switching):
    f = open_gguf(QWEN2)
    names = sorted(n for n, t in f.tensors.items() if len(t.shape) == 2)[:12]
    sizes = {n: int(np.prod(f.tensors[n].shape)) * 4 for n in names}
    # room for about three: constant eviction
    w = Weights(f, max_cache_bytes=sum(sorted(sizes.values())[-3:]))
    errors: list[BaseException] = []
    start = threading.Barrier(THREADS)

    def hammer(seed: int) -> None:
        order = np.random.default_rng(seed).permutation(ROUNDS) % len(names)
        start.wait()
        try:
            for i in order:
                got = w.get(names[i])
                assert got.nbytes == sizes[names[i]]
        except BaseException as error:  # noqa: BLE001 - collected and asserted on the test's thread
            errors.append(error)

    threads = [threading.Thread(target=hammer, args=(seed,)) for seed in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]
    held = w.cached()
    assert w.cached_bytes == sum(v.nbytes for v in held.values())  # no update lost
    assert w.cached_bytes <= w.max_cache_bytes
