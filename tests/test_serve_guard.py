"""`walkthrough serve` against a hostile page or visitor (issue 25), over textual-serve's websocket protocol.

Each test starts a real server (`serve_support.served`: its own process group, always stopped) and
speaks to it with aiohttp's client as a browser page would, or as another site's page would.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import sys

import aiohttp
import pytest
from serve_support import alive, read_screen, screen_size, served, wait_for_screen, wait_until

pytest.importorskip("textual_serve", reason="textual-serve is not installed (pip install '.[serve]')")

END_WAIT = 10.0  # seconds allowed for an app to be gone after its visitor left (SIGTERM, 2 s, SIGKILL)


async def _status(session: aiohttp.ClientSession, url: str, **headers: str) -> int:
    """The HTTP status a websocket upgrade to `url` gets (101 when accepted)."""
    try:
        async with session.ws_connect(url, headers=headers) as ws:
            await ws.close()
            return 101
    except aiohttp.WSServerHandshakeError as error:
        return error.status


async def test_another_sites_page_cannot_open_the_websocket_or_the_page(tmp_path):
    with served(tmp_path) as server:
        port = server.port
        async with aiohttp.ClientSession() as session:
            hostile = {
                "another site": {"Origin": "http://evil.example"},
                "another port": {"Origin": f"http://127.0.0.1:{port + 1}"},
                "opaque origin": {"Origin": "null"},
                "DNS rebinding": {"Origin": f"http://evil.example:{port}", "Host": f"evil.example:{port}"},
            }
            for case, headers in hostile.items():
                assert await _status(session, server.ws_url(), **headers) == 403, case
                async with session.get(server.url, headers=headers) as page:
                    assert page.status == 403, case
            assert server.apps() == [], "a refused websocket started an app"
            for own in (server.origin, f"http://localhost:{port}"):
                assert await _status(session, server.ws_url(), Origin=own, Host=own.split("//")[1]) == 101
    refused = server.log_lines("refused")
    assert len(refused) == 2 * len(hostile), server.console()
    assert "evil.example" in refused[0] and "Traceback" not in server.console()


async def test_the_terminal_size_is_clamped_on_connect_and_on_resize(tmp_path):
    def drawn(sizes: list[tuple[int, int]], size: tuple[int, int]) -> bool:
        """`size` was drawn last, and nothing larger than the clamp ever was."""
        return sizes[-1:] == [size] and all(w <= 500 and h <= 200 for w, h in sizes)

    with served(tmp_path) as server:
        async with aiohttp.ClientSession() as session:
            async with session.ws_connect(server.ws_url("width=800&height=300")) as ws:
                assert drawn(await wait_for_screen(ws, (500, 200)), (500, 200))
                for asked, clamped in [((40, 20), (40, 20)), ((100000, 100000), (500, 200)), ((3, 1), (10, 5))]:
                    await ws.send_json(["resize", {"width": asked[0], "height": asked[1]}])
                    assert drawn(await wait_for_screen(ws, clamped), clamped), asked
            async with session.ws_connect(server.ws_url("width=abc&height=1e400")) as ws:
                assert drawn(await wait_for_screen(ws, (80, 24)), (80, 24))  # not numbers: the default size


async def test_a_busy_app_is_ended_when_its_visitor_leaves(tmp_path):
    with served(tmp_path) as server:
        async with aiohttp.ClientSession() as session, session.ws_connect(server.ws_url()) as ws:
            assert screen_size(await read_screen(ws))
            assert len(server.apps()) == 1
            processes = server.processes()
            for pid in processes:  # busy: the app reads no packet, not even textual-serve's "quit"
                os.kill(pid, signal.SIGSTOP)
        assert await wait_until(lambda: not any(map(alive, processes)), END_WAIT), "the app outlived its visitor"
        assert await wait_until(lambda: server.log_lines("visitor 1 ended"), 2.0)
    [ended] = server.log_lines("visitor 1 ended")
    assert "SIGKILL" in ended, ended


async def test_visitors_beyond_the_cap_are_refused_with_a_message_the_page_shows(tmp_path):
    with served(tmp_path, "--max-visitors", "1") as server:
        async with aiohttp.ClientSession() as session:
            async with session.ws_connect(server.ws_url()) as first:
                assert screen_size(await read_screen(first))
                async with session.ws_connect(server.ws_url()) as second:
                    closing = await asyncio.wait_for(second.receive(), 10)
                    assert closing.type == aiohttp.WSMsgType.CLOSE
                    assert closing.data == aiohttp.WSCloseCode.TRY_AGAIN_LATER
                    assert "--max-visitors 1" in closing.extra and "try again" in closing.extra
                async with session.get(server.url) as page:
                    assert page.status == 503 and "--max-visitors 1" in await page.text()
                assert len(server.apps()) == 1
            assert await wait_until(lambda: server.apps() == [], END_WAIT), "the app outlived its visitor"
            # The app is gone a moment before the server frees its place (it reaps the app and drains its
            # output first); the line saying the visitor ended is written once the place is free.
            assert await wait_until(lambda: server.log_lines("visitor 1 ended"), END_WAIT), server.console()
            async with session.ws_connect(server.ws_url()) as third:  # the place is free again
                assert screen_size(await read_screen(third))
    assert len(server.log_lines("refused visitor")) == 2, server.console()


HOSTILE_PACKETS = [
    '["resize", {"width": 0, "height": 0}]',
    '["resize", {"width": -3, "height": -3}]',
    '["resize", {"width": NaN, "height": 30}]',
    '["resize", {"width": Infinity, "height": -Infinity}]',
    '["resize", {"width": "80", "height": null}]',
    '["resize", {"width": true, "height": 30}]',
    '["resize", [80, 24]]',
    '["resize"]',
    '["stdin", 5]',
    '["stdin", "\\ud800"]',
    '{"stdin": "q"}',
    "[]",
    "not json",
    "[" * 100000,
]


HOSTILE_REQUESTS = [  # raw bytes on a new connection; Host is filled in
    b"\x00\xff garbage\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: {host}\r\nX: " + b"a" * 100000 + b"\r\n\r\n",
    (b"GET /ws HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    b"Sec-WebSocket-Key: bad\r\nSec-WebSocket-Version: 13\r\n\r\n"),
    b"GET /static/../../../../etc/passwd HTTP/1.1\r\nHost: {host}\r\n\r\n",
    b"GET /download/nope HTTP/1.1\r\nHost: {host}\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: {host}\r\nOrigin: \xff\xfe\r\n\r\n",
    b"GET / HTTP/1.1\r\nHost: [zz\r\n\r\n",
]


def _raw_status(port: int, request: bytes) -> bytes:
    """The status line the server answers a raw request with."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
        connection.sendall(request.replace(b"{host}", f"127.0.0.1:{port}".encode()))
        return connection.recv(4096).split(b"\r\n", 1)[0]


async def test_hostile_sizes_and_packets_leave_the_app_running_and_the_console_clean(tmp_path):
    with served(tmp_path) as server:
        for request in HOSTILE_REQUESTS:
            status = await asyncio.to_thread(_raw_status, server.port, request)
            assert re.match(rb"HTTP/1\.[01] 4\d\d ", status), (request[:60], status)
        async with aiohttp.ClientSession() as session, session.ws_connect(server.ws_url()) as ws:
            assert screen_size(await read_screen(ws))
            for packet in HOSTILE_PACKETS:
                await ws.send_str(packet)
            await ws.send_bytes(b"\x00\xff")
            await read_screen(ws, timeout=3.0)
            await ws.send_json(["resize", {"width": 40, "height": 20}])
            assert (await wait_for_screen(ws, (40, 20)))[-1:] == [(40, 20)], "the app died on a hostile packet"
            await ws.send_json(["ping", "still there"])
            assert await asyncio.wait_for(ws.receive_json(), 10) == ["pong", "still there"]
        assert await wait_until(lambda: server.log_lines("visitor 1 ended"), END_WAIT)
    console = server.console()
    assert "Traceback" not in console and "IndexError" not in console, console
    [ended] = server.log_lines("visitor 1 ended")
    assert "malformed packets ignored" in ended
    assert all(line.startswith(("walkthrough: serving", "walkthrough serve: ")) for line in console.splitlines())


async def test_stopping_the_server_ends_every_visitors_app_and_tells_the_page(tmp_path):
    with served(tmp_path) as server:
        async with aiohttp.ClientSession() as session, session.ws_connect(server.ws_url()) as ws:
            assert screen_size(await read_screen(ws))
            processes = server.processes()
            os.killpg(server.process.pid, signal.SIGTERM)  # what Ctrl+C does too
            closing = await asyncio.wait_for(ws.receive(), END_WAIT)
            while closing.type in (aiohttp.WSMsgType.BINARY, aiohttp.WSMsgType.TEXT):  # the app's last frames
                closing = await asyncio.wait_for(ws.receive(), END_WAIT)
            assert closing.type == aiohttp.WSMsgType.CLOSE and closing.extra == "the server stopped"
            server.process.wait(timeout=END_WAIT)
        assert processes and not any(map(alive, processes)), "an app outlived the server"
    assert server.log_lines("visitor 1 ended"), server.console()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's prctl")
async def test_a_server_killed_outright_takes_its_visitors_apps_with_it(tmp_path):
    with served(tmp_path) as server:
        async with aiohttp.ClientSession() as session, session.ws_connect(server.ws_url()) as ws:
            assert screen_size(await read_screen(ws))
            processes = server.processes()
            os.kill(server.process.pid, signal.SIGKILL)  # no handler runs: the kernel must end the apps
            server.process.wait(timeout=END_WAIT)
            assert await wait_until(lambda: not any(map(alive, processes)), END_WAIT), "apps outlived the server"
