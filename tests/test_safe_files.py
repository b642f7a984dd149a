"""The app's files (`--record`, `--screenshots`) never destroy the user's (issue 25, items 6-8).

Every parser takes options only as spelled in full (`--rec` was `--record`, and
the recorded child, whose argv was edited word by word, recorded again: a fork
bomb); the child's argv is written from the parsed options. The writer refuses
the model (by any name), a file it did not make (unless `--overwrite`), and
never writes through a symbolic link; a `--screenshots` path that is a file is
one line before the screen is taken.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO_ROOT
from hostile_support import assert_one_clear_line, run_cli

from walkthrough.cli import app_parser, build_parser
from walkthrough.engine.serving.coldstart import child_parser
from walkthrough.errors import WalkthroughError
from walkthrough.inspect.locate import BUNDLED_MODEL
from walkthrough.safewrite import Writer


@pytest.fixture
def model(tmp_path: Path) -> Path:
    """A copy of the bundled tiny model the user owns."""
    path = tmp_path / "m.gguf"
    shutil.copyfile(BUNDLED_MODEL, path)
    return path


def every_parser() -> list[argparse.ArgumentParser]:
    """The app's parser, the subcommands' parser and each subcommand's, the cold-start child's."""
    parsers = [app_parser(), child_parser()]
    todo = [build_parser()]
    while todo:
        parser = todo.pop()
        parsers.append(parser)
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                todo += list(action.choices.values())
    return parsers


def test_no_parser_takes_an_abbreviated_option():
    parsers = every_parser()
    assert len(parsers) > 10  # the subcommands were found
    for parser in parsers:
        assert parser.allow_abbrev is False, parser.prog


@pytest.mark.parametrize(
    "spelling",
    [
        ["--record", "w.cast"],
        ["--record=w.cast"],
        ["--rec", "w.cast"],
        ["--rec=w.cast"],
        ["--reco", "w.cast"],
    ],
)
def test_the_recorded_child_never_records(spelling):
    from walkthrough.commands.app import child_argv

    try:
        args = app_parser().parse_args(["m.gguf", *spelling, "--seed", "3"])
    except SystemExit:
        return  # refused: an abbreviation is not an option
    child = app_parser().parse_args(child_argv(args))
    assert child.record is None
    assert (child.model, child.seed) == ("m.gguf", 3)


def test_the_child_runs_every_option_as_parsed():
    """Each app option given a value other than its default reaches the child as parsed (a new one
    must be added here, so it cannot be forgotten)."""
    from walkthrough.commands.app import child_argv

    given = [
        "-model.gguf",
        "--messages=-m.json",
        "--seed",
        "7",
        "--temperature",
        "0.7",
        "--max-tokens",
        "9",
        "--template",
        "t.jinja",
        "--template-name",
        "rag",
        "--hardware",
        "cpu-here",
        "--draft",
        "d.gguf",
        "--engine",
        "llama.cpp",
        "--autoplay",
        "--pace",
        "0.25",
        "--exit",
        "--screenshots",
        "shots",
        "--format",
        "png",
        "--overwrite",
        "--record",
        "w.cast",
        "--raw",
        "--max-memory",
        "512M",
        "--rpc",
        "127.0.0.1:50052,127.0.0.1:50053",
        "--split",
        "1,1,2",
        "--beside",
        "b.gguf",
        "--mmproj",
        "mmproj-x.gguf",
        "--images",
        "v16x640x360",
        "--exact-products",
    ]
    parser = app_parser()
    args = parser.parse_args(given[1:] + ["--", given[0]])
    defaults = parser.parse_args([])
    dests = {a.dest for a in parser._actions if a.dest != "help"}
    assert {
        d for d in dests if getattr(args, d) == getattr(defaults, d)
    } == set()  # every option is given
    child = parser.parse_args(child_argv(args))
    assert vars(child) == {**vars(args), "record": None}


def test_the_writer_refuses_the_model_by_any_name(model, tmp_path):
    (tmp_path / "other").mkdir()
    os.link(model, tmp_path / "hard.cast")
    os.symlink(model, tmp_path / "soft.cast")
    writer = Writer([("the model", model)], overwrite=True)
    before = model.read_bytes()
    for path in (
        model,
        tmp_path / "other" / ".." / "m.gguf",
        tmp_path / "hard.cast",
        tmp_path / "soft.cast",
    ):
        with pytest.raises(WalkthroughError, match="is the model this run reads"):
            writer.write(path, b"cast", "--record")
    assert model.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "hard.cast",
        "m.gguf",
        "other",
        "soft.cast",
    ]  # no leftovers


def test_the_writer_replaces_only_its_own_files_unless_told(tmp_path):
    mine, theirs = tmp_path / "mine.svg", tmp_path / "theirs.svg"
    theirs.write_text("theirs")
    writer = Writer()
    writer.write(mine, b"one", "--screenshots")
    writer.write(mine, b"two", "--screenshots")  # made in this run: may be written again
    assert mine.read_bytes() == b"two"
    with pytest.raises(
        WalkthroughError,
        match="--screenshots .*theirs.svg is a file this run did not make; .*--overwrite",
    ):
        writer.write(theirs, b"new", "--screenshots")
    assert theirs.read_text() == "theirs"
    with pytest.raises(WalkthroughError, match="did not make"):
        Writer().write(mine, b"three", "--screenshots")  # another run did not make it
    Writer(overwrite=True).write(theirs, b"new", "--screenshots")
    assert theirs.read_bytes() == b"new"


def test_the_writer_never_writes_through_a_link(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("victim")
    link = tmp_path / "link.cast"
    link.symlink_to("victim.txt")
    with pytest.raises(WalkthroughError, match="is a symbolic link this run did not make"):
        Writer().write(link, b"cast", "--record")
    Writer(overwrite=True).write(link, b"cast", "--record")  # the link is replaced, not its target
    assert victim.read_text() == "victim"
    assert not link.is_symlink() and link.read_bytes() == b"cast"
    dangling = tmp_path / "dangling.cast"
    dangling.symlink_to(tmp_path / "absent.txt")
    with pytest.raises(WalkthroughError, match="symbolic link"):
        Writer().write(dangling, b"cast", "--record")
    assert not (tmp_path / "absent.txt").exists()


def test_a_file_made_during_the_write_is_kept_and_so_is_what_was_written(tmp_path):
    path = tmp_path / "w.cast"
    refused = pytest.raises(WalkthroughError, match=r"w.cast is a file this run did not make.*kept in")
    with refused, Writer().stream(path, "--record") as out:
        out.write(b"recorded")
        path.write_text("theirs")
    assert path.read_text() == "theirs"
    (kept,) = [p for p in tmp_path.iterdir() if p.name.endswith(".part")]
    assert kept.read_bytes() == b"recorded"


def test_record_refuses_the_model_and_leaves_it_whole(model, capsys):
    before = model.read_bytes()
    code, _, err = run_cli([model, "--record", model, "--exit"], capsys)
    assert_one_clear_line(code, err, "--record", "is the model this run reads")
    assert model.read_bytes() == before


def test_record_refuses_a_link_and_an_existing_file(model, tmp_path, capsys):
    victim = tmp_path / "victim.txt"
    victim.write_text("victim")
    (tmp_path / "link.cast").symlink_to("victim.txt")
    for target, needle in (("link.cast", "symbolic link"), ("victim.txt", "did not make")):
        code, _, err = run_cli([model, "--record", tmp_path / target, "--exit"], capsys)
        assert_one_clear_line(code, err, needle, "--overwrite")
    assert victim.read_text() == "victim"


def test_record_refuses_the_messages_file_even_with_overwrite(model, tmp_path, capsys):
    messages = tmp_path / "chat.json"
    messages.write_text(json.dumps([{"role": "user", "content": "hi"}]))
    before = messages.read_bytes()
    code, _, err = run_cli(
        [model, "--messages", messages, "--record", messages, "--overwrite", "--exit"], capsys
    )
    assert_one_clear_line(code, err, "is the --messages file this run reads")
    assert messages.read_bytes() == before


@pytest.mark.app  # slow: a recorded app run, written as a cast
def test_record_with_overwrite_replaces_the_file_with_a_cast(model, tmp_path):
    cast = tmp_path / "w.cast"
    cast.write_text("old")
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "walkthrough",
            str(model),
            "--exit",
            "--record",
            str(cast),
            "--overwrite",
        ],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert json.loads(cast.read_text().splitlines()[0])["version"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.gguf", "w.cast"]


@pytest.mark.parametrize("where", ["a file", "under a file"])
def test_screenshots_into_a_file_is_one_line_before_the_screen(model, tmp_path, capsys, where):
    victim = tmp_path / "victim.txt"
    victim.write_text("victim")
    target = victim if where == "a file" else victim / "shots"
    code, out, err = run_cli([model, "--screenshots", target], capsys)
    assert_one_clear_line(code, err, f"--screenshots {target}")
    assert out == ""  # the screen was never taken
    assert victim.read_text() == "victim"


def test_screenshots_refuse_a_planted_link_and_an_old_picture(model, tmp_path, capsys):
    victim = tmp_path / "victim.txt"
    victim.write_text("victim")
    shots = tmp_path / "shots"
    shots.mkdir()
    (shots / "1-File.svg").symlink_to("../victim.txt")
    code, out, err = run_cli([model, "--screenshots", shots], capsys)
    assert_one_clear_line(code, err, "1-File.svg is a symbolic link")
    assert out == "" and victim.read_text() == "victim"
    (shots / "1-File.svg").unlink()
    (shots / "3-Tokens.svg").write_text("an older picture")
    code, out, err = run_cli([model, "--screenshots", shots], capsys)
    assert_one_clear_line(code, err, "3-Tokens.svg is a file this run did not make")
    assert (shots / "3-Tokens.svg").read_text() == "an older picture"
