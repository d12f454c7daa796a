"""Reader protocol and the helpers readers share: opening files defensively, sniffing."""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO, Protocol

from traceanalyzer.errors import TraceFormatError
from traceanalyzer.model import Timeline

GZIP_MAGIC = b"\x1f\x8b"
SQLITE_MAGIC = b"SQLite format 3\x00"


class Reader(Protocol):
    """A trace format: a cheap sniff and a read into the timeline model."""

    name: str
    suffixes: tuple[str, ...]

    def sniff(self, path: Path) -> bool:
        """Return True when the file looks like this format (first bytes only)."""
        ...

    def read(self, path: Path) -> Timeline:
        """Read a file or a folder of per-rank files into one validated Timeline."""
        ...


def head_bytes(path: Path, n: int = 4096) -> bytes:
    """Return the first `n` bytes of the decompressed content (gzip recognised by magic)."""
    try:
        return next(iter(ByteBlocks(path, n)), b"")[:n]
    except TraceFormatError:
        return b""


class ByteBlocks:
    """The decompressed content of a file, in blocks of about `size` bytes.

    A gzip stream that is cut off ends the data instead of raising (everything decompressed
    before the cut is yielded) and sets `truncated`: Kineto traces are sometimes left
    unfinished, and the events before the cut are still worth reading.
    """

    def __init__(self, path: Path, size: int) -> None:
        self.path = path
        self.size = size
        self.truncated = False

    def __iter__(self) -> Iterator[bytes]:
        try:
            fh = self.path.open("rb")
        except PermissionError as exc:
            raise TraceFormatError(
                "cannot read the file: permission denied",
                path=self.path,
                hint="check its permissions",
            ) from exc
        with fh:
            if fh.read(2) != GZIP_MAGIC:
                fh.seek(0)
                while block := fh.read(self.size):
                    yield block
                return
            fh.seek(0)
            yield from self._gunzip(fh)

    def _gunzip(self, fh: BinaryIO) -> Iterator[bytes]:
        d = zlib.decompressobj(wbits=31)
        member_done = False  # True right after a gzip member ended
        pieces: list[bytes] = []
        held = 0
        while chunk := fh.read(1 << 20):
            while chunk:
                if member_done:  # bytes after a member's end: a concatenated member
                    d = zlib.decompressobj(wbits=31)
                    member_done = False
                try:
                    out = d.decompress(chunk)
                except zlib.error as exc:
                    raise TraceFormatError(
                        f"corrupt gzip data ({exc})",
                        path=self.path,
                        hint="the file is damaged; copy it again from its source",
                    ) from exc
                pieces.append(out)
                held += len(out)
                chunk = d.unused_data if d.eof else b""
                member_done = d.eof
            if held >= self.size:
                yield b"".join(pieces)
                pieces, held = [], 0
        if not member_done:
            self.truncated = True
        if pieces:
            yield b"".join(pieces)
