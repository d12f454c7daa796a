"""Reader for Nsight Systems SQLite exports (`nsys export --type sqlite`).

Pipeline position: file -> this reader -> Timeline. What an export holds and which ranks its
processes are is probed in `nsys_schema_probe.py`; this module turns the event tables into
the event schema: kernels, memcpys and memsets (GPU work), CUDA runtime (and driver) API
calls, CUPTI synchronisation records and NVTX ranges.

How it stays fast: SQL does the work. Each table is read in rowid ranges by one aggregate
query that prints its rows as CSV text inside SQLite (`printf` + `group_concat`) and hands
back one blob per range; polars parses the blob with an explicit schema. No Python object is
made per event (that alone would cost seconds per million rows). String ids (kernel and API
names) stay integers in the big tables; their distinct values are joined to `StringIds` in
SQL and then to the events in polars.
"""

from __future__ import annotations

import re
import sqlite3
import struct
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import polars as pl

from traceanalyzer.errors import TraceFormatError
from traceanalyzer.model import (
    EVENT_SCHEMA,
    KIND,
    DataQuality,
    PageFaults,
    RankInfo,
    Timeline,
    TraceMeta,
)
from traceanalyzer.parallel import usable_cores
from traceanalyzer.readers import nsys_schema_probe as sp
from traceanalyzer.readers.base import SQLITE_MAGIC
from traceanalyzer.readers.nsys_gpu_metrics import read_gpu_metrics

#: Rows per aggregate query: one blob of about 25 MB for the widest table.
CHUNK_ROWS = 1 << 18

#: CUPTI's "no such stream/device" value, written as an unsigned 32-bit integer.
INVALID_ID = 0xFFFFFFFF

#: CUpti_ActivityMemcpyKind -> direction (11..13 are nsys's unified-memory migrations).
COPY_KIND: dict[int, str] = {
    1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA",
    8: "DtoD", 9: "HtoH", 10: "PtoP", 11: "HtoD", 12: "DtoH", 13: "DtoD",
}  # fmt: skip
#: The copy kinds of unified-memory migrations (managed pages moved by the driver).
UNIFIED_COPIES = (11, 12, 13)
#: CUpti_ActivityMemoryKind -> the label Kineto puts in memcpy/memset names.
MEMORY_LABEL: dict[int, str] = {
    0: "Pageable", 1: "Pinned", 2: "Device", 3: "Array", 4: "Managed",
    5: "Device Static", 6: "Managed Static", 7: "Unknown",
}  # fmt: skip
#: CUpti_ActivityMemoryKind -> the `src_memory`/`dst_memory` value (static kinds folded).
MEMORY_KIND: dict[int, str] = {
    0: "pageable", 1: "pinned", 2: "device", 3: "array", 4: "managed",
    5: "device", 6: "managed",
}  # fmt: skip
#: CUpti_ActivitySynchronizationType -> Kineto's cuda_sync event names.
SYNC_NAME: dict[int, str] = {
    1: "Event Sync", 2: "Stream Wait Event", 3: "Stream Sync", 4: "Context Sync",
}  # fmt: skip
#: ENUM_NSYS_EVENT_TYPE values of NVTX rows (stable since 2021; the 2021 export has no enum).
NVTX_RANGES = (59, 60, 70, 71)  # NvtxPushPopRange, NvtxStartEndRange, and the NVTXT forms
NVTX_MARKS = (34, 65)  # NvtxMark, NvtxtMark: instants, no duration
NVTX_DOMAIN_CREATE = 75

PID = "((t.globalPid >> 24) & 16777215)"  # globalPid packs the pid in bits 24..47
TID_PID = "((t.globalTid >> 24) & 16777215)"  # globalTid: pid in bits 24..47, tid in 0..23
TID = "(t.globalTid & 16777215)"

_API_VERSION = re.compile(r"_v\d+$")

Column = tuple[str, str, pl.DataType]  # name, SQL expression, dtype
_I = pl.Int64()
_I32 = pl.Int32()
_S = pl.String()


class NsysSqliteReader:
    """Nsight Systems SQLite export, one file (all its processes and GPUs)."""

    name: str = "nsys"
    suffixes: tuple[str, ...] = (".sqlite", ".sqlite3", ".db")

    def sniff(self, path: Path) -> bool:
        """A file that starts with the SQLite magic bytes."""
        try:
            with path.open("rb") as fh:
                return fh.read(len(SQLITE_MAGIC)) == SQLITE_MAGIC
        except OSError:
            return False

    def read(self, path: Path) -> Timeline:
        """Read one export into a validated Timeline (raises TraceFormatError if unusable)."""
        con = sp.open_readonly(path)
        try:
            return _read(con, path).validate()
        except (
            pl.exceptions.ComputeError,
            pl.exceptions.SchemaError,
            UnicodeDecodeError,
            sqlite3.Error,
        ) as exc:
            # a value of the wrong type where nsys writes integers, text that is not UTF-8,
            # a page SQLite cannot read: a hand-edited or damaged export
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise TraceFormatError(
                f"the export is damaged or holds values of the wrong type ({first})",
                path=path,
                hint="export it again with `nsys export --type sqlite`",
            ) from exc
        finally:
            con.close()


def session_start_utc_ns(path: Path) -> int | None:
    """When the capture of an export started, in ns since the Unix epoch (None if unrecorded).

    Event times are ns since this moment; TraceMeta has no field for it yet.
    """
    con = sp.open_readonly(path)
    try:
        return sp.session_start_utc_ns(con, sp.probe(con, path))
    finally:
        con.close()


# ------------------------------------------------------------------------------ fetching


def _query(table: str, columns: Sequence[Column], where: str, joins: str) -> tuple[str, pl.Schema]:
    """The aggregate query that prints one rowid range of `table` as CSV, and its schema."""
    schema = pl.Schema({name: dtype for name, _expr, dtype in columns})
    fmt = ",".join("%Q" if dtype == _S else "%s" for _n, _e, dtype in columns)
    args = ", ".join(
        f"coalesce({expr}, '')" if dtype == _S else expr for _n, expr, dtype in columns
    )
    cond = f"AND ({where})" if where else ""
    sql = (
        f"SELECT CAST(group_concat(printf('{fmt}', {args}), char(10)) AS BLOB) "
        f"FROM {table} AS t {joins} WHERE t.rowid >= ? AND t.rowid < ? {cond}"
    )
    return sql, schema


def _parse(blobs: Iterable[bytes], schema: pl.Schema) -> pl.DataFrame:
    parts = [
        pl.read_csv(blob, has_header=False, schema=schema, quote_char="'") for blob in blobs if blob
    ]
    return pl.concat(parts, rechunk=False) if parts else pl.DataFrame(schema=schema)


def fetch(
    con: sqlite3.Connection,
    table: str,
    columns: Sequence[Column],
    *,
    where: str = "",
    joins: str = "",
) -> pl.DataFrame:
    """Read columns of `table` (aliased `t`) into a frame, one CSV blob per rowid range.

    String columns are printed with `%Q` (SQL quoting: 'it''s'), which is CSV quoting with
    `'` as the quote character, so names with commas, quotes or newlines survive.
    """
    sql, schema = _query(table, columns, where, joins)
    lo, hi = con.execute(f"SELECT min(rowid), max(rowid) FROM {table}").fetchone()
    blobs: list[bytes] = []
    if lo is not None:
        for start in range(lo, hi + 1, CHUNK_ROWS):
            (blob,) = con.execute(sql, (start, start + CHUNK_ROWS)).fetchone()
            blobs.append(blob or b"")
    return _parse(blobs, schema)


#: Tables with at least this many rows are printed by a helper process (see `fetch_aside`).
ASIDE_MIN_ROWS = 1 << 20

#: The helper process: prints each rowid range of the query and writes the blobs to stdout,
#: each after its length (8 bytes, little-endian). Only the standard library is imported.
_ASIDE_CODE = """
import sqlite3, struct, sys
uri, sql, lo, hi, step = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6])
con = sqlite3.connect(uri, uri=True)
out = sys.stdout.buffer
for start in range(lo, hi + 1, step):
    (blob,) = con.execute(sql, (start, start + step)).fetchone()
    blob = blob or b""
    out.write(struct.pack("<q", len(blob)))
    out.write(blob)
out.flush()
"""


def fetch_aside(
    con: sqlite3.Connection,
    path: Path,
    table: str,
    columns: Sequence[Column],
    pool: ThreadPoolExecutor,
) -> Future[pl.DataFrame]:
    """`fetch`, started now and finished while the caller reads other tables.

    SQLite prints the rows (most of a read's time) on one core per process: threads of one
    process gain nothing (they contend inside SQLite), so a large table is printed by a
    helper Python process running the same query on the same read-only, immutable file,
    and a thread of `pool` parses its blobs as they arrive. Should the helper fail, that
    thread reads the table itself, on a connection of its own. A small table is read at
    once, here.
    """
    sql, schema = _query(table, columns, "", "")
    lo, hi = con.execute(f"SELECT min(rowid), max(rowid) FROM {table}").fetchone()
    if lo is None or hi - lo + 1 < ASIDE_MIN_ROWS:  # not worth a process: read it now
        done: Future[pl.DataFrame] = Future()
        done.set_result(fetch(con, table, columns))
        return done
    uri = sp.readonly_uri(path)

    def run() -> pl.DataFrame:
        try:
            return _parse(_blobs_aside(uri, sql, lo, hi), schema)
        except (OSError, ValueError, subprocess.SubprocessError):
            pass
        own = sp.open_readonly(path)
        try:
            return fetch(own, table, columns)
        finally:
            own.close()

    return pool.submit(run)


def _blobs_aside(uri: str, sql: str, lo: int, hi: int) -> Iterator[bytes]:
    """The blobs of every rowid range of `sql`, printed by the helper process, as they come."""
    if not Path(sys.executable).name.lower().startswith("python"):
        # embedded (uWSGI, a frozen app...): sys.executable may not be an interpreter
        raise ValueError(f"no Python interpreter to run the helper: {sys.executable!r}")
    args = [uri, sql, str(lo), str(hi), str(CHUNK_ROWS)]
    cmd = [sys.executable, "-I", "-S", "-c", _ASIDE_CODE, *args]
    count = 0
    with subprocess.Popen(
        cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    ) as proc:
        assert proc.stdout is not None
        while head := proc.stdout.read(8):
            size = struct.unpack("<q", head)[0] if len(head) == 8 else -1
            blob = proc.stdout.read(size) if size >= 0 else b""
            if len(blob) != size:
                raise ValueError("the helper process stopped in the middle of a blob")
            count += 1
            yield blob
    if proc.returncode != 0 or count != len(range(lo, hi + 1, CHUNK_ROWS)):
        raise ValueError(f"the helper process failed (exit status {proc.returncode})")


def _names(
    con: sqlite3.Connection, table: str, column: str, *, strip_version: bool = False
) -> pl.Expr:
    """`_name_id` -> its StringIds value, as a Categorical expression.

    SQL joins the distinct ids of `table.column` to StringIds (a few hundred rows); the
    events are then mapped in polars, with no per-row string made.
    """
    rows = con.execute(
        f"SELECT s.id, s.value FROM StringIds s WHERE s.id IN (SELECT DISTINCT {column} "
        f"FROM {table})"
    ).fetchall()
    ids = [int(i) for i, _v in rows]
    # API names carry the version of their entry point (cudaLaunchKernel_v7000): drop it
    texts = [_API_VERSION.sub("", str(v)) if strip_version else str(v) for _i, v in rows]
    return pl.col("_name_id").replace_strict(
        ids, texts, default=None, return_dtype=pl.Categorical()
    )


def _col(pr: sp.Probe, table: str, column: str, default: str = "NULL") -> str:
    return f't."{column}"' if pr.has(table, column) else default


def _gpu_columns(pr: sp.Probe, table: str) -> list[Column]:
    return [
        ("start_ns", "t.start", _I),
        ("end_ns", 't."end"', _I),
        ("device", _col(pr, table, "deviceId"), _I),
        ("stream", _col(pr, table, "streamId"), _I),
        ("correlation", _col(pr, table, "correlationId"), _I),
        ("_pid", PID if pr.has(table, "globalPid") else "NULL", _I),
    ]


# ------------------------------------------------------------------------------- tables


def _kernel_name(pr: sp.Probe) -> str:
    return "demangledName" if pr.has(sp.KERNEL, "demangledName") else "shortName"


def _kernel_columns(pr: sp.Probe) -> list[Column]:
    t = sp.KERNEL
    smem = f"{_col(pr, t, 'staticSharedMemory', '0')} + {_col(pr, t, 'dynamicSharedMemory', '0')}"
    return [
        *_gpu_columns(pr, t),
        ("_name_id", f"t.{_kernel_name(pr)}", _I),
        ("registers", _col(pr, t, "registersPerThread"), _I32),
        # parsed as the schema's Int32: the lists are then built once, in their final dtype
        *((c, _col(pr, t, c), _I32) for c in ("gridX", "gridY", "gridZ")),
        *((c, _col(pr, t, c), _I32) for c in ("blockX", "blockY", "blockZ")),
        ("shared_mem_bytes", smem, _I),
        ("local_mem_bytes", _col(pr, t, "localMemoryPerThread"), _I),
    ]


def _kernels(
    con: sqlite3.Connection, pr: sp.Probe, raw: pl.DataFrame | None = None
) -> pl.DataFrame:
    """Kernels; `raw`: the table's rows, where already fetched (`fetch_aside`)."""
    t, name = sp.KERNEL, _kernel_name(pr)
    if raw is None:
        raw = fetch(con, t, _kernel_columns(pr))
    return raw.with_columns(
        kind=pl.lit("kernel", KIND),
        name=_names(con, t, name),
        grid=pl.concat_list("gridX", "gridY", "gridZ"),
        block=pl.concat_list("blockX", "blockY", "blockZ"),
    )


#: Nsight's default capture of a CUDA graph replay: one graph-level activity per launch
#: (`--cuda-graph-trace=node` records each kernel instead, and writes no such rows).
GRAPH = sp.GRAPH


def _graphs(con: sqlite3.Connection, pr: sp.Probe) -> pl.DataFrame:
    """Graph replays recorded whole: GPU work (kind `kernel`, named `CUDA graph N replay`) on
    their stream, linked to their `cudaGraphLaunch` by correlation id, so that busy time,
    steps and the critical path count them; their kernels inside are not known."""
    cols = [*_gpu_columns(pr, GRAPH), ("_graph", _col(pr, GRAPH, "graphId"), _I)]
    return fetch(con, GRAPH, cols).with_columns(
        kind=pl.lit("kernel", KIND),
        name=pl.format("CUDA graph {} replay", pl.col("_graph").fill_null(-1)),
    )


def _memcpys(con: sqlite3.Connection, pr: sp.Probe) -> pl.DataFrame:
    t = sp.MEMCPY
    cols = [
        *_gpu_columns(pr, t),
        ("bytes", _col(pr, t, "bytes"), _I),
        ("_copy", _col(pr, t, "copyKind"), _I),
        ("_src", _col(pr, t, "srcKind"), _I),
        ("_dst", _col(pr, t, "dstKind"), _I),
    ]
    raw = fetch(con, t, cols)
    kind = pl.col("_copy").replace_strict(COPY_KIND, default=None, return_dtype=_S)
    label = MEMORY_LABEL

    def mem(c: str) -> pl.Expr:
        return pl.col(c).replace_strict(label, default="Unknown", return_dtype=_S)

    # nsys's unified-memory migrations (copy kinds 11-13) move managed pages on demand (a
    # page fault) or by prefetch; their memory kinds read "unknown": both sides are managed
    unified = pl.col("_copy").is_in(list(UNIFIED_COPIES))
    managed = pl.lit("managed", _S)
    return raw.with_columns(
        kind=pl.lit("memcpy", KIND),
        name=pl.when(unified)
        .then(pl.format("Memcpy Unified {} (Managed -> Managed)", kind.fill_null("Unknown")))
        .otherwise(
            pl.format("Memcpy {} ({} -> {})", kind.fill_null("Unknown"), mem("_src"), mem("_dst"))
        ),
        copy_kind=kind,
        src_memory=pl.when(unified)
        .then(managed)
        .otherwise(pl.col("_src").replace_strict(MEMORY_KIND, default=None, return_dtype=_S)),
        dst_memory=pl.when(unified)
        .then(managed)
        .otherwise(pl.col("_dst").replace_strict(MEMORY_KIND, default=None, return_dtype=_S)),
    )


def _memsets(con: sqlite3.Connection, pr: sp.Probe) -> pl.DataFrame:
    t = sp.MEMSET
    cols = [*_gpu_columns(pr, t), ("bytes", _col(pr, t, "bytes"), _I),
            ("_mem", _col(pr, t, "memKind"), _I)]  # fmt: skip
    raw = fetch(con, t, cols)
    mem = pl.col("_mem").replace_strict(MEMORY_LABEL, default="Unknown", return_dtype=_S)
    return raw.with_columns(kind=pl.lit("memset", KIND), name=pl.format("Memset ({})", mem))


def _syncs(con: sqlite3.Connection, pr: sp.Probe) -> pl.DataFrame:
    t = sp.SYNC
    raw = fetch(con, t, [*_gpu_columns(pr, t), ("_type", _col(pr, t, "syncType"), _I)])
    invalid = [INVALID_ID, -1]
    return raw.with_columns(
        kind=pl.lit("sync", KIND),
        name=pl.col("_type").replace_strict(SYNC_NAME, default="Unknown Sync", return_dtype=_S),
        device=pl.when(pl.col("device").is_in(invalid)).then(None).otherwise("device"),
        stream=pl.when(pl.col("stream").is_in(invalid)).then(None).otherwise("stream"),
    )


def _api_columns(pr: sp.Probe, table: str) -> list[Column]:
    return [
        ("start_ns", "t.start", _I),
        ("end_ns", 't."end"', _I),
        ("_pid", TID_PID, _I),
        ("tid", TID, _I),
        ("correlation", _col(pr, table, "correlationId"), _I),
        ("_name_id", "t.nameId", _I),
    ]


def _api_calls(
    con: sqlite3.Connection,
    pr: sp.Probe,
    table: str,
    kind: str,
    raw: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """CUDA runtime or driver API calls on host threads; names lose their `_v7000` suffix.

    `raw`: the table's rows, where already fetched (`fetch_aside`).
    """
    if raw is None:
        raw = fetch(con, table, _api_columns(pr, table))
    return raw.with_columns(
        kind=pl.lit(kind, KIND), name=_names(con, table, "nameId", strip_version=True), pid="_pid"
    )


def _nvtx(con: sqlite3.Connection, pr: sp.Probe, dropped: Counter[str]) -> pl.DataFrame:
    """NVTX push/pop and start/end ranges as annotations; marks and open ranges are counted."""
    t = sp.NVTX
    text_id = pr.has(t, "textId")
    text = "coalesce(t.text, s.value)" if text_id else "t.text"
    joins = "LEFT JOIN StringIds s ON s.id = t.textId" if text_id else ""
    for reason, types, extra in (
        ("NVTX mark (no duration)", NVTX_MARKS, ""),
        ("NVTX range with no end", NVTX_RANGES, ' AND "end" IS NULL'),
    ):
        (n,) = con.execute(f"SELECT count(*) FROM {t} WHERE eventType IN {types}{extra}").fetchone()
        if n:
            dropped[reason] += n
    domain = _col(pr, t, "domainId", "0")
    raw = fetch(
        con,
        t,
        [
            ("start_ns", "t.start", _I),
            ("end_ns", 't."end"', _I),
            ("_pid", TID_PID, _I),
            ("tid", TID, _I),
            ("_domain_id", domain, _I),
            ("name", text, _S),
        ],
        where=f't.eventType IN {NVTX_RANGES} AND t."end" IS NOT NULL',
        joins=joins,
    )
    domains = pl.DataFrame(
        con.execute(
            f"SELECT DISTINCT {TID_PID}, {domain.removeprefix('t.')}, {text} FROM {t} AS t "
            f"{joins} WHERE t.eventType = {NVTX_DOMAIN_CREATE}"
        ).fetchall(),
        schema={"_pid": _I, "_domain_id": _I, "domain": _S},
        orient="row",
    ).unique(["_pid", "_domain_id"], keep="first")
    return raw.join(domains, on=["_pid", "_domain_id"], how="left").with_columns(
        kind=pl.lit("annotation", KIND), pid="_pid"
    )


# ------------------------------------------------------------------------------ assembly


def _finish(frame: pl.DataFrame, ranks: dict[int, int], dropped: Counter[str]) -> pl.DataFrame:
    """Give one table's rows their rank (from their process) and conform them to the schema.

    Rows of a process that drives no GPU, and rows that end before they start, are dropped
    and counted.
    """
    pid, on_gpu = pl.col("_pid"), pl.col("kind").is_in(["kernel", "memcpy", "memset"])
    known = pid.is_in(list(ranks)).fill_null(False)
    bad = pl.col("end_ns") < pl.col("start_ns")
    lost_gpu, lost_host, negative = frame.select(
        gpu=(~known & on_gpu).sum(), host=(~known & ~on_gpu).sum(), bad=(known & bad).sum()
    ).row(0)
    for reason, n in (
        ("GPU events with no process", lost_gpu),
        ("host events of processes with no GPU work", lost_host),
        ("negative duration", negative),
    ):
        if n:
            dropped[reason] += n
    if lost_gpu or lost_host or negative:
        frame = frame.filter(known & ~bad)
    rank = pid.replace_strict(list(ranks), list(ranks.values()), return_dtype=pl.Int32())
    return frame.select(
        *(
            (rank if name == "rank" else pl.col(name) if name in frame.columns else pl.lit(None))
            .cast(dtype)
            .alias(name)
            for name, dtype in EVENT_SCHEMA.items()
        )
    )


def _gpu_processes(gpu: list[pl.DataFrame]) -> list[sp.Process]:
    """The processes that ran kernels, memcpys or memsets (rows with a pid), in pid order."""
    found = (
        pl.concat([f.select("_pid", "start_ns") for f in gpu])
        .filter(pl.col("_pid").is_not_null())
        .group_by("_pid")
        .agg(pl.col("start_ns").min())
        .sort("_pid")
    )
    return [sp.Process(pid=int(p), first_gpu_ns=int(t)) for p, t in found.iter_rows()]


def _read(con: sqlite3.Connection, path: Path) -> Timeline:
    pr = sp.probe(con, path)
    meta_kv = sp.export_meta(con, pr)
    notes: list[str] = []
    dropped: Counter[str] = Counter()
    apis = [(t, kind) for t, kind in ((sp.RUNTIME, "runtime"), (sp.DRIVER, "driver"))
            if pr.has(t, "nameId")]  # fmt: skip
    # the largest tables are printed meanwhile by other processes (SQLite holds one core per
    # process): the runtime calls always, the kernels too where a third core is free
    tables = [(t, _api_columns(pr, t)) for t, _k in apis[:1]]
    if usable_cores() >= 3:
        tables.append((sp.KERNEL, _kernel_columns(pr)))
    with ThreadPoolExecutor(max_workers=max(1, len(tables))) as pool:
        aside = {t: fetch_aside(con, path, t, cols, pool) for t, cols in tables}
        others = [
            f(con, pr)
            for t, f in ((sp.MEMCPY, _memcpys), (sp.MEMSET, _memsets), (GRAPH, _graphs))
            if pr.has(t)
        ]
        kernels = aside[sp.KERNEL].result() if sp.KERNEL in aside else None
        gpu = [_kernels(con, pr, kernels), *others]
        procs = _gpu_processes(gpu)
        if not procs:
            raise sp.no_kernels(con, pr, path)
        ranks, rank_source, rank_notes = sp.assign_ranks(con, pr, procs)
        notes += rank_notes
        host = [_syncs(con, pr)] if pr.has(sp.SYNC) else []
        host += [_api_calls(con, pr, t, kind, aside[t].result() if t in aside else None)
                 for t, kind in apis]  # fmt: skip
    if pr.has(sp.NVTX, "eventType"):
        host.append(_nvtx(con, pr, dropped))
    if len(procs) == 1:  # a GPU row with no globalPid can only be the one process's
        gpu = [f.with_columns(pl.col("_pid").fill_null(procs[0].pid)) for f in gpu]
    ranked = pl.concat(
        [_finish(f, ranks, dropped) for f in gpu + host], how="vertical", rechunk=False
    )
    used = (  # lazily: an eager filter would copy every column of the GPU rows first
        ranked.lazy()
        .filter(pl.col("kind").is_in(["kernel", "memcpy", "memset"]))
        .select("rank", "device")
        .unique()
        .sort("rank", "device")
        .collect()
    )
    pid_of = {r: p for p, r in ranks.items()}
    triples = [(r, pid_of[r], d) for r, d in used.iter_rows()]
    devices = sp.device_infos(con, pr, triples)
    samples, metric_notes = read_gpu_metrics(con, pr, sp.gpu_ids(con, pr, triples))
    notes += metric_notes
    version = meta_kv.get("EXPORT_PRODUCT_VERSION")
    # ranks numbered by order are exactly this file's processes; others may be a part of a job
    world = len(ranks) if rank_source == "pid order" else None
    if not meta_kv:
        notes.append("no export metadata table: an nsys 2021 (or older) export")
    meta = TraceMeta(
        path=str(path),
        format="nsys-sqlite",
        producer="Nsight Systems",
        producer_version=version,
        ranks=tuple(
            RankInfo(rank=r, rank_source=rank_source, path=str(path), world_size=world)
            for r in sorted(ranks.values())
        ),
        devices=tuple(devices),
        quality=DataQuality(dropped=dict(dropped), notes=tuple(notes)),
        page_faults=_page_faults(con, pr, ranks),
    )
    return Timeline(events=ranked, meta=meta, gpu_metrics=samples)


#: Nsight's unified-memory fault tables (`--cuda-um-gpu-page-faults`, `-cpu-page-faults`).
UM_GPU_FAULTS = "CUDA_UM_GPU_PAGE_FAULT_EVENTS"
UM_CPU_FAULTS = "CUDA_UM_CPU_PAGE_FAULT_EVENTS"


def _page_faults(
    con: sqlite3.Connection, pr: sp.Probe, ranks: dict[int, int]
) -> tuple[PageFaults, ...]:
    """The unified-memory page faults of each rank's process over the capture: the GPU
    fault rows and their faults per device, the CPU fault rows (counted in SQL: a capture
    holds thousands to millions of them). Empty where neither table was recorded."""
    gpu: dict[tuple[int, int | None], tuple[int, int]] = {}
    cpu: dict[int, int] = {}
    if pr.has(UM_GPU_FAULTS, "numberOfPageFaults") and pr.has(UM_GPU_FAULTS, "globalPid"):
        for pid, dev, rows, faults in con.execute(
            f"SELECT {PID}, t.deviceId, count(*), sum(t.numberOfPageFaults) "
            f"FROM {UM_GPU_FAULTS} t GROUP BY 1, 2"
        ):
            if pid in ranks:
                gpu[(ranks[pid], int(dev))] = (int(rows), int(faults or 0))
    if pr.has(UM_CPU_FAULTS, "globalPid"):
        for pid, rows in con.execute(f"SELECT {PID}, count(*) FROM {UM_CPU_FAULTS} t GROUP BY 1"):
            if pid in ranks:
                cpu[ranks[pid]] = int(rows)
    out = [
        PageFaults(rank, dev, rows, faults, cpu.pop(rank, 0) if first else 0)
        for first, ((rank, dev), (rows, faults)) in _firsts(sorted(gpu.items()))
    ]
    out += [PageFaults(rank, None, cpu_faults=n) for rank, n in sorted(cpu.items())]
    return tuple(out)


def _firsts(
    rows: list[tuple[tuple[int, int | None], tuple[int, int]]],
) -> list[tuple[bool, tuple[tuple[int, int | None], tuple[int, int]]]]:
    """Each row with whether it is its rank's first (the CPU faults go on that one)."""
    seen: set[int] = set()
    out = []
    for row in rows:
        rank = row[0][0]
        out.append((rank not in seen, row))
        seen.add(rank)
    return out
