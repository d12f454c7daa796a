"""Per-rank reduction (issue 15): a job's ranks read and analysed apart, merged by the job
stage, give the report of the job read whole. Real multi-rank traces, and small jobs whose
truth is known by construction (a warm-up step on one rank only, a rank without GPU work)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from tests.builders import cpu_op, kernel, launch, step, write_trace
from tests.conftest import REPO, SAMPLES, corpus
from tests.test_golden import _rounded
from traceanalyzer import api, ranks
from traceanalyzer.analyses.critical_path import critical_path
from traceanalyzer.analyses.distributed import rank
from traceanalyzer.analyses.gpu import idle
from traceanalyzer.analyses.timeline import steady, windows
from traceanalyzer.errors import NoGpuEventsError, TraceFormatError

GOLDEN = Path(__file__).parent / "golden"


def _json(rep: Any, tmp: Path, name: str) -> bytes:
    out = tmp / f"{name}.json"
    api.write(rep, "json", str(out))
    return out.read_bytes()


def _three_ways(folder: Path, tmp: Path) -> tuple[bytes, bytes, bytes]:
    """The folder's report reduced in 2 worker processes, reduced here rank after rank, and
    read whole into one timeline."""
    return (
        _json(api.report(folder, jobs=2), tmp, "workers"),
        _json(api.report(folder, jobs=1), tmp, "here"),
        _json(api.run(api.load(folder)).report, tmp, "whole"),
    )


def test_sample_job_reduced_equals_golden(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)  # the golden names the sample by its path in the repository
    workers, here, whole = _three_ways(Path(SAMPLES.name) / "sampled_2rank", tmp_path)
    assert workers == here == whole
    golden = json.loads((GOLDEN / "sampled_2rank.json").read_text())
    assert _rounded(json.loads(workers)) == golden


def test_dlrm_8_ranks_reduced_equals_whole(tmp_path: Path) -> None:
    folder = (corpus() or tmp_path) / "public" / "param" / "dlrm_8rank_v100"
    if not folder.is_dir():
        pytest.skip("DLRM 8-rank trace not in the corpus")
    workers, here, whole = _three_ways(folder, tmp_path)
    assert workers == here == whole
    report = json.loads(workers)
    assert [r["rank"] for r in report["ranks"]] == list(range(8))


# ---------------------------------------------------------------- jobs of known truth

T0 = 1_000_000.0  # µs: a zero timestamp is dropped as missing


def _rank_events(
    gpu: bool = True, warmup: bool = False, gpu_bound: bool = False
) -> list[dict[str, Any]]:
    """Four steps of three launched kernels; `warmup`: the first step takes 4x as long and
    allocates (cudaMalloc), as a first step with one-time work does; `gpu_bound`: each
    step's last kernel runs 12 ms, past the start of the next step's marker (the host runs
    ahead of the GPU)."""
    events: list[dict[str, Any]] = []
    corr, t = 1, T0
    for n in range(1, 5):
        dur = 40_000.0 if warmup and n == 1 else 10_000.0
        events.append(step(n, t, dur))
        first = 30_000.0 if warmup and n == 1 else 100.0  # the allocation, then the launches
        for j in range(3):
            ts = t + first + j * 1000
            events.append(launch(ts, 10, corr))
            if gpu:
                long = gpu_bound and j == 2
                events.append(kernel(ts + 50, 12_000 if long else 800, f"gemm_k{j}", corr=corr))
            corr += 1
        if warmup and n == 1:
            events.append(launch(t + 5000, 20_000, 999, name="cudaMalloc"))
        t += dur + 10
    return events


def _job(folder: Path, ranks: list[list[dict[str, Any]]]) -> Path:
    for r, events in enumerate(ranks):
        header = {"schemaVersion": 1, "distributedInfo": {"rank": r, "world_size": len(ranks)}}
        write_trace(folder / f"rank{r}.json", events, header=header)
    return folder


def test_warmup_on_one_rank_is_left_out_on_every_rank(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = _job(tmp_path / "job", [_rank_events(), _rank_events(warmup=True)])
    calls: list[tuple[int, bool]] = []
    real = rank.analyze_rank

    def counted(
        timeline: Any, opts: Any, flagged: Any = None, solo: bool = False, job_steps: Any = None
    ) -> Any:
        part = real(timeline, opts, flagged, solo, job_steps)
        calls.append((part.rank, flagged is not None))
        return part

    monkeypatch.setattr("traceanalyzer.ranks.analyze_rank", counted)
    metrics = ranks.analyze_folder(folder, rank.Options(), jobs=1)[1]
    # rank 0 saw no warm-up of its own and ran again with the job's decision; rank 1 did not
    assert sorted(calls) == [(0, False), (0, True), (1, False)]
    excluded = metrics.steps.excluded.sort("rank")
    assert excluded.select("rank", "step").rows() == [(0, 1), (1, 1)]
    assert excluded["reason"][0].startswith("left out on every rank (rank 1: warm-up: one-time")
    assert excluded["reason"][1].startswith("warm-up: one-time work (cudaMalloc x1)")
    # the window of each device starts with step 2
    starts = metrics.steps.steady.group_by("rank").agg(pl.col("step").min()).sort("rank")
    assert starts["step"].to_list() == [2, 2]
    # the same decision as the steady state taken over the whole job's timeline at once
    timeline = api.load(folder)
    found = windows.step_markers(timeline, windows.PROFILER_STEP_PATTERN).collect()
    keys = windows.launch_keys(timeline, found.lazy())
    ops = rank._step_ops(timeline, found.lazy(), keys, False)
    whole = steady.find(timeline, found, ops).excluded.sort("rank")
    assert whole.equals(excluded)
    workers, here, whole_json = _three_ways(folder, tmp_path)
    assert workers == here == whole_json


def test_rank_without_gpu_work_stays_in_the_job(tmp_path: Path) -> None:
    folder = _job(tmp_path / "job", [_rank_events(), _rank_events(gpu=False)])
    workers, here, whole = _three_ways(folder, tmp_path)
    assert workers == here == whole
    report = json.loads(workers)
    assert [r["rank"] for r in report["ranks"]] == [0, 1]
    assert {d["rank"] for d in report["devices"]} == {0}


def test_job_without_any_gpu_work_is_an_error(tmp_path: Path) -> None:
    folder = _job(tmp_path / "job", [_rank_events(gpu=False), _rank_events(gpu=False)])
    with pytest.raises(NoGpuEventsError, match="GPU activity records are missing"):
        api.report(folder, jobs=1)


def test_folder_errors_are_the_whole_reads(tmp_path: Path) -> None:
    folder = _job(tmp_path / "job", [_rank_events(), _rank_events()])
    (folder / "rank1.json").write_bytes(b'{"traceEvents": [{"ph": "X", "cat": "kernel",')
    (folder / "rank7.json").write_text("not json at all")
    reduced = api.report(folder, jobs=2)
    whole = api.run(api.load(folder)).report
    assert _json(reduced, tmp_path, "a") == _json(whole, tmp_path, "b")
    two = _job(tmp_path / "two", [_rank_events(), _rank_events()])
    (two / "rank1.json").rename(two / "rank0_copy.json")  # names rank 0 twice
    (two / "rank0_copy.json").write_bytes((two / "rank0.json").read_bytes())
    with pytest.raises(TraceFormatError, match="two files claim rank 0"):
        api.report(two, jobs=1)


def test_step_pattern_matching_nothing_on_any_rank(tmp_path: Path) -> None:
    folder = _job(tmp_path / "job", [_rank_events(), _rank_events()])
    with pytest.raises(Exception, match="matches no host range") as info:
        api.report(folder, step_pattern="^iteration$", jobs=1)
    assert "ProfilerStep#1" in str(info.value.hint)  # type: ignore[attr-defined]


def test_dask_scheduler_runs_the_ranks(tmp_path: Path) -> None:
    distributed = pytest.importorskip("dask.distributed")
    folder = _job(tmp_path / "job", [_rank_events(), _rank_events(warmup=True)])
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None
    ) as cluster:
        on_dask = api.report(folder, dask_scheduler=cluster.scheduler_address)
    assert _json(on_dask, tmp_path, "dask") == _json(api.report(folder, jobs=1), tmp_path, "here")


def test_sync_site_ties_are_decided_by_nesting_then_record_order(tmp_path: Path) -> None:
    """An operator and the one it calls recorded with the same start and end (aten::to
    around aten::_to_copy, microsecond clocks): the outermost is the one recorded first, in
    whatever order the rows reach the analysis."""

    base = [
        step(1, T0, 5_000),
        cpu_op(T0 + 100, 900, "aten::to"),
        cpu_op(T0 + 100, 900, "aten::_to_copy"),
        cpu_op(T0 + 200, 800, "aten::copy_"),
        launch(T0 + 300, 600, 1, name="cudaStreamSynchronize"),
        kernel(T0 + 310, 100, "k", corr=2),
        launch(T0 + 305, 3, 2),
    ]
    for events in (base, [base[0], base[2], base[1], *base[3:]]):
        timeline = api.load(write_trace(tmp_path / "t.json", events))
        markers = windows.step_markers(timeline, windows.PROFILER_STEP_PATTERN)
        syncs = idle.sync_calls(timeline)
        gaps = pl.LazyFrame(
            schema={"rank": pl.Int32, "sync_start_ns": pl.Int64, "sync_ns": pl.Int64}
        )
        sites = idle.sync_sites(timeline, syncs, markers, gaps).collect()
        expected = events[1]["name"]  # the one recorded first
        assert sites["op"].to_list() == [expected]


@pytest.mark.parametrize("job", ["sample", "warmup"])
def test_job_critical_path_a_step_at_a_time_equals_whole(job: str, tmp_path: Path) -> None:
    """The job stage builds and solves its steps' graphs a chunk at a time: one step per
    chunk gives the paths, what-ifs and ties of the whole graph."""
    folder = (
        SAMPLES / "sampled_2rank"
        if job == "sample"
        else _job(tmp_path / "job", [_rank_events(gpu_bound=True), _rank_events(warmup=True)])
    )
    files = sorted(folder.glob("*rank*.json*"))
    parts = [rank.analyze_rank(api.load(f), rank.Options()) for f in files]
    graphs = [p.graph for p in parts if p.graph is not None]
    whole = critical_path.solve_job(graphs, chunk_ops=10**9)
    stepwise = critical_path.solve_job(graphs, chunk_ops=1)
    assert whole.steps["step"].n_unique() > 1
    assert whole.steps.equals(stepwise.steps)
    assert whole.what_if.equals(stepwise.what_if)
    assert whole.path.sort("rank", "step", "seq").equals(stepwise.path.sort("rank", "step", "seq"))


def _shaped_rank(scale: float) -> list[dict[str, Any]]:
    """GPU-bound steps of two memory-bound operators and a GEMM, with recorded shapes: each
    kernel `scale` times as long as on the first rank."""
    events: list[dict[str, Any]] = []
    corr, t = 1, T0
    ops = [("aten::add", 3000.0), ("aten::mul", 2000.0), ("aten::mm", 1000.0)]
    for n in range(1, 6):
        events.append(step(n, t, 200.0))
        g = t + 300
        for j, (op, dur) in enumerate(ops):
            ts = t + 10 + j * 20
            dims = [[4096, 1024], [1024, 1001]] if op == "aten::mm" else [[1024, 1024]] * 2
            kind = "c10::BFloat16" if op == "aten::mm" else "float"
            args = {"External id": corr, "Input Dims": dims, "Input type": [kind, kind]}
            events.append(cpu_op(ts - 2, 15, op, **args))
            events.append(launch(ts, 5, corr))
            name = "sm90_xmma_gemm_bf16bf16_bf16f32" if op == "aten::mm" else "elementwise_kernel"
            events.append(kernel(g, dur * scale, name, corr=corr))
            g += dur * scale
            corr += 1
        t = g + 10
    return events


def test_operator_lists_are_ordered_across_the_job(tmp_path: Path) -> None:
    """Memory-bound operators and matmul shapes are listed by kernel time over the whole
    job (the report shows the first few), not rank after rank."""
    folder = _job(tmp_path / "job", [_shaped_rank(1.0), _shaped_rank(2.0)])
    workers, here, whole = _three_ways(folder, tmp_path)
    assert workers == here == whole
    report = json.loads(workers)
    for listed in (report["memory_bandwidth"], report["matmul_shapes"]):
        assert listed and listed[0]["rank"] == 1
        times = [row["kernel_ns"] for row in listed]
        assert times == sorted(times, reverse=True)


def test_rank_without_steps_of_its_own_takes_the_jobs_windows(tmp_path: Path) -> None:
    """Rank 1 marks steps but its GPU work carries no launch links (no device steps of its
    own), and one kernel runs before its first step: as the job has steps, its window is
    the steps' host span, and that kernel lies outside it."""
    unlinked: list[dict[str, Any]] = []
    for event in _rank_events():
        if event.get("cat") == "kernel":
            args = {k: v for k, v in event["args"].items() if k != "correlation"}
            event = {**event, "args": args}
        unlinked.append(event)
    unlinked.append(kernel(T0 - 5000, 800, "gemm_early"))
    folder = _job(tmp_path / "job", [_rank_events(), unlinked])
    workers, here, whole = _three_ways(folder, tmp_path)
    assert workers == here == whole
    report = json.loads(workers)
    assert report["window"]["basis"] == "steps"
    outside = {r["rank"]: r["before_count"] for r in report["data_quality"]["outside_window"]}
    assert outside[1] == 1
