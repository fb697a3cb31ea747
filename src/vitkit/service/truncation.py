"""A PNG whose image data ends before the rows its header declares, found before it is decoded.

Pillow decodes such a file without an error when its zlib stream ends cleanly (a 342-byte PNG that declares
9000x9000 and holds 10 rows), filling the missing rows with zeros; `LOAD_TRUNCATED_IMAGES` plays no part. The
service refuses it instead: the image data is inflated in pieces of `PIECE` bytes, counted and dropped, so the
check needs no more memory than one piece, and it stops as soon as the declared rows are there.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator

SIGNATURE = b"\x89PNG\r\n\x1a\n"
PIECE = 1 << 20
CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}  # PNG colour type -> samples per pixel
ADAM7 = ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2))


def chunks(data: bytes) -> Iterator[tuple[bytes, memoryview]]:
    """(type, payload) of each whole chunk after the signature, to IEND or the end of the data."""
    view = memoryview(data)
    at = len(SIGNATURE)
    while at + 8 <= len(view):
        length, kind = struct.unpack(">I4s", view[at : at + 8])
        yield kind, view[at + 8 : at + 8 + length]
        if kind == b"IEND":
            return
        at += 12 + length


def row_bytes(width: int, bits: int) -> int:
    return 1 + (width * bits + 7) // 8  # the filter byte, then the packed samples


def declared_bytes(width: int, height: int, bits: int, interlaced: bool) -> int:
    """The inflated size of a PNG's image data: every row (of every Adam7 pass) with its filter byte."""
    if not interlaced:
        return height * row_bytes(width, bits)
    total = 0
    for x0, y0, dx, dy in ADAM7:
        columns, rows = max(0, -(-(width - x0) // dx)), max(0, -(-(height - y0) // dy))
        if columns and rows:
            total += rows * row_bytes(columns, bits)
    return total


def png_shortfall(data: bytes, name: str) -> str | None:
    """Why `data`, a PNG, holds fewer rows than its header declares; None when it holds them all, or is not a
    PNG this check understands (the decoder then has the last word)."""
    if not data.startswith(SIGNATURE):
        return None
    found = chunks(data)
    kind, header = next(found, (b"", memoryview(b"")))
    if kind != b"IHDR" or len(header) != 13:
        return None
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", header)
    if colour not in CHANNELS:
        return None
    expected = declared_bytes(width, height, depth * CHANNELS[colour], interlace == 1)
    inflate = zlib.decompressobj()
    produced = 0
    try:
        for kind, payload in found:
            if kind != b"IDAT":
                continue
            pending: bytes | memoryview = payload
            while pending and produced < expected:
                produced += len(inflate.decompress(pending, PIECE))
                pending = inflate.unconsumed_tail
            if produced >= expected:
                return None
    except zlib.error:
        return None  # broken data: the decoder says so in its own words
    if not interlace:
        got = f"{produced // row_bytes(width, depth * CHANNELS[colour])} of its {height:,} rows"
    else:
        got = f"{produced:,} of its {expected:,} bytes of rows"
    return f"{name}: truncated PNG: declares {width}x{height} but its image data holds {got} (expected a complete image)"
