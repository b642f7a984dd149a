"""`--record FILE.cast`: the autoplay walk as an asciicast v2 file, replayed into a terminal emulator.

The app runs for real in a child process on a pseudo-terminal (no terminal is
needed here); the cast is then replayed through pyte, a terminal emulator, and
the stage bar of each frame says which stage was on screen: the walk must show
every stage, in order, and the file must be what asciinema players read.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyte
from conftest import REPO_ROOT

from walkthrough.request import stages


def stages_shown(cast: Path) -> tuple[dict, list[str]]:
    """The cast's header, and the highlighted stage-bar labels in the order the frames showed them."""
    lines = cast.read_text(encoding="utf-8").splitlines()
    header = json.loads(lines[0])
    screen = pyte.Screen(header["width"], header["height"])
    stream = pyte.Stream(screen)
    shown: list[str] = []
    last_time = 0.0
    for line in lines[1:]:
        seconds, kind, text = json.loads(line)
        assert kind == "o" and isinstance(text, str)
        assert seconds >= last_time, "event times must not go back"
        last_time = seconds
        stream.feed(text)
        bar = screen.buffer[0]
        current = "".join(bar[x].data for x in range(screen.columns) if bar[x].reverse).strip()
        if current and (not shown or shown[-1] != current):
            shown.append(current)
    return header, shown


def test_the_recorded_walk_shows_every_stage_in_order(tmp_path):
    cast = tmp_path / "walk.cast"
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    done = subprocess.run(
        [sys.executable, "-m", "walkthrough", "--autoplay", "--exit", "--pace", "0.5", "--record", str(cast)],
        stdin=subprocess.DEVNULL, capture_output=True, env=env, timeout=600, check=False,
    )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    header, shown = stages_shown(cast)
    assert header["version"] == 2 and (header["width"], header["height"]) == (100, 30)
    assert isinstance(header["timestamp"], int)
    expected = [f"{stage.number} {stage.label}" for stage in stages.STAGES]
    assert shown == expected

