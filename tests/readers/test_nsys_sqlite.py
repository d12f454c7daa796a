"""Nsight Systems SQLite reader: hand-written exports, schema drift, and NVIDIA's own numbers.

The fixtures in tests/data/nsys/*.sql are CREATE/INSERT text, built into a .sqlite under
tmp_path. The corpus tests (TRACEANALYZER_CORPUS) compare the timeline with the golden
output of `nsys stats` / `nsys analyze` 2022.4.2, and with plain loops written here.
"""

from __future__ import annotations

import csv
import os
import re
import sqlite3
import sys
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest

import traceanalyzer.readers as readers
from tests.conftest import REPO, corpus
from traceanalyzer.errors import NoGpuEventsError, TraceFormatError
from traceanalyzer.model import EVENT_SCHEMA, Timeline
from traceanalyzer.readers import nsys_sqlite
from traceanalyzer.readers.nsys_sqlite import NsysSqliteReader, session_start_utc_ns

DATA = REPO / "tests" / "data" / "nsys"
READER = NsysSqliteReader()


def nsys_db_from_sql(name: str, tmp_path: Path, *extra: str) -> Path:
    """Build tests/data/nsys/<name>.sql (plus `extra` statements) into <tmp>/<name>.sqlite."""
    out = tmp_path / f"{name}.sqlite"
    con = sqlite3.connect(out)
    con.executescript((DATA / f"{name}.sql").read_text())
    for stmt in extra:
        con.execute(stmt)
    con.commit()
    con.close()
    return out


def _row(tl: Timeline, **where: object) -> dict[str, object]:
    cond = pl.lit(True)
    for col, value in where.items():
        cond = cond & (pl.col(col).cast(pl.String) == str(value))
    rows = tl.events.filter(cond)
    assert rows.height == 1, (where, rows)
    return rows.row(0, named=True)


# ------------------------------------------------------------------------ hand-written


def test_two_ranks_values(tmp_path: Path) -> None:
    tl = READER.read(nsys_db_from_sql("two_ranks", tmp_path))
    assert tl.events.schema == EVENT_SCHEMA
    assert tl.meta.format == "nsys-sqlite"
    assert (tl.meta.producer, tl.meta.producer_version) == ("Nsight Systems", "2024.5.1.113")
    # NVTX thread names say pid 100 is "MPI Rank 1" and pid 200 "MPI Rank 0"
    assert [(r.rank, r.rank_source) for r in tl.meta.ranks] == [(0, "nvtx"), (1, "nvtx")]
    k = _row(tl, kind="kernel", rank=1)
    assert k["name"] == "void gemm_kernel<(int)128>(float *, int)"
    assert (k["device"], k["stream"], k["pid"], k["tid"]) == (0, 7, None, None)
    assert (k["start_ns"], k["end_ns"], k["correlation"]) == (1000, 2000, 1)
    assert (k["grid"], k["block"], k["registers"], k["shared_mem_bytes"]) == (
        [4, 1, 1],
        [128, 1, 1],
        32,
        1536,
    )
    assert _row(tl, kind="kernel", rank=0)["device"] == 1
    cp = _row(tl, kind="memcpy")
    assert cp["name"] == "Memcpy HtoD (Pageable -> Device)"
    assert (cp["copy_kind"], cp["src_memory"], cp["dst_memory"], cp["bytes"]) == (
        "HtoD",
        "pageable",
        "device",
        4096,
    )
    assert cp["rank"] == 1
    ms = _row(tl, kind="memset")
    assert (ms["name"], ms["bytes"], ms["rank"], ms["device"]) == ("Memset (Device)", 256, 0, 1)
    ss = _row(tl, kind="sync", rank=1)
    assert (ss["name"], ss["device"], ss["stream"], ss["correlation"]) == ("Stream Sync", 0, 7, 3)
    cs = _row(tl, kind="sync", rank=0)
    assert (cs["name"], cs["stream"]) == ("Context Sync", None)  # 0xFFFFFFFF: no stream
    rt = tl.events.filter(pl.col("kind") == "runtime").sort("start_ns")
    assert rt["name"].cast(pl.String).to_list() == [
        "cudaLaunchKernel",
        "cudaMemcpyAsync",
        "cudaStreamSynchronize",
        "cudaLaunchKernel",
        "cudaMemsetAsync",
        "cudaDeviceSynchronize",
        "cudaStreamGetCaptureInfo_v2",
    ]
    assert rt.select("pid", "tid").unique().sort("pid").rows() == [(100, 101), (200, 201)]
    assert tl.meta.quality.dropped == {
        "host events of processes with no GPU work": 1,
        "GPU events with no process": 1,
        "NVTX mark (no duration)": 1,
        "NVTX range with no end": 1,
    }


def test_correlation_joins_within_a_process(tmp_path: Path) -> None:
    """Both processes use correlation 1: joined on (rank, correlation), each finds its own."""
    ev = READER.read(nsys_db_from_sql("two_ranks", tmp_path)).events
    launches = ev.filter(pl.col("name") == "cudaLaunchKernel").select(
        "rank", "correlation", launch_pid="pid"
    )
    kernels = ev.filter(pl.col("kind") == "kernel").select("rank", "correlation", "device")
    joined = kernels.join(launches, on=["rank", "correlation"], how="inner").sort("rank")
    assert joined.rows() == [(0, 1, 1, 200), (1, 1, 0, 100)]


def test_nvtx_annotations(tmp_path: Path) -> None:
    tl = READER.read(nsys_db_from_sql("two_ranks", tmp_path))
    ann = tl.events.filter(pl.col("kind") == "annotation").sort("start_ns")
    assert ann.select(
        pl.col("name").cast(pl.String), pl.col("domain").cast(pl.String), "rank", "pid", "tid"
    ).rows() == [
        ("step_0", None, 1, 100, 100),
        ("nccl:all_reduce", "NCCL", 1, 100, 100),  # textId -> StringIds, domain 1 -> "NCCL"
        ("step_0", None, 0, 200, 200),  # a start/end range
        ('it\'s, "quoted"', None, 0, 200, 200),
    ]
    assert ann["device"].null_count() == ann.height


def test_devices_and_session_start(tmp_path: Path) -> None:
    path = nsys_db_from_sql("two_ranks", tmp_path)
    devs = {(d.rank, d.device): d for d in READER.read(path).meta.devices}
    assert devs[(1, 0)].name == "NVIDIA H100 80GB HBM3"
    assert (devs[(1, 0)].compute_capability, devs[(1, 0)].sm_count) == ("9.0", 132)
    assert devs[(0, 1)].name == "NVIDIA A100-SXM4-80GB"
    assert devs[(0, 1)].memory_bytes == 84990623744
    assert session_start_utc_ns(path) == 1700000000000000000


def test_pid_order_without_rank_names(tmp_path: Path) -> None:
    path = nsys_db_from_sql(
        "two_ranks",
        tmp_path,
        "DELETE FROM ThreadNames",
        "DELETE FROM NVTX_EVENTS WHERE eventType = 39",
    )
    tl = READER.read(path)
    assert [(r.rank, r.rank_source, r.world_size) for r in tl.meta.ranks] == [
        (0, "pid order", 2),
        (1, "pid order", 2),
    ]
    assert _row(tl, kind="kernel", rank=0)["device"] == 0  # pid 100 is rank 0 now


def test_rank_from_environment(tmp_path: Path) -> None:
    tl = READER.read(nsys_db_from_sql("env_rank", tmp_path))
    assert [(r.rank, r.rank_source) for r in tl.meta.ranks] == [(5, "environment")]
    assert tl.events["rank"].unique().to_list() == [5]
    assert tl.meta.devices[0].device == 1 and tl.meta.devices[0].name is None


def test_legacy_2021_layout(tmp_path: Path) -> None:
    tl = READER.read(nsys_db_from_sql("legacy_2021", tmp_path))
    assert tl.meta.producer_version is None
    assert any("no export metadata table" in n for n in tl.meta.quality.notes)
    assert [(r.rank, r.rank_source) for r in tl.meta.ranks] == [(0, "default")]
    kernels = tl.events.filter(pl.col("kind") == "kernel")
    assert kernels.height == 2  # the one with no globalPid belongs to the only process
    cps = tl.events.filter(pl.col("kind") == "memcpy").sort("start_ns")
    assert cps["name"].cast(pl.String).to_list() == [
        "Memcpy HtoD (Pinned -> Device)",
        "Memcpy DtoH (Device -> Pageable)",
    ]
    assert tl.meta.devices[0].name == "Quadro RTX 6000"


def test_export_meta_data_2022_layout(tmp_path: Path) -> None:
    tl = READER.read(nsys_db_from_sql("export_meta_2022", tmp_path))
    assert tl.meta.producer_version == "2022.2.1.31"
    assert [(r.rank, r.rank_source) for r in tl.meta.ranks] == [(2, "nvtx")]
    cp = _row(tl, kind="memcpy")
    assert (cp["name"], cp["copy_kind"]) == ("Memcpy PtoP (Device -> Device)", "PtoP")
    ann = _row(tl, kind="annotation")
    assert (ann["name"], ann["domain"]) == ("MPI_Send", "MPI")


def test_no_kernel_table_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(NoGpuEventsError) as err:
        READER.read(nsys_db_from_sql("no_kernels", tmp_path))
    # CUDA runtime calls were recorded: tracing was on, nothing ran on the GPU (issue 33)
    assert "no CUDA kernel ran in the capture, though CUDA was traced (1 runtime calls)" in str(
        err.value
    )
    assert "was CUDA tracing enabled" not in str(err.value)
    assert "No CUDA events collected" in err.value.hint
    assert err.value.path is not None


def test_no_cuda_at_all_asks_whether_cuda_was_traced(tmp_path: Path) -> None:
    path = nsys_db_from_sql("no_kernels", tmp_path, "DELETE FROM CUPTI_ACTIVITY_KIND_RUNTIME")
    with pytest.raises(NoGpuEventsError, match="was CUDA tracing enabled"):
        READER.read(path)


def test_memsets_without_kernels_say_cuda_was_traced(tmp_path: Path) -> None:
    path = nsys_db_from_sql(
        "no_kernels",
        tmp_path,
        "CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (start INTEGER, end INTEGER, deviceId INTEGER,"
        " streamId INTEGER, globalPid INTEGER, bytes INTEGER, value INTEGER)",
        "INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET VALUES (5, 6, 0, 7, 1, 64, 0)",
    )
    with pytest.raises(NoGpuEventsError, match=r"CUDA was traced \(1 runtime calls, 1 memsets\)"):
        READER.read(path)


def test_not_an_nsys_export(tmp_path: Path) -> None:
    path = tmp_path / "other.sqlite"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE t (x INTEGER)")
    con.commit()
    con.close()
    assert READER.sniff(path)
    with pytest.raises(TraceFormatError, match="not an Nsight Systems export"):
        READER.read(path)


def test_damaged_file(tmp_path: Path) -> None:
    path = tmp_path / "cut.sqlite"
    path.write_bytes(b"SQLite format 3\x00" + b"\x00" * 50)
    assert READER.sniff(path)
    with pytest.raises(TraceFormatError) as err:
        READER.read(path)
    assert err.value.hint


@pytest.mark.parametrize("cores", [2, 8])
def test_large_table_printed_by_a_helper_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cores: int
) -> None:
    """The runtime table, when large, is printed by a helper process, and the kernels by
    another where a third core is free: same timeline."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)))
    path = nsys_db_from_sql("two_ranks", tmp_path)
    monkeypatch.setattr(nsys_sqlite, "CHUNK_ROWS", 2)  # several blobs per table
    expected = READER.read(path)
    calls: list[str] = []
    helper = nsys_sqlite._blobs_aside

    def counted(uri: str, sql: str, lo: int, hi: int) -> Iterator[bytes]:
        calls.append(sql)
        return helper(uri, sql, lo, hi)

    monkeypatch.setattr(nsys_sqlite, "ASIDE_MIN_ROWS", 1)
    monkeypatch.setattr(nsys_sqlite, "_blobs_aside", counted)
    got = READER.read(path)
    tables = ["CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL"][: 1 if cores < 3 else 2]
    assert len(calls) == len(tables)
    assert all(any(t in sql for sql in calls) for t in tables)
    assert got.events.equals(expected.events, null_equal=True)
    assert got.meta == expected.meta


def test_helper_process_failure_falls_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A helper that fails (here: exits at once) costs time, not the read."""
    path = nsys_db_from_sql("two_ranks", tmp_path)
    expected = READER.read(path)
    monkeypatch.setattr(nsys_sqlite, "ASIDE_MIN_ROWS", 1)
    monkeypatch.setattr(nsys_sqlite, "_ASIDE_CODE", "import sys; sys.exit(3)")
    assert READER.read(path).events.equals(expected.events, null_equal=True)
    for missing in ("python3-missing", "uwsgi"):  # cannot start; not an interpreter
        monkeypatch.setattr(sys, "executable", str(tmp_path / missing))
        assert READER.read(path).events.equals(expected.events, null_equal=True)


def test_sniff_rejects_json(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text('{"traceEvents": []}')
    assert not READER.sniff(path)


def test_read_only_no_file_beside_the_input(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    src = nsys_db_from_sql("two_ranks", folder)
    os.chmod(src, 0o444)
    before = sorted(p.name for p in folder.iterdir())
    stat = src.stat()
    READER.read(src)
    assert sorted(p.name for p in folder.iterdir()) == before  # no -journal, -wal or -shm
    assert (src.stat().st_mtime_ns, src.stat().st_size) == (stat.st_mtime_ns, stat.st_size)


def test_detected_by_magic_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Registered before "chrome" (as readers/__init__.py will), `read()` picks it by content."""
    monkeypatch.setattr(readers, "READERS", {"nsys": READER, **readers.READERS})
    path = nsys_db_from_sql("two_ranks", tmp_path)
    renamed = path.rename(tmp_path / "run.data")  # the suffix does not matter
    assert readers.read(renamed).meta.format == "nsys-sqlite"


# ------------------------------------------------------------------------------ corpus


def _nsys_dir() -> Path | None:
    root = corpus()
    return None if root is None else root / "public" / "nsys"


def _golden_cases(report: str) -> list[Path]:
    """Export files that have `golden_nsys2022.4.2/<stem>/<report>` (none without a corpus)."""
    root = _nsys_dir()
    if root is None:
        return []
    golden = root / "golden_nsys2022.4.2"
    return sorted(f for f in root.glob("*.sqlite") if (golden / f.stem / report).exists())


def _golden(path: Path, report: str) -> list[dict[str, str]]:
    with (path.parent / "golden_nsys2022.4.2" / path.stem / report).open(newline="") as fh:
        return list(csv.DictReader(fh))


def _xyz(text: str) -> tuple[int, ...]:
    return tuple(int(v) for v in text.split())


@pytest.mark.parametrize("path", _golden_cases("stats_gpukernsum.csv"), ids=lambda p: p.stem)
def test_kernel_summary_matches_nsys_stats(path: Path) -> None:
    """Per (name, grid, block): count, total, min, max and median equal `nsys stats gpukernsum`."""
    ev = READER.read(path).events.filter(pl.col("kind") == "kernel")
    ours = (
        ev.with_columns(dur=pl.col("end_ns") - pl.col("start_ns"))
        .group_by(pl.col("name").cast(pl.String), "grid", "block")
        .agg(
            count=pl.len(),
            total=pl.col("dur").sum(),
            min=pl.col("dur").min(),
            max=pl.col("dur").max(),
            med=pl.col("dur").median(),
        )
    )
    got = {
        (r["name"], tuple(r["grid"]), tuple(r["block"])): (
            r["count"], r["total"], r["min"], r["max"], r["med"],
        )
        for r in ours.iter_rows(named=True)
    }  # fmt: skip
    want = {
        (g["Name"], _xyz(g["GridXYZ"]), _xyz(g["BlockXYZ"])): (
            int(g["Instances"]), int(g["Total Time (ns)"]), int(g["Min (ns)"]),
            int(g["Max (ns)"]), float(g["Med (ns)"]),
        )
        for g in _golden(path, "stats_gpukernsum.csv")
    }  # fmt: skip
    assert got == want
    # and an independent plain loop over the export's own rows
    con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    total = 0
    for start, end in con.execute('SELECT start, "end" FROM CUPTI_ACTIVITY_KIND_KERNEL'):
        total += end - start
    con.close()
    assert ev.select((pl.col("end_ns") - pl.col("start_ns")).sum()).item() == total


def _gaps_by_loop(ev: pl.DataFrame, min_gap_ns: int) -> list[tuple[int, int, int, int]]:
    """(duration, start, rank, device) of every gap > min_gap_ns in the union of GPU work."""
    spans: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
    gpu = ev.filter(pl.col("kind").is_in(["kernel", "memcpy", "memset"]))
    for rank, device, start, end in gpu.select("rank", "device", "start_ns", "end_ns").rows():
        spans[(rank, device)].append((start, end))
    gaps = []
    for (rank, device), items in spans.items():
        items.sort()
        busy_until = items[0][1]
        for start, end in items[1:]:
            if start - busy_until > min_gap_ns:
                gaps.append((start - busy_until, busy_until, rank, device))
            busy_until = max(busy_until, end)
    return sorted(gaps, reverse=True)


@pytest.mark.parametrize(
    "path", _golden_cases("analyze_gpu-starv_gap1ms.csv"), ids=lambda p: p.stem
)
def test_gpu_gaps_match_nsys_analyze(path: Path) -> None:
    """Gaps over 1 ms in kernel+memcpy+memset per (process, device) equal `nsys analyze`."""
    tl = READER.read(path)
    pid_rank = dict(
        tl.events.filter(pl.col("pid").is_not_null()).select("pid", "rank").unique().rows()
    )
    want = [
        (
            int(g["Duration (ns)"]),
            int(g["Start (ns)"]),
            pid_rank[int(g["PID"])],
            int(g["Device ID"]),
        )
        for g in _golden(path, "analyze_gpu-starv_gap1ms.csv")
    ]
    got = _gaps_by_loop(tl.events, 1_000_000)
    assert got[:50] == sorted(want, reverse=True)  # nsys prints at most 50 rows


_VERSION = re.compile(r"_v\d+$")


@pytest.mark.parametrize("path", _golden_cases("stats_cudaapisum.csv"), ids=lambda p: p.stem)
def test_runtime_calls_match_nsys_stats(path: Path) -> None:
    """Per API name (version suffix dropped on both sides): call count and total time."""
    ev = READER.read(path).events.filter(pl.col("kind") == "runtime")
    got = {
        name: (n, total)
        for name, n, total in ev.group_by(pl.col("name").cast(pl.String))
        .agg(pl.len(), (pl.col("end_ns") - pl.col("start_ns")).sum())
        .rows()
    }
    want: dict[str, tuple[int, int]] = {}
    for g in _golden(path, "stats_cudaapisum.csv"):
        name = _VERSION.sub("", g["Name"])
        n, total = want.get(name, (0, 0))
        want[name] = (n + int(g["Num Calls"]), total + int(g["Total Time (ns)"]))
    assert got == want


def _all_exports() -> list[Path]:
    root = corpus()
    return [] if root is None else sorted(root.rglob("*.sqlite"))


@pytest.mark.parametrize("path", _all_exports(), ids=lambda p: p.stem)
def test_every_export_reads_or_is_refused(path: Path) -> None:
    """Every export of the corpus gives a valid timeline whose launches pair within a process."""
    if path.name.startswith("NOKERNELS"):
        # CUDA tracing was on where runtime calls were recorded (issue 33)
        with pytest.raises(
            NoGpuEventsError, match=r"was CUDA tracing enabled|CUDA collection failed"
        ):
            READER.read(path)
        return
    tl = READER.read(path)  # read() validates
    assert tl.meta.producer == "Nsight Systems"
    rt = tl.events.filter(pl.col("kind") == "runtime")
    # plain loop: (rank, correlation) never names two launches of different processes
    owner: dict[tuple[int, int], int] = {}
    for rank, corr, pid in rt.select("rank", "correlation", "pid").rows():
        assert owner.setdefault((rank, corr), pid) == pid
    kernels = tl.events.filter(pl.col("kind") == "kernel")
    launched = kernels.join(rt, on=["rank", "correlation"], how="semi").height
    # the same pairing done on the export's own rows, on (pid, correlation), in a plain loop
    con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    calls = {
        (gtid >> 24 & 0xFFFFFF, corr)
        for gtid, corr in con.execute(
            "SELECT globalTid, correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME"
        )
    }
    expected = 0
    for gpid, corr in con.execute(
        "SELECT globalPid, correlationId FROM CUPTI_ACTIVITY_KIND_KERNEL"
    ):
        expected += (gpid >> 24 & 0xFFFFFF, corr) in calls
    con.close()
    assert launched == expected
    # nsys-ai's windowed exports dropped some launches; whole exports pair every kernel
    if not path.stem.startswith("nsysai_h100x2"):
        assert launched == kernels.height
