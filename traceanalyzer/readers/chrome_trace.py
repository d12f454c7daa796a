"""Reader for torch.profiler / Kineto Chrome traces (`.json`, `.json.gz`, or a folder of ranks).

Pipeline position: file(s) -> this reader -> Timeline.

How it stays fast and lean on multi-GB traces: Kineto writes one event per indented block,
consecutive events separated by `},` + newline + indentation + `{`. A raw newline cannot
occur inside a JSON string, so that separator is structural. The reader streams the file in
blocks, finds the separators with numpy, turns each block of whole events into NDJSON (one
event per line) and hands it to polars' NDJSON reader with an explicit schema that names
only the fields the model needs; everything else in the event is skipped by the parser.
Memory stays at about one block plus the columnar result.

Whatever the fast path cannot split (compact JSON, odd indentation, the last event, a
truncated tail) is parsed with the standard library's JSON scanner, one event at a time,
so every valid trace reads the same way, only slower. A file cut off mid-event keeps the
events that are whole, and the timeline says it was truncated.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import polars as pl

from traceanalyzer.errors import TraceFormatError, UnsupportedTraceError
from traceanalyzer.model import (
    EVENT_SCHEMA,
    KIND,
    DataQuality,
    DeviceInfo,
    RankInfo,
    Timeline,
    TraceMeta,
    combine,
)
from traceanalyzer.readers.base import ByteBlocks, head_bytes

#: Bytes read per block. Peak memory is a few blocks plus the parsed columns.
BLOCK_BYTES = 32 << 20
#: How far into a file the `"traceEvents"` key is looked for before giving up.
MAX_HEADER_BYTES = 256 << 20

#: Kineto `cat` (lower-cased: the 2021 schema capitalises) -> timeline kind.
KIND_BY_CAT: dict[str, str] = {
    "kernel": "kernel",
    "gpu_memcpy": "memcpy",
    "memcpy": "memcpy",
    "gpu_memset": "memset",
    "memset": "memset",
    "cuda_runtime": "runtime",
    "runtime": "runtime",
    "cuda_driver": "driver",
    "cpu_op": "cpu_op",
    "operator": "cpu_op",
    "user_annotation": "annotation",
    "gpu_user_annotation": "gpu_annotation",
    "python_function": "python",
    "cuda_sync": "sync",
}

#: Categories that Kineto always writes and the model does not need: not worth a count.
IGNORED_CATS = frozenset({"trace", "overhead", "fwdbwd", "ac2g", "async", "async_cpu_to_gpu"})

_DEVICE_KINDS = ("kernel", "memcpy", "memset", "gpu_annotation", "sync")

#: The fields parsed from each event; everything else is skipped by the NDJSON parser.
#: Ids and places are read as text because producers disagree on their type
#: (`"tid": "stream 7"` in 2021, `"stream": "0x0"` on ROCm).
RAW_SCHEMA = pl.Schema(
    {
        "ph": pl.String(),
        "cat": pl.String(),
        "name": pl.String(),
        "pid": pl.String(),
        "tid": pl.String(),
        "ts": pl.Float64(),
        "tn": pl.Int64(),  # exact ns, see _exact_timestamps
        "dur": pl.Float64(),
        "args": pl.Struct(
            {
                "device": pl.String(),
                "stream": pl.String(),
                "correlation": pl.Int64(),
                "External id": pl.Int64(),
                "external id": pl.Int64(),
                "grid": pl.List(pl.Int64()),
                "block": pl.List(pl.Int64()),
                "bytes": pl.Int64(),
                "Input Dims": pl.String(),
                "Input dims": pl.String(),
                "Input type": pl.String(),
            }
        ),
    }
)

_EVENTS_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
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
        files = sorted(p for p in folder.iterdir() if p.is_file() and self.sniff(p))
        if not files:
            raise TraceFormatError(
                "the folder holds no Chrome trace files",
                path=folder,
                hint="point at a folder of torch.profiler traces (*.json, *.json.gz), one per rank",
            )
        parts = [(f, read_file(f)) for f in files]
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
        return combine(timelines, str(folder)).validate()


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


def read_file(path: Path) -> _Parsed:
    """Parse one Chrome-trace file into normalised event frames (rank not yet set)."""
    if not path.exists():
        raise TraceFormatError("no such file or folder", path=path, hint="check the path")
    source = ByteBlocks(path, BLOCK_BYTES)
    blocks = _with_last_flag(iter(source))
    buf, eof = next(blocks, (b"", True))
    lead = buf.lstrip(_WS)
    if not lead and eof:
        raise TraceFormatError(
            "the file is empty", path=path, hint="the profiler may have crashed before writing"
        )
    if lead[:1] not in (b"{", b"["):
        raise UnsupportedTraceError(
            "not a JSON trace (it does not start with '{' or '[')",
            path=path,
            hint="traceanalyzer reads torch.profiler Chrome traces (.json, .json.gz)",
        )
    if lead[:1] == b"[":  # the Trace Event Format's bare-array form
        start, header_bytes = len(buf) - len(lead) + 1, b""
    else:
        match = _EVENTS_KEY.search(buf)
        while match is None and not eof and len(buf) < MAX_HEADER_BYTES:
            more, eof = next(blocks)
            buf += more
            match = _EVENTS_KEY.search(buf)
        if match is None:
            _raise_no_events(path, buf, eof)
        assert match is not None
        start, header_bytes = match.end(), buf[: match.start()]
    parsed = _Parsed(path=path, header=_parse_header(header_bytes))
    body = buf[start:]
    del buf
    splitter = _Splitter()
    while True:
        body = _consume_whole_events(body, splitter, parsed)
        if eof:
            break
        more, eof = next(blocks)
        body = body + more if more else body
    _parse_tail(body, parsed)
    if source.truncated and not parsed.truncated:
        parsed.truncated = True
        parsed.notes.append(f"{path.name}: the gzip stream is cut off")
    return parsed


def _with_last_flag(blocks: Iterator[bytes]) -> Iterator[tuple[bytes, bool]]:
    """Yield (block, is_last) pairs, looking one block ahead."""
    prev = next(blocks, None)
    if prev is None:
        return
    for block in blocks:
        yield prev, False
        prev = block
    yield prev, True


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


@dataclass
class _Splitter:
    """Finds the structural separators between Kineto events in a block of bytes."""

    indent: int | None = None

    def boundaries(self, arr: np.ndarray[Any, np.dtype[np.uint8]]) -> tuple[Any, Any]:
        """Return (all newline positions, positions of newlines that separate two events)."""
        newlines = np.flatnonzero(arr == 10)
        if newlines.size == 0:
            return newlines, newlines
        ok = newlines[newlines >= 2]
        cand = ok[(arr[ok - 1] == 44) & (arr[ok - 2] == 125)]  # '},' then newline
        if cand.size == 0:
            return newlines, cand
        if self.indent is None:
            self.indent = _indent_after(arr, cand)
            if self.indent is None:
                return newlines, cand[:0]
        k = self.indent
        cand = cand[cand + 1 + k < arr.size]
        sep = cand[arr[cand + 1 + k] == 123]  # then `indent` spaces and '{'
        if k:
            for j in range(1, k + 1):  # a handful of columns, not a loop over events
                sep = sep[arr[sep + j] == 32]
        return newlines, sep


def _indent_after(arr: np.ndarray[Any, np.dtype[np.uint8]], cand: Any) -> int | None:
    """Count the spaces between the first `},\\n` separator and the next `{`."""
    for p in cand[:16]:
        k = 0
        while p + 1 + k < arr.size and arr[p + 1 + k] == 32:
            k += 1
        if p + 1 + k < arr.size and arr[p + 1 + k] == 123:
            return k
    return None


def _consume_whole_events(body: bytes, splitter: _Splitter, parsed: _Parsed) -> bytes:
    """Parse the whole events at the front of `body`; return the rest (from the last `{`)."""
    arr = np.frombuffer(body, dtype=np.uint8)
    newlines, sep = splitter.boundaries(arr)
    if sep.size == 0:
        return body
    last = int(sep[-1])
    newlines = newlines[newlines < last]
    sep = sep[:-1]
    out = arr[:last].copy()
    out[newlines] = 32  # fold each multi-line event onto one line
    out[sep] = 10  # one event per line
    out[sep - 1] = 32  # drop the separating comma
    out[last - 1] = 32  # and the one before the block's last separator
    _exact_timestamps(out)
    try:
        raw = pl.read_ndjson(out.tobytes(), schema=RAW_SCHEMA, ignore_errors=True)
    except pl.exceptions.ComputeError:
        # a separator that was not one (an array of objects nested at the same depth):
        # parse this stretch with the exact scanner instead
        raw = _raw_from_dicts(_scan_events(_exact_text(body[:last]))[0])
    _add_frame(raw, parsed)
    return body[last + 1 :]


def _scan_events(text: str) -> tuple[list[Any], int]:
    """Decode consecutive `{...}` values separated by commas; stop at `]` or a cut-off.

    Returns the events and the index just past the closing `]` (-1 when the array did not end).
    """
    decoder = json.JSONDecoder()
    events: list[Any] = []
    i, n = 0, len(text)
    while True:
        while i < n and text[i] in " \t\r\n,":
            i += 1
        if i >= n:
            return events, -1
        if text[i] == "]":
            return events, i + 1
        try:
            obj, i = decoder.raw_decode(text, i)
        except json.JSONDecodeError:
            return events, -1
        events.append(obj)


def _parse_tail(body: bytes, parsed: _Parsed) -> None:
    """Parse what follows the last separator: the last events, `]`, and the trailing keys."""
    text = _exact_text(body)
    events, end = _scan_events(text)
    if events:
        _add_frame(_raw_from_dicts(events), parsed)
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


def _exact_text(data: bytes) -> str:
    """The text of `data` with exact-ns timestamps (see `_exact_timestamps`)."""
    arr = np.frombuffer(data, dtype=np.uint8).copy()
    _exact_timestamps(arr)
    return arr.tobytes().decode("utf-8", "replace")


def _raw_from_dicts(events: list[Any]) -> pl.DataFrame:
    """Turn decoded event dicts into the raw frame (via NDJSON, so typing is identical)."""
    dicts = [e for e in events if isinstance(e, dict)]
    if not dicts:
        return pl.DataFrame(schema=RAW_SCHEMA)
    ndjson = b"\n".join(map(orjson.dumps, dicts))
    return pl.read_ndjson(ndjson, schema=RAW_SCHEMA, ignore_errors=True)


_TS_WINDOW = 24


def _exact_timestamps(out: np.ndarray[Any, np.dtype[np.uint8]]) -> None:
    """Rewrite `"ts": 1712195495519689.047` as `"tn":  1712195495519689047` in place.

    Kineto writes float microseconds with ns decimals; epoch-based values like the one above
    have 19 significant digits, more than a float64 holds (it would be off by up to 125 ns).
    Moving the decimal point in the text, in the same number of bytes, lets the JSON parser
    read exact integer nanoseconds into the `tn` field. Values it cannot rewrite in place
    (integers, no space to spare, more than 3 decimals) stay `ts` and are exact as floats
    or as close as a float allows. Vectorised over all timestamps of a block at once.
    """
    if out.size < 8:
        return
    t = np.flatnonzero(out[1:-6] == 116) + 1
    t = t[(out[t - 1] == 34) & (out[t + 1] == 115) & (out[t + 2] == 34) & (out[t + 3] == 58)]
    if t.size == 0:
        return
    r0 = t + 4
    sp = (out[r0] == 32).astype(np.int64)
    v = r0 + sp
    cols = np.arange(_TS_WINDOW)
    idx = np.minimum(v[:, None] + cols, out.size - 1)
    win = out[idx]
    isdig = (win >= 48) & (win <= 57)
    nd = ~isdig
    k = nd.argmax(1)
    dot = win[np.arange(win.shape[0]), k] == 46
    nd_after = nd & (cols > k[:, None])
    e = nd_after.argmax(1)
    f = e - k - 1
    ok = (
        dot
        & (k >= 1)
        & (win[:, 0] != 48)  # no leading zero: "0001" is not JSON
        & nd_after.any(1)
        & (f >= 1)
        & (f <= 3)
        & (sp + f >= 2)
        & (v + e < out.size)
    )
    if not ok.any():
        return
    t, r0, sp, k, f, win = t[ok], r0[ok], sp[ok], k[ok], f[ok], win[ok]
    length = sp + k + 1 + f  # bytes from r0 to the end of the number
    pad = sp + f - 2
    c = cols[None, :] - pad[:, None]  # position within the new digits
    kk = k[:, None]
    ff = f[:, None]
    # source column in `win` (relative to v) for integer and fraction digits
    src_int = np.clip(c, 0, _TS_WINDOW - 1)
    src_frac = np.clip(c + 1, 0, _TS_WINDOW - 1)
    rows = np.arange(win.shape[0])[:, None]
    new = np.where(
        c < 0,
        32,
        np.where(c < kk, win[rows, src_int], np.where(c < kk + ff, win[rows, src_frac], 48)),
    ).astype(np.uint8)
    write = cols[None, :] < length[:, None]
    pos = (r0[:, None] + cols[None, :])[write]
    out[pos] = new[write]
    out[t + 1] = 110  # "ts" -> "tn"


# ------------------------------------------------------------------------- normalisation


def _int_of(col: pl.Expr) -> pl.Expr:
    """Parse an id written as an int, a float, `"stream 7"` or `"0x1f"` into Int64."""
    text = col.str.strip_chars()
    hexa = text.str.strip_prefix("0x").str.to_integer(base=16, strict=False)
    digits = text.str.extract(r"(-?\d+)(?:\.0+)?$", 1).str.to_integer(strict=False)
    return pl.when(text.str.starts_with("0x")).then(hexa).otherwise(digits).cast(pl.Int64)


def _to_ns(col: pl.Expr) -> pl.Expr:
    """Float microseconds -> integer ns, exact to the ns for values below 2**43 µs.

    The integer part is converted exactly and only the fraction goes through floating point,
    so a timestamp like 4476047788645.790 becomes ...645790 ns, not ...645789.
    """
    whole = col.floor()
    return whole.cast(pl.Int64) * 1000 + ((col - whole) * 1000).round().cast(pl.Int64)


def _add_frame(raw: pl.DataFrame, parsed: _Parsed) -> None:
    """Normalise one raw frame to the event schema (rank set later) and count what is dropped."""
    if raw.height == 0:
        return
    cat = pl.col("cat").str.to_lowercase()
    tagged = (
        raw.lazy()
        .filter(pl.col("ph") == "X")
        .with_columns(
            kind=cat.replace_strict(KIND_BY_CAT, default=None, return_dtype=pl.String),
            start_ns=pl.coalesce(pl.col("tn"), _to_ns(pl.col("ts"))),
        )
    )
    counts = (
        tagged.select(
            reason=pl.when(pl.col("kind").is_null())
            .then(pl.lit("category ") + pl.col("cat").fill_null("(none)"))
            .when(pl.col("start_ns").is_null() | pl.col("dur").is_null())
            .then(pl.lit("missing ts or dur"))
            .when(pl.col("start_ns") <= 0)
            .then(pl.lit("zero timestamp"))
            .when(pl.col("dur") < 0)
            .then(pl.lit("negative duration")),
            cat=cat,
        )
        .filter(pl.col("reason").is_not_null() & ~pl.col("cat").is_in(list(IGNORED_CATS)))
        .group_by("reason")
        .len()
        .collect()
    )
    for reason, n in counts.iter_rows():  # a handful of reasons, not events
        parsed.dropped[reason] += n
    args = pl.col("args").struct
    on_device = pl.col("kind").is_in(_DEVICE_KINDS)
    start = pl.col("start_ns")
    frame = (
        tagged.filter(
            pl.col("kind").is_not_null()
            & pl.col("start_ns").is_not_null()
            & pl.col("dur").is_not_null()
            & (pl.col("start_ns") > 0)
            & (pl.col("dur") >= 0)
        )
        .select(
            rank=pl.lit(0, pl.Int32),
            device=pl.when(on_device)
            .then(pl.coalesce(_int_of(args.field("device")), _int_of(pl.col("pid"))))
            .cast(pl.Int32),
            stream=pl.when(on_device).then(
                pl.coalesce(_int_of(args.field("stream")), _int_of(pl.col("tid")))
            ),
            pid=pl.when(~on_device).then(_int_of(pl.col("pid"))),
            tid=pl.when(~on_device).then(_int_of(pl.col("tid"))),
            kind=pl.col("kind").cast(KIND),
            name=pl.col("name").fill_null("").cast(pl.Categorical),
            start_ns=start,
            end_ns=start + (pl.col("dur") * 1000).round().cast(pl.Int64),
            correlation=args.field("correlation"),
            external_id=pl.coalesce(args.field("External id"), args.field("external id")),
            grid=args.field("grid").cast(pl.List(pl.Int32)),
            block=args.field("block").cast(pl.List(pl.Int32)),
            bytes=args.field("bytes"),
            input_dims=pl.coalesce(args.field("Input Dims"), args.field("Input dims")),
            input_types=args.field("Input type"),
        )
        .collect()
    )
    parsed.frames.append(frame)


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


def _to_timeline(part: _Parsed, rank: int, rank_source: str, source_path: str) -> Timeline:
    frames = part.frames or [pl.DataFrame(schema=EVENT_SCHEMA)]
    events = pl.concat(frames, how="vertical", rechunk=True).with_columns(
        rank=pl.lit(rank, pl.Int32)
    )
    events = events.select(EVENT_SCHEMA.names()).cast(dict(EVENT_SCHEMA))  # type: ignore[arg-type]
    header = part.header
    info = header.get("distributedInfo")
    world = info.get("world_size") if isinstance(info, dict) else None
    devices = tuple(
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
            dropped=dict(part.dropped),
            notes=tuple(part.notes),
        ),
    )
    return Timeline(events=events, meta=meta)
