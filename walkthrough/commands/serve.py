"""`walkthrough serve [MODEL]`: the same app in a web browser, one app process per visitor.

Textualize's `textual-serve` (the optional extra `walkthrough[serve]`) serves a
page that draws a terminal; each browser tab that opens it gets a fresh
`walkthrough` process of its own (its own run, stage and seed), started with
the options given here. Nothing is shared between visitors but the model file,
which each process maps read-only.

Listening on localhost is the default. Any other address must be named with
`--host`, and then whoever can reach that address can run the app, read the
model's metadata and make this machine compute: the command says so on start,
and the page and websocket then need a token made for this launch, printed once
in the URL. The checks on every request and packet are in `walkthrough/serving_web/`
(docs/serve.md: what is refused and why).

Example:
    walkthrough serve --port 8000          # then open http://localhost:8000
"""

from __future__ import annotations

import argparse
import ipaddress
import secrets
import shlex
import socket
import sys

from walkthrough.commands.common import add_model_argument, open_model
from walkthrough.errors import WalkthroughError

DEFAULT_HOST = "localhost"
DEFAULT_PORT = 8000
LOOPBACK_NAMES = ("localhost", "ip6-localhost")
INSTALL_HINT = "pip install 'walkthrough[serve]'"


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    """Register `serve` and its options."""
    p = subparsers.add_parser(
        "serve",
        help="serve the app to a web browser (one app process per visitor)",
        description="Serve the walkthrough to a web browser with textual-serve: each visitor gets an app "
        "process of their own. Listens on localhost unless --host names another address.",
    )
    add_model_argument(p)
    p.add_argument("--host", default=DEFAULT_HOST, metavar="H",
                   help="address to listen on (default localhost; another address lets others reach the app)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, metavar="P", help="port (default 8000)")
    p.add_argument("--messages", metavar="F.json", help="chat messages for every visitor's app")
    p.add_argument("--seed", type=int, default=0, help="sampling seed for every visitor's app (default 0)")
    p.add_argument("--hardware", metavar="NAME", help="first hardware profile on the Costs stage")
    p.add_argument("--max-visitors", type=int, metavar="N",
                   help="app processes at once; more visitors are asked to come back (default: as many as "
                   "the free memory holds); each app's weights get an equal share of the free memory")


def is_loopback(host: str) -> bool:
    """True when `host` names this machine only (localhost, 127.0.0.0/8, ::1)."""
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_port_free(host: str, port: int) -> None:
    """Raise a one-line error if `port` cannot be listened on at `host` (busy, or the address is not ours)."""
    if not 1 <= port <= 65535:
        raise WalkthroughError(f"--port {port}: choose a port from 1 to 65535")
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise WalkthroughError(f"--host {host!r}: cannot resolve it ({exc.strerror}); try localhost") from None
    family, _, _, _, address = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(address)
        except OSError as exc:
            raise WalkthroughError(
                f"cannot listen on {host}:{port} ({exc.strerror}); is another server using it? try --port {port + 1}"
            ) from None


def app_command(args: argparse.Namespace, weight_budget: int) -> str:
    """The shell command each visitor's app process runs: this Python, this package, the options given,
    and the app's share of memory for dequantized weights."""
    words = [sys.executable, "-m", "walkthrough"]
    if args.model is not None:
        words.append(args.model)
    if args.messages is not None:
        words += ["--messages", args.messages]
    words += ["--seed", str(args.seed), "--max-memory", str(weight_budget)]
    if args.hardware is not None:
        words += ["--hardware", args.hardware]
    return " ".join(shlex.quote(word) for word in words)


def run(args: argparse.Namespace) -> int:
    from walkthrough.costs.memory import dequantized_bytes, free_memory
    from walkthrough.textsafe import visible

    if args.max_visitors is not None and args.max_visitors < 1:
        raise WalkthroughError(f"--max-visitors {args.max_visitors}: at least 1 visitor (or leave it out for the "
                               "default from this machine's free memory)")
    with open_model(args.model) as gguf:  # a bad model is one line now, not an error page in every browser
        dequantized = dequantized_bytes(gguf)
    if args.messages is not None:
        from walkthrough.request.state import load_messages

        load_messages(args.messages)
    if args.hardware is not None:
        from walkthrough.costs.hardware import load_profiles, pick

        pick(load_profiles(), args.hardware)
    try:
        import textual_serve.server  # noqa: F401 (the extra is installed)
    except ImportError:
        raise WalkthroughError(f"serving needs textual-serve, which is not installed: {INSTALL_HINT}") from None
    from walkthrough.serving_web import server as guarded
    from walkthrough.serving_web.capacity import plan

    visitors = plan(dequantized, args.max_visitors, free_memory())
    check_port_free(args.host, args.port)
    loopback = is_loopback(args.host)
    if not loopback:
        print(f"walkthrough: warning: listening on {visible(args.host)}: anyone who can reach it and has the "
              "token in the URL below can run the app on this machine and read the model's metadata",
              file=sys.stderr)
    token = None if loopback else secrets.token_urlsafe(24)
    guarded.GuardedServer(app_command(args, visitors.weight_budget), host=args.host, port=args.port,
                          loopback=loopback, token=token, max_visitors=visitors.visitors,
                          weight_budget=visitors.weight_budget).serve()
    return 0

