"""Readers: trace files -> Timeline. `read(path)` picks the reader by the file's first bytes."""

from __future__ import annotations

from pathlib import Path

from traceanalyzer.errors import TraceFormatError, UnsupportedTraceError
from traceanalyzer.model import Timeline
from traceanalyzer.readers.base import Reader, head_bytes
from traceanalyzer.readers.chrome_trace import ChromeTraceReader
from traceanalyzer.readers.nsys_sqlite import NsysSqliteReader

#: Sniffed in order: the SQLite magic bytes first, then JSON.
READERS: dict[str, Reader] = {"nsys": NsysSqliteReader(), "chrome": ChromeTraceReader()}


def detect(path: Path) -> Reader:
    """Return the reader for a file or folder, judged by content, not by suffix."""
    if not path.exists():
        raise TraceFormatError("no such file or folder", path=path, hint="check the path")
    if path.is_dir():
        return READERS["chrome"]
    if path.stat().st_size == 0:
        raise TraceFormatError(
            "the file is empty", path=path, hint="the profiler may have crashed before writing"
        )
    for reader in READERS.values():
        if reader.sniff(path):
            return reader
    if not head_bytes(path, 1 << 16).strip():
        raise TraceFormatError(
            "the file is empty (only whitespace)",
            path=path,
            hint="the profiler may have crashed before writing",
        )
    raise UnsupportedTraceError(
        f"not a known trace: the content matches none of the formats read ({', '.join(READERS)})",
        path=path,
        hint="traceanalyzer reads torch.profiler Chrome traces (.json, .json.gz) and Nsight "
        "Systems SQLite exports (nsys export --type sqlite)",
    )


def read(path: Path | str) -> Timeline:
    """Read a trace file or a folder of per-rank trace files into a validated Timeline."""
    p = Path(path)
    return detect(p).read(p)


__all__ = ["READERS", "detect", "read"]
