"""textual-serve's `Server`, guarded: the checks of `guard` on every request, one app per visitor, capped.

What it adds to textual-serve 1.1.3 (which checks none of this itself; docs/serve.md says why):
- a middleware refusing, with 403 and one log line, a request whose `Host` or `Origin` is not this
  server, and the page or websocket without the launch token when one is set;
- terminal sizes clamped on connect and on every resize packet; malformed packets ignored;
- each visitor's app ended (`visitor.Visitor.end`) when its websocket closes and when the server stops;
- at most `max_visitors` apps at once: the page answers 503 and the websocket closes with code 1013 and
  the reason, which the page shows;
- logging that writes one line per record and never a traceback.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import signal
import sys
from pathlib import Path
from typing import Any

import aiohttp_jinja2
import jinja2
from aiohttp import WSCloseCode, WSMsgType, web
from textual_serve.server import Server

from walkthrough.serving_web.guard import (
    ServedAddress,
    origin_refusal,
    parse_packet,
    size_from_query,
    token_matches,
)
from walkthrough.serving_web.visitor import Visitor
from walkthrough.textsafe import visible
from walkthrough.units import binary_bytes

log = logging.getLogger("walkthrough.serve")
PAGE_DIR = Path(__file__).resolve().parent
GUARDED_ROUTES = ("index", "websocket", "websocket-token")  # need the token, when there is one
SHUTDOWN_TIMEOUT = 5.0  # seconds the server waits for visitors' handlers when it stops


class OneLineFormatter(logging.Formatter):
    """"walkthrough serve: <message>" on one line; an exception adds its type and message, never a traceback."""

    def format(self, record: logging.LogRecord) -> str:
        text = record.getMessage()
        if record.exc_info and record.exc_info[1] is not None:
            error = record.exc_info[1]
            text += f" ({type(error).__name__}: {error})"
        return "walkthrough serve: " + visible(" ".join(text.split()))

    def formatException(self, ei) -> str:
        return ""

    def formatStack(self, stack_info: str) -> str:
        return ""


class GuardedServer(Server):
    """Serve `command` (one app process per visitor) at `host`:`port`, guarded.

    Args:
        command: the shell words of each visitor's app.
        host, port: where to listen.
        loopback: whether `host` names this machine only (then `Host` headers are checked by name).
        token: required in the page's URL (`?token=`) and the websocket's, or None.
        max_visitors: apps running at once; more are refused with a message the page shows.
        weight_budget: each app's --max-memory (bytes), for the start line; None if not given.
    """

    def __init__(self, command: str, *, host: str, port: int, loopback: bool, token: str | None,
                 max_visitors: int, weight_budget: int | None = None, title: str = "walkthrough") -> None:
        super().__init__(command, host=host, port=port, title=title, templates_path=PAGE_DIR)
        self.address = ServedAddress(host, port, loopback)
        self.token = token
        self.max_visitors = max_visitors
        self.weight_budget = weight_budget
        self.visitors: dict[Visitor, web.WebSocketResponse] = {}
        self._numbers = itertools.count(1)

    # ---- start and stop -------------------------------------------------------------------------
    def initialize_logging(self) -> None:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(OneLineFormatter())
        logging.basicConfig(level=logging.INFO, handlers=[handler], force=True)
        logging.getLogger("aiohttp.access").disabled = True

    def url(self) -> str:
        """The page's address, with the token when there is one."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/" + (f"?token={self.token}" if self.token else "")

    async def on_startup(self, app: web.Application) -> None:
        each = f", each app's weights within {binary_bytes(self.weight_budget)}" if self.weight_budget else ""
        print(f"walkthrough: serving on {self.url()} (at most {self.max_visitors} visitors at once{each}; "
              "Ctrl+C stops)", flush=True)

    async def on_shutdown(self, app: web.Application) -> None:
        """End every visitor's app and close its websocket."""
        for visitor, websocket in list(self.visitors.items()):
            await websocket.close(code=WSCloseCode.GOING_AWAY, message=b"the server stopped")
            await visitor.end()

    def serve(self, debug: bool = False) -> None:
        """Listen until SIGINT or SIGTERM; then end every visitor's app."""
        self.initialize_logging()
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, self.request_exit)
        web.run_app(self._make_app(), host=self.host, port=self.port, handle_signals=False, loop=loop,
                    print=None, access_log=None, shutdown_timeout=SHUTDOWN_TIMEOUT)

    async def _make_app(self) -> web.Application:
        app = web.Application(middlewares=[self._guard])
        aiohttp_jinja2.setup(app, loader=jinja2.FileSystemLoader(self.templates_path), autoescape=True)
        app.add_routes([
            web.get("/", self.handle_index, name="index"),
            web.get("/ws", self.handle_websocket, name="websocket"),
            web.get("/ws/{token}", self.handle_websocket, name="websocket-token"),
            web.get("/download/{key}", self.handle_download, name="download"),
            web.static("/static", self.statics_path, name="static"),
        ])
        app.on_startup.append(self.on_startup)
        app.on_shutdown.append(self.on_shutdown)
        return app

    # ---- checks ---------------------------------------------------------------------------------
    def refusal(self, request: web.Request) -> str | None:
        """Why `request` is refused (403), or None."""
        host = request.headers.get("Host")
        why = self.address.host_refusal(host) or origin_refusal(request.headers.get("Origin"), host)
        if why is None and self.token is not None and _route_name(request) in GUARDED_ROUTES:
            given = request.match_info.get("token") or request.query.get("token")
            if not token_matches(given, self.token):
                why = "no token or a wrong one (use the URL serve printed when it started)"
        return why

    @web.middleware
    async def _guard(self, request: web.Request, handler) -> web.StreamResponse:
        why = self.refusal(request)
        if why is not None:
            log.warning(f"refused {request.remote} {request.method} {_route_name(request) or 'path'}: {why}")
            return web.Response(status=403, text=f"walkthrough serve refused this request: {why}\n")
        try:
            return await handler(request)
        except web.HTTPException:
            raise
        except Exception as error:  # noqa: BLE001 (one log line, never a traceback, for any visitor input)
            log.error(f"request from {request.remote} to {_route_name(request)} failed: "
                      f"{type(error).__name__}: {error}")
            return web.Response(status=500, text="walkthrough serve: internal error\n")

    def full(self) -> str | None:
        """The message a visitor sees when every place is taken, or None."""
        if len(self.visitors) < self.max_visitors:
            return None
        return (f"{len(self.visitors)} visitors already (--max-visitors {self.max_visitors}); "
                "try again when one leaves")

    # ---- handlers -------------------------------------------------------------------------------
    async def handle_index(self, request: web.Request) -> web.StreamResponse:
        if (why := self.full()) is not None:
            log.warning(f"refused visitor from {request.remote}: {why}")
            return web.Response(status=503, text=f"walkthrough: {why}\n")
        scheme = "wss" if request.secure else "ws"
        socket_path = "/ws" + (f"/{self.token}" if self.token else "")
        context: dict[str, Any] = {
            "title": self.title,
            "static_url": "/static/",
            "websocket_url": f"{scheme}://{request.host}{socket_path}",
            "font_size": 16,
        }
        return aiohttp_jinja2.render_template("page.html", request, context)

    async def handle_websocket(self, request: web.Request) -> web.WebSocketResponse:
        websocket = web.WebSocketResponse(heartbeat=15)
        await websocket.prepare(request)
        if (why := self.full()) is not None:
            log.warning(f"refused visitor from {request.remote}: {why}")
            await websocket.close(code=WSCloseCode.TRY_AGAIN_LATER, message=why.encode()[:120])
            return websocket
        width, height = size_from_query(request.query.get("width"), request.query.get("height"))
        visitor = Visitor(self.command, number=next(self._numbers), write_bytes=websocket.send_bytes,
                          write_str=websocket.send_str, close=websocket.close,
                          download_manager=self.download_manager)
        self.visitors[visitor] = websocket
        ignored, why = 0, "left"
        try:
            await visitor.start(width, height)
            log.info(f"visitor {visitor.number} from {request.remote}: app started at {width}x{height}")
            ignored = await self._process_messages(websocket, visitor)
        except asyncio.CancelledError:
            why = "server stopping"
        except Exception as error:  # noqa: BLE001 (one log line, never a traceback)
            why = f"error {type(error).__name__}: {error}"
        finally:  # shielded: a handler cancelled now (the server stopping) still frees the visitor's place
            await asyncio.shield(self._leave(visitor, websocket, why, ignored))
        return websocket

    async def _leave(self, visitor: Visitor, websocket: web.WebSocketResponse, why: str, ignored: int) -> None:
        """End the visitor's app, free its place, close its websocket, and say so in one line."""
        try:
            how = await visitor.end()
        finally:
            self.visitors.pop(visitor, None)
        await websocket.close()
        note = f"; {ignored} malformed packets ignored" if ignored else ""
        log.info(f"visitor {visitor.number} ended ({why}): {how}{note}")

    async def _process_messages(self, websocket: web.WebSocketResponse, app_service: Visitor) -> int:
        """Pass the page's packets to the app until the websocket closes; returns how many were ignored."""
        ignored = 0
        async for message in websocket:
            packet = parse_packet(message.data) if message.type == WSMsgType.TEXT else None
            if packet is None:
                ignored += 1
            elif packet.kind == "stdin":
                await app_service.send_bytes(packet.text.encode("utf-8", "replace"))
            elif packet.kind == "resize":
                await app_service.set_terminal_size(*packet.size)
            elif packet.kind == "ping":
                await websocket.send_json(["pong", packet.echo])
            elif packet.kind == "focus":
                await app_service.focus()
            elif packet.kind == "blur":
                await app_service.blur()
        return ignored


def _route_name(request: web.Request) -> str | None:
    route = request.match_info.route
    return getattr(route, "name", None)

