"""Shared pytest fixtures: where the project's shared reference files live."""

from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
FIXTURES_DIR = REPO_ROOT.parent / "shared" / "fixtures"
# Benchmark scripts in tests/bench are run by hand and print figures: pytest never collects them.
collect_ignore = ["bench"]


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    """`../shared/fixtures` beside the checkout (vocab/, templates/, reference/); fails if absent."""
    if not FIXTURES_DIR.is_dir():
        pytest.fail(f"reference fixtures not found at {FIXTURES_DIR}; they ship beside the checkout in ../shared")
    return FIXTURES_DIR
