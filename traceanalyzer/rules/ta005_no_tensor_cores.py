"""TA005: GEMM-class time that does not run on Tensor Cores."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from traceanalyzer.analyses.gpu.gemm_units import non_tc_kernels
from traceanalyzer.analyses.gpu.shapes import has_misaligned
from traceanalyzer.rules import advice as advise
from traceanalyzer.rules.base import Context, Finding, Rule, Scope, Severity
from traceanalyzer.rules.examples import Event, launched, step

_SGEMM = "volta_sgemm_128x64_nn"
_TC_GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_nn_n_tilesize128x128x64_warpgroupsize1x1x1"
_ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::add_kernel>"


class NoTensorCores(Rule):
    """Matrix multiplies run on the slow path: GEMM time off the Tensor Cores.

    ## What it detects
    The share of GEMM-class time (matrix multiply, convolution, attention) whose kernels the
    Tensor Core analysis judged not to run on Tensor Cores (time it could not decide is left
    out), where GEMMs are a meaningful share of kernel time. The evidence names the kernels
    and why they were judged so: SIMT names (`volta_sgemm_*`, `implicit_convolve_sgemm`,
    `*_scudnn_*`, `ffma`, legacy cuDNN engines), or an FP32 launching operator with no TF32
    token in the kernel name. FP32 without TF32 is the usual cause; 16-bit GEMMs that still
    miss the Tensor Cores usually have odd dimensions (see TA006). That verdict is an
    estimate from names and dtypes; where the trace is an Nsight Systems export with GPU
    metrics, the tensor pipes' activity the counters measured inside those kernels says
    whether it holds (`evidence.tensor_active_measured_share`, `tensor_active_source`): at
    `max_measured_tensor_active_share` or more, the kernels use the Tensor Cores after all
    and the finding is an info.

    ## Why it matters
    Tensor Cores deliver 8–16x the FP32 SIMT throughput (an H100 does ~67 TFLOP/s FP32 and
    ~990 TFLOP/s dense BF16). A model whose GEMMs run in FP32 on SIMT units leaves most of the
    GPU unused, however busy it looks.

    ## How to fix
    Train under `torch.autocast(device_type="cuda", dtype=torch.bfloat16)` (or float16 with
    a GradScaler before Ampere); for FP32 models allow TF32:
    `torch.backends.cuda.matmul.allow_tf32 = True`, `torch.backends.cudnn.allow_tf32 = True`
    or `torch.set_float32_matmul_precision("high")`. Pad GEMM dimensions to multiples of 8
    (16-bit) or 16 (8-bit). GPUs before Volta have no Tensor Cores.

    ## Known false positives
    Some small or oddly shaped GEMMs run on SIMT kernels by the library's choice, and FP64
    work never uses them on consumer GPUs. Kernel names are evidence, not proof: a library
    may name a Tensor Core kernel in a way the table does not know.

    ## Impact estimate
    The off-Tensor-Core GEMMs made `TC_SPEEDUP` (3x) faster: measured on an H100, the same
    FP32 model steps in 96 ms without TF32 and 29 ms with it. From the critical path's
    `gemm_2x` what-if (GEMM-class kernels twice as fast) scaled by the share of GEMM time
    off the Tensor Cores and from 2x to 3x, and never more than that share of the path's
    GEMM time times (1 - 1/3); without a critical path, that share of the GEMM time.
    """

    code = "TA005"
    slug = "no-tensor-cores"
    title = "GEMMs not on Tensor Cores"
    category = "no_tensor_cores"
    advice_neutral = (
        "Run the matrix products on Tensor Cores: FP16/BF16 inputs, or TF32 for FP32 (cuBLAS: "
        "cublasGemmEx / cublasLtMatmul with CUBLAS_COMPUTE_32F_FAST_TF32 or a 16-bit type), "
        "dimensions multiples of 8."
    )
    claims = "gemm_kernels"
    default_severity = Severity.WARNING
    advice = (
        "Use bf16 autocast, or allow TF32 for FP32 matmuls "
        '(torch.set_float32_matmul_precision("high"), torch.backends.cudnn.allow_tf32); '
        "pad GEMM dims to multiples of 8."
    )

    @dataclass(frozen=True, slots=True)
    class Thresholds:
        min_non_tc_share: float = field(
            default=0.30,
            metadata={"help": "GEMM time off Tensor Cores, as a share of GEMM time, to trigger"},
        )
        min_gemm_share: float = field(
            default=0.10,
            metadata={"help": "GEMM time as a share of kernel time for GEMMs to matter"},
        )
        top_kernels: int = field(default=3, metadata={"help": "kernels listed as evidence"})
        max_measured_tensor_active_share: float = field(
            default=0.2,
            metadata={
                "help": "tensor pipes active, measured by GPU metrics inside the kernels judged "
                "off the Tensor Cores, at which they are taken to use them (an info)"
            },
        )

    # the host queues the step's work in 20 µs; the GPU then runs it back to back
    example_bad: ClassVar[list[Event]] = [
        step(1, 100, 20),
        *launched(105, 110, 300, 1, _SGEMM),
        *launched(110, 410, 50, 2, _ADD),
    ]
    example_good: ClassVar[list[Event]] = [
        step(1, 100, 20),
        *launched(105, 110, 300, 1, _TC_GEMM),
        *launched(110, 410, 50, 2, _ADD),
    ]

    def check(self, ctx: Context, t: Thresholds) -> Iterable[Finding]:
        for d in ctx.metrics.tensor_core_model:
            gemm, kernel, off = d.gemm_ns, d.kernel_ns, d.non_tc_ns
            if not gemm or not kernel or gemm / kernel < t.min_gemm_share:
                continue
            if off <= 0 or off / gemm < t.min_non_tc_share:
                continue
            rank, device = d.rank, d.device
            kernels = non_tc_kernels(
                ctx.metrics.gemm_units.off_tensor_cores, rank, device, t.top_kernels
            )
            fp32 = any(
                k["op_dtype"] == "fp32" or "sgemm" in k["name"].lower() or "scudnn" in k["evidence"]
                for k in kernels
            )
            half = any(k["op_dtype"] == "half" for k in kernels)
            odd = has_misaligned(ctx.metrics.shapes.matmuls, rank, device)
            why = "; ".join(f"{_short(k['name'])} ({k['evidence']})" for k in kernels)
            inside = ctx.metrics.gpu_metrics.of_class(rank, device, "gemm_off_tensor_cores")
            measured = inside["tensor_active_share"] if inside else None
            contradicted = measured is not None and measured >= t.max_measured_tensor_active_share
            yield self.finding(
                ctx,
                f"rank {rank} GPU {device}: {off / gemm:.0%} of GEMM time ({off / 1e6:.2f} ms) "
                f"is off the Tensor Cores; GEMMs are {gemm / kernel:.0%} of kernel time"
                + (f"; e.g. {why}" if why else "")
                + ("; misaligned shapes, see TA006" if odd else "")
                + _measured_words(measured, inside, contradicted),
                {
                    "gemm_ns": gemm,
                    "tc_ns": d.tc_ns,
                    "unknown_ns": d.unknown_ns,
                    "non_tc_ns": off,
                    "non_tc_share_of_gemm": off / gemm,
                    "gemm_share_of_kernel": gemm / kernel,
                    "kernels": kernels,
                    "fp32_without_tf32": fp32,
                    "half_precision_off_tc": half,
                    "odd_shapes": odd,
                    "threshold_share": t.min_non_tc_share,
                    "tensor_active_measured_share": measured,
                    "tensor_active_measured_samples": inside["samples"] if inside else None,
                    "tensor_active_source": "measured" if measured is not None else "estimated",
                },
                Scope(rank, device),
                d.impact_ns,
                _advice(fp32, half, odd, advise.arch(ctx, rank, device)),
                severity=Severity.INFO if contradicted else None,
                ceiling_ns=d.ceiling_ns,
            )


def _measured_words(
    measured: float | None, inside: dict[str, Any] | None, contradicted: bool
) -> str:
    """What the GPU's counters measured inside the kernels judged off the Tensor Cores."""
    if measured is None or inside is None:
        return ""
    if contradicted:
        return (
            f"; but the GPU's counters measured the tensor pipes {measured:.0%} active inside "
            f"these kernels ({inside['samples']} samples): they use the Tensor Cores after "
            "all (a kernel name the table misjudges); the verdict above is estimated from "
            "names and dtypes"
        )
    return (
        f"; measured by the GPU's counters: tensor pipes {measured:.0%} active inside these "
        f"kernels ({inside['samples']} samples)"
    )


def _short(name: str, width: int = 48) -> str:
    return name if len(name) <= width else name[: width - 1] + "…"


def _advice(fp32: bool, half: bool, odd: bool, arch: str | None = None) -> str | None:
    if half and odd and not fp32:
        return (
            "The GEMMs are 16-bit but miss the Tensor Cores: pad their dimensions to "
            "multiples of 8 (see TA006)."
        )
    if fp32 and arch == "volta_turing":
        return (
            "The GEMMs run in FP32 on SIMT units, and this GPU (Volta/Turing) has no bf16 or "
            'TF32: use fp16 autocast (torch.autocast("cuda", dtype=torch.float16)) with a '
            "torch.amp.GradScaler."
        )
    if fp32:
        return (
            "The GEMMs run in FP32 on SIMT units: use bf16 autocast, or allow TF32 "
            '(torch.set_float32_matmul_precision("high"), torch.backends.cudnn.allow_tf32 = '
            "True)."
        )
    return None
