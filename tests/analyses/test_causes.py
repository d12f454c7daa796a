"""The causes room: the signatures' spellings, the host work's GPU idle on a trace whose
numbers are worked out by hand, and the real traces against plain loops over their events."""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import orjson
import pytest

from tests.builders import cpu_op, gpu_op, kernel, launch, step
from tests.conftest import REPO
from traceanalyzer import api
from traceanalyzer.analyses.causes import signatures as sig
from traceanalyzer.analyses.causes import step_kinds
from traceanalyzer.rules.examples import memory, write_example

GPU = REPO / "tests" / "data" / "gpu"


@pytest.mark.parametrize(
    ("pattern", "name", "matches"),
    [
        (sig.COMPILE_WORK, "_compile.compile_inner (dynamo_timed)", True),
        (sig.COMPILE_WORK, "inductor_compile", True),
        (sig.COMPILE_WORK, "fx_codegen_and_compile", True),
        (sig.COMPILE_WORK, "entire_frame_compile", True),
        (sig.COMPILE_WORK, "async_compile.wait", True),
        (sig.COMPILE_WORK, "bytecode_tracing", True),
        (sig.COMPILE_WORK, "CachingAutotuner.benchmark_all_configs", True),
        (sig.COMPILE_WORK, "Torch-Compiled Region: 0/7", False),
        (sig.COMPILE_WORK, "TorchDynamo Cache Lookup", False),
        (sig.COMPILE_WORK, "## Call CompiledFxGraph fxyz ##", False),
        (sig.COMPILE_WORK, "CompiledFunction", False),
        (sig.COMPILE_WORK, "aten::mm", False),
        (sig.ALLOCATOR_CALLS, "cudaMalloc", True),
        (sig.ALLOCATOR_CALLS, "cudaFree", True),
        (sig.ALLOCATOR_CALLS, "cuMemAlloc_v2", True),
        (sig.ALLOCATOR_CALLS, "hipFree", True),
        (sig.ALLOCATOR_CALLS, "cuMemMap", True),
        (sig.ALLOCATOR_CALLS, "cudaMallocHost", False),
        (sig.ALLOCATOR_CALLS, "cudaFreeHost", False),
        (sig.ALLOCATOR_CALLS, "cudaMallocAsync", False),
        (sig.ALLOCATOR_SYNCS, "cudaFree", True),
        (sig.ALLOCATOR_SYNCS, "cudaMalloc", False),
        (sig.LAYOUT_KERNEL, "void cudnn::engines_precompiled::nchwToNhwcKernel<float>", True),
        (sig.LAYOUT_KERNEL, "void cudnn::ops::nhwcToNchwKernel<__half, __half>", True),
        (sig.LAYOUT_KERNEL, "void cudnn::cnn::convertTensor_kernel<float>", True),
        (sig.LAYOUT_KERNEL, "batched_transpose_32x16_half", True),
        (sig.LAYOUT_KERNEL, "sm90_xmma_fprop_implicit_gemm_bf16bf16_nhwckrsc_nhwc", False),
        (sig.COMPILED_REGION, "Torch-Compiled Region: 0/7", True),
        (sig.COMPILED_REGION, "Torch-Compiled Region: 12/0", True),
        (sig.ANOMALY_CHECK, "aten::isnan", True),
        (sig.ANOMALY_CHECK, "aten::_is_any_true", True),
        (sig.ANOMALY_CHECK, "aten::_local_scalar_dense", True),
        (sig.ANOMALY_CHECK, "aten::isnan_", False),
    ],
)
def test_signature_spellings(pattern: str, name: str, matches: bool) -> None:
    assert bool(re.search(pattern, name)) is matches


def _metrics(tmp_path: Path, events: list[dict[str, object]]) -> api.Analysis:
    return api.analyze_path(write_example(events, tmp_path, "t"))


def test_allocator_idle_worked_by_hand(tmp_path: Path) -> None:
    """Two identical steps of 1000 µs. In each: a kernel 10-100 µs in; a cudaMalloc at
    200-300 µs while the GPU idles (100 µs explained); a kernel 400-550 µs; a cudaFree at
    500-700 µs that waits for it (the GPU goes idle at 550, 50 µs after the call began: the
    host was 50 µs ahead), returns at 700, and the next kernel starts at 720: 150 µs inside the
    call plus a refill of 20 µs (under max(50 µs ahead, the 50 µs launch-gap limit)). 270 µs
    of idle explained per step, of 4 calls (2 per step)."""
    events: list[dict[str, object]] = []
    for n, t0 in ((1, 1000), (2, 2000)):
        c = 10 * n
        events += [
            step(n, t0, 1000),
            launch(t0 + 5, 2, c),
            kernel(t0 + 10, 90, "gemm", corr=c),
            launch(t0 + 200, 100, c + 1, name="cudaMalloc"),
            launch(t0 + 390, 2, c + 2),
            kernel(t0 + 400, 150, "gemm", corr=c + 2),
            launch(t0 + 500, 200, c + 3, name="cudaFree"),
            launch(t0 + 705, 2, c + 4),
            kernel(t0 + 720, 200, "gemm", corr=c + 4),
        ]
    m = _metrics(tmp_path, events).metrics
    row = m.causes.host.to_dicts()
    assert len(row) == 1
    assert row[0]["cause"] == "allocator"
    assert (row[0]["calls"], row[0]["steps"], row[0]["steps_with"]) == (4, 2, 2)
    assert row[0]["host_ns"] == 2 * 300_000
    assert row[0]["idle_ns"] == 2 * 270_000
    (model,) = m.cause_model
    assert model.explained_ns == 270_000
    assert model.impact_ns == min(270_000, model.ceiling_ns or 0)


def test_anomaly_checks_only_under_backward_functions(tmp_path: Path) -> None:
    """An `item` in the forward is no anomaly check; the same ops under a backward function
    with an `isnan` are, and one without `isnan` is not."""
    events = [
        step(1, 100, 900),
        cpu_op(110, 50, "aten::item"),
        cpu_op(200, 100, "autograd::engine::evaluate_function: MmBackward0"),
        cpu_op(210, 10, "aten::isnan"),
        cpu_op(230, 10, "aten::_is_any_true"),
        cpu_op(250, 40, "aten::item"),
        cpu_op(400, 100, "autograd::engine::evaluate_function: AddBackward0"),
        cpu_op(450, 40, "aten::item"),
        launch(120, 2, 1),
        kernel(125, 500, "gemm", corr=1),
    ]
    m = _metrics(tmp_path, events).metrics
    names = m.causes.names.to_dicts()
    assert {(n["name"], n["parent"], n["count"]) for n in names} == {
        ("aten::isnan", "MmBackward0", 1),
        ("aten::_is_any_true", "MmBackward0", 1),
        ("aten::item", "MmBackward0", 1),
    }


def test_compiled_regions_count_recompiles(tmp_path: Path) -> None:
    """Frame 0 runs graph 0/3 in step 1, 0/4 and 0/5 in steps 2 and 3 (recompiles: ids above
    0); frame 1 (a graph break) runs 1/0 every step (its first graph, compiled before the
    trace began: not a recompile)."""
    events: list[dict[str, object]] = []
    for n, g in ((1, 3), (2, 4), (3, 5)):
        t0 = n * 1000
        events += [
            step(n, t0, 1000),
            cpu_op(t0 + 10, 100, f"Torch-Compiled Region: 0/{g}"),
            cpu_op(t0 + 200, 100, "Torch-Compiled Region: 1/0"),
            launch(t0 + 20, 2, n),
            kernel(t0 + 30, 800, "triton_poi_fused_0", corr=n),
        ]
    m = _metrics(tmp_path, events).metrics
    (row,) = m.causes.regions.to_dicts()
    assert row["frames"] == 2
    assert row["graphs"] == 4
    assert row["new_graphs"] == 3
    assert row["steps_with_new"] == 3
    assert row["last_graph"] == "1/0"


def _events(path: Path) -> list[dict[str, object]]:
    return orjson.loads(gzip.open(path).read())["traceEvents"]  # type: ignore[no-any-return]


def test_allocator_calls_on_a_real_trace_match_a_loop() -> None:
    """cold_start (every step kept): the allocator calls inside the steady steps, counted and
    summed by a plain loop over the trace's events."""
    path = GPU / "cold_start.json.gz"
    a = api.analyze_path(path, all_steps=True)
    events = _events(path)
    steps = [
        (e["ts"], e["ts"] + e["dur"])
        for e in events
        if e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith("ProfilerStep#")
    ]
    count: dict[str, int] = {}
    total: dict[str, int] = {}
    for e in events:
        name = str(e.get("name", ""))
        if e.get("cat") != "cuda_runtime" or name not in ("cudaMalloc", "cudaFree"):
            continue
        if any(lo <= e["ts"] < hi for lo, hi in steps):  # type: ignore[operator]
            count[name] = count.get(name, 0) + 1
            total[name] = total.get(name, 0) + round(e["dur"] * 1000)  # type: ignore[operator]
    names = {n["name"]: n for n in a.metrics.causes.names.to_dicts()}
    assert count and {k: names[k]["count"] for k in count} == count
    for k, v in total.items():
        assert abs(names[k]["total_ns"] - v) <= count[k]  # rounding, at most 1 ns a call


def test_layout_transposes_on_a_real_trace_match_a_loop() -> None:
    """conv_train (NCHW under bf16 autocast): the transposes cuDNN launched for convolutions,
    counted and timed by a loop over the kernels of the steady steps' GPU work."""
    path = GPU / "conv_train.json.gz"
    a = api.analyze_path(path)
    (row,) = a.metrics.causes.layout.to_dicts()
    events = _events(path)
    window = a.metrics.steps.windows.to_dicts()[0]
    lo, hi = window["start_ns"], window["end_ns"]
    n = t = 0
    for e in events:
        if e.get("cat") != "kernel" or not re.search(sig.LAYOUT_KERNEL, str(e["name"])):
            continue
        s = round(e["ts"] * 1000)  # type: ignore[operator]
        end = s + round(e["dur"] * 1000)  # type: ignore[operator]
        if end > lo and s < hi:
            n += 1
            t += min(end, hi) - max(s, lo)
    assert (row["count"], row["transpose_ns"]) == (n, pytest.approx(t, abs=n))
    assert row["depthwise_ns"] > 0  # its depthwise convolutions: no channels-last advice


@pytest.mark.parametrize(
    ("times", "expected"),
    [
        ([58, 26, 58, 26, 58, 26], ("periodic", 2, [0, 2, 4])),
        ([26, 58, 26, 58], ("periodic", 2, [1, 3])),
        ([20, 20, 50, 20, 20, 50], ("periodic", 3, [2, 5])),
        ([29, 29, 18, 18, 29, 29, 18, 18], ("periodic", 4, [0, 1, 4, 5])),
        # one cycle of three is not seen twice: no period assumed
        ([20, 20, 50, 20, 20], ("outliers", None, [2])),
        ([29, 29, 18, 18], ("trend: warm-up", None, [0, 1])),
        ([18, 18, 18, 29, 29], ("trend: slowing", None, [3, 4])),
        ([20, 21, 20, 22, 21, 20], None),  # one kind: jumps under 25 %
        ([20, 50, 50, 20, 50, 20, 20, 50], ("irregular", None, [1, 2, 4, 7])),
        ([30, 20, 20], None),  # too few steps
    ],
)
def test_step_kinds(times: list[int], expected: tuple[str, int | None, list[int]] | None) -> None:
    assert step_kinds.kinds_of(times) == expected


def test_slow_steps_name_what_they_run(tmp_path: Path) -> None:
    """Every 2nd of 7 steps also runs `log_metrics` (a 2 ms host range): two kinds, period 2,
    and the extra work named with its count and time per slow step."""
    from traceanalyzer.rules.ta018_uneven_steps import UnevenSteps

    m = _metrics(tmp_path, UnevenSteps.example_bad).metrics
    (row,) = m.causes.step_kinds.to_dicts()
    assert (row["pattern"], row["period"], row["slow_steps"]) == ("periodic", 2, [2, 4, 6])
    assert row["slow_ns"] - row["fast_ns"] == pytest.approx(2_000_000, rel=0.05)
    assert row["extra_ns"] == (row["slow_ns"] - row["fast_ns"]) * 3 // 7
    (work,) = m.causes.slow_work.to_dicts()
    assert (work["name"], work["extra_calls"], work["extra_ns"]) == ("log_metrics", 1.0, 2_000_000)


def test_zero_grad_fills_only_inside_zero_grad(tmp_path: Path) -> None:
    """zero_ inside Optimizer.zero_grad is a fill; the same op elsewhere (a buffer reset) is
    not; each fill's kernel is counted as the fills'."""
    events = [
        step(1, 100, 1000),
        cpu_op(110, 50, "aten::zero_"),
        launch(120, 2, 1),
        kernel(125, 20, "fill", corr=1),
        cpu_op(300, 400, "Optimizer.zero_grad#AdamW.zero_grad"),
        cpu_op(310, 50, "aten::zero_"),
        launch(320, 2, 2),
        kernel(330, 10, "fill", corr=2),
        cpu_op(400, 50, "aten::zero_"),
        launch(410, 2, 3),
        kernel(420, 10, "fill", corr=3),
        launch(800, 2, 4),
        kernel(805, 100, "gemm", corr=4),
    ]
    m = _metrics(tmp_path, events).metrics
    (fill,) = [r for r in m.causes.host.to_dicts() if r["cause"] == "zero_grad_fill"]
    assert (fill["calls"], fill["host_ns"]) == (2, 100_000)
    (k,) = m.causes.zero_fill.to_dicts()
    assert (k["kernels"], k["kernel_ns"]) == (2, 20_000)


def _built_step(t: int, n: int) -> list[dict[str, object]]:
    """A step of 1000 µs at `t`: a kernel 0-50 µs in, an unrelated operator ending 10 µs in,
    a list turned into a tensor (aten::empty at 200, lift_fresh ending at 402), a pageable
    copy (aten::copy_ 410-470, its memcpy 420-425) and the next kernel at 490-900."""
    return [
        step(n, t, 1000),
        launch(t + 1, 2, 10 * n),
        kernel(t, 50, "k", corr=10 * n),
        cpu_op(t + 5, 5, "aten::mul"),
        cpu_op(t + 200, 5, "aten::empty"),
        cpu_op(t + 400, 2, "aten::lift_fresh"),
        cpu_op(t + 410, 60, "aten::copy_"),
        launch(t + 415, 50, 10 * n + 1, name="cudaMemcpyAsync"),
        gpu_op("gpu_memcpy", t + 420, 5, "Memcpy HtoD (Pageable -> Device)", corr=10 * n + 1),
        launch(t + 480, 2, 10 * n + 2),
        kernel(t + 490, 410, "gemm", corr=10 * n + 2),
    ]


def test_host_built_batch_worked_by_hand(tmp_path: Path) -> None:
    """Per step: the constructor holds the host from the mul's end (10 µs) to lift_fresh's
    end (402): 392 µs; the copy 60 µs. GPU idle 50-420: 352 µs under the constructor, 10
    under the copy; idle 425-490: the copy (a sync) returned at 470, 45 µs under it and the
    20 µs refill to 490: 65. 427 µs per step. A step that only builds a scalar, or only
    copies, holds no batch."""
    events = [*_built_step(100, 1), *_built_step(1100, 2)]
    only_copy = [e for e in _built_step(2100, 3) if e.get("name") != "aten::lift_fresh"]
    m = _metrics(tmp_path, [*events, *only_copy]).metrics
    (row,) = [r for r in m.causes.host.to_dicts() if r["cause"] == "host_batch"]
    assert (row["steps"], row["steps_with"], row["calls"]) == (3, 2, 4)
    assert row["host_ns"] == 2 * (392_000 + 60_000)
    assert row["idle_ns"] == 2 * 427_000


def test_host_built_batch_on_a_real_trace_matches_a_loop() -> None:
    """host_tensor_every_step: per steady step, the lift_fresh operators (one per tensor
    built from a list) and the aten::copy_ operators that launched a pageable host-to-device
    memcpy, counted by a plain loop over the trace's events."""
    path = GPU / "host_tensor_every_step.json.gz"
    a = api.analyze_path(path)
    events = _events(path)
    steady = sorted(
        (e["ts"], e["ts"] + e["dur"])
        for e in events
        if e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith("ProfilerStep#")
    )  # four steps, all steady (the tool keeps every one: 4 of 4)
    corr = {
        e["args"]["correlation"]
        for e in events
        if e.get("cat") == "gpu_memcpy" and "HtoD (Pageable" in str(e.get("name"))
    }
    launches = [
        e["ts"]
        for e in events
        if e.get("cat") == "cuda_runtime" and e.get("args", {}).get("correlation") in corr
    ]
    lifts = copies = 0
    for e in events:
        if e.get("cat") != "cpu_op" or not any(lo <= e["ts"] < hi for lo, hi in steady):
            continue
        if e["name"] == "aten::lift_fresh":
            lifts += 1
        elif e["name"] == "aten::copy_" and any(
            e["ts"] <= t <= e["ts"] + e["dur"] for t in launches
        ):
            copies += 1
    names = {
        n["name"]: n["count"]
        for n in a.metrics.causes.names.to_dicts()
        if n["cause"] == "host_batch"
    }
    (row,) = [r for r in a.metrics.causes.host.to_dicts() if r["cause"] == "host_batch"]
    assert row["steps"] == row["steps_with"] == len(steady) == 4
    assert (lifts, copies) == (8, 8)
    assert names == {
        "torch.tensor(<Python data>)": lifts,
        "aten::copy_ (host-to-device, pageable)": copies,
    }


def _churn_step(t: int, n: int, reserved: tuple[int, int, int]) -> list[dict[str, object]]:
    """A step of 1000 µs with a cudaMalloc and a cudaFree, and memory events whose reserved
    totals are `reserved` (GiB) at 100, 400 and 900 µs; 1 GiB allocated at the peak."""
    gib = 2**30
    return [
        step(n, t, 1000),
        launch(t + 10, 100, 10 * n, name="cudaMalloc"),
        launch(t + 120, 2, 10 * n + 1),
        kernel(t + 130, 300, "gemm", corr=10 * n + 1),
        launch(t + 600, 200, 10 * n + 2, name="cudaFree"),
        launch(t + 810, 2, 10 * n + 3),
        kernel(t + 820, 100, "gemm", corr=10 * n + 3),
        memory(t + 100, gib // 2, total_reserved=reserved[0] * gib),
        memory(t + 400, gib, total_reserved=reserved[1] * gib),
        memory(t + 900, gib // 4, total_reserved=reserved[2] * gib),
    ]


@pytest.mark.parametrize(
    ("reserved", "said"),
    [
        ((3, 3, 1), "falls by 2.00 GiB and climbs back in 3 of 3 steps"),  # emptied
        ((3, 3, 3), "3.00 GiB reserved against 1.00 GiB allocated"),  # fragmented
        ((1, 1, 1), None),  # a pool that fits
    ],
)
def test_allocator_churn_reads_the_reserved_memory(
    tmp_path: Path, reserved: tuple[int, int, int], said: str | None
) -> None:
    """TA015 on memory events: reserved memory given back every step reads as an emptied
    pool; reserved three times allocated as a fragmented one, with expandable segments
    advised first; and neither where reserved stays at allocated."""
    events = [e for n in range(3) for e in _churn_step(100 + 1000 * n, n + 1, reserved)]
    doc = api.report(write_example(events, tmp_path, "t")).to_json_dict()
    (f,) = [d for d in doc["diagnoses"] if d["rule"] == "TA015"]
    pool = f["evidence"]["reserved"]
    assert pool["steps"] == 3 and pool["allocated_peak_bytes"] == 2**30
    if said is None:
        assert not pool["emptied"] and not pool["fragmented"]
        assert "GiB" not in f["message"]
    else:
        assert said in f["message"], f["message"]
    assert f["advice"].startswith("The pool is fragmented") == (reserved == (3, 3, 3))


def test_library_setup_outermost_and_syncing(tmp_path: Path) -> None:
    """Per step: an aten::_convolution (1.5 ms) around an aten::cudnn_convolution that
    synchronises (autotuning): one call, syncing; a 0.2 ms cuDNN call without a sync: none;
    a 2 ms cuDNN attention call: one call, not syncing."""
    events: list[dict[str, object]] = []
    for n, t in enumerate((100, 10_100), start=1):
        events += [
            step(n, t, 10_000),
            cpu_op(t + 10, 1500, "aten::_convolution"),
            cpu_op(t + 20, 1400, "aten::cudnn_convolution"),
            launch(t + 30, 2, 100 * n),
            kernel(t + 40, 100, "candidate", corr=100 * n),
            launch(t + 200, 500, 100 * n + 1, name="cudaDeviceSynchronize"),
            cpu_op(t + 2000, 200, "aten::cudnn_convolution"),
            cpu_op(t + 3000, 2000, "aten::_cudnn_attention_forward"),
            launch(t + 6000, 2, 100 * n + 2),
            kernel(t + 6010, 3000, "gemm", corr=100 * n + 2),
        ]
    m = _metrics(tmp_path, events).metrics
    (row,) = [r for r in m.causes.host.to_dicts() if r["cause"] == "library_setup"]
    assert (row["calls"], row["syncing_calls"]) == (4, 2)
    assert row["host_ns"] == 2 * (1_500_000 + 2_000_000)
    names = {n["name"] for n in m.causes.names.to_dicts() if n["cause"] == "library_setup"}
    assert names == {"aten::_convolution", "aten::_cudnn_attention_forward"}


def test_interval_minus_worked_by_hand() -> None:
    """[0, 40) and [50, 100) less [10, 20), [30, 55), [60, 70): [0, 10), [20, 30),
    [55, 60), [70, 100); another group untouched."""
    import polars as pl

    from traceanalyzer.analyses.timeline.intervals import minus

    a = pl.LazyFrame({"g": [1, 1, 2], "start_ns": [0, 50, 0], "end_ns": [40, 100, 10]})
    b = pl.LazyFrame({"g": [1, 1, 1], "start_ns": [10, 30, 60], "end_ns": [20, 55, 70]})
    got = minus(a, b, ["g"]).collect().rows()
    assert got == [(1, 0, 10), (1, 20, 30), (1, 55, 60), (1, 70, 100), (2, 0, 10)]
