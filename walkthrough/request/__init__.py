"""The request layer: the request state, its loader and part builders, the stage list, the run controller.

Below the screens and the CLI, above the engine: nothing here imports Textual or `walkthrough.screens`
(`tests/test_import_arrows.py`). Worker messages are Textual `Message`s and stay in `screens/messages.py`.
"""
