"""The import arrows point one way: the layers below the screens never import them, nor Textual.

DESIGN.md's data flow: inspect -> engine -> request -> render -> screens / commands. Every module
under `commands/`, `render/`, `request/`, `costs/`, `engine/`, `inspect/` (and `cli.py`) is parsed, and every
import in it (top level, inside a function, or under `if TYPE_CHECKING:`) is checked; `screens/`
holds only Textual code (each of its modules imports Textual or another screen module).
"""

from __future__ import annotations

import ast
from pathlib import Path

import walkthrough

PACKAGE = Path(walkthrough.__file__).parent
BELOW_SCREENS = ["commands", "render", "request", "costs", "engine", "inspect", "architectures"]
TEXTUAL = {"textual", "textual_plotext"}  # textual_serve runs the app as a subprocess; it is not imported code


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, dotted module) for every import statement in a file, wherever it sits."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}:{node.lineno}: relative import (the house uses absolute ones)"
            module = node.module or ""
            found.append((node.lineno, module))
            found += [(node.lineno, f"{module}.{alias.name}") for alias in node.names]
    return found


def modules_under(*parts: str) -> list[Path]:
    return sorted(p for part in parts for p in (PACKAGE / part).rglob("*.py"))


def climbs(module: str) -> bool:
    """True if importing `module` reaches the screens, the Textual app, or Textual itself."""
    top = module.split(".")[0]
    return (
        top in TEXTUAL
        or module in ("walkthrough.screens", "walkthrough.app", "walkthrough.textual_private")
        # the screens, and the app's parts (keys, quitting, loading, the runs)
        or module.startswith(("walkthrough.screens.", "walkthrough.app_"))
    )


def test_no_module_below_the_screens_imports_them_or_textual() -> None:
    files = modules_under(*BELOW_SCREENS) + [PACKAGE / "cli.py"]
    assert len(files) > 50  # the walk found the packages
    launcher = PACKAGE / "commands" / "app.py"  # the one command that starts the Textual app
    bad = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: imports {module}"
        for path in files
        for line, module in imported_modules(path)
        if climbs(module) and not (path == launcher and module.startswith(("walkthrough.app", "walkthrough.textual")))
    ]
    assert bad == []


def test_the_check_sees_an_upward_import(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from walkthrough.screens.base import StageScreen\n"
        "def f():\n    import textual.app\n    from walkthrough import screens\n",
        encoding="utf-8",
    )
    lines = sorted({line for line, m in imported_modules(module) if climbs(m)})
    assert lines == [3, 5, 6]  # the type-only import, the function's textual, `from walkthrough import screens`


def test_screens_hold_only_textual_code() -> None:
    files = [p for p in modules_under("screens") if p.name != "__init__.py"]
    plain = [
        p.name
        for p in files
        if not any(
            m.split(".")[0] in TEXTUAL or m.startswith("walkthrough.screens.")
            for _, m in imported_modules(p)
        )
    ]
    assert plain == []


def test_the_card_and_the_declarations_do_not_climb() -> None:
    """inspect/ reads the architectures' declarations, never the engine; architectures/ imports neither."""
    rules = {"inspect": ("walkthrough.engine", "walkthrough.costs"),
             "architectures": ("walkthrough.engine", "walkthrough.costs", "walkthrough.inspect")}
    bad = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: imports {module}"
        for part, above in rules.items()
        for path in modules_under(part)
        for line, module in imported_modules(path)
        if any(module == a or module.startswith(a + ".") for a in above)
    ]
    assert bad == []
