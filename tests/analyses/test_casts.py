"""Where copy/cast kernels come from (analyses/gpu/casts.py): each source on a hand-written
step, and the prices of the named fixes by a plain sum."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from traceanalyzer import api
from traceanalyzer.rules.examples import (
    Event,
    cpu_op,
    gpu_op,
    launch,
    launched,
    step,
    write_example,
)

CAST = "void at::native::vectorized_elementwise_kernel<8, at::native::bfloat16_copy_kernel_cuda>"
UPCAST = "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda>"
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32"
BF16, F32 = "c10::BFloat16", "float"
W, X = [4096, 1024], [512, 1024]


def _copy(ts: float, corr: int, dst: str, src: str, shape: list[int]) -> Event:
    return cpu_op(
        ts,
        3,
        "aten::copy_",
        **{
            "External id": corr,
            "Input Dims": [shape, shape, []],
            "Input type": [dst, src, "Scalar"],
        },
    )


def _cast(ts: float, corr: int, dst: str, src: str, shape: list[int], us: float) -> list[Event]:
    """An aten::copy_ at `ts` launching a `us` long cast kernel (kernels follow in order)."""
    name = CAST if dst == BF16 else UPCAST
    return [_copy(ts, corr, dst, src, shape), *launched(ts + 0.5, 1000 + corr * 10, us, corr, name)]


def _pass(t: float, corr: int) -> list[Event]:
    """One forward and backward pass: autocast casts weight W (8 µs) and activation X (4 µs)
    under aten::linear; backward casts their gradients back (10 µs, 5 µs)."""
    linear = {"Input Dims": [X, W, [4096]], "Input type": [F32, F32, F32]}
    return [
        cpu_op(t, 20, "aten::linear", **linear),
        *_cast(t + 1, corr, BF16, F32, W, 8),
        *_cast(t + 5, corr + 1, BF16, F32, X, 4),
        cpu_op(t + 30, 10, "ToCopyBackward0"),
        *_cast(t + 31, corr + 2, F32, BF16, W, 10),
        cpu_op(t + 40, 10, "ToCopyBackward0"),
        *_cast(t + 41, corr + 3, F32, BF16, X, 5),
    ]


def _step(passes: int) -> list[Event]:
    events: list[Event] = [step(1, 0, 400)]
    for i in range(passes):
        events += _pass(10 + 60 * i, 1 + 10 * i)
    logits = [512, 8192]
    events += [
        # the logits' .float() (3 µs) before cross_entropy_loss over [512, 8192]
        cpu_op(300, 4, "aten::to"),
        *_cast(300.5, 90, F32, BF16, logits, 3),
        cpu_op(306, 4, "aten::cross_entropy_loss", **{"Input Dims": [logits, [512]]}),
        # DDP's bucket copied back into a gradient (2 µs)
        cpu_op(320, 5, "torch.distributed.ddp.reducer::copy_bucket_to_grad"),
        *_cast(321, 91, F32, F32, W, 2),
        # and one as a device-to-device memcpy (4 µs)
        launch(324, 0.5, 94, "cudaMemcpyAsync"),
        gpu_op("gpu_memcpy", 1950, 4, "Memcpy DtoD (Device -> Device)", corr=94),
        # a layout copy (6 µs): other
        cpu_op(330, 5, "aten::clone"),
        *_cast(331, 92, BF16, BF16, X, 6),
        *launched(340, 2000, 60, 93, GEMM),
    ]
    return events


def _sources(tmp: Path, passes: int) -> Any:
    m = api.analyze(api.load(write_example(_step(passes), tmp, f"p{passes}")))
    return m.cast_sources


def test_each_source_by_its_operator(tmp_path: Path) -> None:
    s = _sources(tmp_path, 1)
    per = dict(zip(s.sources["source"], s.sources["per_step_ns"], strict=True))
    assert per == {
        "activation_cast": 9_000,
        "ddp_bucket_copy": 2_000,
        "logits_upcast": 3_000,
        "other": 6_000,
        "weight_cast": 8_000,
        "weight_grad_cast": 10_000,
    }
    assert s.pass_count == 1 and s.training and s.path_share == 1.0
    # bf16 parameters remove the weight, gradient and activation casts (27 µs) and add a
    # master copy of twice one pass's weight casts (16 µs)
    assert s.master_copy_ns == 16_000 and s.bf16_params_ns == 11_000
    # DDP's bucket copies: the copy kernel and the memcpy
    assert s.ddp_memcpy_ns == 4_000 and s.ddp_bucket_ns == 6_000
    assert s.logits_ns == 3_000 and s.other_ns == 6_000
    assert s.impact_ns == 20_000


def test_ddp_bucket_memcpys_priced_by_their_exposed_time(tmp_path: Path) -> None:
    """A bucket's memcpy (4 µs) of which 3 µs run beside an all-reduce kernel on another
    stream: only the 1 µs during which nothing else runs is priced."""
    nccl = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm *, unsigned long, ncclWork *)"
    events = [*_step(1), *launched(326, 1951, 10, 95, nccl, stream=20)]
    s = api.analyze(api.load(write_example(events, tmp_path, "nccl"))).cast_sources
    assert s.ddp_memcpy_ns == 1_000
    assert s.ddp_bucket_ns == 2_000 + 1_000  # the bucket's copy kernel and the exposed memcpy


def test_gradient_accumulation_repeats_the_casts_not_the_master_copy(tmp_path: Path) -> None:
    s = _sources(tmp_path, 3)
    assert s.pass_count == 3
    assert s.weights_ns == 3 * 18_000 and s.activations_ns == 3 * 9_000
    assert s.master_copy_ns == 16_000
    assert s.bf16_params_ns == 3 * 27_000 - 16_000


ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>"


def _op(
    ts: float, corr: int, name: str, types: list[str], kernel_ts: float, us: float
) -> list[Event]:
    """An operator at `ts` with inputs of `types`, launching a `us` long memory-bound kernel."""
    shapes = [[512, 1024] for _ in types]
    return [
        cpu_op(ts, 3, name, **{"External id": corr, "Input Dims": shapes, "Input type": types}),
        *launched(ts + 0.5, kernel_ts, us, corr, ADD),
    ]


def _fp32_step(weights: bool) -> list[Event]:
    """A step whose memory-bound kernels are: an fp32 residual add (7 µs) and an fp32 norm
    (3 µs), both halved by bf16 parameters; a bf16 add (5 µs), the loss's fp32 log_softmax
    (4 µs), the fused optimizer (6 µs) and an fp32 op inside Optimizer.step (2 µs), which
    stay as they are. With `weights`, autocast casts an fp32 weight (the regime priced)."""
    events: list[Event] = [step(1, 0, 400)]
    if weights:
        events += _pass(10, 1)
    events += [
        *_op(100, 50, "aten::add", [F32, BF16, "Scalar"], 1100, 7),
        *_op(110, 51, "aten::native_layer_norm", [F32, "", F32, F32], 1107, 3),
        *_op(120, 52, "aten::add", [BF16, BF16, "Scalar"], 1110, 5),
        *_op(130, 53, "aten::_log_softmax", [F32, "Int", "Bool"], 1115, 4),
        *_op(140, 54, "aten::_fused_adamw_", [F32, F32, F32], 1119, 6),
        {**cpu_op(150, 20, "Optimizer.step#AdamW.step"), "cat": "user_annotation"},
        *_op(155, 55, "aten::mul_", [F32, "Scalar"], 1125, 2),
    ]
    return events


def test_fp32_traffic_is_the_memory_bound_kernels_autocast_leaves_in_fp32(tmp_path: Path) -> None:
    """bf16 parameters halve the fp32 residual add and norm (10 µs); the bf16 add, the loss,
    the optimizer's kernels stay. The halving what-if on this serial stream saves half of
    every memory-bound kernel: scaled to the fp32 ones' share, 5 µs."""
    s = api.analyze(api.load(write_example(_fp32_step(True), tmp_path, "w"))).cast_sources
    assert s.fp32_traffic_ns == 10_000
    assert s.fp32_saving_ns == 5_000
    # the casts' price (27 µs of casts less the 16 µs master copy) plus the traffic's
    assert s.bf16_params_ns == 11_000 + 5_000
    # without autocast's weight casts the parameters are not fp32 under autocast: no price
    plain = api.analyze(api.load(write_example(_fp32_step(False), tmp_path, "p"))).cast_sources
    assert plain.fp32_traffic_ns == 0 and not plain.bf16_params_ns


def test_fp32_traffic_on_a_real_trace_by_a_plain_loop() -> None:
    """On the recorded GPT under autocast with fp32 parameters: the fp32 traffic per step is
    the memory-bound kernels, clipped to the steady window, whose launch's operator has a
    `float` first or second input, is no loss or multi-tensor optimizer op, and lies outside every
    Optimizer.step range, summed event by event."""
    import gzip
    import json
    import re

    import polars as pl

    from tests.conftest import REPO
    from traceanalyzer.analyses.gpu.classify import class_of

    path = REPO / "tests" / "data" / "gpu" / "casts_autocast_fp32.json.gz"
    m = api.analyze(api.load(path))
    (w0, w1) = m.steps.windows.select("start_ns", "end_ns").row(0)
    steps = m.steps.counts.on(0, 0)
    with gzip.open(path) as f:
        events = json.load(f)["traceEvents"]
    ns = lambda us: round(us * 1000)  # noqa: E731
    ops, launches, kernels, optimizer = {}, {}, [], []
    for e in events:
        cat, args = e.get("cat"), e.get("args", {})
        if cat == "cpu_op" and "External id" in args:
            ops.setdefault(args["External id"], e)
        elif cat in ("cuda_runtime", "cuda_driver") and "correlation" in args:
            launches[args["correlation"]] = e
        elif cat == "kernel":
            kernels.append(e)
        named = str(e.get("name", "")).startswith(("Optimizer.step#", "Optimizer.zero_grad#"))
        if named and cat in ("cpu_op", "user_annotation"):  # not the GPU's copy of the range
            optimizer.append((ns(e["ts"]), ns(e["ts"] + e["dur"])))
    names = pl.DataFrame({"name": [k["name"] for k in kernels]})
    memory_bound = names.select(class_of(pl.col("name")) == "memory_bound").to_series().to_list()
    keeps = re.compile(r"log_softmax|nll_loss|cross_entropy|^aten::_foreach_|^aten::_fused_")
    total = 0
    for k, mb in zip(kernels, memory_bound, strict=True):
        lo, hi = max(ns(k["ts"]), w0), min(ns(k["ts"] + k["dur"]), w1)
        launch = launches.get(k["args"].get("correlation"))
        if not mb or hi <= lo or launch is None:
            continue
        op = ops.get(launch["args"].get("External id"))
        t = ns(launch["ts"])
        if op is None or not ns(op["ts"]) <= t <= ns(op["ts"] + op["dur"]):
            continue
        if "float" not in op["args"].get("Input type", [])[:2] or keeps.search(op["name"]):
            continue
        if any(a <= t <= b for a, b in optimizer):
            continue
        total += hi - lo
    got = m.cast_sources.fp32_traffic_ns
    assert got > 0 and abs(got - total // steps) <= 1_000, (got, total // steps)
