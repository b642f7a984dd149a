"""Bytes this process has sent to and received from each RPC worker, as the kernel counts them (Linux).

ggml's RPC client keeps one TCP connection per worker inside this process. The
kernel counts every byte of it (`struct tcp_info`, linux/tcp.h: tcpi_bytes_acked
at offset 120, tcpi_bytes_received at 128, both since Linux 4.2), so the bytes a
pass moves are the difference of two readings around it: llama.cpp's graph,
the activations, the logits and the stages' reads of remote tensors, all of it.
Sent bytes are counted once the worker acknowledged them.

    before = counters(endpoints)
    ... one pass ...
    moved = difference(before, counters(endpoints))   # {"127.0.0.1:50052": {"sent": .., "received": ..}}

Not handled: other systems (returns {}), a worker named by a host name that
resolves to several addresses (the first is used).
"""

from __future__ import annotations

import os
import socket
import struct

from walkthrough.engine.llama.rpc import Endpoint

TCP_INFO_BYTES = 256
BYTES_ACKED, BYTES_RECEIVED = 120, 128


def counters(endpoints: list[Endpoint]) -> dict[str, dict[str, int]]:
    """{endpoint: {"sent", "received"}} summed over this process's TCP connections to it; {} if unreadable."""
    if not hasattr(socket, "TCP_INFO") or not os.path.isdir("/proc/self/fd"):
        return {}
    wanted = {}
    for e in endpoints:
        try:
            wanted[(socket.gethostbyname(e.host), e.port)] = str(e)
        except OSError:
            continue
    out = {name: {"sent": 0, "received": 0} for name in wanted.values()}
    for fd in _socket_fds():
        try:
            with socket.socket(fileno=os.dup(fd)) as s:
                peer = s.getpeername()
                name = wanted.get(peer[:2]) if isinstance(peer, tuple) else None
                if name is None:
                    continue
                info = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, TCP_INFO_BYTES)
        except OSError:
            continue
        if len(info) >= BYTES_RECEIVED + 8:
            out[name]["sent"] += struct.unpack_from("<Q", info, BYTES_ACKED)[0]
            out[name]["received"] += struct.unpack_from("<Q", info, BYTES_RECEIVED)[0]
    return out


def difference(before: dict[str, dict[str, int]], after: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    """What moved between two readings, per worker."""
    return {name: {k: after[name][k] - before.get(name, {}).get(k, 0) for k in ("sent", "received")}
            for name in after}


def _socket_fds() -> list[int]:
    fds = []
    for entry in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{entry}").startswith("socket:"):
                fds.append(int(entry))
        except OSError:
            continue
    return fds
