"""Hostile and damaged input (issue 14): a clear answer, never a traceback, nothing lost.

Each test here failed before its fix: an internal error (exit 3), a misleading message, or
data silently lost or reused.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from click.testing import CliRunner

from tests.builders import kernel, launch, step, write_trace
from tests.conftest import SAMPLES
from traceanalyzer import batch as batch_mod
from traceanalyzer import parallel, termination
from traceanalyzer.batch import Options, run_batch
from traceanalyzer.cli import cli
from traceanalyzer.comparison import load_report
from traceanalyzer.config import load_settings
from traceanalyzer.errors import ConfigError, NoGpuEventsError, TraceFormatError
from traceanalyzer.readers import read

EVENTS = [
    step(1, 100, 100),
    launch(110, 2, corr=1),
    kernel(150, 30, "gemm", corr=1),
    step(2, 200, 100),
    launch(210, 2, corr=2),
    kernel(260, 40, "gemm", corr=2),
]


def _cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stderr


def _one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


# ------------------------------------------------------------------------ reader values


@pytest.mark.parametrize("field,value", [("dur", 1e18), ("ts", 1e26), ("ts", -1e26)])
def test_values_too_large_are_dropped_and_counted(tmp_path: Path, field: str, value: float) -> None:
    bad = {**kernel(190, 5, "huge", corr=7), field: value}
    tl = read(write_trace(tmp_path / "t.json", [*EVENTS, bad]))
    assert tl.meta.quality.dropped == {"ts or dur out of range": 1}
    assert sorted(tl.events.filter(pl.col("kind") == "kernel")["name"].cast(str)) == [
        "gemm",
        "gemm",
    ]
    code, _err = _cli("report", str(tmp_path / "t.json"), "--format", "json")
    assert code == 0


def test_every_value_out_of_range_says_so(tmp_path: Path) -> None:
    path = write_trace(tmp_path / "t.json", [{**kernel(150, 30, corr=1), "dur": 1e18}])
    code, err = _cli("report", str(path))
    assert code == 2
    assert "1 events dropped (ts or dur out of range)" in _one_error_line(err)


def test_string_timestamps_are_read_and_named(tmp_path: Path) -> None:
    """Numbers written as JSON text are read as numbers and counted (issue 28); text that
    is no number is named, not called a CPU-only trace."""
    from traceanalyzer import api

    events = [{**ev, "ts": str(ev["ts"])} for ev in EVENTS]
    text = api.report(write_trace(tmp_path / "t.json", events)).to_json_dict()
    plain = api.report(write_trace(tmp_path / "n.json", EVENTS)).to_json_dict()
    assert text["diagnoses"] == plain["diagnoses"] and text["devices"] == plain["devices"]
    assert any("written as JSON text" in n for n in text["data_quality"]["notes"])
    events = [{**ev, "ts": "soon"} for ev in EVENTS]
    path = write_trace(tmp_path / "w.json", events)
    with pytest.raises(NoGpuEventsError, match="written as a string"):
        api.report(path)
    code, err = _cli("report", str(path))
    assert code == 2 and "CPU-only" not in _one_error_line(err)


def test_lost_gpu_records_are_not_a_cpu_only_trace(tmp_path: Path) -> None:
    path = write_trace(tmp_path / "t.json", [ev for ev in EVENTS if ev["cat"] != "kernel"])
    code, err = _cli("report", str(path))
    line = _one_error_line(err)
    assert code == 2
    assert "GPU activity records are missing" in line and "launched 2" in line
    assert "CPU-only" not in line


def test_duplicated_events_are_counted_once(tmp_path: Path) -> None:
    once = json.loads(
        CliRunner()
        .invoke(cli, ["report", str(write_trace(tmp_path / "a.json", EVENTS)), "--format", "json"])
        .stdout
    )
    code_twice = CliRunner().invoke(
        cli,
        ["report", str(write_trace(tmp_path / "b.json", EVENTS + EVENTS)), "--format", "json"],
    )
    assert code_twice.exit_code == 0
    twice = json.loads(code_twice.stdout)
    assert twice["data_quality"]["dropped_events"] == {"exact duplicate": len(EVENTS)}
    assert "appear more than once" in twice["data_quality"]["notes"][0]
    for doc in (once, twice):
        doc.pop("data_quality")
        doc.pop("source")
        doc.pop("ranks")
        doc.pop("diagnoses")  # TA012 notes the duplicates
    assert once == twice


def test_kernels_that_share_a_start_on_other_streams_are_not_duplicates(tmp_path: Path) -> None:
    other = {**kernel(150, 30, "gemm", corr=1), "tid": 8}
    other["args"] = {**other["args"], "stream": 8}
    tl = read(write_trace(tmp_path / "t.json", [*EVENTS, other]))
    assert "exact duplicate" not in tl.meta.quality.dropped
    assert tl.events.filter(pl.col("kind") == "kernel").height == 3


# ------------------------------------------------------------------------ CLI values


def test_step_pattern_that_matches_nothing(tmp_path: Path) -> None:
    path = write_trace(tmp_path / "t.json", EVENTS)
    code, err = _cli("report", str(path), "--step-pattern", "^train_iter")
    line = _one_error_line(err)
    assert code == 2 and "matches no host range" in line and "ProfilerStep#1" in line


def test_negative_top_is_a_usage_error(tmp_path: Path) -> None:
    code, err = _cli("report", str(write_trace(tmp_path / "t.json", EVENTS)), "--top", "-5")
    assert code == 2 and "Traceback" not in err and "--top" in err


def test_file_name_too_long(tmp_path: Path) -> None:
    long = tmp_path / ("a" * 300 + ".json")
    for args in (
        ["report", str(long)],
        ["report", str(write_trace(tmp_path / "t.json", EVENTS)), "-o", str(long)],
    ):
        code, err = _cli(*args)
        assert code == 2 and "shorter file name" in _one_error_line(err)


def test_unreachable_dask_scheduler(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("dask.distributed")
    monkeypatch.setattr(parallel, "DASK_CONNECT_TIMEOUT_S", 1)
    path = write_trace(tmp_path / "t.json", EVENTS)
    with pytest.raises(ConfigError, match="cannot reach the dask scheduler"):
        run_batch([str(path)], tmp_path / "out", dask_scheduler="tcp://127.0.0.1:9")


# ------------------------------------------------------------------------ compare


def test_compare_summary_row_from_another_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = write_trace(tmp_path / "t.json", EVENTS)
    (tmp_path / "where_batch_ran").mkdir()
    monkeypatch.chdir(tmp_path / "where_batch_ran")
    run_batch([str(trace)], Path("../out"), jobs=1)
    batch_mod.write_summary(run_batch([str(trace)], Path("../out"), jobs=1), Path("../out"), "csv")
    monkeypatch.chdir(tmp_path)
    doc = load_report("out/summary.csv#t.json")
    assert doc["format_version"] == 1


def test_compare_errors(tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "t.json", EVENTS)
    with pytest.raises(TraceFormatError, match="no such batch summary"):
        load_report(str(tmp_path / "none.parquet#run"))
    code, _ = _cli("report", str(trace), "--format", "json", "-o", str(tmp_path / "r.json"))
    assert code == 0
    doc = json.loads((tmp_path / "r.json").read_text())
    doc["format_version"] = 2
    (tmp_path / "r2.json").write_text(json.dumps(doc))
    code, err = _cli("compare", str(tmp_path / "r2.json"), str(tmp_path / "r.json"))
    assert code == 2 and "format_version 2" in _one_error_line(err)


# ------------------------------------------------------------------------ Nsight WAL


def test_nsys_export_with_an_unmerged_wal(tmp_path: Path) -> None:
    from tests.readers.test_nsys_sqlite import nsys_db_from_sql

    folder = tmp_path / "in"
    folder.mkdir()
    db = nsys_db_from_sql("two_ranks", folder)
    kernels_before = read(db).events.filter(pl.col("kind") == "kernel").height
    con = sqlite3.connect(db)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA wal_autocheckpoint=0")
    row = con.execute("SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL LIMIT 1").fetchone()
    cols = [d[0] for d in con.execute("SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL").description]
    new = dict(zip(cols, row, strict=True))
    new["start"], new["end"] = new["end"] + 1000, new["end"] + 2000
    con.execute(
        f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL ({','.join(cols)}) "
        f"VALUES ({','.join('?' * len(cols))})",
        list(new.values()),
    )
    con.commit()
    wal = folder / (db.name + "-wal")
    assert wal.stat().st_size > 0
    saved = {p.name: p.read_bytes() for p in folder.iterdir()}
    con.close()  # closing checkpoints and deletes the WAL: put the unmerged state back
    for name, data in saved.items():
        (folder / name).write_bytes(data)
    tl = read(db)
    assert tl.events.filter(pl.col("kind") == "kernel").height == kernels_before + 1
    assert any("write-ahead log" in n for n in tl.meta.quality.notes)
    assert tl.meta.path == str(db)
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == saved  # nothing written beside


# ------------------------------------------------------------------------ batch


def _row(summary: pl.DataFrame) -> dict[str, Any]:
    assert summary.height == 1
    return summary.row(0, named=True)


def test_batch_applies_settings_and_they_are_part_of_the_cache_key(tmp_path: Path) -> None:
    trace = SAMPLES / "train_bf16_healthy.json.gz"
    out = tmp_path / "out"
    first = _row(run_batch([str(trace)], out, jobs=1))
    assert first["diagnoses"] and not first["cached"]
    assert _row(run_batch([str(trace)], out, jobs=1))["cached"]
    quiet = Options(load_settings(overrides=("TA001.min_host_wait_share=0.99",), cwd=tmp_path))
    changed = _row(run_batch([str(trace)], out, jobs=1, options=quiet))
    assert not changed["cached"]
    assert "TA001" not in (changed["top_diagnosis"] or "")
    assert "TA001" in first["top_diagnosis"]
    code, err = _cli(
        "batch", str(trace), "--out-dir", str(out), "--set", "TA001.min_host_wait_share=0.99"
    )
    assert code == 0, err


def test_batch_settings_file_in_the_working_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = SAMPLES / "train_bf16_healthy.json.gz"
    monkeypatch.chdir(tmp_path)
    (tmp_path / "traceanalyzer.toml").write_text('ignore = ["TA001"]\n')
    code, err = _cli("batch", str(trace), "--out-dir", "out", "--summary-format", "csv")
    assert code == 0, err
    assert "TA001" not in (pl.read_csv(tmp_path / "out" / "summary.csv")["diagnoses"][0] or "")


def test_damaged_cache_entry_or_lost_report_is_analysed_again(tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "t.json", EVENTS)
    out = tmp_path / "out"
    first = _row(run_batch([str(trace)], out, jobs=1))
    (entry,) = (out / ".cache").iterdir()
    entry.write_text('{"run": "t.json", "cut off')
    again = _row(run_batch([str(trace)], out, jobs=1))
    assert again["error"] is None and not again["cached"]
    assert again["busy_share"] == first["busy_share"]
    Path(again["report"]).unlink()
    third = _row(run_batch([str(trace)], out, jobs=1))
    assert not third["cached"] and Path(third["report"]).is_file()
    assert _row(run_batch([str(trace)], out, jobs=1))["cached"]


def test_archive_bomb_is_a_failed_run(tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.zip"
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("trace.json", b" " * (300 << 20))  # 300 MB of whitespace, a few 100 kB
    assert bomb.stat().st_size < (2 << 20)
    good = write_trace(tmp_path / "t.json", EVENTS)
    summary = run_batch([str(bomb), str(good)], tmp_path / "out", jobs=1)
    rows = {r["run"]: r for r in summary.iter_rows(named=True)}
    assert "unpacks to more than" in rows["bomb.zip"]["error"]
    assert rows["t.json"]["error"] is None
    small = run_batch([str(bomb)], tmp_path / "out2", jobs=1, max_unpacked=1 << 20)
    assert "unpacks to more than 0.0 GiB" in small["error"][0]


@pytest.mark.parametrize("delay_s", [0.0, 0.3, 1.0])  # unpacking, starting workers, analysing
def test_sigterm_removes_the_scratch_folder(tmp_path: Path, delay_s: float) -> None:
    archive = tmp_path / "runs.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for i in range(4):
            zf.write(SAMPLES / "train_bf16_healthy.json.gz", f"run{i}.json.gz")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "traceanalyzer", "batch", str(archive), "--out-dir", "out"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 240  # generous: CI machines can be loaded
    while not any(tmp.glob("traceanalyzer-batch-*/archive*/run0.json.gz")):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    time.sleep(delay_s)
    proc.send_signal(signal.SIGTERM)
    _out, err = proc.communicate(timeout=240)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert b"Traceback" not in err
    assert list(tmp.iterdir()) == []
    assert archive.is_file()


def test_sigterm_from_another_thread_waits_for_the_hold() -> None:
    """CI once saw a worker killed half-started: the signal reached a thread other than the
    one whose mask held it back, and the main thread raised mid-spawn. The hold is a flag the
    handler reads, so it holds whichever thread the signal lands on."""
    previous = signal.getsignal(signal.SIGTERM)
    termination.install()
    try:
        reached_end = False
        with pytest.raises(termination.Terminated), termination.held():
            sender = threading.Thread(target=os.kill, args=(os.getpid(), signal.SIGTERM))
            sender.start()
            sender.join()
            for _ in range(1000):  # bytecodes run: the handler has had its chances
                time.sleep(0)
            reached_end = True
        assert reached_end
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # a second one ends it
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_gpu_event_without_device_or_stream_is_dropped_and_counted(tmp_path: Path) -> None:
    """Found by the fuzz suite: a kernel whose pid is null and whose args name no device was
    an internal error (timeline invariants); it is dropped and counted instead."""
    placeless = {"ph": "X", "cat": "kernel", "name": "k", "pid": None, "tid": 7, "ts": 1, "dur": 0}
    tl = read(write_trace(tmp_path / "t.json", [*EVENTS, placeless]))
    assert tl.meta.quality.dropped == {"GPU event with no device or stream": 1}
    code, _err = _cli("report", str(tmp_path / "t.json"), "--format", "json")
    assert code == 0
