"""Shared pytest fixtures: where the project's shared reference files live."""

from pathlib import Path

import pytest
from hypothesis import settings

REPO_ROOT = Path(__file__).resolve().parents[1]
FIXTURES_DIR = REPO_ROOT.parent / "shared" / "fixtures"
# Benchmark scripts in tests/bench are run by hand and print figures: pytest never collects them.
collect_ignore = ["bench"]
# Property tests check what a function returns, never how fast: hypothesis's per-example deadline (200 ms) is a
# timed assert that a loaded machine fails (a first example paying imports took 563 ms here).
settings.register_profile("walkthrough", deadline=None)
settings.load_profile("walkthrough")


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    """`../shared/fixtures` beside the checkout (vocab/, templates/, reference/); fails if absent."""
    if not FIXTURES_DIR.is_dir():
        pytest.fail(f"reference fixtures not found at {FIXTURES_DIR}; they ship beside the checkout in ../shared")
    return FIXTURES_DIR
