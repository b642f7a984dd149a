"""The walk (`request.autoplay`) names what it needs of the app in a Protocol, and the app has all of it."""

from __future__ import annotations

from walkthrough.request.autoplay import WalkedApp


def test_the_app_has_everything_the_walk_needs() -> None:
    from walkthrough.app import WalkthroughApp, make_app

    members = {name for name in vars(WalkedApp) if not name.startswith("_")} | set(WalkedApp.__annotations__)
    assert {"state", "error", "screen", "stepping", "export_screenshot", "exit"} <= members
    app = make_app(None, None)  # made, not run: its own attributes are set
    missing = [name for name in sorted(members) if not hasattr(WalkthroughApp, name) and name not in vars(app)]
    assert missing == []
