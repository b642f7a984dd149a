"""The documentation's commands still run.

Every `walkthrough ...` line in a code block of README.md or docs/*.md is run here (exit status 0,
and its first printed line as the page shows it, digits aside) or listed in `NOT_RUN_HERE` with the
reason and the test that covers it. Also: the README's test command is the one CI runs, and every
page or picture the docs link to exists.

A command is a code-block line that starts with `walkthrough` or `$ walkthrough` (after `&&`, too),
up to a pipe or a `#` comment; a trailing backslash continues it on the next line.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from walkthrough.cli import main

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
TEST_COMMAND = "pip install '.[test]' && python -m pytest -q"

SHAPED = "/tmp/walkthrough-bench/qwen36-35b-a3b-shaped.gguf"
SMOL_PROMPT = '"What is the capital of France? Answer in one sentence."'
# Commands the docs show that this file does not run, each with why and where it is covered.
NOT_RUN_HERE = {
    "walkthrough worker --port 50052 &": "a server that runs until stopped: tests/test_rpc_worker.py",
    "walkthrough worker --port 50053 &": "a server that runs until stopped: tests/test_rpc_worker.py",
    "walkthrough trace walkthrough/assets/tiny-clinical-moe.gguf --engine llama.cpp --rpc 127.0.0.1:50052,"
    "127.0.0.1:50053 --prompt \"Any interactions?\"": "needs the two workers above: tests/test_rpc_split.py",
    "walkthrough worker --host 192.168.1.20 --port 50052 --threads 8": "another host's address: "
                                                                        "tests/test_rpc_worker.py",
    "walkthrough trace FILE --engine llama.cpp --rpc 192.168.1.20:50052,192.168.1.21:50052":
        "placeholder hosts and FILE: tests/test_rpc_split.py",
    "walkthrough": "opens the app on the bundled model: tests/test_app_default.py",
    "walkthrough FILE --engine llama.cpp":
        "a placeholder FILE; the app on llama.cpp: tests/test_llama_engine.py",
    'walkthrough trace FILE --engine llama.cpp --prompt "Any interactions?"':
        "a placeholder FILE; trace on llama.cpp: tests/test_llama_engine.py",
    "walkthrough --autoplay --exit --record walk.cast": "records the app: tests/test_app_record.py",
    "walkthrough --autoplay --exit --screenshots shots --format png":
        "needs Chromium; the pictures and their one-line error without it: tests/test_pictures.py",
    f"walkthrough bench {SHAPED} --engine llama.cpp --prompt-tokens 8 --output-tokens 4":
        "a 21 GB file (tests/bench/qwen36_shaped.py) that loads in minutes; "
        "bench: tests/test_cli_bench.py",
    "walkthrough compare /tmp/tiny-q4_0.gguf":
        "needs the Q4_0 copy tests/requantize.py writes; tests/test_compare.py makes that pair "
        "and compares it",
    "walkthrough compare SmolLM2-135M-Instruct.Q4_1.gguf smol-q4_0.gguf "
    f"--prompt {SMOL_PROMPT} --steps 16":
        "a real model and its copy, 80 s; compare: tests/test_compare.py",
    "walkthrough tokenize lossy.gguf --text 'Hello, Zoë! naïve café 🦙 ok'":
        "lossy.gguf is built by tests/test_lost_text.py, which tokenizes with it",
    "walkthrough trace --messages assets/default_request.json --four-calls --steps 24 --measure":
        "starts a fresh process to time a cold start (seconds); --four-calls --measure: "
        "tests/test_cli_turns.py",
}
NEEDS_LLAMA_CPP = "--engine llama.cpp"


def doc_commands() -> dict[str, tuple[str, list[str]]]:
    """Each `walkthrough` command in a code block -> ('page:line', the output lines under it)."""
    found: dict[str, tuple[str, list[str]]] = {}
    for page in PAGES:
        lines = page.read_text(encoding="utf-8").splitlines()
        fenced = False
        i = 0
        while i < len(lines):
            line = lines[i]
            if line.startswith("```"):
                fenced = not fenced
                i += 1
                continue
            in_block = fenced or line.startswith("    ")
            text = line.strip()
            start = i
            while in_block and text.endswith("\\") and i + 1 < len(lines):
                i += 1
                text = text[:-1].rstrip() + " " + lines[i].strip()
            for part in text.split("&&") if in_block else ():
                command = _command(part.strip())
                if command is not None:
                    where = f"{page.relative_to(ROOT)}:{start + 1}"
                    found.setdefault(command, (where, _output(lines, i, fenced)))
            i += 1
    return found


def _command(text: str) -> str | None:
    text = text.removeprefix("$ ")
    if text != "walkthrough" and not text.startswith("walkthrough "):
        return None
    return re.sub(r"\s+#\s.*$", "", text.split(" | ")[0]).strip()  # no pipe, no comment


def _output(lines: list[str], i: int, fenced: bool) -> list[str]:
    """The lines printed under a `$ command` in a fenced block, up to the next `$` or the fence."""
    out = []
    for line in lines[i + 1:]:
        if not fenced or line.startswith(("```", "$ ")):
            break
        out.append(line)
    return out


def masked(line: str) -> str:
    """A printed line with its digits and runs of spaces made alike (times and widths vary)."""
    return re.sub(r"\s+", " ", re.sub(r"\d+", "#", line)).strip()


COMMANDS = doc_commands()
RUN_HERE = sorted(command for command in COMMANDS if command not in NOT_RUN_HERE)


def test_the_docs_show_commands_and_the_list_of_those_not_run_here_is_current():
    assert len(COMMANDS) >= 10, COMMANDS
    stale = sorted(set(NOT_RUN_HERE) - set(COMMANDS))
    assert not stale, f"listed in NOT_RUN_HERE but no longer in the docs: {stale}"
    assert all(reason.strip() for reason in NOT_RUN_HERE.values())


@pytest.mark.app  # slow: whole commands, as the pages show them
@pytest.mark.parametrize("command", RUN_HERE)
def test_a_documented_command_runs_and_prints_what_the_page_shows(command, capsys, monkeypatch,
                                                                  fixtures_dir):
    where, shown = COMMANDS[command]
    if NEEDS_LLAMA_CPP in command:
        pytest.importorskip("llama_cpp", reason="the llama.cpp extra is not installed")
    monkeypatch.chdir(ROOT)  # the pages' paths are relative to the checkout (../shared, assets/)
    monkeypatch.setenv("COLUMNS", "80")
    code = main(shlex.split(command)[1:])
    out, err = capsys.readouterr()
    assert code == 0, f"{where}: `{command}` exited {code}: {err}"
    assert out.strip(), f"{where}: `{command}` printed nothing"
    if shown:
        first, page = masked(out.splitlines()[0]), masked(shown[0])
        short, long = sorted((first, page), key=len)  # one may wrap sooner than the other
        assert len(short) >= 10 and long.startswith(short), \
            f"{where}: prints {first!r}, the page shows {page!r}"


def test_the_readme_test_command_is_the_one_ci_runs():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert f"\n    {TEST_COMMAND}\n" in readme
    assert "\n    pip install . && walkthrough\n" in readme
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert ci.rstrip().splitlines()[-1] == TEST_COMMAND


def test_every_link_between_pages_and_every_picture_exists():
    missing = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            if "://" not in target and not (page.parent / target).exists():
                missing.append(f"{page.relative_to(ROOT)} -> {target}")
    assert not missing, missing
