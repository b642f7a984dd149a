"""Writing the files the user asked for (`--record`, `--screenshots`) without destroying theirs.

A `Writer` never replaces a file it did not create in this run unless it was
told it may (`--overwrite`), never writes through a symbolic link, and never
touches the files the run reads (the model, the `--draft` model, the
`--messages` and `--template` files), whatever the name: the same file reached
by another path or a hard link is the same (device, inode).

Every file is written to a new temporary name in the same folder, opened with
`O_CREAT | O_EXCL | O_NOFOLLOW` (so neither a planted link nor a file made in
between is written into), then put in place: a hard link (which fails if the
name was taken meanwhile) when the name is free, `os.replace` (which replaces a
link itself, never its target) when replacing is allowed. Refusals are one-line
`WalkthroughError`s saying what, where and what to do.

Example:
    writer = Writer(inputs=[Path("m.gguf")])
    writer.write(Path("1-File.svg"), b"<svg/>", "--screenshots")  # made, so it may be written again
    writer.write(Path("m.gguf"), b"...", "--record")  # WalkthroughError: it is the model ...
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from walkthrough.errors import WalkthroughError

NEW_FILE = (
    os.O_WRONLY
    | os.O_CREAT
    | os.O_EXCL
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_CLOEXEC", 0)
)
NEW_FILE_MODE = 0o666  # less the umask, as any program's new file
# the file system has no hard links (e.g. FAT): put in place with os.replace after the check
LINK_UNSUPPORTED = (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS)


def _identity(info: os.stat_result) -> tuple[int, int]:
    return info.st_dev, info.st_ino


class Writer:
    """Writes files for one run; remembers what it made, so only those may be written over.

    Args:
        inputs: (name, path) of the files the run reads; a name is what a refusal calls the file
            ("the model"). Paths that do not exist are left out.
        overwrite: existing files (and links, replaced as links) may be replaced.
    """

    def __init__(self, inputs: Iterable[tuple[str, Path]] = (), *, overwrite: bool = False) -> None:
        self.overwrite = overwrite
        self.inputs: dict[tuple[int, int], str] = {}
        for name, path in inputs:
            try:
                self.inputs.setdefault(_identity(os.stat(path)), name)
            except OSError:
                continue
        self.made: set[tuple[int, int]] = set()  # files this writer created

    def check(self, path: Path, option: str) -> None:
        """Raise a one-line error unless `path` may be written by this run."""
        where = f"{option} {path}"
        parent = path.parent if str(path.parent) else Path(".")
        if not parent.is_dir():
            raise WalkthroughError(
                f"{where}: {parent} is not a folder; name a file in an existing folder"
            )
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            return
        except OSError as exc:
            raise WalkthroughError(f"{where}: cannot look at it ({exc.strerror})") from None
        try:
            target = os.stat(path)
        except OSError:
            target = None  # a dangling link
        if target is not None and _identity(target) in self.inputs:
            raise WalkthroughError(
                f"{where} is {self.inputs[_identity(target)]} this run reads; name another file"
            )
        if stat.S_ISDIR(info.st_mode) or (target is not None and stat.S_ISDIR(target.st_mode)):
            raise WalkthroughError(f"{where} is a folder; name a file")
        if _identity(info) in self.made and not stat.S_ISLNK(info.st_mode):
            return
        if not self.overwrite:
            kind = "a symbolic link" if stat.S_ISLNK(info.st_mode) else "a file"
            raise WalkthroughError(
                f"{where} is {kind} this run did not make; name another file, "
                "or add --overwrite to replace it"
            )

    def write(self, path: Path, data: bytes, option: str) -> None:
        """Write `data` as `path` (see the module docstring for what is refused)."""
        with self.stream(path, option) as out:
            out.write(data)

    @contextmanager
    def stream(self, path: Path, option: str) -> Iterator[BinaryIO]:
        """A new file to write into, put in place as `path` when the block ends (even by raising).

        The path is checked before the file is made and again when it is put in place; if it was
        taken meanwhile, the error names the temporary file, which keeps what was written.
        """
        self.check(path, option)
        temporary, descriptor = self._new_temporary(path, option)
        try:
            with os.fdopen(descriptor, "wb") as out:
                yield out
        finally:
            self._put_in_place(temporary, path, option)

    def _new_temporary(self, path: Path, option: str) -> tuple[Path, int]:
        """A new file beside `path` under a free name, and its descriptor (O_EXCL, O_NOFOLLOW)."""
        for _ in range(100):
            temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}.part")
            try:
                return temporary, os.open(temporary, NEW_FILE, NEW_FILE_MODE)
            except FileExistsError:
                continue
            except OSError as exc:
                raise WalkthroughError(
                    f"{option} {path}: cannot write in {temporary.parent} ({exc.strerror})"
                ) from None
        raise WalkthroughError(f"{option} {path}: no free temporary name beside it")

    def _put_in_place(self, temporary: Path, path: Path, option: str) -> None:
        try:
            self.check(path, option)
            if os.path.lexists(path):
                os.replace(temporary, path)
            else:
                self._link(temporary, path, option)
        except (WalkthroughError, OSError) as exc:
            reason = (
                exc
                if isinstance(exc, WalkthroughError)
                else f"{option} {path}: {exc.strerror or exc}"
            )
            raise WalkthroughError(f"{reason}; what was written is kept in {temporary}") from None
        self.made.add(_identity(os.lstat(path)))

    def _link(self, temporary: Path, path: Path, option: str) -> None:
        """Give `temporary` the free name `path`, failing if another file took it meanwhile."""
        try:
            os.link(temporary, path, follow_symlinks=False)
        except FileExistsError:
            raise WalkthroughError(
                f"{option} {path}: another program made this file during the run"
            ) from None
        except OSError as exc:
            if exc.errno not in LINK_UNSUPPORTED:
                raise
            os.replace(temporary, path)  # no hard links here: the check above is the guard
            return
        os.unlink(temporary)


def run_inputs(
    model: str | os.PathLike | None,
    draft: str | os.PathLike | None,
    messages: str | os.PathLike | None,
    template: str | os.PathLike | None,
    mmproj: str | os.PathLike | None = None,
) -> list[tuple[str, Path]]:
    """The files a run reads, as `Writer(inputs=...)` takes them: ("the model", path), ...

    A MODEL that names no model has no file to protect (the run reports it); every shard of a split
    model is one.
    """
    from walkthrough.inspect.locate import bundled_model, resolve_model

    named: list[tuple[str, Path]] = []
    for name, spec in (("the model", model), ("the --draft model", draft)):
        try:
            if spec is not None:
                named += [(name, path) for path in resolve_model(spec)]
            elif name == "the model":
                named.append((name, bundled_model()))
        except (WalkthroughError, OSError):
            continue
    named += [
        (name, Path(spec))
        for name, spec in (("the --messages file", messages), ("the --template file", template),
                           ("the --mmproj file", mmproj))
        if spec is not None
    ]
    return named
