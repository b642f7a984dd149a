"""Hostile inputs for the hostile-run tests: GGUFs that parse but poison, hostile texts, and checks on output.

Every GGUF here is a copy of the reference llama model (`ref-llama-f32.gguf`,
F32 so any weight can be replaced exactly) with one thing changed, written by
`gguf_builder.rewrite_gguf`. `raw_controls(text)` lists the characters a
terminal would act on or a reader could not see (C0 but newline, DEL, C1, ESC,
bidi, tag, zero-width, BOM): none may reach a command's output.
"""

from __future__ import annotations

import math
import struct
import unicodedata
from pathlib import Path

import numpy as np
from conftest import FIXTURES_DIR
from gguf.constants import GGUFValueType as V
from gguf_builder import Tensor, rewrite_gguf

from walkthrough.cli import main

LLAMA = FIXTURES_DIR / "reference" / "ref-llama-f32.gguf"
ARCH = "llama"

# Text carrying every escape class: OSC title + BEL, OSC 52 clipboard, SGR colour, 8-bit CSI, bidi override
# and isolate, tag characters, zero-width space and joiner, word joiner, BOM, line separator, and markup.
HOSTILE_TEXT = ("\x1b]0;pwned\x07\x1b]52;c;aGk=\x07\x1b[31mred\x9b31m\u202eevil\u2066"
                "\U000e0041\U000e0042\u200b\u200d\u2060\ufeff\u2028[bold]x[/]")

BIG = "{% set a=[0]*16000000 %}{% set b=[0]*16000000 %}"

# Templates by the class of attack issue 20 found: work inside one C-level operation, list multiplication
# growing memory, constant folding of a huge format, expandtabs/format_map spikes, too deeply nested blocks.
# Each was seen to hang or to grow memory without bound in-process; each must end in a TemplateError.
HOSTILE_TEMPLATES = {
    "one endless comparison": BIG + "{{ ([a]*16000000)==([b]*16000000) }}",
    "string of a huge list": BIG + "{{ ([a]*1000)|string|length }}",
    "tojson of a huge list": BIG + "{{ ([a]*1000)|tojson|length }}",
    "sum of huge lists": BIG + "{{ ([a]*1000)|sum(start=[])|length }}",
    "folded format precision": "{{ '%.50000000f'|format(1.0)|length }}",
    "folded format width then wordwrap": "{{ '%16000000d'|format(1)|wordwrap(3) }}",
    "huge precision": "{{ '%.2000000000f'|format(1.0) }}",
    "expandtabs": "{{ ('\\t'*500).expandtabs(16000000) }}",
    "format_map width": "{{ '{a:>{w}}'.format_map({'a':1,'w':6000000000}) }}",
    "21 nested for": "{% for a in messages %}" * 21 + "x" + "{% endfor %}" * 21,
    "200 nested if": "{% if true %}" * 200 + "x" + "{% endif %}" * 200,
}
# One template of each class, for the slower paths (every command, the app): all of them go through
# the renderer itself in test_template_isolation.py.
TEMPLATE_CLASSES = ("one endless comparison", "sum of huge lists", "folded format precision", "expandtabs",
                    "21 nested for")

# (key suffix, bad value) pairs for the float hyperparameters the engine reads.
BAD_FLOATS = [
    ("rope.freq_base", (V.FLOAT32, math.nan)),
    ("rope.freq_base", (V.FLOAT32, -1.0)),
    ("rope.freq_base", (V.FLOAT32, 0.0)),
    ("rope.freq_base", (V.FLOAT32, math.inf)),
    ("attention.layer_norm_rms_epsilon", (V.FLOAT32, -1.0)),
    ("attention.layer_norm_rms_epsilon", (V.FLOAT32, math.nan)),
    ("rope.scaling.factor", (V.FLOAT32, math.nan)),
    ("rope.scaling.factor", (V.STRING, "abc")),
    ("rope.scaling.factor", (V.STRING, "0")),
    ("rope.scaling.factor", (V.ARRAY, V.FLOAT32, [1.0, 2.0])),
]
BAD_WEIGHTS = [("output_norm.weight", math.nan), ("blk.0.attn_norm.weight", math.inf), ("output_norm.weight", 3e38)]


def hidden_char(ch: str) -> bool:
    """A character no command may print raw (derived from Unicode categories, not from the code under test)."""
    code = ord(ch)
    if ch == "\n":
        return False
    return code < 0x20 or 0x7F <= code < 0xA0 or unicodedata.category(ch) in ("Cf", "Cs", "Zl", "Zp")


def raw_controls(text: str) -> list[str]:
    """The hidden characters in `text`, escaped for an assertion message."""
    return [f"U+{ord(c):04X}" for c in text if hidden_char(c)]


def with_metadata(tmp_path: Path, name: str, changes: dict, source: Path = LLAMA) -> Path:
    """A copy of `source` with metadata keys changed (a value of None drops the key)."""
    return rewrite_gguf(source, tmp_path / name, changes)


def with_weight(tmp_path: Path, name: str, tensor: str, value: float) -> Path:
    """A copy of the llama reference whose tensor has `value` at index 3."""
    from gguf import GGUFReader

    data = next(t for t in GGUFReader(LLAMA).tensors if t.name == tensor).data
    poisoned = np.array(data, dtype=np.float32).reshape(-1).copy()
    poisoned[3] = value
    return rewrite_gguf(LLAMA, tmp_path / name, tensor_data={tensor: poisoned})


def run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    """`walkthrough ARGV` in this process: (exit status, stdout, stderr)."""
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def assert_one_clear_line(code: int, err: str, *needles: str) -> None:
    """Exit 2 and one `walkthrough: error:` line holding each needle, no traceback, nothing hidden."""
    lines = err.strip().splitlines()
    assert code == 2, err
    assert "Traceback" not in err
    assert lines and lines[-1].startswith("walkthrough: error: "), err[:300]
    assert not raw_controls(err), raw_controls(err)
    for needle in needles:
        assert needle in lines[-1], lines[-1][:300]


def with_many_tensors(tmp_path: Path, name: str, n: int, source: Path = LLAMA) -> Path:
    """A copy of `source` with n more tensors of 8 F32 values each (`extra.I.weight`): 300,000 make 25 MB."""
    return rewrite_gguf(source, tmp_path / name, extra_tensors=[Tensor(f"extra.{i}.weight", (8,)) for i in range(n)])



def with_many_keys(tmp_path: Path, name: str, n: int, key=lambda i: f"extra.{i}.value", source: Path = LLAMA) -> Path:
    """A copy of `source` with n more metadata keys named `key(i)`, strings and uint32 in turn: 300,000 make 12 MB."""
    return with_metadata(tmp_path, name, {key(i): (V.STRING, f"text {i}") if i % 2 else (V.UINT32, i)
                                          for i in range(n)}, source)

def with_sparse_strings(tmp_path: Path, name: str, strings: dict[str, int], source: Path = LLAMA) -> Path:
    """A copy of `source` where each key in `strings` is a string value of that many bytes, left as a hole.

    The file is sparse: the strings read as NUL bytes but take no disk space, so a header claiming
    four 1 GiB strings costs a few hundred KB. Sizes must be multiples of 32 (the alignment), so the
    tensor data stays where the tensor table says.
    """
    markers = {key: f"@sparse-{i:08d}@".ljust(32, "#") for i, key in enumerate(strings)}
    plain = with_metadata(tmp_path, f"{name}.plain", {k: (V.STRING, m) for k, m in markers.items()}, source)
    blob = plain.read_bytes()
    plain.unlink()
    path = tmp_path / name
    with open(path, "wb") as fh:
        pos = 0
        encoded = {key: struct.pack("<Q", len(m)) + m.encode() for key, m in markers.items()}
        for key in sorted(strings, key=lambda k: blob.index(encoded[k])):  # in file order
            assert strings[key] % 32 == 0, strings[key]
            at = blob.index(encoded[key])
            fh.write(blob[pos:at] + struct.pack("<Q", strings[key]))
            fh.seek(strings[key], 1)  # the string's bytes: a hole
            pos = at + len(encoded[key])
        fh.write(blob[pos:])
    return path


# One fresh process runs several command lines in turn (imports paid once) and prints what each wrote.
_MEASURED = """
import contextlib, io, json, sys
from walkthrough.cli import main
results = []
for argv in json.loads(sys.argv[1]):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code
    results.append({"code": code, "out": out.getvalue(), "err": err.getvalue()})
print(json.dumps(results))
"""


# Prepended to a measured script: at exit, report the process's own peak resident memory (VmHWM, Linux) and
# that of the helpers it waited for (ru_maxrss of its children), and its CPU seconds, on the last line of stderr.
_PEAK_REPORT = """
import atexit as _atexit, resource as _resource, sys as _sys
def _report_peak():
    own = _resource.getrusage(_resource.RUSAGE_SELF).ru_maxrss * (1 if _sys.platform == "darwin" else 1024)
    try:
        with open("/proc/self/status") as fh:
            own = next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmHWM:"))
    except (OSError, StopIteration):
        pass
    kids = _resource.getrusage(_resource.RUSAGE_CHILDREN).ru_maxrss * (1 if _sys.platform == "darwin" else 1024)
    usage = _resource.getrusage(_resource.RUSAGE_SELF)
    _sys.stderr.write(f"\\npeak-bytes {max(own, kids)} {usage.ru_utime + usage.ru_stime}\\n")
_atexit.register(_report_peak)
"""


def run_script_measured(script: str, args: list[str], timeout: float = 300.0) -> tuple[str, int, float]:
    """Run `python -c script *args` in a fresh process: (its stdout, its peak resident memory in bytes,
    its CPU seconds, which unlike wall time hardly depend on what else the machine runs).

    The process reports its own peak when it exits (VmHWM on Linux, which starts afresh at exec;
    `ru_maxrss` from `wait4` would not: it counts the memory of the test process that started it),
    and that of the helpers it waited for (a template render's). A process still running after
    `timeout` is killed and the test fails: the bound on time is there so a hang cannot stall the
    suite, not as a target.
    """
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _PEAK_REPORT + script, *args], capture_output=True,
                          timeout=timeout, check=False)
    stderr = done.stderr.decode(errors="replace")
    assert done.returncode == 0, f"exit {done.returncode}: {stderr[-2000:]}"
    peak, cpu = stderr.rsplit("peak-bytes ", 1)[1].split()
    return done.stdout.decode(), int(peak), float(cpu)


def run_cli_measured(argvs: list[list], timeout: float = 300.0) -> tuple[list[dict], int]:
    """Each argv through `walkthrough.cli.main`, in turn, in one fresh process.

    Returns:
        ({"code", "out", "err"} for each argv, the process's peak resident memory in bytes).
    """
    import json

    stdout, peak, _ = run_script_measured(_MEASURED, [json.dumps([[str(a) for a in argv] for argv in argvs])], timeout)
    return json.loads(stdout), peak
