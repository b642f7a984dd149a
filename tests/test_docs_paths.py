"""Every source path the docs name exists: a moved or renamed file is caught here, not by a reader.

The pages under docs/ and the README name files in two ways: from the repository's root
(`walkthrough/engine/glassbox/layers.py`, `tests/test_layer_kinds.py`, `docs/app.md`) and, inside the
package, from its sub-packages (`engine/glassbox/ggml_math.py`, `render/glossary.json`). Both are looked up;
a name with a wildcard (`tests/test_app_*.py`) is a pattern, not a path, and is left out.
"""

from __future__ import annotations

import re
from pathlib import Path

import walkthrough

REPO = Path(__file__).resolve().parents[1]
PACKAGE = Path(walkthrough.__file__).parent
PAGES = sorted((REPO / "docs").glob("*.md")) + [REPO / "README.md"]
SUFFIXES = "py|tcss|json|csv|md|gguf|svg|png|toml|yml|yaml|txt|sh"
FROM_ROOT = ("walkthrough", "tests", "docs", "assets", r"\.ci", r"\.github")


def named_paths(text: str) -> list[tuple[int, str, Path]]:
    """(line, name as written, where it should be) for every file path named in a page's text."""
    inside = sorted(p.name for p in PACKAGE.iterdir() if p.is_dir() and not p.name.startswith("_"))
    pattern = re.compile(rf"(?<![\w/.*-])((?:{'|'.join(FROM_ROOT)}|{'|'.join(inside)})/[\w./*-]*\w\.(?:{SUFFIXES}))"
                         r"(?![\w*])")
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        for match in pattern.finditer(line):
            name = match.group(1)
            if "*" in name:
                continue  # a pattern
            top = name.split("/")[0]
            base = REPO if re.fullmatch("|".join(FROM_ROOT), top) else PACKAGE
            found.append((number, name, base / name))
    return found


def test_every_path_the_docs_name_exists() -> None:
    named = [(page, line, name, path) for page in PAGES
             for line, name, path in named_paths(page.read_text(encoding="utf-8"))]
    assert len(named) > 150  # the pages were read and the names found
    missing = [f"{page.relative_to(REPO)}:{line}: {name}" for page, line, name, path in named if not path.exists()]
    assert missing == []


def test_the_check_sees_a_path_that_is_not_there() -> None:
    text = ("`walkthrough/engine/glassbox/layers.py:runner` and `screens/glossary.json`;\n"
            "tests/test_app_*.py, and tests/test_nothing_here.py.")
    names = {name: path.exists() for _, name, path in named_paths(text)}
    assert names == {"walkthrough/engine/glassbox/layers.py": True, "screens/glossary.json": False,
                     "tests/test_nothing_here.py": False}
