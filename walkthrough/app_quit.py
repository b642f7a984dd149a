"""Quitting: on a terminal the process ends at once; anywhere, what the app started is ended with
it.

Textual's orderly close works through every widget's queued messages before it
lets go of the terminal, and after a storm of keys and resizes those are
seconds of redraws nobody will see (tests/bench/key_storm.py on SmolLM2: 1.0-2.6 s
from q to exit, 0.8 s of it after the screens were closed). So when a person
quits on a terminal (`end_process_on_quit`, set by the command that runs the
app there), nothing is written at the end: workers are cancelled, render
helpers and cold starts killed, the terminal restored, and the process ends.
Elsewhere (tests, textual-serve's pipes) Textual closes the app in order and
its unmount still releases what the app started.
"""

from __future__ import annotations

from typing import Any

from textual.app import App

from walkthrough import textual_private
from walkthrough.engine.serving.coldstart import kill_children
from walkthrough.inspect.render_process import stop_all as stop_renders


class EndsAtOnce(App):
    """Mixin of the app: `exit` on a terminal ends the process; `release_processes` ends what the
    app started."""

    # set by the command that runs the app on a terminal (`commands/app.py`)
    end_process_on_quit = False

    def exit(self, result: Any = None, return_code: int = 0, message: Any = None) -> None:
        super().exit(result, return_code, message)
        if self.end_process_on_quit and return_code == 0 and self.quits_cleanly():
            self.end_process_now()

    def quits_cleanly(self) -> bool:
        """Nothing is left to show after the app (an error, the files an autoplay saves):
        override."""
        return True

    def end_process_now(self) -> None:
        """Give the terminal back and end the process, without Textual's orderly close; where the
        driver cannot be read (another Textual), the orderly close it is."""
        self.release_processes()
        driver = textual_private.driver(self)
        if driver is None:
            return
        # terminal modes back, input thread ended, alternate screen left
        driver.stop_application_mode()
        driver.close()  # the output thread writes what it holds, then ends
        textual_private.end_process(0)

    def release_processes(self) -> None:
        """Cancel the workers and kill the processes they started (render helpers, cold starts)."""
        self.workers.cancel_all()
        stop_renders()  # a template render in a worker ends now, not at its time limit
        kill_children()
