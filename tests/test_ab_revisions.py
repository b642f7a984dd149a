"""`tests/bench/ab_revisions.py`: another revision's engine loaded beside this checkout's, and the comparison it prints.

The benchmark extracts a git revision's package under another name and times both engines in one process. These
check that the renamed copy imports itself and not this checkout, runs the bundled model to the same logits as this
checkout when it is the same code, and that the comparison reports what it measured.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from bench.ab_revisions import RENAMED, compare, load_revision, renamed_imports
from real_weights_support import request_ids
from tiny_model_support import MODEL_PATH

from walkthrough.engine.glassbox.model import Model
from walkthrough.engine.glassbox.session import Session
from walkthrough.inspect.gguf import open_gguf

REPO = Path(__file__).resolve().parents[1]


def test_renamed_imports_renames_the_package_and_nothing_else():
    source = (
        "from walkthrough.engine.glassbox import ops\n"
        "import walkthrough.cli as cli\n"
        "from walkthrough import errors\n"
        "import walkthrough\n"
        'files("walkthrough.costs")\n'
        'prog = "walkthrough"\n'
        "my_walkthrough.x = 1\n"
        "walkthrough_rev.y = 2\n"
    )
    assert renamed_imports(source, "other") == (
        "from other.engine.glassbox import ops\n"
        "import other.cli as cli\n"
        "from other import errors\n"
        "import other\n"
        'files("other.costs")\n'
        'prog = "walkthrough"\n'
        "my_walkthrough.x = 1\n"
        "walkthrough_rev.y = 2\n"
    )


def _git_checkout() -> bool:
    done = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], check=False, capture_output=True)
    return done.returncode == 0


@pytest.mark.skipif(not _git_checkout(), reason="needs this repository's git history")
def test_a_revision_loads_beside_this_checkout_and_gives_the_same_logits_when_it_is_the_same_code(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))
    modules = dict(sys.modules)
    try:
        RevModel, RevSession, rev_open = load_revision("HEAD", tmp_path)
        assert RevModel.__module__ == f"{RENAMED}.engine.glassbox.model"
        loaded = [m for name, m in sys.modules.items() if name.startswith(RENAMED + ".")]
        assert loaded and all(Path(m.__file__).is_relative_to(tmp_path) for m in loaded if getattr(m, "__file__", None))
        namespace = vars(sys.modules[RevModel.__module__]).values()  # what the copy's model.py imported
        sources = {v.__name__ if isinstance(v, ModuleType) else getattr(v, "__module__", "") for v in namespace}
        assert not any(s == "walkthrough" or s.startswith("walkthrough.") for s in sources if isinstance(s, str))
        assert any(s.startswith(RENAMED + ".") for s in sources if isinstance(s, str))
        f = open_gguf(MODEL_PATH)
        ids = request_ids(f)[:12]
        this, rev = Model(f), RevModel(rev_open(MODEL_PATH))
        engines = {"rev": lambda: RevSession(rev, kv_type="f32"), "this": lambda: Session(this, kv_type="f32")}
        out = compare(engines, ids, tokens=2, rounds=2)
    finally:
        for name in set(sys.modules) - set(modules):
            del sys.modules[name]
    assert out["same_logits"] is True
    assert 0 < out["prefill_ratio"] < np.inf and 0 < out["decode_ratio"] < np.inf
    assert all(t > 0 for t in out["best_rev"] + out["best_this"])


def test_compare_says_when_the_logits_differ():
    f = open_gguf(MODEL_PATH)
    ids = request_ids(f)[:6]
    model = Model(f)

    class Nudged(Session):  # the same engine, its last logits one float32 step off
        def feed(self, *a, **k):
            step = super().feed(*a, **k)
            self.last_logits = np.nextafter(self.last_logits, np.float32(np.inf))
            return step

    out = compare({"rev": lambda: Session(model, kv_type="f32"), "this": lambda: Nudged(model, kv_type="f32")},
                  ids, tokens=1, rounds=1)
    assert out["same_logits"] is False
