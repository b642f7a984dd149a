"""Entry point for `python -m walkthrough`."""

from walkthrough.cli import main

raise SystemExit(main())
