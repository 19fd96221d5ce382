"""The framing between the tuner and its measuring process: a JSON header and named binary blobs.

A message is an 8-byte little-endian length, the UTF-8 JSON header (which lists the blobs' names
and sizes), then the blobs' bytes in that order. Only JSON and raw bytes cross the pipe: nothing
is unpickled and no code is sent (the measuring process loads the candidate's parts with the
backend's checking loader, as a compiled model's parts are loaded).
"""

from __future__ import annotations

import json
import struct
from typing import IO, Any

MAX_HEADER = 1 << 24


def send(stream: IO[bytes], header: dict[str, Any], blobs: dict[str, bytes] | None = None) -> None:
    """Write one message (``header`` plus ``blobs``) to ``stream`` and flush it."""
    blobs = blobs or {}
    head = dict(header, blobs=[[k, len(v)] for k, v in blobs.items()])
    data = json.dumps(head).encode()
    stream.write(struct.pack("<Q", len(data)))
    stream.write(data)
    for v in blobs.values():
        stream.write(v)
    stream.flush()


def _read_exact(stream: IO[bytes], n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = stream.read(n - len(buf))
        if not chunk:
            raise EOFError("the other side closed the pipe")
        buf += chunk
    return bytes(buf)


def recv(stream: IO[bytes]) -> tuple[dict[str, Any], dict[str, bytes]]:
    """Read one message from ``stream``: (header, blobs). Raises ``EOFError`` when the stream
    ends and ``ValueError`` for a malformed message."""
    (n,) = struct.unpack("<Q", _read_exact(stream, 8))
    if n > MAX_HEADER:
        raise ValueError(f"message header of {n} bytes is too large")
    header = json.loads(_read_exact(stream, n))
    if not isinstance(header, dict) or not isinstance(header.get("blobs"), list):
        raise ValueError("malformed message header")
    blobs = {str(k): _read_exact(stream, int(size)) for k, size in header.pop("blobs")}
    return header, blobs
