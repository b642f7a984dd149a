"""Screenshots fit to publish: ligatures off, spaces kept where styles meet, PNGs drawn by headless Chromium.

The browser check renders a real SVG (Rich's export, as the app's screenshots
are) with Chromium and reads the picture back with Tesseract: the words on each
side of a style change stay apart, and `<|im_start|>` keeps its characters.
"""

from __future__ import annotations

import shutil

import pytest
from browser_support import Unavailable, chromium_binary, screen_text, tesseract_binary
from rich.console import Console
from rich.text import Text
from test_cli_errors import assert_one_line_error, run_cli

from walkthrough.pictures import NO_LIGATURES, publishable_svg, svg_size, svg_to_png


def rich_svg() -> str:
    console = Console(record=True, width=40, file=open("/dev/null", "w"))  # noqa: SIM115
    line = Text("1.4 MiB ")
    line.append("intensity", style="bold red")
    line.append(" <|im_start|>user")
    console.print(line)
    return console.export_svg()


def test_ligatures_are_turned_off_in_the_pictures_stylesheet():
    svg = publishable_svg(rich_svg())
    assert NO_LIGATURES in svg.split("</style>")[0]
    assert svg_size(svg)[0] > 0


@pytest.mark.app  # slow: a browser and OCR
def test_a_browser_draws_the_picture_as_the_terminal_showed_it(tmp_path):
    try:
        chromium_binary()
        tesseract_binary()
    except Unavailable as exc:
        pytest.skip(str(exc))
    svg = tmp_path / "line.svg"
    svg.write_text(publishable_svg(rich_svg()), encoding="utf-8")
    text = screen_text(svg_to_png(svg, tmp_path / "line.png"))
    assert "MiB intensity" in text, text  # the space where the bold red span starts is kept
    assert "<|im" in text and "|>user" in text, text  # drawn as characters, not ligature arrows


def test_png_pictures_without_chromium_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    code, out, err = run_cli(capsys, ["--screenshots", tmp_path, "--format", "png"])
    assert_one_line_error(code, out, err, "apt-get install chromium")
