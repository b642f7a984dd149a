"""The request layer: the request state, its part builders, the stage list, the run service and
the records its jobs post.

Below the screens and the CLI, above the engine: nothing here imports Textual or
`walkthrough.screens` (`tests/test_import_arrows.py`). The jobs' records (`events.py`) are plain
dataclasses; the app wraps them in its one Textual message (`screens/messages.py`).
"""
