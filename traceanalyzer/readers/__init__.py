"""Readers: trace files -> Timeline. `read(path)` picks the reader by the file's first bytes."""

from __future__ import annotations

import dataclasses
import gzip
import re
import shutil
import sqlite3
import tempfile
from pathlib import Path

from traceanalyzer.errors import TraceAnalyzerError, TraceFormatError, UnsupportedTraceError
from traceanalyzer.model import Timeline
from traceanalyzer.readers import nsys_rep
from traceanalyzer.readers.base import GZIP_MAGIC, SQLITE_MAGIC, ByteSource, Reader, head_bytes
from traceanalyzer.readers.chrome_tail import WHITESPACE
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
    if not path.is_file():
        # a device (/dev/zero), a pipe or a socket: no size to read a trace by, and maybe no end
        raise TraceFormatError(
            "not a regular file (a device, pipe or socket)",
            path=path,
            hint="point at the trace file itself (a .json, .json.gz or .sqlite file)",
        )
    if path.stat().st_size == 0:
        raise TraceFormatError(
            "the file is empty", path=path, hint="the profiler may have crashed before writing"
        )
    _not_a_trace(path)
    for reader in READERS.values():
        if reader.sniff(path):
            return reader
    _check_gzip(path)
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


def _check_gzip(path: Path) -> None:
    """A gzip file whose data does not decompress, or ends before any of it, is named as
    such (not "empty"): random bytes after a gzip header are not gzip data; a stream cut
    right after its header is a cut-off copy."""
    with path.open("rb") as fh:
        if fh.read(2) != GZIP_MAGIC:
            return
    size = path.stat().st_size
    try:
        with ByteSource(path) as src:
            got = src.readinto(memoryview(bytearray(1 << 16)))
            cut = src.truncated
    except TraceFormatError as exc:
        raise TraceFormatError(
            f"not gzip data: the {_size(max(0, size - 10))} after its gzip header do not "
            "decompress "
            f"{exc.problem.removeprefix('corrupt gzip data ')}",
            path=path,
            hint="the file is damaged or is not what its name says; copy it again from its source",
        ) from exc
    if not got and cut:
        raise TraceFormatError(
            f"cut off: the gzip stream ends after {_size(size)}, before any data",
            path=path,
            hint="the copy stopped early; copy the trace again from its source",
        )


def _size(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 1_000_000 else f"{n} bytes"


def read(path: Path | str, export_dir: Path | None = None) -> Timeline:
    """Read a trace file or a folder of per-rank trace files into a validated Timeline.

    A gzip-compressed Nsight SQLite export (`run.sqlite.gz`) is decompressed into a temporary
    folder (never beside the input), read, and removed; an Nsight Systems report
    (`run.nsys-rep`) is exported there with `nsys` (see `nsys_rep`; `export_dir` keeps the
    exports by content hash). The report names the input."""
    p = Path(path)
    if nsys_rep.is_report(p):
        export = nsys_rep.read_report(p, lambda copy: _read_copy(copy, p), export_dir)
        return _renamed(export, p)
    if p.is_file() and not READERS["nsys"].sniff(p) and head_bytes(p, 16) == SQLITE_MAGIC:
        return _read_gzipped_sqlite(p)
    reader = detect(p)
    wal = p.with_name(p.name + "-wal")
    if reader is READERS["nsys"] and wal.is_file() and wal.stat().st_size > 0:
        return _read_with_wal(p, wal)
    return reader.read(p)


def _read_with_wal(path: Path, wal: Path) -> Timeline:
    """An export with an unmerged write-ahead log (`run.sqlite-wal` beside it, left by a
    writer that did not close the database): its committed changes live in the WAL, which a
    read-only, immutable open would ignore. The pair is copied into a temporary folder (never
    written beside the input), merged there, read, and removed."""
    with tempfile.TemporaryDirectory(prefix="traceanalyzer-") as tmp:
        inner = Path(tmp) / path.name
        try:
            shutil.copyfile(path, inner)
            shutil.copyfile(wal, inner.with_name(inner.name + "-wal"))
            con = sqlite3.connect(inner)
            try:
                con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            finally:
                con.close()
        except (OSError, sqlite3.Error) as exc:
            raise TraceFormatError(
                f"cannot merge the export's write-ahead log {wal.name} ({exc})",
                path=path,
                hint="open the database once with sqlite3 to merge it, or export again",
            ) from exc
        timeline = _read_copy(inner, path)
    note = f"{path.name}: read with its unmerged write-ahead log ({wal.name}), merged in a copy"
    return _renamed(timeline, path, note)


def _read_copy(copy: Path, path: Path) -> Timeline:
    """Read the SQLite export `copy`, a temporary stand-in for `path`: an error names `path`,
    the file the user gave, not the temporary folder."""
    try:
        return READERS["nsys"].read(copy)
    except TraceAnalyzerError as exc:
        exc.path = str(path)
        raise


def _renamed(timeline: Timeline, path: Path, note: str | None = None) -> Timeline:
    """A timeline read from a temporary copy, named after the input (and with a note)."""
    meta = timeline.meta
    ranks = tuple(dataclasses.replace(r, path=str(path)) for r in meta.ranks)
    quality = meta.quality
    if note:
        quality = dataclasses.replace(quality, notes=(*quality.notes, note))
    return Timeline(
        events=timeline.events,
        meta=dataclasses.replace(meta, path=str(path), ranks=ranks, quality=quality),
        gpu_metrics=timeline.gpu_metrics,
    )


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
        timeline = _read_copy(inner, path)
    return _renamed(timeline, path)


__all__ = ["READERS", "detect", "read"]


#: torch.profiler's `export_memory_timeline` JSON: `[[times...], [[bytes per category]...]]`.
_MEMORY_TIMELINE = re.compile(rb"^\[\s*\[\s*-?\d")
#: Nsight Compute's exports: a raw-page CSV's header, a report's suffix.
_NCU_CSV = re.compile(rb'^(?:==PROF==[^\n]*\n)*"ID","Process ID"')
#: Perfetto's protobuf traces, by name (their bytes have no mark of their own).
_PERFETTO_SUFFIXES = (".pftrace", ".perfetto-trace", ".perfetto")


def _not_a_trace(path: Path) -> None:
    """Files people hand over for a trace that are not one, each named with what to record
    or convert instead."""
    head = head_bytes(path, 256).lstrip(WHITESPACE)
    if head.startswith(b"[[[["):
        # Kineto's array form is a list of event objects; arrays nested in arrays hold none
        depth = len(head) - len(head.lstrip(b"["))
        raise UnsupportedTraceError(
            f"not a trace: a JSON array of arrays ({depth} or more levels deep), not of events",
            path=path,
            hint="a Chrome trace is an object with traceEvents, or an array of event objects "
            '({"ph": ..., "ts": ...})',
        )
    if _MEMORY_TIMELINE.match(head):
        raise UnsupportedTraceError(
            "not a trace: this is torch.profiler's export_memory_timeline output (memory by "
            "category over time), which holds no kernels or steps",
            path=path,
            hint="export the trace itself: prof.export_chrome_trace(path), or "
            "tensorboard_trace_handler",
        )
    if _NCU_CSV.match(head) or path.name.lower().endswith((".ncu-rep", ".ncu-rep.gz")):
        raise UnsupportedTraceError(
            "an Nsight Compute export, not a trace: it holds kernels replayed one by one, "
            "with no timeline to analyse",
            path=path,
            hint="give it beside a trace of the same program: `traceanalyzer report TRACE "
            f"--ncu {path.name}`",
        )
    if path.name.lower().endswith(_PERFETTO_SUFFIXES):
        raise UnsupportedTraceError(
            "a Perfetto protobuf trace: not read",
            path=path,
            hint="convert it to JSON with Perfetto's traceconv (traceconv json IN OUT.json), "
            "or record with torch.profiler (export_chrome_trace)",
        )
