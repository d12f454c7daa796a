"""Batch analysis: discovery (folders, archives), failures as rows, cache, summary, dask."""

from __future__ import annotations

import io
import shutil
import tarfile
import zipfile
from pathlib import Path

import polars as pl
import pytest

from tests.builders import kernel, launch, step, write_trace
from tests.conftest import SAMPLES
from traceanalyzer.batch import SUMMARY_SCHEMA, run_batch, write_summary
from traceanalyzer.readers.archives import discover

EVENTS = [
    step(1, 100, 100),
    launch(110, 2, corr=1),
    kernel(150, 30, "gemm", corr=1),
    step(2, 200, 100),
    launch(210, 2, corr=2),
    kernel(260, 40, "gemm", corr=2),
]


def _archive_dir(tmp: Path) -> Path:
    root = tmp / "runs"
    write_trace(root / "a.json", EVENTS)
    write_trace(root / "job" / "rank0.json", EVENTS)
    write_trace(root / "job" / "rank1.json", EVENTS)
    (root / "bad.json").write_text("{not json")
    (root / "notes.txt").write_text("hello")
    return root


def test_discovery_of_files_rank_folders_and_archives(tmp_path: Path) -> None:
    root = _archive_dir(tmp_path)
    with tarfile.open(tmp_path / "old.tar.gz", "w:gz") as tf:
        tf.add(root, arcname="runs")
    runs = discover([str(root), str(tmp_path / "old.tar.gz")], tmp_path / "scratch")
    labels = sorted(r.label for r in runs)
    assert labels == sorted(
        [
            "runs/a.json",
            "runs/bad.json",
            "runs/job",
            "old.tar.gz!runs/a.json",
            "old.tar.gz!runs/bad.json",
            "old.tar.gz!runs/job",
        ]
    )


def test_zip_escaping_its_folder_is_a_failed_run(tmp_path: Path) -> None:
    evil = tmp_path / "evil.zip"
    with zipfile.ZipFile(evil, "w") as zf:
        zf.writestr("../../outside.json", "{}")
    runs = discover([str(evil)], tmp_path / "scratch")
    assert len(runs) == 1 and runs[0].error and "escapes" in runs[0].error
    assert not (tmp_path / "outside.json").exists()


def test_batch_rows_errors_and_cache(tmp_path: Path) -> None:
    root = _archive_dir(tmp_path)
    out = tmp_path / "out"
    seen: list[str] = []
    summary = run_batch([str(root)], out, jobs=2, on_result=lambda r, n: seen.append(r["run"]))
    assert summary.schema == SUMMARY_SCHEMA
    assert sorted(seen) == sorted(summary["run"].to_list())
    rows = {r["run"]: r for r in summary.iter_rows(named=True)}
    assert rows["runs/bad.json"]["error"] and "not valid JSON" in rows["runs/bad.json"]["error"]
    good = rows["runs/a.json"]
    assert good["error"] is None and good["steps"] == 2 and good["kernel_count"] == 2
    # the window opens at the first step marker (100 µs) and ends with the last kernel (300)
    assert good["window_ns"] == 200_000 and good["busy_share"] == pytest.approx(70 / 200)
    assert rows["runs/job"]["ranks"] == 2
    assert Path(good["report"]).is_file()
    # a rerun with nothing changed comes from the cache; a changed run is analysed again
    again = run_batch([str(root)], out, jobs=1)
    assert again.filter(pl.col("error").is_null())["cached"].all()
    write_trace(root / "a.json", [*EVENTS, kernel(290, 5, "extra", corr=9)])
    third = run_batch([str(root)], out, jobs=1)
    assert third.filter(pl.col("run") == "runs/a.json")["cached"].to_list() == [False]
    for fmt in ("parquet", "csv"):
        path = write_summary(third, out, fmt)
        back = pl.read_parquet(path) if fmt == "parquet" else pl.read_csv(path)
        assert back.height == third.height and back.columns == third.columns


def test_inputs_are_not_modified(tmp_path: Path) -> None:
    src = tmp_path / "in"
    shutil.copytree(SAMPLES, src)
    before = {p: p.read_bytes() for p in src.rglob("*") if p.is_file()}
    run_batch([str(src)], tmp_path / "out", jobs=1)
    after = {p: p.read_bytes() for p in src.rglob("*") if p.is_file()}
    assert before == after


def test_dask_local_cluster(tmp_path: Path) -> None:
    distributed = pytest.importorskip("dask.distributed")
    write_trace(tmp_path / "in" / "a.json", EVENTS)
    write_trace(tmp_path / "in" / "b.json", EVENTS)
    with distributed.LocalCluster(
        n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None
    ) as cluster:
        summary = run_batch(
            [str(tmp_path / "in")], tmp_path / "out", dask_scheduler=cluster.scheduler_address
        )
    assert summary.height == 2 and summary["error"].is_null().all()
    assert summary["kernel_count"].to_list() == [2, 2]


def test_summary_csv_is_readable_text(tmp_path: Path) -> None:
    summary = run_batch([str(SAMPLES / "tiny_kernels.json.gz")], tmp_path / "o", jobs=1)
    text = write_summary(summary, tmp_path / "o", "csv").read_text()
    assert text.splitlines()[0].startswith("run,path,content_hash")
    assert io.StringIO(text).read().count("\n") == 2


def test_runs_that_share_a_file_name_keep_their_own_rows_and_reports(tmp_path: Path) -> None:
    """`batch a/trace.json b/trace.json`: two rows, two labels, two report files, each with
    its own run's numbers (issue 14)."""
    a = write_trace(tmp_path / "exp1" / "trace.json", EVENTS)
    b = write_trace(tmp_path / "exp2" / "trace.json", [*EVENTS, kernel(290, 5, "extra", corr=9)])
    out = tmp_path / "out"
    summary = run_batch([str(a), str(b)], out, jobs=1, cache=False)
    rows = {r["run"]: r for r in summary.iter_rows(named=True)}
    assert set(rows) == {"exp1/trace.json", "exp2/trace.json"}
    assert rows["exp1/trace.json"]["kernel_count"] == 2
    assert rows["exp2/trace.json"]["kernel_count"] == 3
    assert rows["exp1/trace.json"]["report"] != rows["exp2/trace.json"]["report"]
    # the same file twice is numbered, not merged
    twice = run_batch([str(a), str(a)], tmp_path / "out2", jobs=1, cache=False)
    assert twice["run"].to_list() == ["trace.json", "trace.json#2"]


def test_report_file_names_stay_unique() -> None:
    from traceanalyzer.batch import report_stems

    stems = report_stems(["c/a_x.json.gz", "c/a/x.json.gz", "other.json"])
    assert len(set(stems)) == 3 and stems[2] == "other.json"
