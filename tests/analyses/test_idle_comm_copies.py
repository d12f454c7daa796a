"""Idle gaps and causes, syncs, comm overlap, rank imbalance and copies on tiny traces."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest

from tests.builders import cpu_op, gpu_op, kernel, launch, step, write_trace
from tests.conftest import corpus
from traceanalyzer.analyses import analyze
from traceanalyzer.analyses.gpu import idle
from traceanalyzer.analyses.timeline import windows
from traceanalyzer.readers import read


def _py(ts: float, dur: float, name: str) -> dict[str, Any]:
    return {
        "ph": "X",
        "cat": "python_function",
        "name": name,
        "pid": 100,
        "tid": 100,
        "ts": ts,
        "dur": dur,
        "args": {},
    }


# µs; host step [100, 1000); six 10 µs kernels; one gap per cause, and the window's opening
# [100, 200) before the first kernel (launched at 110, after it began: host_wait)
CAUSES_TRACE = [
    step(1, 100, 900),
    launch(110, 2, corr=1),
    kernel(200, 10, "A", corr=1),
    launch(150, 2, corr=2),
    kernel(220, 10, "B", corr=2),  # queued early: gap [210,220) other
    launch(240, 2, corr=3),
    kernel(245, 10, "C", corr=3),  # late, 15 µs: launch_overhead
    _py(250, 170, "train.py(88): train_step"),
    cpu_op(255, 147, "aten::item"),
    launch(256, 144, corr=90, name="cudaStreamSynchronize"),  # gap [255,410): 144 sync, 11 launch
    launch(405, 2, corr=4),
    kernel(410, 10, "D", corr=4),
    launch(600, 2, corr=5),
    kernel(700, 10, "E", corr=5),  # gap [420,700): host_wait
    launch(720, 2, corr=6),
    kernel(760, 10, "F", corr=6),  # gap exactly 50 µs: launch_overhead
]


def test_each_gap_gets_its_cause(tmp_path: Path) -> None:
    m = analyze(read(write_trace(tmp_path / "t.json", CAUSES_TRACE)))
    d = m.devices.summary.row(0, named=True)
    assert (d["window_ns"], d["busy_ns"], d["idle_ns"]) == (670_000, 60_000, 610_000)
    assert {c: d[f"{c}_ns"] for c in ("other", "launch_overhead", "sync", "host_wait")} == {
        "other": 10_000,
        "launch_overhead": 76_000,
        "sync": 144_000,
        "host_wait": 380_000,
    }
    gaps = m.idle.gaps.select(
        "start_ns", "gap_ns", pl.col("cause").cast(pl.String), "before", "after"
    )
    assert gaps.row(0) == (100_000, 100_000, "host_wait", None, "A")
    assert gaps.row(4) == (420_000, 280_000, "host_wait", "D", "E")
    assert m.idle.gaps.filter(pl.col("cause") == "sync")["sync_name"].to_list() == [
        "cudaStreamSynchronize"
    ]
    steps = m.steps.steady.row(0, named=True)
    assert steps["sync_ns"] == 144_000 and steps["kernel_count"] == 6


def test_threshold_is_inclusive(tmp_path: Path) -> None:
    m = analyze(read(write_trace(tmp_path / "t.json", CAUSES_TRACE)), launch_gap_max_ns=49_999)
    d = m.devices.summary.row(0, named=True)
    assert (d["launch_overhead_ns"], d["host_wait_ns"]) == (26_000, 430_000)


def test_sync_call_sites(tmp_path: Path) -> None:
    m = analyze(read(write_trace(tmp_path / "t.json", CAUSES_TRACE)))
    site = m.idle.sync_sites.row(0, named=True)
    assert site["name"] == "cudaStreamSynchronize"
    assert site["op"] == "aten::item"
    assert site["site"] == "train.py(88): train_step"
    assert (site["count"], site["steps"], site["per_step"], site["idle_ns"]) == (1, 1, 1.0, 144_000)
    assert m.idle.syncs_per_step.rows() == [(0, 1, 1)]


def test_comm_overlap(tmp_path: Path) -> None:
    events = [
        kernel(1000, 100, "ncclKernel_AllReduce_RING_LL_Sum_float", stream=20),
        kernel(1050, 100, "volta_sgemm_128x64_nn", stream=7),
        kernel(1300, 40, "ncclDevKernel_AllGather_RING_LL", stream=20),  # fully exposed
    ]
    m = analyze(read(write_trace(tmp_path / "c.json", events)))
    d = m.devices.summary.row(0, named=True)
    assert (d["comm_ns"], d["overlapped_comm_ns"], d["exposed_comm_ns"]) == (
        140_000,
        50_000,
        90_000,
    )
    assert d["overlap_share"] == 50 / 140
    per = {
        r["collective"]: (r["count"], r["total_ns"], r["exposed_ns"])
        for r in m.communication.collectives.iter_rows(named=True)
    }
    assert per == {"all_reduce": (1, 100_000, 50_000), "all_gather": (1, 40_000, 40_000)}


#: DeepEP's MoE all-to-all as DeepSeek's DualPipe trace names it, on its own stream.
_DISPATCH = "void dpsk::ep::internode::dispatch<false, 8, 6, 1, 14, 14, 2>(int4*, float*)"
_COMBINE = "void dpsk::ep::internode::combine<__nv_bfloat16, 8, 4, 12>(int4*, float*, bool*)"


def test_moe_all_to_all_on_its_own_stream_is_communication(tmp_path: Path) -> None:
    # µs: dispatch [1000,1200) under a GEMM [1100,1300); combine [1300,1400) alone
    events = [
        kernel(1000, 200, _DISPATCH, stream=30),
        kernel(1100, 200, "sm90_xmma_gemm_bf16bf16_bf16f32", stream=7),
        kernel(1300, 100, _COMBINE, stream=30),
    ]
    m = analyze(read(write_trace(tmp_path / "ep.json", events)))
    d = m.devices.summary.row(0, named=True)
    assert (d["comm_ns"], d["overlapped_comm_ns"], d["exposed_comm_ns"]) == (
        300_000,
        100_000,
        200_000,
    )
    per = m.communication.collectives.select("collective", "count", "total_ns", "exposed_ns").rows()
    assert per == [("all_to_all", 2, 300_000, 200_000)]
    classes = dict(m.kernels.classes.select("kernel_class", "total_ns").iter_rows())
    assert classes["comm"] == 300_000


def test_a_kernel_launched_by_a_collective_op_is_communication(tmp_path: Path) -> None:
    # a custom collective kernel whose name says nothing, launched by record_param_comms
    # (the c10d wrapper) under c10d::alltoall_base_; an elementwise kernel beside it is not
    events = [
        cpu_op(90, 30, "c10d::alltoall_base_", **{"External id": 50}),
        cpu_op(95, 20, "record_param_comms", **{"External id": 1, "Collective name": "all_to_all"}),
        launch(100, 2, corr=1),
        kernel(1000, 100, "void my_ep_exchange<float>(float*)", stream=30, corr=1),
        cpu_op(130, 10, "aten::add_", **{"External id": 2}),
        launch(132, 2, corr=2),
        kernel(1200, 50, "void at::native::vectorized_elementwise_kernel<4>(int)", corr=2),
    ]
    m = analyze(read(write_trace(tmp_path / "op.json", events)))
    d = m.devices.summary.row(0, named=True)
    assert (d["comm_ns"], d["exposed_comm_ns"]) == (100_000, 100_000)
    assert m.communication.collectives.select("collective", "count").rows() == [("all_to_all", 1)]


def test_no_comm_gives_null_overlap_share(tmp_path: Path) -> None:
    m = analyze(read(write_trace(tmp_path / "n.json", [kernel(10, 5, "k")])))
    d = m.devices.summary.row(0, named=True)
    assert (d["comm_ns"], d["overlap_share"]) == (0, None)


def test_rank_imbalance(tmp_path: Path) -> None:
    # rank 1 arrives last at both collectives: its kernels are the shortest
    for rank, (d1, d2) in enumerate([(100, 70), (40, 20)]):
        write_trace(
            tmp_path / "job" / f"rank{rank}.json",
            [
                kernel(
                    1000 + 500 * rank, d1, "ncclKernel_AllReduce_RING_LL_Sum_float", device=rank
                ),
                kernel(3000, d2, "ncclKernel_AllReduce_RING_LL_Sum_float", device=rank),
            ],
        )
    m = analyze(read(tmp_path / "job"))
    assert m.communication.rank_waits.select("rank", "collectives", "wait_ns").rows() == [
        (0, 2, 110_000),
        (1, 2, 0),
    ]
    assert m.slowest_rank == 1


def test_copies_by_direction_and_memory(tmp_path: Path) -> None:
    events = [
        gpu_op("gpu_memcpy", 10, 2, "Memcpy HtoD (Pageable -> Device)", bytes=4096),
        gpu_op("gpu_memcpy", 20, 1, "Memcpy DtoH (Device -> Pinned)", bytes=1000),
        gpu_op("gpu_memcpy", 30, 2, "Memcpy HtoD (Pageable -> Device)", bytes=4096),
    ]
    m = analyze(read(write_trace(tmp_path / "m.json", events)))
    rows = {
        (r["copy_kind"], r["src_memory"]): (r["count"], r["bytes"], r["time_ns"], r["gbps"])
        for r in m.copies.summary.iter_rows(named=True)
    }
    assert rows == {
        ("HtoD", "pageable"): (2, 8192, 4000, 2.048),
        ("DtoH", "device"): (1, 1000, 1000, 1.0),
    }


def test_timeline_bins_add_up(tmp_path: Path) -> None:
    m = analyze(read(write_trace(tmp_path / "t.json", CAUSES_TRACE)))
    b = m.idle.timeline_bins
    d = m.devices.summary.row(0, named=True)
    assert b.height == 240
    assert int(b["busy_ns"].sum()) + sum(
        int(b[f"{c}_ns"].sum()) for c in ("host_wait", "sync", "launch_overhead", "other")
    ) == pytest.approx(d["window_ns"], abs=240)
    assert int((b["end_ns"] - b["start_ns"]).sum()) == d["window_ns"]
    # the 280 µs host wait lies in the bins between kernels D and E
    wait = b.filter((pl.col("start_ns") >= 420_000) & (pl.col("end_ns") <= 700_000))
    assert wait["busy_ns"].sum() == 0 and wait["host_wait_ns"].sum() > 0


def test_sync_site_without_stacks_is_the_enclosing_user_range(tmp_path: Path) -> None:
    """No Python stacks and no operator around the sync: the innermost user range around it
    (DDP's `DistributedDataParallel.forward` record_function) names the call site; the step
    marker never does."""
    from traceanalyzer import api
    from traceanalyzer.rules.examples import HOST_PID, launch, launched, step, write_example

    def annotation(ts: float, dur: float, name: str) -> dict[str, object]:
        return {
            "ph": "X",
            "cat": "user_annotation",
            "name": name,
            "pid": HOST_PID,
            "tid": HOST_PID,
            "ts": ts,
            "dur": dur,
            "args": {},
        }

    events = []
    for i in range(3):
        t = 100 + 300 * i
        events += [
            step(i + 1, t, 300),
            annotation(t + 5, 200, "DistributedDataParallel.forward"),
            *launched(t + 10, t + 15, 100, 10 * i + 1, "gemm"),
            launch(t + 20, 100, 10 * i + 2, name="cudaStreamSynchronize"),
            *launched(t + 130, t + 135, 100, 10 * i + 3, "gemm"),
        ]
    rep = api.report(write_example(events, tmp_path, "ddp_sync")).to_json_dict()
    sites = {s["site"] for s in rep["idle"]["sync_sites"]}
    assert sites == {"DistributedDataParallel.forward"}


def test_the_profilers_closing_sync_is_not_the_loops(tmp_path: Path) -> None:
    """A cudaDeviceSynchronize after the last step under no operator (torch.profiler's own,
    as it stops) is not listed; a sync inside the steps without any stack or range is."""
    from traceanalyzer import api
    from traceanalyzer.rules.examples import launch, launched, step, write_example

    events = []
    for i in range(3):
        t = 100 + 300 * i
        events += [
            step(i + 1, t, 300),
            *launched(t + 10, t + 15, 100, 10 * i + 1, "gemm"),
            launch(t + 20, 100, 10 * i + 2, name="cudaStreamSynchronize"),
            *launched(t + 130, t + 135, 100, 10 * i + 3, "gemm"),
        ]
    events.append(launch(1100, 20, 99, name="cudaDeviceSynchronize"))
    rep = api.report(write_example(events, tmp_path, "closing")).to_json_dict()
    sites = [(s["name"], s["op"], s["site"], s["count"]) for s in rep["idle"]["sync_sites"]]
    assert sites == [("cudaStreamSynchronize", None, None, 3)]


#: A real trace with Python stacks and host syncs (TraceLens' OWLv2 inference on an H100).
_STACKS_TRACE = (
    Path("public")
    / "tracelens"
    / "h100_owlv2_inference"
    / "google_owlv2-large-patch14-ensemble__1016001.json.gz"
)


def test_sync_sites_on_a_real_trace_with_stacks_match_a_plain_loop() -> None:
    """Each host sync call's site is the innermost user frame on its thread that encloses
    it (latest start, then earliest end, then the greater name), as a loop over every frame
    of the trace finds it."""
    root = corpus()
    if root is None or not (root / _STACKS_TRACE).is_file():
        pytest.skip("needs the shared corpus (TRACEANALYZER_CORPUS)")
    timeline = read(root / _STACKS_TRACE)
    syncs = idle.sync_calls(timeline).collect()
    markers = windows.step_markers(timeline, windows.default_step_pattern("chrome"))
    no_gaps = pl.LazyFrame(
        schema={"rank": pl.Int32, "sync_start_ns": pl.Int64, "sync_ns": pl.Int64}
    )
    got = idle.sync_sites(timeline, syncs.lazy(), markers, no_gaps).collect()
    calls = syncs.filter(pl.col("pid").is_not_null()).sort("rank", "start_ns")
    assert got.height == calls.height > 100

    frames = timeline.events.filter(pl.col("kind") == "python")
    thread = [frames[c].to_numpy() for c in ("rank", "pid", "tid")]
    f_start, f_end = frames["start_ns"].to_numpy(), frames["end_ns"].to_numpy()
    names = frames["name"].cast(pl.String).to_list()
    user = np.array(
        [
            re.search(idle._USER_FRAME, n) is not None and re.search(idle._LIBRARY_FRAME, n) is None
            for n in names
        ]
    )
    expected: Counter[tuple[Any, ...]] = Counter()
    for call in calls.iter_rows(named=True):
        around = np.flatnonzero(
            user
            & (thread[0] == call["rank"])
            & (thread[1] == call["pid"])
            & (thread[2] == call["tid"])
            & (f_start <= call["start_ns"])
            & (f_end >= call["end_ns"])
        )
        if around.size:  # without a frame the tool names the enclosing user range, if any
            innermost = max(around, key=lambda i: (f_start[i], -f_end[i], names[i]))
            expected[(call["rank"], call["start_ns"], call["name"], names[innermost])] += 1
    assert expected.total() > 100
    named = Counter(got.select("rank", "start_ns", "name", "site").iter_rows())
    assert expected <= named
