"""Draw the README's picture: the File stage of the bundled tiny model at 120x36, as an SVG.

    python docs/screenshot.py            # writes docs/file-stage.svg

The picture is the app's own screenshot (Textual's SVG export, ligatures off as `--screenshots`
writes them), taken once the file is read and the engine's check is done: every figure is the app's.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from walkthrough.app import make_app
from walkthrough.pictures import publishable_svg

SIZE = (120, 36)
OUT = Path(__file__).resolve().parent / "file-stage.svg"


async def draw(out: Path = OUT) -> Path:
    """Open the app on the bundled model and request, wait for its workers, save the File stage."""
    app = make_app()
    async with app.run_test(size=SIZE) as pilot:
        for _ in range(3):
            await app.workers.wait_for_complete()
            await pilot.pause(0.2)
        out.write_text(publishable_svg(app.export_screenshot(title="walkthrough: the File stage")),
                       encoding="utf-8")
    return out


if __name__ == "__main__":
    print(asyncio.run(draw()))
