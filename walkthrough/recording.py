"""Recording the app as an asciicast v2 file (`walkthrough --autoplay --exit --record walk.cast`).

The app runs as a child process on a pseudo-terminal of a fixed size; every
byte it writes is copied to this terminal (when there is one) and stored in the
cast with the seconds since the start, and this terminal's keys are passed on,
so the person can still press `q`. Without a terminal (a script, CI), the child
still gets its pseudo-terminal and the recording is the same. The cast is
written as `walkthrough.safewrite` writes: never over a file this run did not
make (unless `--overwrite`), never through a link, never onto the model.

The file is what asciinema players read (asciicast v2): one JSON header line,
then one `[seconds, "o", text]` line per output chunk. The format is specified
at docs.asciinema.org/manual/asciicast/v2/.

Example:
    record(["--autoplay", "--exit"], Path("walk.cast"), (100, 30))  # -> the app's exit status
"""

from __future__ import annotations

import codecs
import json
import os
import select
import shutil
import signal
import struct
import sys
import time
from pathlib import Path

from walkthrough.safewrite import Writer

DEFAULT_SIZE = (100, 30)  # columns, rows when this process has no terminal to copy the size from
READ_BYTES = 65536


def terminal_size() -> tuple[int, int]:
    """This terminal's columns and rows, or `DEFAULT_SIZE` without one."""
    if sys.stdout.isatty():
        size = shutil.get_terminal_size(DEFAULT_SIZE)
        return size.columns, size.lines
    return DEFAULT_SIZE


def header(width: int, height: int, title: str) -> dict:
    """The asciicast v2 header line."""
    return {"version": 2, "width": width, "height": height, "timestamp": int(time.time()), "title": title,
            "env": {"TERM": "xterm-256color", "SHELL": os.environ.get("SHELL", "/bin/sh")}}


def record(app_args: list[str], path: Path, size: tuple[int, int] | None = None,
           writer: Writer | None = None) -> int:
    """Run `walkthrough APP_ARGS` on a pseudo-terminal, show it here, write the cast to `path`.

    The cast goes through `writer` (see `walkthrough.safewrite`): the path is checked before the app
    starts, written under a temporary name, and put in place when the app ends.

    Returns:
        the app's exit status.

    Raises:
        WalkthroughError: `path` may not be written (an existing file, a link, an input of the run).
    """
    import pty
    import termios
    import tty

    width, height = size or terminal_size()
    with (writer or Writer()).stream(path, "--record") as cast:
        pid, master = pty.fork()
        if pid == 0:  # the child: the app, on the pseudo-terminal
            try:
                os.environ["TERM"] = "xterm-256color"
                os.environ.pop("COLUMNS", None)
                os.environ.pop("LINES", None)
                os.execv(sys.executable, [sys.executable, "-m", "walkthrough", *app_args])
            finally:
                os._exit(127)  # never back into the parent's code (it would put the cast in place)
        import fcntl

        fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", height, width, 0, 0))
        os.kill(pid, signal.SIGWINCH)
        keys = sys.stdin.fileno() if sys.stdin is not None and sys.stdin.isatty() else None
        screen = sys.stdout.fileno() if sys.stdout.isatty() else None
        saved = termios.tcgetattr(keys) if keys is not None else None
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        start = time.monotonic()
        try:
            if keys is not None:
                tty.setraw(keys)
            cast.write((json.dumps(header(width, height, "walkthrough")) + "\n").encode("utf-8"))
            _copy(master, keys, screen, cast, decoder, start)
        finally:
            if saved is not None:
                termios.tcsetattr(keys, termios.TCSADRAIN, saved)
            os.close(master)
        _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def _copy(master: int, keys: int | None, screen: int | None, cast, decoder, start: float) -> None:
    """Pass keys to the app and its output to the screen and the cast until the app closes its terminal."""
    sources = [master] + ([keys] if keys is not None else [])
    while True:
        ready, _, _ = select.select(sources, [], [])
        if keys is not None and keys in ready:
            data = os.read(keys, READ_BYTES)
            if data:
                os.write(master, data)
        if master in ready:
            try:
                data = os.read(master, READ_BYTES)
            except OSError:  # EIO: the app exited and its terminal closed
                data = b""
            if not data:
                return
            if screen is not None:
                os.write(screen, data)
            text = decoder.decode(data)
            if text:
                line = json.dumps([round(time.monotonic() - start, 6), "o", text]) + "\n"
                cast.write(line.encode("utf-8"))
