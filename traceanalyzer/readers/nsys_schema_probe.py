"""What an Nsight Systems SQLite export holds: tables, columns, metadata, devices, ranks.

Pipeline position: helper of `readers/nsys_sqlite.py` (file -> this probe -> the event
queries -> Timeline). Exports from nsys 2021 to 2026 differ in which tables exist (tables are
created lazily, only for what was traced), in their names (`EXPORT_META_DATA` until 2023.2,
`META_DATA_EXPORT` since) and in their columns (`mangledName`, `greenContextId`, `copyCount`,
... were added over time). Everything here probes `sqlite_master` and `PRAGMA table_info`
instead of assuming a version, and every per-version quirk is handled in this one module.

It also decides the rank of each process (see `assign_ranks`) and describes the devices.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from traceanalyzer.errors import NoGpuEventsError, TraceFormatError
from traceanalyzer.model import DeviceInfo

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
DRIVER = "CUPTI_ACTIVITY_KIND_DRIVER"
SYNC = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
NVTX = "NVTX_EVENTS"
#: Graph replays recorded whole (nsys's default `--cuda-graph-trace=graph`).
GRAPH = "CUPTI_ACTIVITY_KIND_GRAPH_TRACE"

#: The export-metadata table, by its names over time (2023.2 and older, then 2023.3 on).
META_TABLES = ("META_DATA_EXPORT", "EXPORT_META_DATA")
#: Device descriptions, newest name first.
GPU_INFO_TABLES = ("TARGET_INFO_GPU", "TARGET_INFO_CUDA_GPU")

#: Environment variables that name a process's rank, most specific first.
RANK_VARIABLES = (
    "RANK",
    "OMPI_COMM_WORLD_RANK",
    "PMI_RANK",
    "PMIX_RANK",
    "MV2_COMM_WORLD_RANK",
    "SLURM_PROCID",
    "LOCAL_RANK",
)
_ENV_ASSIGN = re.compile(r"(?:^|[\s;])(" + "|".join(RANK_VARIABLES) + r")=(\d+)(?=$|[\s;])")
#: Thread names that carry a rank: nsys's MPI tracing names the main thread "MPI Rank N".
_RANK_THREAD = re.compile(r"^\s*(?:MPI\s+)?rank[\s_#:]*(\d+)\s*$", re.IGNORECASE)
#: NVTX "name this OS thread" events (nvtxNameOsThread), in ENUM_NSYS_EVENT_TYPE.
NVTX_THREAD_NAME = 39


@dataclass
class Probe:
    """The tables of interest that exist, with their columns."""

    path: Path
    columns: dict[str, frozenset[str]] = field(default_factory=dict)
    tables: frozenset[str] = frozenset()

    def has(self, table: str, column: str | None = None) -> bool:
        """Whether the table (and that column of it) exists."""
        if column is None:
            return table in self.tables
        return column in self.cols(table)

    def cols(self, table: str) -> frozenset[str]:
        """The columns of a table (empty when absent); probed once."""
        if table not in self.columns:
            self.columns[table] = frozenset()
        return self.columns[table]


def open_readonly(path: Path) -> sqlite3.Connection:
    """Open the export read-only and immutable: no journal, -wal or -shm file appears beside it.

    `immutable=1` also tells SQLite that nobody writes the file meanwhile, so it takes no
    locks; an export is written once by `nsys export` and never changed.
    """
    uri = readonly_uri(path)
    try:
        con = sqlite3.connect(uri, uri=True, check_same_thread=False)
        con.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.DatabaseError as exc:
        raise TraceFormatError(
            f"not a readable SQLite database ({exc})",
            path=path,
            hint="the file may be damaged or cut off; export it again with "
            "`nsys export --type sqlite`",
        ) from exc
    return con


def readonly_uri(path: Path) -> str:
    """The URI that opens `path` read-only and immutable (see `open_readonly`)."""
    return f"{path.resolve().as_uri()}?mode=ro&immutable=1"


def probe(con: sqlite3.Connection, path: Path) -> Probe:
    """List the tables and the columns of the ones the reader uses; check it is an nsys export."""
    tables = frozenset(
        name for (name,) in con.execute("SELECT name FROM sqlite_master WHERE type='table'")
    )
    result = Probe(path=path, tables=tables)
    for table in (KERNEL, MEMCPY, MEMSET, GRAPH, RUNTIME, DRIVER, SYNC, NVTX, *GPU_INFO_TABLES,
                  "TARGET_INFO_CUDA_DEVICE", "PROCESSES", "ThreadNames", "DIAGNOSTIC_EVENT",
                  "TARGET_INFO_SESSION_START_TIME", "META_DATA_CAPTURE", "GPU_METRICS",
                  "TARGET_INFO_GPU_METRICS", "CUDA_UM_GPU_PAGE_FAULT_EVENTS",
                  "CUDA_UM_CPU_PAGE_FAULT_EVENTS"):  # fmt: skip
        if table in tables:
            result.columns[table] = frozenset(
                row[1] for row in con.execute(f"PRAGMA table_info('{table}')")
            )
    if "StringIds" not in tables:
        raise TraceFormatError(
            "an SQLite database, but not an Nsight Systems export (it has no StringIds table)",
            path=path,
            hint="export an Nsight Systems report with `nsys export --type sqlite report.nsys-rep`",
        )
    if KERNEL not in tables:
        raise no_kernels(con, result, path)
    return result


def no_kernels(con: sqlite3.Connection, pr: Probe, path: Path) -> NoGpuEventsError:
    """The refusal of an export with no kernel: where CUDA calls or GPU activity were
    recorded, tracing was on and nothing ran on the GPU in the capture; else tracing was
    off (or found no CUDA in the process)."""
    said = _diagnostics(con, pr)
    seen = _cuda_seen(con, pr)
    nsys = f"; nsys said: {said}" if said else ""
    if said and re.search(r"not supported|might have not been started|not all CUDA", said, re.I):
        return NoGpuEventsError(
            "the export holds no CUDA kernels, and nsys warned that its CUDA collection failed"
            + (f" ({seen} recorded)" if seen else "")
            + f": {said}",
            path=path,
            hint="use an Nsight Systems that supports the installed driver, check that CUDA "
            "tracing starts (`nsys profile --trace=cuda,nvtx ...`), and export again",
        )
    if seen:
        return NoGpuEventsError(
            f"no CUDA kernel ran in the capture, though CUDA was traced ({seen})",
            path=path,
            hint="the work ran on the CPU, or the capture missed it (nsys --delay, "
            "--duration or a capture range): capture the part of the run that launches "
            "kernels" + nsys,
        )
    return NoGpuEventsError(
        "the export holds no CUDA kernels: was CUDA tracing enabled?",
        path=path,
        hint="profile with `nsys profile --trace=cuda,nvtx ...` and export again" + nsys,
    )


def _cuda_seen(con: sqlite3.Connection, pr: Probe) -> str:
    """What CUDA activity the export holds besides kernels: "N runtime calls, M memsets"."""
    parts = []
    for table, what in ((RUNTIME, "runtime calls"), (MEMCPY, "copies"), (MEMSET, "memsets")):
        if pr.has(table):
            n = con.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
            if n:
                parts.append(f"{n} {what}")
    return ", ".join(parts)


def _diagnostics(con: sqlite3.Connection, pr: Probe) -> str:
    """nsys's own warnings about CUDA collection, from DIAGNOSTIC_EVENT (2023.3 on)."""
    if not pr.has("DIAGNOSTIC_EVENT", "text") or not pr.has("DIAGNOSTIC_EVENT", "severity"):
        return ""
    rows = con.execute(
        "SELECT DISTINCT text FROM DIAGNOSTIC_EVENT "
        "WHERE severity >= 2 AND typeof(text) = 'text' AND text LIKE '%CUDA%' LIMIT 2"
    ).fetchall()
    return " / ".join(f"'{text}'" for (text,) in rows)


def export_meta(con: sqlite3.Connection, pr: Probe) -> dict[str, str]:
    """The export-metadata key/values (empty for 2021 exports, which have no such table)."""
    for table in META_TABLES:
        if pr.has(table):
            return {str(k): str(v) for k, v in con.execute(f"SELECT name, value FROM {table}")}
    return {}


def session_start_utc_ns(con: sqlite3.Connection, pr: Probe) -> int | None:
    """When the capture started, ns since the Unix epoch (TARGET_INFO_SESSION_START_TIME)."""
    if not pr.has("TARGET_INFO_SESSION_START_TIME", "utcEpochNs"):
        return None
    row = con.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()
    return int(row[0]) if row and row[0] is not None else None


# ----------------------------------------------------------------------------------- ranks


@dataclass(frozen=True, slots=True)
class Process:
    """One process that ran GPU work, and when its first GPU work started (found from the
    fetched GPU rows, see `nsys_sqlite._gpu_processes`)."""

    pid: int
    first_gpu_ns: int


def _env_ranks(con: sqlite3.Connection, pr: Probe) -> list[int]:
    """Ranks named by the launched process's recorded environment (META_DATA_CAPTURE).

    nsys records the environment of the command it launched (`PROCESS_<n>:...` rows); the
    shared corpus has these rows removed, so this path is exercised by a fixture only.
    Returns the rank found per launched process, most specific variable first.
    """
    if not pr.has("META_DATA_CAPTURE", "name"):
        return []
    rows = con.execute(
        "SELECT name, value FROM META_DATA_CAPTURE "
        "WHERE name LIKE 'PROCESS_%ENV%' AND typeof(value) = 'text'"
    ).fetchall()
    by_process: dict[str, dict[str, int]] = {}
    for name, value in rows:  # a handful of metadata rows, not events
        proc = str(name).split(":", 1)[0]
        for var, num in _ENV_ASSIGN.findall(str(value)):
            by_process.setdefault(proc, {}).setdefault(var, int(num))
    ranks = []
    for found in by_process.values():
        for var in RANK_VARIABLES:
            if var in found:
                ranks.append(found[var])
                break
    return ranks


def _nvtx_ranks(con: sqlite3.Connection, pr: Probe) -> dict[int, int]:
    """pid -> rank from thread names that carry one ("MPI Rank 3"), set through NVTX."""
    names: list[tuple[int, str]] = []
    if pr.has(NVTX, "eventType") and pr.has(NVTX, "globalTid"):
        text = "coalesce(e.text, s.value)" if pr.has(NVTX, "textId") else "e.text"
        join = "LEFT JOIN StringIds s ON s.id = e.textId" if pr.has(NVTX, "textId") else ""
        names += con.execute(
            f"SELECT (e.globalTid >> 24) & 16777215, {text} FROM {NVTX} e {join} "
            f"WHERE e.eventType = {NVTX_THREAD_NAME}"
        ).fetchall()
    if pr.has("ThreadNames", "nameId") and pr.has("ThreadNames", "globalTid"):
        names += con.execute(
            "SELECT (t.globalTid >> 24) & 16777215, s.value FROM ThreadNames t "
            "JOIN StringIds s ON s.id = t.nameId WHERE s.value LIKE '%rank%'"
        ).fetchall()
    found: dict[int, set[int]] = {}
    for pid, name in names:  # thread names: a few per process
        match = _RANK_THREAD.match(str(name or ""))
        if match:
            found.setdefault(int(pid), set()).add(int(match.group(1)))
    return {pid: next(iter(r)) for pid, r in found.items() if len(r) == 1}


def assign_ranks(
    con: sqlite3.Connection, pr: Probe, procs: list[Process]
) -> tuple[dict[int, int], str, list[str]]:
    """Give each GPU process a rank; return pid -> rank, how it was found, and notes.

    The rule, in order; a source is used only if it gives every GPU process a distinct rank:

    1. the environment recorded for the launched process (`RANK`, `OMPI_COMM_WORLD_RANK`,
       `PMI_RANK`, ... in META_DATA_CAPTURE), when one process drives the GPU (one export
       per rank, as `srun nsys profile ...` makes): source "environment";
    2. NVTX thread names that carry a rank ("MPI Rank 3", set by nsys's MPI tracing):
       source "nvtx";
    3. pid order (launchers such as torchrun and mpirun start rank 0 first, and pids are
       stabler than which process happened to reach the GPU first): source "pid order";
       a single process is rank 0 with source "default".
    """
    notes: list[str] = []
    pids = [p.pid for p in procs]
    env = _env_ranks(con, pr)
    if len(pids) == 1 and len(env) == 1:
        return {pids[0]: env[0]}, "environment", notes
    nvtx = _nvtx_ranks(con, pr)
    if pids and all(pid in nvtx for pid in pids) and len({nvtx[p] for p in pids}) == len(pids):
        return {pid: nvtx[pid] for pid in pids}, "nvtx", notes
    if nvtx:
        notes.append("NVTX thread names name ranks for some processes only; ranks by order")
    if len(pids) <= 1:
        return {pid: 0 for pid in pids}, "default", notes
    return {pid: i for i, pid in enumerate(pids)}, "pid order", notes


# --------------------------------------------------------------------------------- devices


def device_infos(
    con: sqlite3.Connection, pr: Probe, used: list[tuple[int, int, int]]
) -> list[DeviceInfo]:
    """Describe each (rank, pid, CUDA device ordinal) that ran GPU work (which GPU of the
    export each is: `gpu_ids`). Exports without TARGET_INFO_GPU (windows cut out by
    nsys-ai) give the ordinal alone."""
    gpu_table = next((t for t in GPU_INFO_TABLES if pr.has(t)), None)
    gpus: dict[int, tuple[object, ...]] = {}
    if gpu_table is not None:
        col = _columns_of(pr, gpu_table)
        for row in con.execute(
            f"SELECT {col('id')}, {col('name')}, {col('computeMajor')}, {col('computeMinor')}, "
            f"{col('smCount')}, {col('totalMemory')}, "
            f"{col('maxWarpsPerSm')} * {col('threadsPerWarp')}, {col('maxBlocksPerSm')}, "
            f"{col('maxRegistersPerSm')}, {col('maxShmemPerSm')}, {col('clockRate')} "
            f"FROM {gpu_table}"
        ):
            if row[0] is not None:
                gpus[int(row[0])] = row[1:]
    ids = gpu_ids(con, pr, used)
    sms = _cuda_sm_counts(con, pr)
    infos = []
    for rank, pid, device in used:
        desc = gpus.get(ids[(rank, device)])
        if desc is None:
            infos.append(DeviceInfo(rank=rank, device=device, sm_count=sms.get((pid, device))))
            continue
        name, major, minor, sm_count, memory, threads, blocks, regs, smem, clock = desc
        infos.append(
            DeviceInfo(
                rank=rank,
                device=device,
                name=str(name) if name is not None else None,
                compute_capability=f"{major}.{minor}" if major is not None else None,
                sm_count=_int(sm_count) if sm_count is not None else sms.get((pid, device)),
                memory_bytes=_int(memory),
                max_threads_per_sm=_int(threads),
                max_blocks_per_sm=_int(blocks),
                regs_per_sm=_int(regs),
                shared_mem_per_sm=_int(smem),
                max_clock_hz=_int(clock) if _int(clock) else None,
            )
        )
    return infos


def gpu_ids(
    con: sqlite3.Connection, pr: Probe, used: list[tuple[int, int, int]]
) -> dict[tuple[int, int], int]:
    """(rank, CUDA device ordinal) -> the GPU's id in the export (TARGET_INFO_GPU.id, the id
    GPU metrics carry in their typeId's low byte), for each (rank, pid, ordinal) in `used`.

    The CUPTI `deviceId` is the CUDA ordinal in that process. TARGET_INFO_CUDA_DEVICE (2024
    on) maps (pid, cudaId) to the GPU's id; without it the ordinal is matched to
    TARGET_INFO_GPU.cuDevice; failing both, the id is taken to be the ordinal."""
    by_cuda: dict[int, int] = {}
    gpu_table = next((t for t in GPU_INFO_TABLES if pr.has(t)), None)
    if gpu_table is not None and pr.has(gpu_table, "id") and pr.has(gpu_table, "cuDevice"):
        for gid, cuda in con.execute(f"SELECT id, cuDevice FROM {gpu_table}"):
            if gid is not None and cuda is not None:
                by_cuda.setdefault(int(cuda), int(gid))
    mapped: dict[tuple[int, int], int] = {}
    if _has_cuda_devices(pr):
        for gpu_id, cuda_id, pid in con.execute(
            "SELECT gpuId, cudaId, pid FROM TARGET_INFO_CUDA_DEVICE"
        ):
            if gpu_id is not None:
                mapped[(int(pid), int(cuda_id))] = int(gpu_id)
    return {
        (rank, device): mapped.get((pid, device), by_cuda.get(device, device))
        for rank, pid, device in used
    }


def _has_cuda_devices(pr: Probe) -> bool:
    return pr.has("TARGET_INFO_CUDA_DEVICE", "cudaId") and pr.has("TARGET_INFO_CUDA_DEVICE", "pid")


def _cuda_sm_counts(con: sqlite3.Connection, pr: Probe) -> dict[tuple[int, int], int]:
    """(pid, CUDA ordinal) -> SM count, from TARGET_INFO_CUDA_DEVICE where it has them."""
    if not _has_cuda_devices(pr) or not pr.has("TARGET_INFO_CUDA_DEVICE", "numMultiprocessors"):
        return {}
    return {
        (int(pid), int(cuda_id)): int(n_sm)
        for cuda_id, pid, n_sm in con.execute(
            "SELECT cudaId, pid, numMultiprocessors FROM TARGET_INFO_CUDA_DEVICE"
        )
        if n_sm is not None
    }


def _columns_of(pr: Probe, table: str) -> Callable[[str], str]:
    """A column's name where `table` has it, else NULL (for a SELECT list)."""
    cols = pr.cols(table)
    return lambda name: name if name in cols else "NULL"


def _int(value: object) -> int | None:
    return int(value) if isinstance(value, int | float) else None
