"""`walkthrough worker`: lend this host's CPU to a run on another host, as a ggml RPC server.

The server is llama.cpp's own (`ggml_backend_rpc_start_server`, through
llama-cpp-python's libraries; `walkthrough.engine.llama.rpc`); a run on another host
reaches it with `--rpc HOST:PORT` and places some of the model's layers here.

ggml's RPC server has no authentication and no encryption: whoever reaches its
port can make this host allocate memory and run graphs. It listens on 127.0.0.1
unless `--host` names another address, and then prints one warning line.

    walkthrough worker --port 50052                       # on this host only
    walkthrough worker --host 192.168.1.20 --port 50052   # on a private network you trust
"""

from __future__ import annotations

import argparse
import ipaddress
import sys
import threading

from walkthrough.commands.options import whole
from walkthrough.errors import WalkthroughError

DEFAULT_HOST = "127.0.0.1"


def add_parser(subparsers) -> None:
    from walkthrough.engine.llama.rpc import DEFAULT_PORT

    p = subparsers.add_parser(
        "worker",
        help="serve this host's CPU to a llama.cpp run elsewhere (ggml's RPC server; --rpc on the other host)",
        description="Run ggml's RPC server on this host's CPU so that `--rpc HOST:PORT` on another run places "
        "layers here. Unauthenticated: it listens on 127.0.0.1 unless --host names another address.",
    )
    p.add_argument("--host", default=DEFAULT_HOST, metavar="H",
                   help="IPv4 address to listen on (default 127.0.0.1; never an address an open network reaches)")
    p.add_argument("--port", type=whole(1), default=DEFAULT_PORT, metavar="P",
                   help=f"port to listen on (default {DEFAULT_PORT}, as llama.cpp's rpc-server)")
    p.add_argument("--threads", type=whole(1), default=None, metavar="N",
                   help="CPU threads for the graphs it runs (default: half the CPUs)")


def run(args: argparse.Namespace) -> int:
    from walkthrough.commands.serve import check_port_free
    from walkthrough.engine.llama import rpc
    from walkthrough.engine.llama.model import default_threads
    from walkthrough.textsafe import visible

    try:
        address = ipaddress.IPv4Address(args.host)
    except ValueError:
        raise WalkthroughError(f"--host {visible(args.host)!r}: ggml's RPC server listens on an IPv4 address "
                               f"(e.g. {DEFAULT_HOST}, or this host's address on a private network)") from None
    rpc.libraries()  # a missing extra or a build without RPC: one line, before anything listens
    check_port_free(args.host, args.port)
    if not address.is_loopback:
        print(f"walkthrough: warning: listening on {args.host}:{args.port}: ggml's RPC server is unauthenticated "
              "and unencrypted; anyone who reaches it can use this host's memory and CPU: never on an open network",
              file=sys.stderr)
    threads = args.threads or default_threads()
    print(f"walkthrough: worker on {args.host}:{args.port}, {threads} threads; on the other host: "
          f"--engine llama.cpp --rpc {args.host}:{args.port}   (Ctrl-C stops it)", file=sys.stderr, flush=True)
    # ggml's server loops in C for ever; in a thread of its own, Ctrl-C and SIGTERM still reach Python.
    server = threading.Thread(target=rpc.serve, args=(args.host, args.port, threads), daemon=True)
    server.start()
    try:
        while server.is_alive():
            server.join(0.5)
    except KeyboardInterrupt:
        return 0
    raise WalkthroughError(f"ggml's RPC server on {args.host}:{args.port} stopped (see its lines above)")
