"""Key storms against the real app in a real terminal (tmux): does `q` still end it, and how fast?

For each seed: start `walkthrough [MODEL]` in a detached tmux session at 80x24,
send KEYS random keys from the README's key table (stage keys, space, enter, r, c,
the sampling knobs, the Decode view keys; no q) in small bursts, resizing the window
every ~RESIZE_EVERY keys, then send `q` and time how long the process takes to end.
A run that has not ended after --give-up seconds is counted as wedged (and killed).

Usage: python tests/bench/key_storm.py [--seeds 10] [--keys 500] [--model PATH] [--storms 1]

Prints one line per run (seed, seconds from q to exit, WEDGED, NOT STARTED, or ENDED
DURING THE STORM with the pane's last lines) and a summary: runs, wedged, median
and worst exit time. With STORM_VERBOSE=1 a wedged run prints its screen and a
py-spy dump of its threads (when py-spy is installed); STORM_LAUNCHER names a
script to run instead of `-m walkthrough` (tests/bench/storm_probe.py logs every
key with the screen on top and dumps the screen stack on SIGUSR1, which the bench
sends to a wedged run). STORM_SPY_EXIT=1 samples the app with py-spy from q to its end
(collapsed stacks in storm-exit-<seed>.txt in the temporary folder). `--storms 2` runs two storms at once.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
KEYS = ["Space", "Enter", "r", "c", "n", "p", *"12345678", "t", "T", "k", "K", "o", "O", "m", "M", "s",
        "[", "]", ",", ".", "v", "left", "right", "i", "h"]
SIZES = [(80, 24), (120, 40), (60, 20), (100, 30), (200, 50), (81, 25)]
RESIZE_EVERY = 25


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], check=False, capture_output=True, text=True).stdout.strip()


def storm(seed: int, n_keys: int, model: str | None, give_up: float, results: list) -> None:
    rng = random.Random(seed)
    session = f"storm-{seed}-{time.monotonic_ns()}"
    launcher = os.environ.get("STORM_LAUNCHER", "-m walkthrough")  # e.g. tests/bench/storm_probe.py
    command = f"cd {shlex.quote(str(ROOT))} && exec {shlex.quote(sys.executable)} {launcher} {model or ''}"
    started = subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "80", "-y", "24", command],
                             check=False, capture_output=True, text=True)
    tmux("set-option", "-t", session, "remain-on-exit", "on")
    try:
        shown = time.monotonic()  # let the app open the file and draw its first stage
        while "File" not in tmux("capture-pane", "-p", "-t", session) and time.monotonic() - shown < 60:
            time.sleep(0.2)
        if "File" not in tmux("capture-pane", "-p", "-t", session):  # not a storm: say so, do not count it
            results.append((seed, f"NOT STARTED (tmux: {started.stderr.strip() or started.returncode})"))
            return
        time.sleep(1)
        sent = 0
        while sent < n_keys:
            burst = [rng.choice(KEYS) for _ in range(min(rng.randint(1, 8), n_keys - sent))]
            tmux("send-keys", "-t", session, *burst)
            sent += len(burst)
            if sent // RESIZE_EVERY != (sent - len(burst)) // RESIZE_EVERY:
                w, h = rng.choice(SIZES)
                tmux("resize-window", "-t", session, "-x", str(w), "-y", str(h))
            time.sleep(rng.uniform(0.0, 0.05))
        storm_ended = time.monotonic()
        pid = tmux("display-message", "-p", "-t", session, "#{pane_pid}")
        if tmux("display-message", "-p", "-t", session, "#{pane_dead}") == "1":  # the storm ended the app
            results.append((seed, "ENDED DURING THE STORM"))
            print(tmux("capture-pane", "-p", "-S", "-40", "-t", session), flush=True)
            return
        tmux("send-keys", "-t", session, "Escape")
        time.sleep(0.3)
        spy = None
        if os.environ.get("STORM_SPY_EXIT") and shutil.which("py-spy"):  # where the time from q to exit goes
            spy = subprocess.Popen(["py-spy", "record", "--format", "raw", "--rate", "250", "--threads", "--pid", pid,
                                    "--output", f"{tempfile.gettempdir()}/storm-exit-{seed}.txt"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(0.5)
        start = time.monotonic()
        tmux("send-keys", "-t", session, "q")
        if os.environ.get("STORM_SIGNAL_AFTER"):  # ask the app for stack dumps while it winds down
            pid = tmux("display-message", "-p", "-t", session, "#{pane_pid}")
            threading.Timer(float(os.environ["STORM_SIGNAL_AFTER"]),
                            lambda: subprocess.run(["kill", "-USR1", pid], check=False, capture_output=True)).start()
        while time.monotonic() - start < give_up:
            if tmux("display-message", "-p", "-t", session, "#{pane_dead}") == "1":
                if os.environ.get("STORM_VERBOSE"):
                    print(f"  q sent at {start:.3f}, pane dead seen at {time.monotonic():.3f}", flush=True)
                results.append((seed, time.monotonic() - start))
                if spy is not None:
                    spy.wait(timeout=10)  # it writes its samples once the app has ended
                behind = caught_up(pid, storm_ended)
                if behind is not None:
                    print(f"  seed {seed}: the storm's last key handled {behind:.2f} s after it was sent", flush=True)
                return
            time.sleep(0.05)
        results.append((seed, None))
        if os.environ.get("STORM_VERBOSE"):  # what the wedged app shows, and where its threads are
            print(tmux("capture-pane", "-p", "-t", session), flush=True)
            if os.environ.get("STORM_LAUNCHER"):  # a launcher that dumps the app's state on SIGUSR1
                subprocess.run(["kill", "-USR1", pid], check=False, capture_output=True)
                time.sleep(1)
            if shutil.which("py-spy"):
                dump = subprocess.run(["py-spy", "dump", "--locals", "--pid", pid], check=False,
                                      capture_output=True, text=True)
                print(dump.stdout or dump.stderr, flush=True)
    finally:
        tmux("kill-session", "-t", session)


def caught_up(pid: str, storm_ended: float) -> float | None:
    """With tests/bench/storm_probe.py as the launcher: seconds from the storm's last key sent to the
    app's handling of it (the backlog a storm leaves; both clocks are the system's monotonic clock)."""
    log = Path(os.environ.get("STORM_PROBE_DIR", tempfile.gettempdir())) / f"storm-{pid}.log"
    if "storm_probe" not in os.environ.get("STORM_LAUNCHER", "") or not log.is_file():
        return None
    keys = re.findall(r"^(\d+\.\d+) Key (\S+) forwarded=False", log.read_text(), re.MULTILINE)
    closing = max((i for i, (_, key) in enumerate(keys) if key == "escape"), default=len(keys))
    storm = keys[:closing]  # the storm sends no escape: the last one is the closing escape
    return max(0.0, float(storm[-1][0]) - storm_ended) if storm else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--keys", type=int, default=500)
    parser.add_argument("--storms", type=int, default=1, help="storms running at once")
    parser.add_argument("--model", default=None)
    parser.add_argument("--give-up", type=float, default=30.0)
    args = parser.parse_args()
    results: list = []
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    for i in range(0, len(seeds), args.storms):
        threads = [threading.Thread(target=storm, args=(s, args.keys, args.model, args.give_up, results))
                   for s in seeds[i:i + args.storms]]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for seed, seconds in results[-len(threads):]:
            print(f"seed {seed}: " + ("WEDGED" if seconds is None else seconds if isinstance(seconds, str)
                                      else f"q -> exit in {seconds:.2f} s"), flush=True)
    times = [s for _, s in results if isinstance(s, float)]
    wedged = sum(1 for _, s in results if s is None)
    other = sum(1 for _, s in results if isinstance(s, str))
    print(f"runs {len(results)}, keys {args.keys}, storms at once {args.storms}: wedged {wedged}"
          + (f", not started or ended early {other}" if other else "") + "; "
          + (f"exit after q: median {statistics.median(times):.2f} s, worst {max(times):.2f} s" if times else ""))


if __name__ == "__main__":
    main()
