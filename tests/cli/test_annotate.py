"""`traceanalyzer annotate`: the trace written back with counters and finding markers."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner

from tests.builders import kernel, launch, step, write_trace
from tests.conftest import REPO
from tests.readers.test_nsys_sqlite import nsys_db_from_sql
from traceanalyzer import api
from traceanalyzer.annotate import BUSY_COUNTER, COMM_COUNTER, MARKER_CATEGORY, annotate
from traceanalyzer.cli import cli

EVENTS = [
    step(1, 100, 100),
    launch(110, 2, corr=1),
    kernel(150, 30, "<script>alert(1)</script>", corr=1),
    step(2, 200, 100),
    launch(210, 2, corr=2),
    kernel(260, 40, "gemm", corr=2),
    launch(262, 2, corr=3),
    kernel(300, 20, "ncclKernel_AllReduce_RING_LL_Sum_float", corr=3),
]


def _events(path: Path) -> list[dict[str, Any]]:
    doc = orjson.loads(gzip.decompress(path.read_bytes()))
    events: list[dict[str, Any]] = doc["traceEvents"] if isinstance(doc, dict) else doc
    return events


def test_chrome_trace_gains_counters_and_markers(tmp_path: Path) -> None:
    src = write_trace(tmp_path / "t.json", EVENTS)
    before = src.read_bytes()
    out = tmp_path / "annotated.json.gz"
    result = CliRunner().invoke(cli, ["annotate", str(src), "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert src.read_bytes() == before  # the input is never touched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["annotated.json.gz", "t.json"]

    events = _events(out)
    original = json.loads(before)["traceEvents"]
    assert events[: len(original)] == original  # every original event kept, in order
    counters = [e for e in events if e["ph"] == "C"]
    busy = [e for e in counters if e["name"] == BUSY_COUNTER]
    assert len(busy) == 241  # one sample per timeline bin, then zeros at the window's end
    assert set(busy[0]["args"]) == {"busy", "host_wait", "sync", "launch_overhead", "other"}
    assert all(e["pid"] == 0 for e in busy)  # on GPU 0's process, beside its kernels
    assert busy[0]["ts"] == 100.0  # the window starts at step 1's marker
    assert 0 < sum(busy[0]["args"].values()) <= 100.01
    comm = [e for e in counters if e["name"] == COMM_COUNTER]
    assert comm and comm[0]["args"]["exposed"] > 0

    rep = api.report(src)
    markers = [e for e in events if e["ph"] == "i" and e.get("cat") == MARKER_CATEGORY]
    assert [m["args"]["rule"] for m in markers] == [f.rule for f in rep.findings]
    assert all(m["args"]["message"] and m["args"]["advice"] for m in markers)


def test_annotated_trace_reads_back_the_same(tmp_path: Path) -> None:
    src = write_trace(tmp_path / "t.json", EVENTS, gzip=True)
    (tmp_path / "a").mkdir()
    out = tmp_path / "a" / "annotated.json.gz"
    annotate(src, out)
    first, again = api.report(src), api.report(out)
    assert again.devices == first.devices
    assert again.kernels == first.kernels
    assert again.steps == first.steps


def test_folder_of_ranks_writes_one_file_per_rank(tmp_path: Path) -> None:
    job = REPO / "sample_traces" / "sampled_2rank"
    done = annotate(job, tmp_path / "out")
    assert sorted(d.path.name for d in done) == [
        "sampled_rank-0.annotated.json.gz",
        "sampled_rank-1.annotated.json.gz",
    ]
    for d in done:
        assert d.counters > 0
        assert any(e["ph"] == "C" for e in _events(d.path))


def test_nsys_export_becomes_a_chrome_trace(tmp_path: Path) -> None:
    db = nsys_db_from_sql("two_ranks", tmp_path)
    out = tmp_path / "nsys.json.gz"
    result = CliRunner().invoke(cli, ["annotate", str(db), "-o", str(out)])
    assert result.exit_code == 0, result.output
    events = _events(out)
    assert {"X", "C"} <= {e["ph"] for e in events}
    kernels = [e for e in events if e.get("cat") == "kernel"]
    assert kernels and all(isinstance(e["ts"], float) for e in kernels)
    original = api.report(db)
    assert api.report(out).kernels["count"] == original.kernels["count"]


def test_bad_input_is_one_error_line(tmp_path: Path) -> None:
    bad = tmp_path / "x.json"
    bad.write_text("not json")
    result = CliRunner().invoke(cli, ["annotate", str(bad), "-o", str(tmp_path / "o.json.gz")])
    assert result.exit_code == 2
    assert result.stderr.startswith("error:")
    assert not (tmp_path / "o.json.gz").exists()


def test_annotate_refuses_to_overwrite_its_input(tmp_path: Path) -> None:
    from traceanalyzer.errors import ReportWriteError

    src = write_trace(tmp_path / "t.json", EVENTS, gzip=True)
    before = src.read_bytes()
    with pytest.raises(ReportWriteError, match="one of the inputs"):
        annotate(src, src)
    assert src.read_bytes() == before


def test_each_finding_has_a_track_over_its_spans(tmp_path: Path) -> None:
    """On the real slow-loader trace, TA001's track holds one slice per host-wait gap of the
    report's gaps, at their times, with the message; the file gets the usual permissions."""
    import os
    import stat

    import polars as pl

    from traceanalyzer.analyses import analyze

    src = REPO / "tests" / "data" / "gpu" / "slow_loader.json.gz"
    out = tmp_path / "a.json.gz"
    old = os.umask(0o022)
    try:
        annotate(src, out)
    finally:
        os.umask(old)
    assert stat.S_IMODE(out.stat().st_mode) == 0o644
    events = _events(out)
    names = {
        e["tid"]: e["args"]["name"]
        for e in events
        if e["ph"] == "M" and e["name"] == "thread_name" and "traceanalyzer:" in e["args"]["name"]
    }
    (tid,) = [t for t, n in names.items() if "TA001" in n]
    slices = [e for e in events if e["ph"] == "X" and e.get("tid") == tid]
    gaps = (
        analyze(api.load(src))
        .idle.gaps.filter(pl.col("cause") == "host_wait")
        .sort("start_ns")
        .select("start_ns", "end_ns")
    )
    assert len(slices) == gaps.height > 0
    assert [round(e["ts"] * 1000) for e in slices] == gaps["start_ns"].to_list()
    durations = (gaps["end_ns"] - gaps["start_ns"]).to_list()
    assert [round(e["dur"] * 1000) for e in slices] == durations
    assert all("waiting for the host" in e["args"]["message"] for e in slices)
    marker = next(
        e
        for e in events
        if e["ph"] == "i" and e.get("cat") == MARKER_CATEGORY and e["args"]["rule"] == "TA001"
    )
    assert marker["ts"] == slices[0]["ts"]  # at its first span, not the window start


def test_nsys_host_processes_and_threads_are_named(tmp_path: Path) -> None:
    db = nsys_db_from_sql("two_ranks", tmp_path)
    out = tmp_path / "nsys.json.gz"
    annotate(db, out)
    events = _events(out)
    host = {(e["pid"], e["tid"]) for e in events if e.get("cat") == "cuda_runtime"}
    named = {(e["pid"], e["tid"]) for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    procs = {e["pid"] for e in events if e["ph"] == "M" and e["name"] == "process_name"}
    assert host and host <= named and {p for p, _t in host} <= procs


@pytest.mark.parametrize("encoding", ["utf-8-sig", "utf-16"])
def test_bom_and_utf16_traces_annotate(tmp_path: Path, encoding: str) -> None:
    plain = write_trace(tmp_path / "plain.json", EVENTS)
    src = tmp_path / f"{encoding}.json"
    src.write_bytes(plain.read_text(encoding="utf-8").encode(encoding))
    out = tmp_path / "a.json.gz"
    result = CliRunner().invoke(cli, ["annotate", str(src), "-o", str(out)])
    assert result.exit_code == 0, result.output
    original = json.loads(plain.read_bytes())["traceEvents"]
    assert _events(out)[: len(original)] == original


def test_a_cause_has_a_track_over_its_own_calls(tmp_path: Path) -> None:
    """empty_cache every step: TA015's track holds one slice per cudaMalloc/cudaFree inside
    the steady steps (64 per step, 4 steps), named after the call, at the calls' times."""
    src = REPO / "tests" / "data" / "gpu" / "empty_cache_every_step.json.gz"
    out = tmp_path / "a.json.gz"
    annotate(src, out)
    events = _events(out)
    names = {
        e["tid"]: e["args"]["name"]
        for e in events
        if e["ph"] == "M" and e["name"] == "thread_name" and "traceanalyzer:" in e["args"]["name"]
    }
    (tid,) = [t for t, n in names.items() if "TA015" in n]
    slices = [e for e in events if e["ph"] == "X" and e.get("tid") == tid]
    assert len(slices) == 64 * 4
    calls = sorted(
        (round(e["ts"] * 1000), e["name"])
        for e in _events(src)
        if e.get("cat") == "cuda_runtime" and e.get("name") in ("cudaMalloc", "cudaFree")
    )
    assert {(round(e["ts"] * 1000), e["name"].removeprefix("TA015: ")) for e in slices} <= set(
        calls
    )
