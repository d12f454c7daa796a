"""TA006: matrix multiplies with dimensions Tensor Cores do not like."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import polars as pl

from traceanalyzer.rules.base import WARNING_SHARE, Context, Finding, Rule, Scope, Severity
from traceanalyzer.rules.examples import Event, cpu_op, launch, step

#: Dimensions at least this large are padded to a multiple of PAD_TO (GPT-2's vocabulary
#: 50257 -> 50304); smaller ones to the next multiple of their alignment.
PAD_LARGE_FROM = 1024
PAD_TO = 64
_GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64"


def _matmul(ts: float, corr: int, n: int, dur: float) -> list[Event]:
    """An `aten::mm` of x[4096, 1024] by W[1024, n] in bf16 and the GEMM kernel it launched."""
    return [
        cpu_op(
            ts,
            10,
            "aten::mm",
            **{
                "External id": corr,
                "Input Dims": [[4096, 1024], [1024, n]],
                "Input type": ["c10::BFloat16", "c10::BFloat16"],
            },
        ),
        launch(ts + 2, 5, corr),
        {
            "ph": "X",
            "cat": "kernel",
            "name": _GEMM,
            "pid": 0,
            "tid": 7,
            "ts": ts + 20,
            "dur": dur,
            "args": {"device": 0, "stream": 7, "correlation": corr},
        },
    ]


class OddShapes(Rule):
    """Matrix multiplies whose dimensions are not multiples of the Tensor Core tile.

    ## What it detects
    Matrix-multiply operators (`aten::mm`, `addmm`, `bmm`, `baddbmm`, `linear`) whose M, N
    or K is not a multiple of what their element type wants: 8 for 16-bit types, 16 for
    8-bit types, 4 for FP32/TF32, where those operators take a meaningful share of GEMM time.
    It needs the trace's recorded shapes (`record_shapes=True`). The evidence lists the
    shapes, the misaligned dimensions and a padded size (a multiple of 64, e.g. a vocabulary
    of 50257 padded to 50304).

    ## Why it matters
    cuBLAS runs Tensor Core kernels at full speed only when the dimensions are multiples of
    the tile; otherwise it picks slower kernels, pads internally or, on older libraries,
    falls back to SIMT. A vocabulary projection of 50257 can run markedly slower than the
    same projection padded to 50304, and it is often the largest GEMM of a language model.

    ## How to fix
    Pad the dimension: round the vocabulary up (`vocab_size=50304` and ignore the extra
    logits), make hidden and head sizes multiples of 64, and batch x sequence a multiple of
    8. Padding costs a few wasted rows; misalignment costs time on every call.

    ## Known false positives
    Small GEMMs where alignment hardly matters, and M dimensions set by the batch that vary
    step to step. FP32 GEMMs without TF32 run on SIMT units anyway (see TA005).

    ## Impact estimate
    None: the trace cannot tell how fast the padded GEMM would run. Without an impact, the
    finding is a warning when the misaligned GEMMs take at least 3 % of the device's kernel
    time, else info.
    """

    code = "TA006"
    slug = "odd-shapes"
    title = "GEMM dimensions not aligned for Tensor Cores"
    category = "odd_shapes"
    default_severity = Severity.WARNING
    advice = (
        "Pad GEMM dimensions to multiples of 8 (16-bit), 16 (8-bit) or 64 to be safe, e.g. a "
        "vocabulary of 50257 to 50304."
    )

    @dataclass(frozen=True, slots=True)
    class Thresholds:
        min_misaligned_share: float = field(
            default=0.05,
            metadata={"help": "misaligned GEMM time as a share of the device's GEMM time"},
        )
        top_shapes: int = field(default=3, metadata={"help": "shapes listed as evidence"})

    example_bad: ClassVar[list[Event]] = [
        step(1, 100, 500),
        *_matmul(105, 1, 50257, 300),  # a GPT-2 vocabulary projection
    ]
    example_good: ClassVar[list[Event]] = [
        step(1, 100, 500),
        *_matmul(105, 1, 50304, 300),
    ]

    def check(self, ctx: Context, t: Thresholds) -> Iterable[Finding]:
        shapes = ctx.metrics.matmul_shapes.filter(pl.col("misaligned").is_not_null())
        for d in ctx.devices():
            rank, device = d["rank"], d["device"]
            mine = shapes.filter((pl.col("rank") == rank) & (pl.col("device") == device))
            gemm = d["gemm_ns"] or 0
            odd = int(mine["kernel_ns"].sum() or 0)
            if not gemm or not odd or odd / gemm < t.min_misaligned_share:
                continue
            listed = [_shape(s) for s in mine.head(t.top_shapes).iter_rows(named=True)]
            text = "; ".join(
                f"{s['op_name']} {s['m']}x{s['n']}x{s['k']} {s['dtype']} ({s['misaligned']} "
                f"not multiples of {s['align']}: pad {s['pad']})"
                for s in listed
            )
            kernel = d["kernel_ns"] or 0
            small = not kernel or odd / kernel < WARNING_SHARE
            yield self.finding(
                ctx,
                f"rank {rank} GPU {device}: {odd / gemm:.0%} of GEMM time ({odd / 1e6:.2f} ms) "
                f"in {mine.height} misaligned matmul shape(s): {text}",
                {
                    "misaligned_ns": odd,
                    "gemm_ns": gemm,
                    "misaligned_share_of_gemm": odd / gemm,
                    "shapes": listed,
                    "misaligned_share_of_kernel": odd / kernel if kernel else None,
                    "threshold_share": t.min_misaligned_share,
                },
                Scope(rank, device),
                None,
                severity=Severity.INFO if small else None,
            )


def _shape(row: dict[str, Any]) -> dict[str, Any]:
    """One shape row with a padding suggestion for each misaligned dimension."""
    pads = []
    for dim in (row["misaligned"] or "").split(","):
        if dim:
            size = row[dim.lower()]
            step = PAD_TO if size >= PAD_LARGE_FROM else row["align"]
            pads.append(f"{dim} {size} -> {-(-size // step) * step}")
    keys = ("op_name", "m", "n", "k", "dtype", "calls", "kernel_ns", "align", "misaligned")
    return {**{k: row[k] for k in keys}, "pad": ", ".join(pads)}
