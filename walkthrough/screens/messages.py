"""The one Textual message the workers' records travel in: `Posted`, a record and the worker that
posted it.

The jobs (the run service, the loader) post plain records
(`walkthrough.request.events`) through a callback the app supplies
(`WalkthroughApp.post_record`); it wraps each in a `Posted` naming the worker
thread it came from, and the app's handler, on the UI thread, applies the
record to the request state (whose changes redraw the screens).

A record that follows its worker is `stale` once that worker was cancelled,
and the app drops it: the check is on the UI thread, where cancels happen, so
no post can slip between a worker's last look at its flag and the cancel.
"""

from __future__ import annotations

from textual.message import Message
from textual.worker import Worker

from walkthrough.request.events import Event


class Posted(Message):
    """`record`, posted by `worker` (None: by no worker)."""

    def __init__(self, record: Event, worker: Worker | None = None) -> None:
        super().__init__()
        self.record = record
        self.worker = worker

    @property
    def stale(self) -> bool:
        """The record follows its worker, which was cancelled: what it carries is not wanted any
        more."""
        return (self.record.follows_worker and self.worker is not None
                and self.worker.is_cancelled)

    def can_replace(self, message: Message) -> bool:
        # a burst of progress reports: the newer one says all the older one said
        return (self.record.merges and isinstance(message, Posted)
                and type(message.record) is type(self.record))

    def __repr__(self) -> str:
        return f"Posted({self.record!r})"
