"""Shared pytest set-up: where the project's shared reference files live, and which suites are slow.

The `app` marker tags the slow suites: every `test_app_*.py` file and every async test (Pilot runs
of the app, served apps), the stress suites in `APP_SUITES` (hostile files through the app and in
fresh processes, key storms, a real terminal, a browser, a real trained model), and single slow
tests elsewhere, marked where they are (fresh processes, whole commands, sweeps over every
fixture). So
`python -m pytest -q -m "not app"` runs the fast core. The `quality` runs of the tiny model are left
out unless `-m` names them, whatever else `-m` selects (`-m quality` runs them).
"""

import inspect
import os
from functools import cache
from pathlib import Path

# BLAS threads as the CLI sets them (`walkthrough.cli`): one unless the environment names a count. BLAS reads this
# once, when numpy is first imported, which nothing has done yet: the engine's bit-for-bit claims (a row's bits
# whatever the pass) hold for one thread; a threaded matrix-vector product splits its outputs wherever the
# thread count falls, and a split that is no whole number of the kernel's 16-output groups sums its first
# outputs differently.
for _variable in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

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
APP_SUITES = frozenset({
    "test_hostile_app.py", "test_hostile_runs.py", "test_hostile_sizes.py", "test_key_storm.py",
    "test_quit_on_terminal.py", "test_serve_browser.py", "test_template_isolation.py",
    "test_real_weights.py",  # a real 135M model against llama.cpp: minutes of CPU
    "test_rpc_split.py", "test_rpc_worker.py",  # llama.cpp RPC workers started as processes
})


@cache
def fixture_tokenizer(path: Path):
    """The tokenizer of a fixture file, built once per session and shared read-only by every suite that
    tokenizes with it (a 150k-token vocabulary takes about a second to build)."""
    from walkthrough.inspect.gguf import open_gguf
    from walkthrough.inspect.tokenizer import GGUFTokenizer

    with open_gguf(path) as f:
        return GGUFTokenizer.from_gguf(f)


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    """`../shared/fixtures` beside the checkout (vocab/, templates/, reference/); fails if absent."""
    if not FIXTURES_DIR.is_dir():
        pytest.fail(f"reference fixtures not found at {FIXTURES_DIR}; they ship beside the checkout in ../shared")
    return FIXTURES_DIR


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects, so the marks added here count
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        name = item.path.name
        pilot = inspect.iscoroutinefunction(getattr(item, "obj", None))  # async: Pilot runs, servers
        if name.startswith("test_app_") or name in APP_SUITES or pilot:
            item.add_marker(pytest.mark.app)
    if "quality" not in (config.option.markexpr or ""):
        quality = [item for item in items if item.get_closest_marker("quality")]
        if quality:
            config.hook.pytest_deselected(items=quality)
            items[:] = [item for item in items if not item.get_closest_marker("quality")]
