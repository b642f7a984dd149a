"""The one exception type the CLI and the app turn into a one-line message.

Every error caused by user input (a bad file, a missing model, a malformed
messages file) is raised as a `WalkthroughError` (or a subclass) whose message
says what is wrong, where, and what to do. Anything else is a bug.
"""


class WalkthroughError(Exception):
    """A problem with the user's input, explained in one line."""
