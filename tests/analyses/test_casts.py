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


def test_gradient_accumulation_repeats_the_casts_not_the_master_copy(tmp_path: Path) -> None:
    s = _sources(tmp_path, 3)
    assert s.pass_count == 3
    assert s.weights_ns == 3 * 18_000 and s.activations_ns == 3 * 9_000
    assert s.master_copy_ns == 16_000
    assert s.bf16_params_ns == 3 * 27_000 - 16_000
