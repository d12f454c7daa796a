"""Reader for torch.profiler / Kineto Chrome traces (`.json`, `.json.gz`, or a folder of ranks).

Pipeline position: file(s) -> this reader -> Timeline.

How it stays fast and lean on multi-GB traces: Kineto writes one event per indented block,
consecutive events separated by `},` + newline + indentation + `{`. A raw newline cannot
occur inside a JSON string, so that separator is structural. The reader streams the file in
blocks, finds the separators with numpy, turns each block of whole events into NDJSON (one
event per line), lifts each event's `args` fields into the event itself (a same-length byte
rewrite: polars parses plain fields several times faster than a nested struct) and hands
it to polars' NDJSON reader with an explicit schema that names only the fields the model
needs; everything else in the event is skipped by the parser. Memory stays at about one
block plus the columnar result.

Every other layout (minified single-line JSON, CRLF line ends, other tools' indentation,
keys in any order, a byte-order mark, UTF-16) goes through a structural splitter
(`json_stream`) that finds the events from string quotes and brace depths, rewrites them
onto lines of their own the same way and feeds the same parser, in the same bounded memory.
Only what follows the last whole event (the array's end and the keys after it, or a
truncated tail) is parsed with the standard library's JSON scanner. A file cut off
mid-event keeps the events that are whole, and the timeline says it was truncated.

The reader's parts, one module each: this one streams the file (blocks, splitters, threads)
and assembles the Timeline; `json_scan` and `json_stream` split blocks into events;
`chrome_fields` decides which fields are parsed and parses them; `chrome_normalise` turns
parsed rows into the event schema; `chrome_tail` reads what follows the last whole event.
"""

from __future__ import annotations

import dataclasses
import os
import re
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import orjson
import polars as pl

from traceanalyzer.errors import TraceAnalyzerError, TraceFormatError, UnsupportedTraceError
from traceanalyzer.model import (
    EVENT_SCHEMA,
    GPU_KINDS,
    DataQuality,
    DeviceInfo,
    RankInfo,
    Timeline,
    TraceMeta,
    combine,
)
from traceanalyzer.parallel import usable_cores
from traceanalyzer.readers.base import ByteSource, head_bytes
from traceanalyzer.readers.chrome_fields import (
    TIMES_FROM_TEXT,
    Fields,
    Parsed,
    keep,
    parse_block,
)
from traceanalyzer.readers.chrome_normalise import (
    DUPLICATE,
    GPU_DROPPED,
    GPU_EXAMPLE,
    LEGACY,
    Frame,
    normalise,
    with_copy_kinds,
    without_duplicates,
)
from traceanalyzer.readers.chrome_tail import WHITESPACE, parse_header, parse_tail
from traceanalyzer.readers.device_match import described_by_names, match_devices
from traceanalyzer.readers.json_scan import SPACE, EventSplitter, WritableBytes, rewrite
from traceanalyzer.readers.json_stream import (
    LayoutError,
    SpeculationFailed,
    SpeculativeCutter,
    StructuralSplitter,
)

#: Bytes read per block; up to `read_workers()` blocks are in flight, so peak memory is a
#: few blocks plus the parsed columns. The same whatever the cores: which optional fields a
#: block parses depends on what the file showed up to it, so the events read must not
#: depend on where blocks are cut by the machine. At 4 MB (16 MB before the blocks were read
#: at once) the reader's CPU is the same and its peak lower (77 MB trace with Python stacks:
#: 1.2-1.3 CPU s either way, peak RSS 406 MB with 16 MB blocks, 236 MB with 4 MB ones).
BLOCK_BYTES = 4 << 20
#: How far into a file the `"traceEvents"` key is looked for before giving up.
MAX_HEADER_BYTES = 256 << 20


_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*')
T = TypeVar("T")

_RANK_IN_NAME = re.compile(r"(?:rank|worker)[-_]?(\d+)", re.IGNORECASE)


class ChromeTraceReader:
    """torch.profiler / Kineto Chrome-trace JSON, plain or gzip, one file or a folder of ranks."""

    name: str = "chrome"
    suffixes: tuple[str, ...] = (".json", ".json.gz", ".pt.trace.json", ".pt.trace.json.gz")

    def sniff(self, path: Path) -> bool:
        """A file whose (decompressed) content starts with `{` or `[`."""
        head = head_bytes(path, 64).lstrip(WHITESPACE)
        return head[:1] in (b"{", b"[")

    def read(self, path: Path) -> Timeline:
        """Read one trace file, or every trace file of a folder (one per rank)."""
        if path.is_dir():
            return self._read_folder(path)
        part = read_file(path)
        rank, source = _rank_of(path, part.header)
        return _to_timeline(part, rank, source, str(path)).validate()

    def folder_files(self, folder: Path) -> list[Path]:
        """The files of a folder that look like a rank's trace (read, or named when
        unreadable), in order of name."""
        named = [
            p for p in folder.iterdir() if p.is_file() and p.name.lower().endswith(_TRACE_SUFFIXES)
        ]
        return sorted({*named, *(p for p in folder.iterdir() if p.is_file() and self.sniff(p))})

    def read_or_skip(self, path: Path, read: Callable[[Path], T]) -> T | Skipped:
        """`read(path)` of one file of a folder, or why it could not be read (one rank's
        unreadable file is named in the notes; the others are still read)."""
        try:
            if not self.sniff(path):
                raise TraceFormatError("empty, or not JSON", path=path)
            return read(path)
        except TraceAnalyzerError as exc:
            return Skipped(f"{path.name}: {exc.problem}")
        except (OSError, EOFError, ValueError) as exc:  # a corrupt gzip stream, say
            return Skipped(f"{path.name}: unreadable ({type(exc).__name__}: {exc})")

    def _read_folder(self, folder: Path) -> Timeline:
        parts: list[tuple[Path, Parsed]] = []
        skipped: list[str] = []
        for f in self.folder_files(folder):  # one per rank: each is read or named
            got = self.read_or_skip(f, read_file)
            if isinstance(got, Skipped):
                skipped.append(got.why)
            else:
                parts.append((f, got))
        ranked = [(f, p, *_rank_of(f, p.header)) for f, p in parts]
        check_ranks(folder, [(f, rank, src) for f, _p, rank, src in ranked], skipped)
        timelines = [_to_timeline(p, rank, src, str(f)) for f, p, rank, src in ranked]
        combined = combine(timelines, str(folder))
        meta = with_skipped(combined.meta, skipped)
        return Timeline(events=combined.events, meta=meta).validate()


@dataclass(frozen=True, slots=True)
class Skipped:
    """A file of a folder that could not be read: why, as the notes name it."""

    why: str


def check_ranks(folder: Path, ranked: list[tuple[Path, int, str]], skipped: list[str]) -> None:
    """A TraceFormatError unless the folder's files read (path, rank, how the rank was
    found) tell one rank each apart."""
    if not ranked:
        raise TraceFormatError(
            "the folder holds no readable Chrome trace files"
            + (f" ({'; '.join(skipped[:3])})" if skipped else ""),
            path=folder,
            hint="point at a folder of torch.profiler traces (*.json, *.json.gz), one per rank",
        )
    if len(ranked) > 1 and any(src == "default" for *_x, src in ranked):
        unnamed = next(f for f, _r, src in ranked if src == "default")
        raise TraceFormatError(
            "cannot tell the ranks apart: a file has no distributedInfo.rank "
            "and no rank in its name",
            path=unnamed,
            hint="name per-rank files rank0.json, rank1.json, ... or read one file at a time",
        )
    seen: dict[int, Path] = {}
    for f, rank, _src in ranked:
        if rank in seen:
            raise TraceFormatError(
                f"two files claim rank {rank} ({seen[rank].name} and {f.name})",
                path=folder,
                hint="a folder must hold the per-rank files of one job, one file per rank",
            )
        seen[rank] = f


def with_skipped(meta: TraceMeta, skipped: list[str]) -> TraceMeta:
    """A folder's meta with the files that could not be read named in its quality."""
    if not skipped:
        return meta
    quality = dataclasses.replace(
        meta.quality,
        skipped_files=tuple(skipped),
        notes=(
            *meta.quality.notes,
            f"{len(skipped)} file(s) of the folder could not be read and are not "
            f"analysed: {'; '.join(skipped)}",
        ),
    )
    return dataclasses.replace(meta, quality=quality)


#: File names that look like a rank's trace in a folder (read, or named when unreadable).
_TRACE_SUFFIXES = (".json", ".json.gz")


# ---------------------------------------------------------------------------- file parsing


class _Window:
    """A reusable buffer over the file: read at the end, consumed from the front.

    Reusing one buffer instead of allocating a fresh block for every read keeps the kernel
    from zeroing and mapping new pages for each of them (seconds of system time per GB).
    """

    def __init__(self, source: ByteSource) -> None:
        self.source = source
        self.block = BLOCK_BYTES
        self.data = bytearray(2 * self.block)
        self.n = 0
        self.eof = False
        self.offset = 0  # where `data` starts in the (decompressed) file

    def fill(self) -> None:
        """Read up to one more block after the valid bytes."""
        if len(self.data) < self.n + self.block:
            self.data.extend(bytes(self.n + self.block - len(self.data)))
        with memoryview(self.data) as view:
            got = self.source.readinto(view[self.n : self.n + self.block])
        self.n += got
        self.eof = got < self.block

    def drop(self, k: int) -> None:
        """Forget the first `k` valid bytes (the rest moves to the front)."""
        self.data[: self.n - k] = self.data[k : self.n]
        self.n -= k
        self.offset += k

    def take(self, k: int) -> bytes:
        """A copy of the first `k` bytes."""
        with memoryview(self.data) as view:
            return bytes(view[:k])

    def copy(self, k: int) -> bytearray:
        """A copy of the first `k` bytes that can be rewritten in place."""
        with memoryview(self.data) as view:
            return bytearray(view[:k])

    def bytes_copy(self, k: int) -> WritableBytes:
        """A copy of the first `k` bytes as a bytes object that can be rewritten in place
        (copied with the interpreter's lock released)."""
        return WritableBytes(self.data, k)


_NON_WS = re.compile(rb"[^ \t\r\n]")


class _SplitMismatch(Exception):
    """A block split at something that looked like a separator and was not one."""


def read_file(path: Path) -> Parsed:
    """Parse one Chrome-trace file into normalised event frames (rank not yet set)."""
    try:
        return _read_file(path, kineto=True)
    except (_SplitMismatch, SpeculationFailed):
        # an array of objects nested at the events' own indentation, or a guessed cut that
        # was not between two events (or a damaged event, named on the way through now):
        # rare enough that reading the file again in one pass is the simple, safe answer
        return _read_file(path, kineto=False)


def _read_file(path: Path, kineto: bool) -> Parsed:
    if not path.exists():
        raise TraceFormatError("no such file or folder", path=path, hint="check the path")
    with ByteSource(path) as source:
        win = _Window(source)
        win.fill()
        lead = _NON_WS.search(win.data, 0, win.n)
        if lead is None:
            raise TraceFormatError(
                "the file is empty" if win.eof else "not a JSON trace (only whitespace)",
                path=path,
                hint="the profiler may have crashed before writing",
            )
        first = win.data[lead.start()]
        if first not in b"{[":
            raise UnsupportedTraceError(
                "not a JSON trace (it does not start with '{' or '[')",
                path=path,
                hint="traceanalyzer reads torch.profiler Chrome traces (.json, .json.gz)",
            )
        if first == ord("["):  # the Trace Event Format's bare-array form
            start, header = lead.start() + 1, b""
        else:
            match = _EVENTS_KEY.search(win.data, 0, win.n)
            while (match is None or match.end() == win.n) and not win.eof:
                if win.n >= MAX_HEADER_BYTES:
                    break
                win.fill()
                match = _EVENTS_KEY.search(win.data, 0, win.n)
            if match is None:
                _raise_no_events(path, win.take(win.n), win.eof)
            assert match is not None
            if match.end() == win.n or win.data[match.end()] != ord("["):
                end = min(match.end() + 1, win.n)
                found = bytes(win.data[match.end() : end]).decode("latin-1")
                raise TraceFormatError(
                    f"traceEvents is not a list (it starts with {found!r}, not '[')"
                    if found
                    else "traceEvents holds no value: the file is cut off",
                    path=path,
                    hint="a Chrome trace holds its events in a JSON array: "
                    '"traceEvents": [{...}, ...]',
                )
            start, header = match.end() + 1, win.take(match.start())
        meta = parse_header(header)
        parsed = Parsed(path=path, header=meta, fields=Fields(comm="distributedInfo" in meta))
        win.drop(start)
        _read_events(win, parsed, kineto)
        parse_tail(win.take(win.n), parsed)
        if source.truncated and not parsed.truncated:
            parsed.truncated = True
            parsed.notes.append(f"{path.name}: the gzip stream is cut off")
    return parsed


def _read_events(win: _Window, parsed: Parsed, kineto: bool) -> None:
    """Turn every whole event into frames; leave what follows the last one in `win`.

    Kineto's layout is split at its separators (`kineto`: try that first); a file that shows
    none in its first block is cut where two events seem to meet and each block split by the
    structural splitter, which reads any layout, on a worker (`SpeculativeCutter`: a cut
    that was no such place fails the file's read, which `read_file` does again in one pass);
    the last events of any file go through the structural splitter here (`kineto` False:
    all of them).

    The main thread reads the file and cuts it into blocks of whole events (a search back
    for the last separator, or the last place two events seem to meet; in one pass, the
    structural splitter rewrites its block here, as it must scan it all to find its end);
    up to `read_workers()` blocks at a time are rewritten, parsed and normalised on worker
    threads (numpy and polars,
    which release the GIL), each with the optional fields the file had shown when it was
    handed out. Frames are kept in file order, and a block handed out before an earlier one
    showed more fields is parsed again with them: the frames are those of reading the blocks
    one after the other. Until the fields settle (the first blocks of a file show most of
    them), blocks are read one at a time, so that they are not parsed twice, unless there
    are cores to spare (`SPECULATE_FROM` workers): then they are handed out at once, and a
    block that shows more fields has the blocks out after it parsed again on the workers.
    At most `workers` blocks wait: memory stays bounded.
    """
    splitter: EventSplitter | SpeculativeCutter | StructuralSplitter = (
        EventSplitter() if kineto else StructuralSplitter()
    )
    workers = read_workers()
    speculate = workers >= SPECULATE_FROM
    pending: deque[Future[_Block]] = deque()
    state = _InOrder(parsed)
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="read")
    try:
        while True:
            if isinstance(splitter, EventSplitter):
                cut = splitter.cut(win.data, win.n)
            elif isinstance(splitter, SpeculativeCutter):
                at = None if win.eof else splitter.cut(win.data, win.n)
                cut = None if at is None else (at, at)
            else:
                cut = _structural_split(splitter, win, parsed.path)
            if cut is None and (
                (isinstance(splitter, EventSplitter) and splitter.separator is None)
                or (isinstance(splitter, SpeculativeCutter) and win.eof)
            ):  # not Kineto's layout: cut by guess; the file's end: in one pass
                splitter = SpeculativeCutter() if not win.eof else StructuralSplitter()
                continue
            if cut is None and isinstance(splitter, EventSplitter) and win.eof:
                splitter = StructuralSplitter()  # Kineto's layout: its last events
                continue
            if cut is not None:
                end, rest = cut
                if isinstance(splitter, EventSplitter):
                    assert splitter.separator is not None
                    task = _Task(
                        [win.bytes_copy(rest + 1)],
                        end,
                        True,
                        splitter.separator,
                        win.offset,
                    )
                elif isinstance(splitter, SpeculativeCutter):  # split on the worker
                    task = _Task([win.copy(end)], end, False, None, win.offset, guessed=True)
                else:  # rewritten here already
                    task = _Task([win.take(end)], end, splitter.exact, None, win.offset)
                pending.append(pool.submit(_read_block, task, state.fields, parsed.path))
                win.drop(rest)
                # while the file keeps showing fields, one block at a time (a block handed
                # out before the one that shows them would parse them again), unless there
                # are cores to spare for parsing blocks again (`SPECULATE_FROM`)
                while len(pending) >= (workers if state.settled or speculate else 1):
                    _keep_next(pending, state, pool, speculate)
            if win.eof:
                break
            win.fill()
        while pending:
            _keep_next(pending, state, pool, speculate)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


#: From this many read workers (8 cores) up, blocks are handed out at once from the file's
#: start, before its optional fields settle: a block kept that shows more fields has the
#: blocks handed out after it parsed again with them, on the workers at once (`_keep_next`).
#: One at a time, the first blocks of a 164 MB trace with Python stacks (fields shown in its
#: second and third blocks, settled from its fifth) kept the 16-core host's workers idle for
#: 0.2 of its 0.5 s read.
SPECULATE_FROM = 4


def _keep_next(
    pending: deque[Future[_Block]], state: _InOrder, pool: ThreadPoolExecutor, speculate: bool
) -> None:
    """Keep the first pending block; where it showed more fields and `speculate`, every other
    pending block is parsed again with them on the pool as soon as its own parse ends (unless
    it was parsed with them, or showed them itself): in order, the blocks after it must be
    read with them, and parsed again one by one in `keep` they held every worker up."""
    before = state.fields
    state.keep(pending.popleft().result())
    if speculate and state.fields != before:
        for i, future in enumerate(pending):
            pending[i] = _parsed_with(future, state.fields, pool, state.parsed.path)


def _parsed_with(
    future: Future[_Block], fields: Fields, pool: ThreadPoolExecutor, path: Path
) -> Future[_Block]:
    """The block of `future`, parsed again with `fields` on `pool` where it was parsed with
    others and showed others (`_InOrder.keep` reads either as parsed with `fields`)."""
    out: Future[_Block] = Future()

    def parsed(done: Future[_Block]) -> None:
        try:
            block = done.result()
            if fields in (block.fields_in, block.fields_out):
                out.set_result(block)
                return
            again = pool.submit(
                _parse, block.ndjson, block.exact, block.offset, fields, block.kineto, path
            )
        except BaseException as exc:  # the parse's own error, or a pool shut down: the reader's
            out.set_exception(exc)
            return
        again.add_done_callback(lambda f: _settle(out, f))

    future.add_done_callback(parsed)
    return out


def _settle(out: Future[T], done: Future[T]) -> None:
    """Give `out` the result, or the error, of `done`."""
    try:
        out.set_result(done.result())
    except BaseException as exc:
        out.set_exception(exc)


def read_workers() -> int:
    """Blocks read at once: one per two cores this process may run on, 2 to 8 (each block's
    parse also spreads over polars' own threads); `TRACEANALYZER_READ_WORKERS` sets it (for
    benchmarks)."""
    told = os.environ.get("TRACEANALYZER_READ_WORKERS", "")
    if told.isdigit() and int(told) > 0:
        return int(told)
    return max(2, min(8, usable_cores() // 2))


def _structural_split(
    splitter: StructuralSplitter, win: _Window, path: Path
) -> tuple[int, int] | None:
    try:
        return splitter.split_in_place(win.data, win.n)
    except LayoutError as exc:
        raise TraceFormatError(
            f"traceEvents is not an array of event objects: {exc.found!r} sits "
            f"between two events (byte {win.offset + exc.offset} of the JSON)",
            path=path,
            hint="the file is damaged or not a trace; re-export it from torch.profiler",
        ) from None


@dataclass(frozen=True, slots=True)
class _Task:
    """One block of whole events handed to a worker: its bytes (Kineto's: up to and with
    the separator after its last event, to be rewritten; the structural splitter's: NDJSON
    already; a `SpeculativeCutter`'s: `guessed`, to be split), where its NDJSON ends,
    whether it may hold exact timestamps (`tn`), Kineto's separator (None: rewritten
    already, or guessed), and where it starts in the JSON."""

    data: list[bytearray | bytes | WritableBytes]  # a box: the worker takes them out (freed early)
    end: int
    exact: bool
    separator: bytes | None
    offset: int
    guessed: bool = False


@dataclass(frozen=True, slots=True)
class _Block:
    """A block read: its NDJSON (kept to parse it again), whether Kineto's splitter cut it,
    the fields it was parsed with and those it showed, its normalised frame and counts."""

    ndjson: bytes
    exact: bool
    offset: int
    kineto: bool
    fields_in: Fields
    fields_out: Fields
    texts: int
    frame: Frame


class _InOrder:
    """The blocks' frames kept in file order, each parsed with the fields the blocks before
    it showed (a block parsed with fewer is parsed again here)."""

    #: Blocks kept in a row that showed no new fields before the blocks are read at once.
    SETTLED_AFTER = 2

    def __init__(self, parsed: Parsed) -> None:
        self.parsed = parsed
        self.fields = parsed.fields  # shown by every block kept so far
        self.unchanged = 0  # blocks kept in a row that showed no new fields

    @property
    def settled(self) -> bool:
        """Whether the fields have stopped changing (`SETTLED_AFTER` blocks in a row)."""
        return self.unchanged >= self.SETTLED_AFTER

    def keep(self, block: _Block) -> None:
        # parsed with other fields, and showing others, it is parsed again with the file's (a
        # block that ended with them was parsed with them: the same frame)
        if self.fields not in (block.fields_in, block.fields_out):
            again = (block.ndjson, block.exact, block.offset, self.fields, block.kineto)
            block = _parse(*again, self.parsed.path)
        self.unchanged = self.unchanged + 1 if block.fields_out == self.fields else 0
        self.fields = self.parsed.fields = block.fields_out
        if block.texts:
            self.parsed.dropped[TIMES_FROM_TEXT] += block.texts
        keep(block.frame, self.parsed)


def _read_block(task: _Task, fields: Fields, path: Path) -> _Block:
    """Rewrite (Kineto's layout) or split (a guessed cut), parse and normalise one block (on
    a worker thread). A guessed block that is not whole events, or that the parser refuses,
    raises `SpeculationFailed` (its cut, or one before it, may have been wrong)."""
    sep, data = task.separator, task.data.pop()
    if task.guessed:
        assert isinstance(data, bytearray)
        splitter = _splitter()
        end = splitter.split_whole(data)
        with memoryview(data) as view:
            ndjson = bytes(view[:end])
        del data
        try:
            return _parse(ndjson, splitter.exact, task.offset, fields, False, path)
        except TraceFormatError:
            raise SpeculationFailed from None
    if isinstance(data, WritableBytes):  # Kineto's: parsed as it is, the separator blanked
        assert sep is not None
        exact = rewrite(data, len(data.data), sep)
        data.view[task.end :] = SPACE
        ndjson = data.data
    else:  # the structural splitter's NDJSON
        ndjson, exact = bytes(data), task.exact
    return _parse(ndjson, exact, task.offset, fields, sep is not None, path)


_thread = threading.local()


def _splitter() -> StructuralSplitter:
    """This thread's structural splitter (its scratch space is reused from block to block)."""
    splitter: StructuralSplitter | None = getattr(_thread, "splitter", None)
    if splitter is None:
        splitter = _thread.splitter = StructuralSplitter()
    return splitter


def _parse(
    ndjson: bytes, exact: bool, offset: int, fields: Fields, kineto: bool, path: Path
) -> _Block:
    """Parse one block of NDJSON events with `fields` and normalise it.

    A line the parser refuses means, after Kineto's splitter, a separator that was not one;
    after the structural splitter, a malformed event (`offset`: where the block starts)."""
    try:
        raw, shown, texts = parse_block(ndjson, fields, exact)
    except pl.exceptions.ComputeError as exc:
        if kineto:
            raise _SplitMismatch from exc
        raise _malformed(ndjson, offset, path, exc) from None
    return _Block(ndjson, exact, offset, kineto, fields, shown, texts, normalise(raw))


def _malformed(ndjson: bytes, offset: int, path: Path, exc: Exception) -> TraceFormatError:
    """The error for a block of whole events that holds one the parser refuses."""
    at, line, why = 0, b"", ""
    for line in ndjson.split(b"\n"):  # the error path only: find the event to name it
        if line.strip():
            try:
                orjson.loads(line)
            except orjson.JSONDecodeError as bad:
                why = str(bad)
                break
        at += len(line) + 1
    else:  # every line is JSON to orjson: name the block and the parser's complaint
        at, line, why = 0, ndjson, str(exc)
    more = at + len(line) < len(ndjson)
    where = f"the event at byte {offset + at} of the JSON"
    if "Depth" in str(exc) or "ecursion" in why:
        return TraceFormatError(
            f"{where} nests objects or lists too deeply to be read",
            path=path,
            hint="the trace's producer wrote a runaway nested value; remove that event",
        )
    return TraceFormatError(
        f"not valid JSON: {where} is malformed" + (" and more events follow it" if more else ""),
        path=path,
        hint="the file is damaged; copy it again from its source or re-export the trace",
    )


def _raise_no_events(path: Path, buf: bytes, eof: bool) -> None:
    if not eof:
        raise TraceFormatError(
            f"no traceEvents array in the first {MAX_HEADER_BYTES >> 20} MB",
            path=path,
            hint="is this a torch.profiler Chrome trace?",
        )
    try:
        doc = orjson.loads(buf)
    except orjson.JSONDecodeError as exc:
        raise TraceFormatError(
            f"not valid JSON ({exc})",
            path=path,
            hint="the file may be cut off or not a trace; re-export it from torch.profiler",
        ) from exc
    keys = ", ".join(list(doc)[:6]) if isinstance(doc, dict) else type(doc).__name__
    raise TraceFormatError(
        f"JSON with no traceEvents (top-level keys: {keys})",
        path=path,
        hint="traceanalyzer reads Chrome traces written by torch.profiler (export_chrome_trace "
        "or tensorboard_trace_handler)",
    )


# ------------------------------------------------------------------------- normalisation


# --------------------------------------------------------------------------- timeline


def _rank_of(path: Path, header: dict[str, Any]) -> tuple[int, str]:
    """The rank from `distributedInfo.rank`, else from the file name, else 0."""
    info = header.get("distributedInfo")
    rank = info.get("rank") if isinstance(info, dict) else None
    # a rank is a small non-negative integer (the timeline's Int32); anything else is unknown
    if isinstance(rank, int) and not isinstance(rank, bool) and 0 <= rank < 2**31:
        return rank, "distributedInfo"
    match = _RANK_IN_NAME.search(path.name)
    if match and int(match.group(1)) < 2**31:
        return int(match.group(1)), "file name"
    return 0, "default"


#: A timestamp or duration written as a JSON string (`"ts": "1712.5"`): it parses as null.
_TEXT_TIME = re.compile(rb'"(?:ts|dur)"\s*:\s*"')
_MISSING = "missing ts or dur"


def _named_drops(part: Parsed) -> dict[str, int]:
    """The drop counts, with the reason named where the file shows it (text timestamps)."""
    dropped = dict(part.dropped)
    if _MISSING in dropped and _TEXT_TIME.search(head_bytes(part.path, 1 << 16)):
        dropped["ts or dur written as a string, not a number"] = dropped.pop(_MISSING)
    return dropped


def _contiguous(part: Parsed) -> pl.DataFrame:
    """The file's frames as one, each column in one piece, made column by column (on a few
    threads): the frames are let go first, so that each column's pieces are freed as soon as
    it is copied. (The first expression run on the frames copied every column at once: at
    the end of a 741 MB trace's read, both copies of the events, 290 MB more.) A large
    file's events are one frame already (`chrome_fields.keep`), with only its text and list
    columns in pieces."""
    frames, part.frames = part.frames or [pl.DataFrame(schema=EVENT_SCHEMA)], []
    columns: list[pl.Series] = pl.concat(frames, how="vertical", rechunk=False).get_columns()
    del frames

    def rechunk(i: int) -> None:
        columns[i] = columns[i].rechunk()  # the old pieces go with the list's reference

    with ThreadPoolExecutor(max_workers=_RECHUNK_THREADS, thread_name_prefix="rechunk") as pool:
        for _ in pool.map(rechunk, range(len(columns))):
            pass
    return pl.DataFrame(columns)


#: Columns copied into one piece at once (`_contiguous`): each copy holds one more column.
_RECHUNK_THREADS = 4


#: A name longer than this is cut to it (bytes): the longest kernel names (templates with
#: lambdas) run to a few KiB; a name of megabytes is data (a tensor printed into a range's
#: name), and every analysis that reads names would read it again.
MAX_NAME_BYTES = 16 << 10


def cut_long_names(events: pl.DataFrame) -> tuple[pl.DataFrame, int]:
    """`events` with each name longer than MAX_NAME_BYTES cut to it (and "…"), and how many
    distinct names were cut. The lengths are read off the names' categories, once: a trace
    whose names are all short pays for one pass over its distinct names."""
    names = events["name"].unique()
    long = names.filter(names.cat.len_bytes() > MAX_NAME_BYTES)
    if long.len() == 0:
        return events, 0
    text = pl.col("name").cast(pl.String)
    cut = (
        pl.when(pl.col("name").is_in(long.implode()))
        .then(text.str.slice(0, MAX_NAME_BYTES) + "…")
        .otherwise(text)
        .cast(pl.Categorical)
    )
    return events.with_columns(name=cut), long.len()


#: The producer of a legacy `torch.autograd.profiler` export (chrome_normalise.LEGACY_*).
LEGACY_PRODUCER = "torch.autograd.profiler (legacy export)"


def _to_timeline(part: Parsed, rank: int, rank_source: str, source_path: str) -> Timeline:
    events = with_copy_kinds(_contiguous(part).with_columns(rank=pl.lit(rank, pl.Int32)))
    events = events.with_columns(domain=pl.lit(None, pl.Categorical))
    events = events.select(EVENT_SCHEMA.names()).cast(dict(EVENT_SCHEMA))  # type: ignore[arg-type]
    events, cut = cut_long_names(events)
    if cut:
        part.notes.append(
            f"{cut} event name(s) longer than {MAX_NAME_BYTES // 1024} KiB cut to that length "
            "(a name that long is data written into the trace, not a name)"
        )
    unplaced = pl.col("kind").is_in([k.value for k in GPU_KINDS]) & (
        pl.col("device").is_null() | pl.col("stream").is_null()
    )
    lost = int(events.select(unplaced.sum()).item())
    if lost:  # a GPU event with neither a device/stream nor a numeric pid/tid to stand in
        part.dropped["GPU event with no device or stream"] += lost
        part.dropped[GPU_DROPPED] += lost
        events = events.filter(~unplaced)
    events, twice = without_duplicates(events)
    if twice:
        part.dropped[DUPLICATE] += twice
        part.notes.append(
            f"{twice} events appear more than once, byte for byte (a trace merged or exported "
            "twice?): each is counted once"
        )
    drops = _named_drops(part)
    if texts := drops.get(TIMES_FROM_TEXT):
        part.notes.append(
            f"{texts} timestamps or durations were written as JSON text (a converter's "
            "output?) and read as numbers"
        )
    legacy = bool(drops.get(LEGACY))
    if legacy and int(events.select(pl.col("kind").is_in(GPU_KINDS).sum()).item()):
        part.notes.append(
            "a legacy torch.autograd.profiler export: its GPU ranges are each operator's time "
            "on the GPU (CUDA events), not kernels, and it records no launches, streams, "
            "shapes or devices, so kernel classes, Tensor Cores, launch shapes, copies and the "
            "host's launch costs are unknown or estimated from names; record with "
            "torch.profiler (activities=[CPU, CUDA]) for them"
        )
    gpu_kinds = [k.value for k in GPU_KINDS]
    header = part.header
    info = header.get("distributedInfo")
    world = info.get("world_size") if isinstance(info, dict) else None
    listed = tuple(
        DeviceInfo(
            rank=rank,
            device=int(d.get("id", i)),
            name=d.get("name"),
            compute_capability=(
                f"{d['computeMajor']}.{d['computeMinor']}"
                if "computeMajor" in d and "computeMinor" in d
                else None
            ),
            sm_count=d.get("numSms"),
            memory_bytes=d.get("totalGlobalMem"),
            max_threads_per_sm=_positive(d.get("maxThreadsPerMultiprocessor")),
            regs_per_sm=_positive(d.get("regsPerMultiprocessor")),
            shared_mem_per_sm=_positive(d.get("sharedMemPerMultiprocessor")),
        )
        for i, d in enumerate(header.get("deviceProperties") or [])
        if isinstance(d, dict)
    )
    used = events.filter(pl.col("kind").is_in(GPU_KINDS))["device"].drop_nulls().unique()
    devices, device_notes = match_devices(listed, used.to_list())
    kernel_names = events.filter(pl.col("kind") == "kernel")["name"].unique()
    devices, named_notes = described_by_names(
        devices, used.to_list(), rank, kernel_names.cast(pl.String).to_list()
    )
    device_notes = [*device_notes, *named_notes]
    version = header.get("schemaVersion")
    meta = TraceMeta(
        path=source_path,
        format="chrome",
        producer=LEGACY_PRODUCER if legacy else "torch.profiler (Kineto)",
        producer_version=f"schemaVersion {version}" if version is not None else None,
        ranks=(
            RankInfo(
                rank=rank,
                rank_source=rank_source,
                path=str(part.path),
                world_size=world if isinstance(world, int) else None,
            ),
        ),
        devices=devices,
        quality=DataQuality(
            truncated_files=(str(part.path),) if part.truncated else (),
            dropped={k: n for k, n in drops.items() if not k.startswith("(")},
            notes=(*part.notes, *device_notes),
            dropped_gpu=drops.get(GPU_DROPPED, 0),
            gpu_events=int(events.select(pl.col("kind").is_in(gpu_kinds).sum()).item()),
            dropped_gpu_example=next(
                (k.removeprefix(GPU_EXAMPLE) for k in drops if k.startswith(GPU_EXAMPLE)), None
            ),
        ),
    )
    return Timeline(events=events, meta=meta)


def _positive(value: object) -> int | None:
    """A device property that is a positive integer, else None (absent, or written oddly)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
