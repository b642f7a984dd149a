"""serve's guards one by one (walkthrough/serving_web): addresses, token, sizes, packets, the visitor cap.

The token is checked on a `GuardedServer` run in this process (aiohttp's test server on 127.0.0.1),
because a bind to another address, where the CLI asks for one, would expose the test to the network.
Its visitors run a stand-in command that only waits, so no app is started.
"""

from __future__ import annotations

import sys

import aiohttp
import pytest

pytest.importorskip("textual_serve", reason="textual-serve is not installed (pip install '.[serve]')")

from aiohttp.test_utils import TestServer

from walkthrough.serving_web import capacity
from walkthrough.serving_web.guard import (
    MAX_SIZE,
    MIN_SIZE,
    ServedAddress,
    clamp_size,
    origin_refusal,
    parse_packet,
    size_from_query,
    token_matches,
)
from walkthrough.serving_web.server import GuardedServer

WAITER = f"{sys.executable} -c 'import sys; sys.stdin.read()'"  # a visitor's "app" that only waits


@pytest.mark.parametrize(("host", "accepted"), [
    ("localhost:8000", True), ("127.0.0.1:8000", True), ("[::1]:8000", True), ("LOCALHOST:8000", True),
    ("evil.example:8000", False), ("localhost:8001", False), ("localhost", False), ("127.0.0.2:8000", False),
    ("localhost:99999", False), ("user@localhost:8000", False), (None, False),
])
def test_a_loopback_bind_accepts_only_its_own_names_in_host(host, accepted):
    assert (ServedAddress("localhost", 8000, loopback=True).host_refusal(host) is None) is accepted


def test_another_bind_leaves_host_to_the_token_but_not_a_malformed_one():
    public = ServedAddress("0.0.0.0", 8000, loopback=False)
    assert public.host_refusal("my-machine.lan:8000") is None
    assert public.host_refusal("bad host:x") is not None


@pytest.mark.parametrize(("origin", "host", "accepted"), [
    (None, "localhost:8000", True),  # not from a page of another site (curl, a top-level load)
    ("http://localhost:8000", "localhost:8000", True),
    ("http://127.0.0.1:8000", "127.0.0.1:8000", True),
    ("http://[::1]:8000", "[::1]:8000", True),
    ("http://localhost", "localhost:80", True),
    ("http://evil.example", "localhost:8000", False),
    ("http://localhost:8001", "localhost:8000", False),
    ("http://127.0.0.1:8000", "localhost:8000", False),  # the page is served for the name it was loaded by
    ("null", "localhost:8000", False),
    ("file://", "localhost:8000", False),
    ("http://localhost:notaport", "localhost:8000", False),
])
def test_origin_must_be_the_pages_own_host_and_port(origin, host, accepted):
    assert (origin_refusal(origin, host) is None) is accepted


def test_the_token_is_compared_whole():
    assert token_matches("s3cret-token", "s3cret-token")
    for wrong in (None, "", "s3cret", "s3cret-token ", "S3CRET-TOKEN", "\udcff"):
        assert not token_matches(wrong, "s3cret-token")


def test_sizes_are_clamped_and_non_numbers_give_the_default():
    assert clamp_size(0, -4) == MIN_SIZE and clamp_size(10**9, 10**9) == MAX_SIZE
    assert clamp_size(120, 40) == (120, 40)
    assert size_from_query("120", "40") == (120, 40)
    assert size_from_query("99999", "0") == (MAX_SIZE[0], MIN_SIZE[1])
    assert size_from_query("abc", "nan") == (80, 24) == size_from_query(None, "1e400")


@pytest.mark.parametrize("message", [
    '["resize", {"width": NaN, "height": 30}]', '["resize", {"width": 80, "height": Infinity}]',
    '["resize", {"width": "80", "height": 24}]', '["resize", {"width": true, "height": 24}]',
    '["resize", {"width": 80}]', '["resize", [80, 24]]', '["stdin", 5]', '["stdin"]', '{"stdin": "q"}',
    "[]", "[5]", '["exec", "rm"]', "not json", "[" * 100000, '"' + "x" * 10,
])
def test_malformed_packets_are_none(message):
    assert parse_packet(message) is None


def test_packets_the_page_sends():
    assert parse_packet('["stdin", "q"]').text == "q"
    assert parse_packet('["resize", {"width": 0, "height": 1e6}]').size == (MIN_SIZE[0], MAX_SIZE[1])
    assert parse_packet('["resize", {"width": 100.6, "height": 30}]').size == (101, 30)
    assert parse_packet('["ping", "t"]').echo == "t"
    assert parse_packet('["focus"]').kind == "focus" and parse_packet('["blur"]').kind == "blur"


def test_the_free_memory_is_shared_out_between_visitors():
    gib, allowance, floor = 2**30, capacity.APP_ALLOWANCE, capacity.MIN_BUDGET
    # A small model: as many visitors as fit, each app's budget all its weights.
    free = 10 * (allowance + gib) + 5
    assert capacity.plan(gib, None, free) == capacity.Plan(10, gib, free)
    # Fewer visitors asked for: each app may hold all its weights; more: each holds its share.
    assert capacity.plan(gib, 2, 10 * gib).weight_budget == gib
    assert capacity.plan(8 * gib, 2, 10 * gib).weight_budget == 5 * gib - allowance
    # A model larger than the memory: one visitor, its weights within what is free (decoded again on use).
    assert capacity.plan(100 * gib, None, 10 * gib) == capacity.Plan(1, 10 * gib - allowance, 10 * gib)
    # Never below the engine's minimum budget; one visitor where the free memory is unknown.
    assert capacity.plan(gib, 1000, 10 * gib).weight_budget == floor
    assert capacity.plan(gib, None, None) == capacity.Plan(1, gib, None)
    assert capacity.plan(gib, 3, None).visitors == 3


@pytest.fixture
async def tokened():
    server = GuardedServer(WAITER, host="127.0.0.1", port=0, loopback=False, token="launch-token-123",
                           max_visitors=2)
    test_server = TestServer(await server._make_app(), host="127.0.0.1")
    await test_server.start_server()
    server.address = ServedAddress("127.0.0.1", test_server.port, loopback=False)
    try:
        async with aiohttp.ClientSession() as session:
            yield server, test_server, session
    finally:
        for visitor in list(server.visitors):
            await visitor.end()
        await test_server.close()


async def test_another_address_needs_the_launch_token_on_the_page_and_the_websocket(tokened):
    _server, test_server, session = tokened
    base = f"http://127.0.0.1:{test_server.port}"
    for query in ("", "?token=", "?token=launch-token-12", "?token=launch-token-1234"):
        async with session.get(f"{base}/{query}") as page:
            assert page.status == 403, query
    async with session.get(f"{base}/?token=launch-token-123") as page:
        assert page.status == 200
        assert f"ws://127.0.0.1:{test_server.port}/ws/launch-token-123" in await page.text()
    async with session.get(f"{base}/static/js/textual.js") as script:  # textual-serve's own files are public
        assert script.status == 200
    for path in ("/ws", "/ws/wrong-token", "/ws?token=wrong"):
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await session.ws_connect(f"{base}{path}")
        assert refused.value.status == 403, path
    async with session.ws_connect(f"{base}/ws/launch-token-123?width=80&height=24") as ws:
        assert not ws.closed



async def test_the_url_with_the_token_is_printed_once_at_start(capsys):
    server = GuardedServer(WAITER, host="0.0.0.0", port=8123, loopback=False, token="launch-token-123",
                           max_visitors=3, weight_budget=64 << 20)
    await server.on_startup(None)
    out = capsys.readouterr().out
    assert out.count("launch-token-123") == 1 and out.count("\n") == 1, out
    assert "http://0.0.0.0:8123/?token=launch-token-123" in out and "at most 3 visitors" in out
    assert "64.0 MiB" in out
