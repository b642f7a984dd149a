"""Pictures of the app fit to publish: SVG screenshots that render the same everywhere, and PNGs of them.

Textual's SVG asks for Fira Code, a font with programming ligatures: where it
is installed, `<|im_start|>` is drawn with arrows instead of its characters.
`publishable_svg` turns ligatures off in the picture's own stylesheet, so the
text is drawn as the terminal showed it. Spaces are kept as no-break spaces
with a fixed text length per run, which browsers honour.

`svg_to_png` renders a picture with headless Chromium (Debian's `chromium`),
the same engine that checks the SVGs in the tests; without it, the error says
how to install it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from walkthrough.errors import WalkthroughError
from walkthrough.safewrite import Writer

NO_LIGATURES = 'font-variant-ligatures: none; font-feature-settings: "liga" 0, "calt" 0;'
VIEWBOX = re.compile(r'viewBox="0 0 ([\d.]+) ([\d.]+)"')
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")
RENDER_SECONDS = 120


def publishable_svg(svg: str) -> str:
    """The SVG with ligatures turned off for every text in it."""
    return svg.replace("<style>", "<style>\n    text { " + NO_LIGATURES + " }", 1)


def chromium() -> str:
    """The Chromium binary, or a one-line error saying how to get it."""
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path:
            return path
    raise WalkthroughError("PNG pictures are drawn by Chromium, which is not installed "
                           "(Debian/Ubuntu: apt-get install chromium); use --format svg meanwhile")


def svg_size(svg: str) -> tuple[int, int]:
    """The picture's width and height in pixels, from its viewBox."""
    match = VIEWBOX.search(svg)
    if match is None:
        raise WalkthroughError("the SVG picture has no viewBox to size a PNG from")
    return round(float(match.group(1))), round(float(match.group(2)))


def svg_to_png(svg_path: Path, png_path: Path, writer: Writer | None = None) -> Path:
    """Render `svg_path` to `png_path` at its own size with headless Chromium.

    Chromium draws into a private temporary folder; `writer` (see `walkthrough.safewrite`) puts the
    picture at `png_path`, refusing a file it may not replace.
    """
    width, height = svg_size(svg_path.read_text(encoding="utf-8"))
    with tempfile.TemporaryDirectory(prefix="walkthrough-png-") as profile:
        drawn = Path(profile) / "picture.png"
        done = subprocess.run(
            [chromium(), "--headless=new", "--no-sandbox", "--hide-scrollbars", f"--user-data-dir={profile}",
             f"--window-size={width},{height}", f"--screenshot={drawn}", svg_path.resolve().as_uri()],
            capture_output=True, text=True, timeout=RENDER_SECONDS, check=False,
        )
        if done.returncode != 0 or not drawn.is_file():
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise WalkthroughError(f"Chromium could not draw {svg_path.name} ({last[:200]})")
        (writer or Writer()).write(png_path, drawn.read_bytes(), "--screenshots")
    return png_path
