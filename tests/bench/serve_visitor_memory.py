"""Memory of one `walkthrough serve` visitor's app: what `serving_web.capacity.APP_ALLOWANCE` budgets for.

Run from the repository root:

    python tests/bench/serve_visitor_memory.py [MODEL.gguf]

Starts `walkthrough serve` on a free localhost port, connects one visitor over the websocket at 80x24,
and prints the app's resident memory (VmRSS) and peak (VmHWM) from /proc: after its first screen,
after stepping to the Prefill stage and running one chunk, and after a resize to 100000x100000 (which
the server clamps to 500x200). The reference in the same run is the server process itself. Nothing is
asserted: this prints figures.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from serve_support import read_screen, served

MIB = 1 << 20


def memory(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) of `pid` in MiB."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    return tuple(int(fields[name].split()[0]) * 1024 / MIB for name in ("VmRSS", "VmHWM"))


async def main(model: list[str]) -> None:
    with tempfile.TemporaryDirectory() as folder, served(Path(folder), *model) as server:
        print(f"server (reference): resident {memory(server.process.pid)[0]:.0f} MiB")
        async with aiohttp.ClientSession() as session, session.ws_connect(server.ws_url()) as ws:
            await read_screen(ws)
            [app] = server.apps()
            print("visitor's app, first screen: resident {:.0f} MiB, peak {:.0f} MiB".format(*memory(app)))
            for key in ("4", " "):  # the Prefill stage, then one chunk
                await ws.send_json(["stdin", key])
                await read_screen(ws, quiet=3.0)
            print("after one prefill chunk:     resident {:.0f} MiB, peak {:.0f} MiB".format(*memory(app)))
            await ws.send_json(["resize", {"width": 100000, "height": 100000}])
            await read_screen(ws, quiet=3.0)
            print("after a 100000x100000 resize: resident {:.0f} MiB, peak {:.0f} MiB".format(*memory(app)))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:2]))
