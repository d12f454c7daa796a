"""Readers: trace files -> Timeline. `read(path)` picks the reader by the file's first bytes."""

from __future__ import annotations

import dataclasses
import gzip
import shutil
import tempfile
from pathlib import Path

from traceanalyzer.errors import TraceFormatError, UnsupportedTraceError
from traceanalyzer.model import Timeline
from traceanalyzer.readers.base import SQLITE_MAGIC, Reader, head_bytes
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
    """Read a trace file or a folder of per-rank trace files into a validated Timeline.

    A gzip-compressed Nsight SQLite export (`run.sqlite.gz`) is decompressed into a temporary
    folder (never beside the input), read, and removed; the report names the input."""
    p = Path(path)
    if p.is_file() and not READERS["nsys"].sniff(p) and head_bytes(p, 16) == SQLITE_MAGIC:
        return _read_gzipped_sqlite(p)
    return detect(p).read(p)


def _read_gzipped_sqlite(path: Path) -> Timeline:
    with tempfile.TemporaryDirectory(prefix="traceanalyzer-") as tmp:
        inner = Path(tmp) / path.name.removesuffix(".gz")
        try:
            with gzip.open(path, "rb") as src, inner.open("wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
        except (OSError, EOFError) as exc:
            raise TraceFormatError(
                f"cannot decompress the gzipped SQLite export ({exc})",
                path=path,
                hint="gunzip it and check the export is complete",
            ) from exc
        timeline = READERS["nsys"].read(inner)
    meta = timeline.meta
    ranks = tuple(dataclasses.replace(r, path=str(path)) for r in meta.ranks)
    return Timeline(
        events=timeline.events, meta=dataclasses.replace(meta, path=str(path), ranks=ranks)
    )


__all__ = ["READERS", "detect", "read"]
