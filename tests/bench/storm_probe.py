"""The app with a probe for key storms: every key and resize logged with the screen on top, a dump on SIGUSR1.

Run in place of `python -m walkthrough` (same arguments); tests/bench/key_storm.py uses it with
`STORM_LAUNCHER=tests/bench/storm_probe.py`. It writes `storm-<pid>.log` in $STORM_PROBE_DIR (default
the system's temporary folder): one line per key or resize the app handles (time, key, whether Textual
had forwarded it already, the screen on top and the stack depth), one line and the call stack per
screen pushed, when each step of the app's ending begins and ends (exit, the driver's stop, Textual's
close of every screen), and on SIGUSR1 the screen stack with each screen's queued messages, the keys the app
counts as typed ahead, the focused widget and the workers. That is how a wedged run is read: which
screens are stacked, whether keys still wait, and what pushed each screen.
"""

from __future__ import annotations

import inspect
import os
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path

from textual import events

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from walkthrough import app as app_module
from walkthrough.cli import main

LOG = open(Path(os.environ.get("STORM_PROBE_DIR", tempfile.gettempdir())) / f"storm-{os.getpid()}.log",  # noqa: SIM115
           "w", buffering=1)
App = app_module.WalkthroughApp
_init, _on_event, _push_screen = App.__init__, App.on_event, App.push_screen


def _dump(app) -> None:
    LOG.write(f"DUMP stack={app.screen_stack!r} typeahead={vars(app.typeahead)!r} focused={app.focused!r}\n")
    LOG.writelines(f"  {screen!r} queue={screen._message_queue.qsize()}\n" for screen in app.screen_stack)
    LOG.write(f"  app queue={app._message_queue.qsize()} workers={[(w.name, w.state) for w in app.workers]}\n")


def __init__(self, *args, **kwargs) -> None:
    _init(self, *args, **kwargs)
    signal.signal(signal.SIGUSR1, lambda _signal, _frame: _dump(self))


async def on_event(self, event) -> None:
    if isinstance(event, (events.Key, events.Resize)):
        what = event.key if isinstance(event, events.Key) else event.size
        LOG.write(f"{time.monotonic():.3f} {type(event).__name__} {what} forwarded={event.is_forwarded} "
                  f"top={type(self.screen).__name__} depth={len(self.screen_stack)}\n")
    return await _on_event(self, event)


def push_screen(self, screen, *args, **kwargs):
    LOG.write(f"{time.monotonic():.3f} PUSH {type(screen).__name__} over {type(self.screen).__name__} "
              f"depth={len(self.screen_stack)}\n" + "".join(traceback.format_stack(limit=8)[:-1]))
    return _push_screen(self, screen, *args, **kwargs)


App.__init__, App.on_event, App.push_screen = __init__, on_event, push_screen


def _timed(owner, name: str) -> None:
    """Log when `owner.name` (a step of the app's shutdown) starts and ends."""
    original = getattr(owner, name)

    async def timed_async(*args, **kwargs):
        LOG.write(f"{time.monotonic():.3f} {name} begins\n")
        try:
            return await original(*args, **kwargs)
        finally:
            LOG.write(f"{time.monotonic():.3f} {name} ends\n")

    def timed(*args, **kwargs):
        LOG.write(f"{time.monotonic():.3f} {name} begins\n")
        try:
            return original(*args, **kwargs)
        finally:
            LOG.write(f"{time.monotonic():.3f} {name} ends\n")


    setattr(owner, name, timed_async if inspect.iscoroutinefunction(original) else timed)


from textual.drivers.linux_driver import LinuxDriver

for _owner, _name in ((App, "exit"), (App, "_shutdown"), (App, "_close_all"), (LinuxDriver, "stop_application_mode"),
                      (LinuxDriver, "disable_input")):
    _timed(_owner, _name)

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
