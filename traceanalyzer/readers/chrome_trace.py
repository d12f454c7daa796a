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
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections import Counter, deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import polars as pl

from traceanalyzer.errors import TraceAnalyzerError, TraceFormatError, UnsupportedTraceError
from traceanalyzer.model import (
    EVENT_SCHEMA,
    GPU_KINDS,
    KIND,
    DataQuality,
    DeviceInfo,
    Kind,
    RankInfo,
    Timeline,
    TraceMeta,
    combine,
)
from traceanalyzer.readers.base import ByteSource, head_bytes
from traceanalyzer.readers.device_match import match_devices
from traceanalyzer.readers.json_scan import EventSplitter, exact_text, needs_exact_timestamps
from traceanalyzer.readers.json_stream import LayoutError, StructuralSplitter

#: Bytes read per block. Peak memory is a few blocks plus the parsed columns.
BLOCK_BYTES = 16 << 20
#: How far into a file the `"traceEvents"` key is looked for before giving up.
MAX_HEADER_BYTES = 256 << 20

#: Kineto `cat` -> timeline kind (the 2021 schema capitalises its categories).
KIND_BY_CAT: dict[str, str] = {
    "kernel": "kernel",
    "Kernel": "kernel",
    "gpu_memcpy": "memcpy",
    "Memcpy": "memcpy",
    "gpu_memset": "memset",
    "Memset": "memset",
    "cuda_runtime": "runtime",
    "Runtime": "runtime",
    "cuda_driver": "driver",
    "cpu_op": "cpu_op",
    "Operator": "cpu_op",
    "user_annotation": "annotation",
    "gpu_user_annotation": "gpu_annotation",
    "python_function": "python",
    "cuda_sync": "sync",
}

#: Categories that Kineto always writes and the model does not need: not worth a count.
IGNORED_CATS = frozenset({"trace", "overhead", "fwdbwd", "ac2g", "async", "async_cpu_to_gpu"})

#: A `[memory]` instant event of a CUDA device (profile_memory=True; Device Type 1 is CUDA).
_CUDA_MEMORY_EVENT = (
    (pl.col("ph") == "i")
    & (pl.col("name") == "[memory]")  # compared as a category, not cast per row
    & (pl.col("Device Type") == 1)
)

_DEVICE_KINDS = ("kernel", "memcpy", "memset", "gpu_annotation", "sync")


def arg_fields(text_ids: bool) -> dict[str, pl.DataType]:
    """The `args` fields the model needs; every other field is skipped by the parser.

    Ids and places are numbers in current Kineto and are parsed as such (`text_ids=False`);
    some producers write them as text (`"tid": "stream 7"` in 2021, `"stream": "0x0"` on
    ROCm), and a block that does is parsed with them as text (`text_ids=True`). Memory
    events, collectives and the 2021 key names (`external id`, `Input dims`) are among them.
    Every field costs parse time in every event, present or not: the optional groups
    (`MEMORY_FIELDS`, `COMM_FIELDS`) are left out until a file shows them (`_parse_ndjson`).
    """
    ident = pl.String() if text_ids else pl.Int64()
    return {
        "device": ident,
        "stream": ident,
        "correlation": pl.Int64(),
        "External id": pl.Int64(),
        "grid": pl.String(),  # `[x, y, z]`, decoded for the few events that carry it
        "block": pl.String(),
        "bytes": pl.Int64(),
        "registers per thread": pl.Int64(),
        "shared memory": pl.Int64(),
        "Input Dims": pl.String(),
        "Input type": pl.String(),
        "Total Allocated": pl.Int64(),
        "Device Id": pl.Int64(),
        "Device Type": pl.Int64(),
        "Collective name": pl.String(),
        "In msg nelems": pl.Int64(),
        "dtype": pl.String(),
        "external id": pl.Int64(),
        "Input dims": pl.String(),
    }


def raw_schema(text_ids: bool) -> pl.Schema:
    """The fields parsed from each event: its own, and those of its `args` object.

    The splitter lifts the args fields of Kineto's events into the event itself
    (`json_scan.lift_args`), so they parse as plain fields. An event whose args object was
    not lifted (another producer's layout, the exact scanner's events) keeps it, read here
    as its JSON text, and `_merge_args` parses those few into the same columns.
    """
    ident = pl.String() if text_ids else pl.Int64()
    return pl.Schema(
        {
            "ph": pl.String(),
            "cat": pl.String(),
            "name": pl.Categorical(),
            "pid": ident,
            "tid": ident,
            "ts": pl.Float64(),
            "tn": pl.Int64(),  # exact ns, see json_scan.exact_timestamps
            "dur": pl.Float64(),
            **arg_fields(text_ids),
            "args": pl.String(),  # costs nothing where absent
        }
    )


#: Fields that only some traces carry (memory events, collectives), only some blocks (`tn`,
#: written by the splitter) or only other producers' layouts (`args`, an object the
#: splitter did not lift): each field of the schema costs parse time in every event,
#: present or not (together these cost about 15 % of the parse of a trace without them),
#: so they are parsed only once the file shows them (see `_parse_ndjson`).
MEMORY_FIELDS = ("Total Allocated", "Device Id", "Device Type")
COMM_FIELDS = ("Collective name", "In msg nelems", "dtype")
#: Event names that may carry the collectives' fields (NCCL/RCCL/oneCCL kernels, c10d's
#: `record_param_comms`, Gloo): a file without `distributedInfo` parses them once it shows one.
_COMM_NAME = (
    r"(?i)ccl|gloo|comm|c10d|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|broadcast"
)


def _read_ndjson(ndjson: bytes, text_ids: bool, skip: frozenset[str] = frozenset()) -> pl.DataFrame:
    """Parse NDJSON events into the raw schema; fields in `skip` are not parsed (all null)."""
    schema = raw_schema(text_ids)
    if not skip:
        raw = pl.read_ndjson(ndjson, schema=schema, ignore_errors=True)
        return _merge_args(raw, text_ids)
    lean = pl.Schema({k: v for k, v in schema.items() if k not in skip})
    raw = (
        pl.read_ndjson(ndjson, schema=lean, ignore_errors=True)
        .with_columns(pl.lit(None, schema[k]).alias(k) for k in skip)
        .select(schema.names())
    )
    return _merge_args(raw, text_ids)


def _merge_args(raw: pl.DataFrame, text_ids: bool) -> pl.DataFrame:
    """Parse the args objects that were not lifted into the same columns as lifted ones."""
    kept = raw.get_column("args")
    raw = raw.drop("args")
    if kept.null_count() == kept.len():
        return raw
    rows = kept.is_not_null()
    fields = arg_fields(text_ids)
    texts = "\n".join(kept.filter(rows).to_list()).encode()
    indexed = raw.with_row_index("_row")
    parsed = pl.read_ndjson(texts, schema=fields, ignore_errors=True).with_columns(
        indexed.get_column("_row").filter(rows)
    )
    return (
        indexed.join(parsed, on="_row", how="left", suffix="_kept", maintain_order="left")
        .with_columns(pl.coalesce(f, f"{f}_kept").alias(f) for f in fields)
        .drop("_row", *(f"{f}_kept" for f in fields))
    )


_GPU_CATS = ["kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"]


def _parse_ndjson(ndjson: bytes, parsed: _Parsed, exact: bool = True) -> pl.DataFrame:
    """Parse NDJSON events with the fields this file has shown so far.

    Ids are parsed as numbers until the file shows text ids: a text id parsed as a number
    comes out null, so a duration event without pid/tid, or a GPU event with args but no
    stream, means this producer writes ids as text. Memory and collective fields are parsed
    once the file shows a `[memory]` event, or an event whose name may carry collective
    fields (or has `distributedInfo`); args objects the splitter did not lift, once an event
    the model keeps shows none of the args fields (a Kineto event always has one: its
    correlation or External id). Each time the block is parsed again with the new fields,
    and so is every later block of the file. `exact`: the block may hold `tn` (the splitter
    rewrote its timestamps).
    """
    raw = _read_ndjson(ndjson, parsed.text_ids, parsed.skipped(exact))
    while _shows_more(raw, parsed):  # each pass turns on at least one more field group
        raw = _read_ndjson(ndjson, parsed.text_ids, parsed.skipped(exact))
    return raw


#: Kineto events the model keeps, as the parser sees them before normalising.
_KEPT_EVENT = (pl.col("ph") == "X") & pl.col("cat").is_in(list(KIND_BY_CAT))
_MEMORY_EVENT = (pl.col("ph") == "i") & (pl.col("name") == "[memory]")


def _shows_more(raw: pl.DataFrame, parsed: _Parsed) -> bool:
    """Whether `raw` shows text ids, memory events, collectives or args objects not parsed
    yet (and mark them in `parsed`)."""
    checks: dict[str, pl.Expr] = {}
    if not parsed.text_ids:
        checks["text_ids"] = (
            (pl.col("ph") == "X") & (pl.col("pid").is_null() | pl.col("tid").is_null())
            | pl.col("cat").is_in(_GPU_CATS)
            & pl.any_horizontal(
                pl.col(f).is_not_null() for f in ("correlation", "External id", "grid", "bytes")
            )
            & pl.col("stream").is_null()
        ).any()
    if not parsed.memory:
        # compared as a category, not cast per row
        checks["memory"] = _MEMORY_EVENT.any()
    if not parsed.comm:
        names = pl.col("name").unique().cast(pl.String)
        checks["comm"] = names.str.contains(_COMM_NAME).any()
    if not parsed.args:
        # an args object left in place leaves its event without any args field
        skipped = parsed.skipped(exact=True)
        read = [f for f in arg_fields(parsed.text_ids) if f not in skipped]
        kept = (_KEPT_EVENT | _MEMORY_EVENT) if parsed.memory else _KEPT_EVENT
        checks["args"] = (kept & pl.all_horizontal(pl.col(f).is_null() for f in read)).any()
    if not checks or raw.height == 0:
        return False
    seen = raw.select(**checks).row(0, named=True)
    parsed.text_ids |= seen.get("text_ids", False)
    parsed.memory |= seen.get("memory", False)
    parsed.comm |= seen.get("comm", False)
    parsed.args |= seen.get("args", False)
    return any(seen.values())


_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*')
_RANK_IN_NAME = re.compile(r"(?:rank|worker)[-_]?(\d+)", re.IGNORECASE)
_WS = b" \t\r\n"


class ChromeTraceReader:
    """torch.profiler / Kineto Chrome-trace JSON, plain or gzip, one file or a folder of ranks."""

    name: str = "chrome"
    suffixes: tuple[str, ...] = (".json", ".json.gz", ".pt.trace.json", ".pt.trace.json.gz")

    def sniff(self, path: Path) -> bool:
        """A file whose (decompressed) content starts with `{` or `[`."""
        head = head_bytes(path, 64).lstrip(_WS)
        return head[:1] in (b"{", b"[")

    def read(self, path: Path) -> Timeline:
        """Read one trace file, or every trace file of a folder (one per rank)."""
        if path.is_dir():
            return self._read_folder(path)
        part = read_file(path)
        rank, source = _rank_of(path, part.header)
        return _to_timeline(part, rank, source, str(path)).validate()

    def _read_folder(self, folder: Path) -> Timeline:
        named = [
            p for p in folder.iterdir() if p.is_file() and p.name.lower().endswith(_TRACE_SUFFIXES)
        ]
        files = sorted({*named, *(p for p in folder.iterdir() if p.is_file() and self.sniff(p))})
        parts: list[tuple[Path, _Parsed]] = []
        skipped: list[str] = []
        for f in files:  # one per rank: every file that looks like a trace is read or named
            try:
                if not self.sniff(f):
                    raise TraceFormatError("empty, or not JSON", path=f)
                parts.append((f, read_file(f)))
            except TraceAnalyzerError as exc:
                skipped.append(f"{f.name}: {exc.problem}")
            except (OSError, EOFError, ValueError) as exc:  # a corrupt gzip stream, say
                skipped.append(f"{f.name}: unreadable ({type(exc).__name__}: {exc})")
        if not parts:
            raise TraceFormatError(
                "the folder holds no readable Chrome trace files"
                + (f" ({'; '.join(skipped[:3])})" if skipped else ""),
                path=folder,
                hint="point at a folder of torch.profiler traces (*.json, *.json.gz), one per rank",
            )
        ranked = [(f, p, *_rank_of(f, p.header)) for f, p in parts]
        if len(ranked) > 1 and any(src == "default" for *_x, src in ranked):
            unnamed = next(f for f, _p, _r, src in ranked if src == "default")
            raise TraceFormatError(
                "cannot tell the ranks apart: a file has no distributedInfo.rank "
                "and no rank in its name",
                path=unnamed,
                hint="name per-rank files rank0.json, rank1.json, ... or read one file at a time",
            )
        seen: dict[int, Path] = {}
        for f, _p, rank, _src in ranked:
            if rank in seen:
                raise TraceFormatError(
                    f"two files claim rank {rank} ({seen[rank].name} and {f.name})",
                    path=folder,
                    hint="a folder must hold the per-rank files of one job, one file per rank",
                )
            seen[rank] = f
        timelines = [_to_timeline(p, rank, src, str(f)) for f, p, rank, src in ranked]
        combined = combine(timelines, str(folder))
        if skipped:
            quality = dataclasses.replace(
                combined.meta.quality,
                skipped_files=tuple(skipped),
                notes=(
                    *combined.meta.quality.notes,
                    f"{len(skipped)} file(s) of the folder could not be read and are not "
                    f"analysed: {'; '.join(skipped)}",
                ),
            )
            combined = Timeline(
                events=combined.events, meta=dataclasses.replace(combined.meta, quality=quality)
            )
        return combined.validate()


#: File names that look like a rank's trace in a folder (read, or named when unreadable).
_TRACE_SUFFIXES = (".json", ".json.gz")


# ---------------------------------------------------------------------------- file parsing


@dataclass
class _Parsed:
    """What one file yields before it becomes a Timeline."""

    path: Path
    header: dict[str, Any]
    frames: list[pl.DataFrame] = field(default_factory=list)
    dropped: Counter[str] = field(default_factory=Counter)
    truncated: bool = False
    notes: list[str] = field(default_factory=list)
    text_ids: bool = False  # ids are written as text: see _parse_ndjson
    memory: bool = False  # memory events seen: their fields are parsed
    comm: bool = False  # collectives seen (or a distributed job): their fields are parsed
    args: bool = False  # args objects not lifted seen: they are parsed

    def skipped(self, exact: bool) -> frozenset[str]:
        """The optional fields not parsed (yet) in a block; `exact`: it may hold `tn`."""
        skip: tuple[str, ...] = () if exact else ("tn",)
        skip += () if self.memory else MEMORY_FIELDS
        skip += () if self.comm else COMM_FIELDS
        skip += () if self.args else ("args",)
        return frozenset(skip)

    @property
    def event_count(self) -> int:
        """Events read so far (after normalisation)."""
        return sum(f.height for f in self.frames)


class _Window:
    """A reusable buffer over the file: read at the end, consumed from the front.

    Reusing one buffer instead of allocating a fresh block for every read keeps the kernel
    from zeroing and mapping new pages for each of them (seconds of system time per GB).
    """

    def __init__(self, source: ByteSource) -> None:
        self.source = source
        self.data = bytearray(2 * BLOCK_BYTES)
        self.n = 0
        self.eof = False
        self.offset = 0  # where `data` starts in the (decompressed) file

    def fill(self) -> None:
        """Read up to one more block after the valid bytes."""
        if len(self.data) < self.n + BLOCK_BYTES:
            self.data.extend(bytes(self.n + BLOCK_BYTES - len(self.data)))
        with memoryview(self.data) as view:
            got = self.source.readinto(view[self.n : self.n + BLOCK_BYTES])
        self.n += got
        self.eof = got < BLOCK_BYTES

    def drop(self, k: int) -> None:
        """Forget the first `k` valid bytes (the rest moves to the front)."""
        self.data[: self.n - k] = self.data[k : self.n]
        self.n -= k
        self.offset += k

    def take(self, k: int) -> bytes:
        """A copy of the first `k` bytes."""
        with memoryview(self.data) as view:
            return bytes(view[:k])


_NON_WS = re.compile(rb"[^ \t\r\n]")


class _SplitMismatch(Exception):
    """A block split at something that looked like a separator and was not one."""


def read_file(path: Path) -> _Parsed:
    """Parse one Chrome-trace file into normalised event frames (rank not yet set)."""
    try:
        return _read_file(path, kineto=True)
    except _SplitMismatch:
        # an array of objects nested at the events' own indentation: rare enough that
        # reading the file again with the structural splitter is the simple, safe answer
        return _read_file(path, kineto=False)


def _read_file(path: Path, kineto: bool) -> _Parsed:
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
        meta = _parse_header(header)
        parsed = _Parsed(path=path, header=meta, comm="distributedInfo" in meta)
        win.drop(start)
        _read_events(win, parsed, kineto)
        _parse_tail(win.take(win.n), parsed)
        if source.truncated and not parsed.truncated:
            parsed.truncated = True
            parsed.notes.append(f"{path.name}: the gzip stream is cut off")
    return parsed


def _read_events(win: _Window, parsed: _Parsed, kineto: bool) -> None:
    """Turn every whole event into frames; leave what follows the last one in `win`.

    Kineto's layout is split at its separators (`kineto`: try that first); a file that shows
    none in its first block, and the last events of one that does, go through the
    structural splitter, which reads any layout.

    Three stages overlap: the main thread reads and splits block N+2 (numpy and I/O, which
    release the GIL), a worker parses block N+1 (polars) and another normalises block N,
    so parsing, the longest stage, never waits for normalisation. Frames keep file order.
    """
    splitter: EventSplitter | StructuralSplitter = (
        EventSplitter() if kineto else StructuralSplitter()
    )
    parsing: deque[Future[Future[_Frame]]] = deque()
    normalising: deque[Future[_Frame]] = deque()
    with ThreadPoolExecutor(max_workers=1) as parse, ThreadPoolExecutor(max_workers=1) as norm:
        while True:
            try:
                cut = splitter.split_in_place(win.data, win.n)
            except LayoutError as exc:
                raise TraceFormatError(
                    f"traceEvents is not an array of event objects: {exc.found!r} sits "
                    f"between two events (byte {win.offset + exc.offset} of the JSON)",
                    path=parsed.path,
                    hint="the file is damaged or not a trace; re-export it from torch.profiler",
                ) from None
            if (
                cut is None
                and isinstance(splitter, EventSplitter)
                and (splitter.separator is None or win.eof)  # not Kineto's layout, or its end
            ):
                splitter = StructuralSplitter()
                continue
            if cut is not None:
                end, rest = cut
                block = win.take(end)
                task = (block, parsed, norm, splitter.exact, isinstance(splitter, EventSplitter))
                parsing.append(parse.submit(_parse_block, *task, win.offset))
                win.drop(rest)
                while len(parsing) > 1:  # at most one block waits: memory stays bounded
                    normalising.append(parsing.popleft().result())
                while len(normalising) > 1:
                    _keep(normalising.popleft().result(), parsed)
            if win.eof:
                break
            win.fill()
        while parsing:
            normalising.append(parsing.popleft().result())
        while normalising:
            _keep(normalising.popleft().result(), parsed)


#: One block's normalised events and the counts of what it dropped.
_Frame = tuple[pl.DataFrame | None, Counter[str]]


def _parse_block(
    ndjson: bytes,
    parsed: _Parsed,
    norm: ThreadPoolExecutor,
    exact: bool,
    kineto: bool,
    offset: int,
) -> Future[_Frame]:
    """Parse one block of NDJSON events and hand it to `norm` to normalise (on a worker).

    A line the parser refuses means, after Kineto's splitter, a separator that was not one;
    after the structural splitter, a malformed event (`offset`: where the block starts)."""
    try:
        raw = _parse_ndjson(ndjson, parsed, exact)
    except pl.exceptions.ComputeError as exc:
        if kineto:
            raise _SplitMismatch from exc
        raise _malformed(ndjson, offset, parsed.path, exc) from None
    return norm.submit(_normalise, raw)


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


def _keep(result: _Frame, parsed: _Parsed) -> None:
    frame, dropped = result
    parsed.dropped.update(dropped)
    if frame is not None:
        parsed.frames.append(frame)


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


def _parse_header(header: bytes) -> dict[str, Any]:
    """Parse the keys before `"traceEvents"` (`{..., "k": v,` -> a dict)."""
    text = header.rstrip(_WS).rstrip(b",")
    if not text.lstrip(_WS).startswith(b"{"):
        return {}
    try:
        doc = orjson.loads(text + b"}")
    except orjson.JSONDecodeError:
        return {}
    return doc if isinstance(doc, dict) else {}


_MORE_EVENTS = re.compile(r"\}\s*,\s*\{")


def _scan_events(text: str) -> tuple[list[Any], int, int]:
    """Decode consecutive `{...}` values separated by commas; stop at `]` or a bad value.

    Returns the events, the index just past the closing `]` (-1 when the array did not end)
    and the index of the value that failed to decode (-1 when none did).
    """
    decoder = json.JSONDecoder()
    events: list[Any] = []
    i, n = 0, len(text)
    while True:
        while i < n and text[i] in " \t\r\n,":
            i += 1
        if i >= n:
            return events, -1, -1
        if text[i] == "]":
            return events, i + 1, -1
        try:
            obj, i = decoder.raw_decode(text, i)
        except (json.JSONDecodeError, RecursionError):  # cut off, or nested very deep
            return events, -1, i
        events.append(obj)


def _parse_tail(body: bytes, parsed: _Parsed) -> None:
    """Parse what follows the last separator: the last events, `]`, and the trailing keys."""
    text = exact_text(body)
    events, end, bad = _scan_events(text)
    if bad >= 0 and _MORE_EVENTS.search(text, bad):
        # whole events follow the one that failed: the file is damaged, not cut off
        raise TraceFormatError(
            f"not valid JSON: the event after {parsed.event_count + len(events)} good ones "
            "is malformed and more events follow it",
            path=parsed.path,
            hint="the file is damaged; copy it again from its source or re-export the trace",
        )
    if events:
        exact = needs_exact_timestamps(body)  # `tn` is then the splitter's key
        _keep(_normalise(_raw_from_dicts(events, parsed, exact)), parsed)
    if end < 0:
        parsed.truncated = True
        parsed.notes.append(
            f"{parsed.path.name}: the trace is cut off mid-event; "
            "the events before the cut were read"
        )
        return
    trailer = text[end:].strip(" \t\r\n").lstrip(",").strip(" \t\r\n")
    if not trailer or trailer == "}":
        return
    try:
        doc = orjson.loads("{" + trailer)
    except orjson.JSONDecodeError:
        parsed.truncated = True
        parsed.notes.append(f"{parsed.path.name}: the keys after traceEvents are cut off")
        return
    if isinstance(doc, dict):
        for key, value in doc.items():
            parsed.header.setdefault(key, value)


def _raw_from_dicts(events: list[Any], parsed: _Parsed, exact: bool) -> pl.DataFrame:
    """Turn decoded event dicts into the raw frame (via NDJSON, so typing is identical)."""
    dicts = [e for e in events if isinstance(e, dict)]
    if not dicts:
        return pl.DataFrame(schema=raw_schema(text_ids=False)).drop("args")
    parsed.args = True  # decoded events keep their args objects: parse them
    return _parse_ndjson(b"\n".join(map(orjson.dumps, dicts)), parsed, exact)


# ------------------------------------------------------------------------- normalisation


def _int_of(col: pl.Expr, text: bool) -> pl.Expr:
    """An id as Int64; as text it may read `7`, `"7"`, `"stream 7"` or `"0x1f"`."""
    if not text:
        return col
    t = col.str.strip_chars()
    hexa = t.str.strip_prefix("0x").str.to_integer(base=16, strict=False)
    digits = t.str.extract(r"(-?\d+)(?:\.0+)?$", 1).str.to_integer(strict=False)
    return pl.when(t.str.starts_with("0x")).then(hexa).otherwise(digits).cast(pl.Int64)


def _int_list(col: pl.Expr) -> pl.Expr:
    """`[256, 1, 1]` (a JSON list of integers read as text) -> a list; anything else -> null."""
    return pl.when(col.str.starts_with("[")).then(
        col.str.extract_all(r"-?\d+").cast(pl.List(pl.Int32))
    )


#: The largest |ts| or dur, in µs, that is read: twice it still fits int64 nanoseconds, so
#: `start + dur` cannot overflow. Larger values (1e18, 1e26) are dropped and counted.
MAX_US = float(2**62 // 1000)


def _in_range(col: pl.Expr) -> pl.Expr:
    return col.is_finite() & (col.abs() <= MAX_US)


def _to_ns(col: pl.Expr) -> pl.Expr:
    """Float microseconds -> integer ns, exact to the ns for values below 2**43 µs.

    The integer part is converted exactly and only the fraction goes through floating point,
    so a timestamp like 4476047788645.790 becomes ...645790 ns, not ...645789. Values out of
    range (see `MAX_US`) become null.
    """
    col = pl.when(_in_range(col)).then(col)
    whole = col.floor()
    return whole.cast(pl.Int64) * 1000 + ((col - whole) * 1000).round().cast(pl.Int64)


def _normalise(raw: pl.DataFrame) -> _Frame:
    """One raw frame in the event schema (rank set later), and the counts of what it drops."""
    dropped: Counter[str] = Counter()
    if raw.height == 0:
        return None, dropped
    text = raw.schema["pid"] == pl.String
    known = pl.col("kind").is_not_null()
    start, dur = pl.col("start_ns"), pl.col("dur")
    tagged = (
        raw.lazy()
        .with_columns(_memory=_CUDA_MEMORY_EVENT)
        .filter((pl.col("ph") == "X") | pl.col("_memory"))
        .with_columns(
            kind=pl.when(pl.col("_memory"))
            .then(pl.lit(Kind.MEMORY.value, KIND))
            .otherwise(pl.col("cat").replace_strict(KIND_BY_CAT, default=None, return_dtype=KIND)),
            start_ns=pl.coalesce(pl.col("tn"), _to_ns(pl.col("ts"))),
            dur=pl.when(pl.col("_memory")).then(pl.lit(0.0)).otherwise(pl.col("dur")),
        )
        .with_columns(
            _unknown=~known & ~pl.col("cat").str.to_lowercase().is_in(list(IGNORED_CATS)),
            _range=known
            & (
                (pl.col("ts").is_not_null() & ~_in_range(pl.col("ts")))
                | (dur.is_not_null() & ~_in_range(dur))
            ),
        )
        .with_columns(
            _missing=known & ~pl.col("_range") & (start.is_null() | dur.is_null()),
            _zero=known & (start <= 0),
            _negative=known & (dur < 0),
        )
    )
    on_device = pl.col("kind").is_in(_DEVICE_KINDS)
    frame, flags = pl.collect_all(
        [
            tagged.filter(
                known
                & ~pl.col("_range")
                & start.is_not_null()
                & dur.is_not_null()
                & (start > 0)
                & (dur >= 0)
            ).select(
                rank=pl.lit(0, pl.Int32),
                device=pl.when(pl.col("_memory"))
                .then(pl.col("Device Id").cast(pl.Int32))
                .when(on_device)
                .then(pl.coalesce(_int_of(pl.col("device"), text), _int_of(pl.col("pid"), text)))
                .cast(pl.Int32),
                stream=pl.when(on_device).then(
                    pl.coalesce(_int_of(pl.col("stream"), text), _int_of(pl.col("tid"), text))
                ),
                pid=pl.when(~on_device).then(_int_of(pl.col("pid"), text)),
                tid=pl.when(~on_device).then(_int_of(pl.col("tid"), text)),
                kind="kind",
                name=pl.col("name").fill_null(""),
                start_ns=start,
                end_ns=start + (dur * 1000).round().cast(pl.Int64),
                correlation=pl.col("correlation"),
                external_id=pl.coalesce(pl.col("External id"), pl.col("external id")),
                grid=_int_list(pl.col("grid")),
                block=_int_list(pl.col("block")),
                registers=pl.col("registers per thread").cast(pl.Int32),
                shared_mem_bytes=pl.col("shared memory"),
                bytes=pl.when(pl.col("_memory"))
                .then(pl.col("Total Allocated"))
                .otherwise(pl.col("bytes")),
                input_dims=pl.coalesce(pl.col("Input Dims"), pl.col("Input dims")),
                input_types=pl.col("Input type"),
                collective=pl.col("Collective name").cast(pl.Categorical),
                msg_nelems=pl.col("In msg nelems"),
                msg_dtype=pl.col("dtype").cast(pl.Categorical),
            ),
            tagged.select(
                pl.col("_unknown").sum(),
                pl.col("_missing").sum(),
                pl.col("_zero").sum(),
                pl.col("_negative").sum(),
                pl.col("_range").sum(),
            ),
        ]
    )
    unknown, missing, zero, negative, out_of_range = flags.row(0)
    for reason, n in (
        ("missing ts or dur", missing),
        ("ts or dur out of range", out_of_range),
        ("zero timestamp", zero),
        ("negative duration", negative),
    ):
        if n:
            dropped[reason] += n
    if unknown:  # rare: name the categories
        cats = tagged.filter("_unknown").group_by("cat").len().collect()
        for cat, n in cats.iter_rows():
            dropped[f"category {cat if cat is not None else '(none)'}"] += n
    return frame, dropped


# --------------------------------------------------------------------------- timeline


def _rank_of(path: Path, header: dict[str, Any]) -> tuple[int, str]:
    """The rank from `distributedInfo.rank`, else from the file name, else 0."""
    info = header.get("distributedInfo")
    if isinstance(info, dict) and isinstance(info.get("rank"), int):
        return int(info["rank"]), "distributedInfo"
    match = _RANK_IN_NAME.search(path.name)
    if match:
        return int(match.group(1)), "file name"
    return 0, "default"


_COPY_NAME = r"^Memcpy (\w+) \((\w+) -> (\w+)\)$"


def _with_copy_kinds(events: pl.DataFrame) -> pl.DataFrame:
    """Add copy_kind / src_memory / dst_memory, parsed from Kineto's memcpy names.

    `Memcpy HtoD (Pageable -> Device)` gives HtoD, pageable, device. Parsed once per distinct
    name, then joined back.
    """
    text = pl.col("name").cast(pl.String)
    kinds = (
        events.lazy()
        .filter(pl.col("kind") == "memcpy")
        .select("name")
        .unique()
        .with_columns(
            copy_kind=text.str.extract(_COPY_NAME, 1).cast(pl.Categorical),
            src_memory=text.str.extract(_COPY_NAME, 2).str.to_lowercase().cast(pl.Categorical),
            dst_memory=text.str.extract(_COPY_NAME, 3).str.to_lowercase().cast(pl.Categorical),
        )
        .collect()
    )
    if kinds.height == 0:
        return events.with_columns(
            copy_kind=pl.lit(None, pl.Categorical),
            src_memory=pl.lit(None, pl.Categorical),
            dst_memory=pl.lit(None, pl.Categorical),
        )
    # a few distinct names: a left join on the categorical name costs one hash probe per row
    return events.join(kinds, on="name", how="left", maintain_order="left")


#: A timestamp or duration written as a JSON string (`"ts": "1712.5"`): it parses as null.
_TEXT_TIME = re.compile(rb'"(?:ts|dur)"\s*:\s*"')
_MISSING = "missing ts or dur"


def _named_drops(part: _Parsed) -> dict[str, int]:
    """The drop counts, with the reason named where the file shows it (text timestamps)."""
    dropped = dict(part.dropped)
    if _MISSING in dropped and _TEXT_TIME.search(head_bytes(part.path, 1 << 16)):
        dropped["ts or dur written as a string, not a number"] = dropped.pop(_MISSING)
    return dropped


_DUPLICATE = "exact duplicate"


def _without_duplicates(events: pl.DataFrame) -> tuple[pl.DataFrame, int]:
    """`events` with exact duplicate rows removed, and how many were removed.

    Two GPU activities on one stream cannot start in the same nanosecond, so a trace without
    such a pair has no duplicates and costs one hash pass over its GPU events; only a trace
    that has one pays for the full comparison of every event.
    """
    gpu = events.lazy().filter(pl.col("kind").is_in(["kernel", "memcpy", "memset"]))
    key = pl.struct("device", "stream", "start_ns", "end_ns")
    if not gpu.select(key.is_duplicated().any()).collect().item():
        return events, 0
    unique = events.unique(maintain_order=True)
    return unique, events.height - unique.height


def _to_timeline(part: _Parsed, rank: int, rank_source: str, source_path: str) -> Timeline:
    frames = part.frames or [pl.DataFrame(schema=EVENT_SCHEMA)]
    events = _with_copy_kinds(
        pl.concat(frames, how="vertical", rechunk=False).with_columns(rank=pl.lit(rank, pl.Int32))
    )
    events = events.with_columns(domain=pl.lit(None, pl.Categorical))
    events = events.select(EVENT_SCHEMA.names()).cast(dict(EVENT_SCHEMA))  # type: ignore[arg-type]
    unplaced = pl.col("kind").is_in([k.value for k in GPU_KINDS]) & (
        pl.col("device").is_null() | pl.col("stream").is_null()
    )
    lost = int(events.select(unplaced.sum()).item())
    if lost:  # a GPU event with neither a device/stream nor a numeric pid/tid to stand in
        part.dropped["GPU event with no device or stream"] += lost
        events = events.filter(~unplaced)
    events, twice = _without_duplicates(events)
    if twice:
        part.dropped[_DUPLICATE] += twice
        part.notes.append(
            f"{twice} events appear more than once, byte for byte (a trace merged or exported "
            "twice?): each is counted once"
        )
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
        )
        for i, d in enumerate(header.get("deviceProperties") or [])
        if isinstance(d, dict)
    )
    used = events.filter(pl.col("kind").is_in(GPU_KINDS))["device"].drop_nulls().unique()
    devices, device_notes = match_devices(listed, used.to_list())
    version = header.get("schemaVersion")
    meta = TraceMeta(
        path=source_path,
        format="chrome",
        producer="torch.profiler (Kineto)",
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
            dropped=_named_drops(part),
            notes=(*part.notes, *device_notes),
        ),
    )
    return Timeline(events=events, meta=meta)
