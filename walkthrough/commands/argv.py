"""Command lines in and out: the parser every command uses, a child's argv from parsed options.

`Parser` turns off argparse's abbreviations: with them, `--rec x.cast` meant
`--record x.cast`, and anything that looks for an option by its spelling (a
child's command line edited word by word) misses the abbreviation. Subparsers
made from a `Parser` are `Parser`s too (argparse makes them of the parent's
class), so every subcommand is covered.

`argv_from` writes the command line back from the parsed options, leaving out
the ones named: a child process runs exactly what was parsed, whatever the user
typed. Options are written `--name=value`, so a value starting with `-` stays a
value, and positionals come after `--`.

Example:
    args = parser.parse_args(["m.gguf", "--record", "w.cast", "--seed", "3"])
    argv_from(parser, args, leave_out={"record"})  # -> ["--seed=3", "--", "m.gguf"]
"""

from __future__ import annotations

import argparse
from collections.abc import Collection


class Parser(argparse.ArgumentParser):
    """An ArgumentParser that takes options only as spelled in full."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)


def argv_from(
    parser: argparse.ArgumentParser, args: argparse.Namespace, leave_out: Collection[str] = ()
) -> list[str]:
    """The words that parse to `args` with `parser`, less the options whose dest is in `leave_out`.

    Options left at their default are not written. Raises TypeError for an option kind it cannot
    write back (counted or appended options), so adding one fails the tests, not a child's run.
    """
    options: list[str] = []
    positionals: list[str] = []
    for action in parser._actions:  # argparse has no public list of a parser's options
        if action.dest in leave_out or action.dest == argparse.SUPPRESS:
            continue
        value = getattr(args, action.dest, action.default)
        if value == action.default:
            continue
        if not action.option_strings:
            positionals.append(str(value))
        elif isinstance(action, argparse._StoreTrueAction | argparse._StoreFalseAction):
            options.append(action.option_strings[-1])
        elif type(action) is argparse._StoreAction and action.nargs is None:
            options.append(f"{action.option_strings[-1]}={_option_text(value)}")
        else:
            raise TypeError(f"cannot write {action.option_strings[-1]} back into a command line")
    return options + (["--", *positionals] if positionals else [])


def _option_text(value: object) -> str:
    """How a parsed value is typed back: a list (--rpc's workers, --split's counts) as its items joined by
    commas, which is how those options are parsed; anything else as its str().

    Example: [Endpoint("127.0.0.1", 50052), Endpoint("10.0.0.2", 50053)] -> "127.0.0.1:50052,10.0.0.2:50053".
    """
    if isinstance(value, list | tuple):
        return ",".join(str(item) for item in value)
    return str(value)
