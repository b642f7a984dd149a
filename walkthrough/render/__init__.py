"""Rich and text views of records (file layout, blocks, passes, reuse), shared by the CLI and the screens.

Nothing here imports Textual or `walkthrough.screens` (`tests/test_import_arrows.py`); screens wrap these
renderables in widgets, `commands/` prints them.
"""
