"""Windows, busy/idle, steps and kernel summaries on tiny traces with hand-checked numbers."""

from __future__ import annotations

import random
from pathlib import Path

import polars as pl

from tests.builders import gpu_op, kernel, launch, step, write_trace
from tests.reference import union_length
from traceanalyzer.analyses import analyze
from traceanalyzer.analyses.gpu.kernels import histogram_edges
from traceanalyzer.analyses.timeline.intervals import busy_before, union
from traceanalyzer.readers import read


def _metrics(tmp_path: Path, events: list[dict[str, object]]):  # type: ignore[no-untyped-def]
    return analyze(read(write_trace(tmp_path / "t.json", events)))


def test_two_streams_overlap_without_steps(tmp_path: Path) -> None:
    # stream 7: [0, 100) µs; stream 13: [50, 150); then a gap, then [200, 210)
    m = _metrics(
        tmp_path, [kernel(1000, 100, "a"), kernel(1050, 100, "b", stream=13), kernel(1200, 10, "c")]
    )
    d = m.devices.summary.row(0, named=True)
    assert m.basis == "trace"
    assert (d["window_ns"], d["busy_ns"], d["idle_ns"]) == (210_000, 160_000, 50_000)
    assert d["idle_share"] == 50_000 / 210_000
    assert (d["kernel_count"], d["kernel_ns"]) == (3, 210_000)
    assert m.steps.steady.height == 0


def test_zero_length_kernel_counts_but_adds_no_time(tmp_path: Path) -> None:
    m = _metrics(tmp_path, [kernel(1000, 10, "a"), kernel(1005, 0, "zero"), kernel(1020, 10, "b")])
    d = m.devices.summary.row(0, named=True)
    assert (d["kernel_count"], d["busy_ns"], d["window_ns"]) == (3, 20_000, 30_000)
    assert m.kernels.histogram.filter(pl.col("lo_ns") == 0)["count"].item() == 1


def test_steps_are_projected_onto_the_work_they_launched(tmp_path: Path) -> None:
    events = [
        # work launched before the first step: outside the window
        launch(10, 1, corr=1),
        kernel(20, 5, "warmup", corr=1),
        step(1, 100, 100),  # host step 1: [100, 200) µs
        launch(110, 2, corr=2),
        kernel(150, 30, "s1a", corr=2),  # GPU [150, 180)
        launch(120, 2, corr=3),
        kernel(190, 20, "s1b", corr=3),  # GPU [190, 210): after host step
        step(2, 200, 100),  # host step 2: [200, 300)
        launch(250, 2, corr=4),
        kernel(260, 40, "s2a", corr=4),  # GPU [260, 300)
        launch(260, 2, corr=5),
        gpu_op("gpu_memcpy", 300, 10, "Memcpy DtoH", corr=5),  # [300, 310)
        launch(400, 2, corr=6),
        kernel(400, 5, "after", corr=6),  # after the last step
    ]
    m = _metrics(tmp_path, events)
    assert m.basis == "steps"
    w = m.steps.windows.row(0, named=True)
    # the first step opens at its marker (the GPU waits for its first launch from there)
    assert (w["start_ns"], w["end_ns"]) == (100_000, 310_000)
    steps = m.steps.steady.select("name", "start_ns", "end_ns", "busy_ns").rows()
    assert steps == [
        ("ProfilerStep#1", 100_000, 210_000, 50_000),
        ("ProfilerStep#2", 210_000, 310_000, 50_000),
    ]
    d = m.devices.summary.row(0, named=True)
    assert (d["busy_ns"], d["idle_ns"], d["kernel_count"]) == (100_000, 110_000, 3)
    assert m.kernels.top["name"].to_list() == ["s2a", "s1a", "s1b"]


def test_kernel_crossing_the_window_edge_is_clipped(tmp_path: Path) -> None:
    events = [
        launch(10, 1, corr=1),
        kernel(90, 20, "early", corr=1, stream=13),
        step(1, 50, 100),
        launch(60, 1, corr=2),
        kernel(100, 10, "k", corr=2),
    ]
    m = _metrics(tmp_path, events)
    d = m.devices.summary.row(0, named=True)
    assert (d["window_ns"], d["busy_ns"], d["kernel_count"], d["kernel_ns"]) == (
        10_000,
        10_000,
        2,
        20_000,
    )


def test_histogram_edges_are_log_spaced() -> None:
    assert histogram_edges(0) == [0, 1000]
    assert histogram_edges(7_500) == [0, 1000, 2000, 5000, 10000]
    assert histogram_edges(10_000) == [0, 1000, 2000, 5000, 10000, 20000]


def test_union_and_busy_before_match_a_plain_loop() -> None:
    rng = random.Random(7)
    for _ in range(40):
        rows = []
        for dev in range(2):
            for _ in range(rng.randint(1, 30)):
                s = rng.randint(0, 500)
                rows.append((0, dev, s, s + rng.randint(0, 60)))
        df = pl.DataFrame(rows, schema=["rank", "device", "start_ns", "end_ns"], orient="row")
        merged = union(df.lazy(), ["rank", "device"])
        points = pl.DataFrame(
            [(0, dev, t) for dev in range(2) for t in range(-5, 600, 37)],
            schema=["rank", "device", "t"],
            orient="row",
        )
        got = busy_before(points.lazy(), merged, ["rank", "device"], "t").collect()
        for dev, t, b in got.select("device", "t", "t_busy_ns").iter_rows():
            ivs = [(s, min(e, t)) for _r, d, s, e in rows if d == dev and s < t]
            assert b == union_length([(s, e) for s, e in ivs if e > s]), (dev, t)


def test_union_merges_each_group_like_a_plain_loop() -> None:
    """Groups side by side after sorting (a null group too): no interval merges across a
    group's edge, touching intervals merge, and busy_before_ns sums the earlier ones."""
    rng = random.Random(11)
    for _ in range(40):
        rows = [
            (0, dev, s, s + rng.randint(0, 40))
            for dev in (0, 1, None)
            for s in (rng.randint(0, 300) for _ in range(rng.randint(1, 25)))
        ]
        df = pl.DataFrame(rows, schema=["rank", "device", "start_ns", "end_ns"], orient="row")
        got = union(df.lazy(), ["rank", "device"]).collect()
        for dev in (0, 1, None):
            want: list[list[int]] = []
            for _r, _d, s, e in sorted(r for r in rows if r[1] == dev):
                if want and s <= want[-1][1]:
                    want[-1][1] = max(want[-1][1], e)
                else:
                    want.append([s, e])
            mine = got.filter(pl.col("device").eq_missing(dev))
            assert mine.select("start_ns", "end_ns").rows() == [tuple(w) for w in want], dev
            before = [sum(e - s for s, e in want[:i]) for i in range(len(want))]
            assert mine["busy_before_ns"].to_list() == before


def _step_names(tmp_path: Path, names: list[str], pattern: str | None) -> list[str]:
    events: list[dict[str, object]] = []
    for i, name in enumerate(names):
        t = 100.0 * (i + 1)
        events += [
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": name,
                "pid": 1,
                "tid": 1,
                "ts": t,
                "dur": 90.0,
                "args": {},
            },
            launch(t + 1, 1, corr=i + 1),
            kernel(t + 5, 10, f"k{i}", corr=i + 1),
        ]
    tl = read(write_trace(tmp_path / f"s{len(names)}.json", events))
    return analyze(tl, step_pattern=pattern, all_steps=True).steps.steady["name"].to_list()


def test_step_patterns(tmp_path: Path) -> None:
    from traceanalyzer.analyses.timeline.windows import NVTX_STEP_PATTERN

    names = ["step_12", "iteration 3", "ProfilerStep#5", "train_step", "forward", "Step 7"]
    assert _step_names(tmp_path, names, None) == ["ProfilerStep#5"]
    assert _step_names(tmp_path, names, NVTX_STEP_PATTERN) == [
        "step_12",
        "iteration 3",
        "ProfilerStep#5",
        "train_step",
        "Step 7",
    ]
    assert _step_names(tmp_path, names, r"^forward$") == ["forward"]
