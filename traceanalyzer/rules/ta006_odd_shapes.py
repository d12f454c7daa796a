"""TA006: matrix multiplies with dimensions Tensor Cores do not like."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from traceanalyzer.rules.base import Context, Finding, Rule, Scope, Severity
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

    GEMMs whose only misaligned dimension is M with fewer rows than the tile (M = 1 while
    decoding one token at a time) are matrix-vector products, not misaligned matrices: they
    are left out.

    ## Known false positives
    Small GEMMs where alignment hardly matters, and M dimensions set by the batch that vary
    step to step. FP32 GEMMs without TF32 run on SIMT units anyway (see TA005).

    ## Impact estimate
    The misaligned GEMMs' time minus their time at the throughput this trace's aligned GEMMs
    reach (FLOPs of `aten::mm`/`addmm`/`linear` shapes over their kernel time, 16-bit ones where
    there are any), or, with no aligned GEMM, at 80 % of the GPU's dense 16-bit peak (the field
    notes' table); per steady step. `bmm` shapes leave out their batch, so their excess is not
    counted. Padding advice names only dimensions a user controls: a dimension equal to the rows
    of a linear layer's input (batch x tokens) is not one.
    """

    code = "TA006"
    slug = "odd-shapes"
    title = "GEMM dimensions not aligned for Tensor Cores"
    category = "odd_shapes"
    advice_neutral = (
        "Pad the matrix dimensions to multiples of 8 (16-bit types) or 16 (8-bit) so that the "
        "GEMMs run their fast Tensor Core kernels."
    )
    claims = "gemm_kernels"
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
        for d in ctx.metrics.shape_model:
            rank, device, gemm, odd = d.rank, d.device, d.gemm_ns, d.misaligned_ns
            if not gemm or not odd or odd / gemm < t.min_misaligned_share:
                continue
            mine, tokens = d.misaligned, d.token_rows
            listed = [_shape(s, tokens) for s in mine.head(t.top_shapes).iter_rows(named=True)]
            text = "; ".join(
                f"{s['op_name']} {s['m']}x{s['n']}x{s['k']} {s['dtype']} ({s['misaligned']} "
                f"not multiples of {s['align']}"
                + (f": pad {s['pad']}" if s["pad"] else ": rows are batch x tokens")
                + ")"
                for s in listed
            )
            tput, excess = d.reference_flops, d.excess_ns
            whole = ctx.share_of_step(rank, d.ceiling_ns)
            if d.impact_ns is None and whole is not None and whole < ctx.policy.min_share:
                continue  # unpriced, but even all of its time is under the floor
            pads = [p for s in mine.iter_rows(named=True) if (p := _shape(s, tokens)["pad"])]
            yield self.finding(
                ctx,
                f"rank {rank} GPU {device}: {odd / gemm:.0%} of GEMM time ({odd / 1e6:.2f} ms) "
                f"in {mine.height} misaligned matmul shape(s): {text}"
                + (
                    f"; at the {tput / 1e12:.0f} TFLOP/s of {d.reference} they would take "
                    f"{(odd - (excess or 0)) / 1e6:.2f} ms"
                    if tput
                    else ""
                ),
                {
                    "misaligned_ns": odd,
                    "gemm_ns": gemm,
                    "misaligned_share_of_gemm": odd / gemm,
                    "shapes": listed,
                    "misaligned_share_of_kernel": odd / d.kernel_ns if d.kernel_ns else None,
                    "reference_tflops": tput / 1e12 if tput else None,
                    "reference": d.reference,
                    "excess_ns": excess,
                    "threshold_share": t.min_misaligned_share,
                },
                Scope(rank, device),
                d.impact_ns,
                _advice(pads),
                ceiling_ns=d.ceiling_ns,
            )


def _advice(pads: list[str]) -> str:
    # "N 50257 -> 50304, K 4001 -> 4008": each size once, whichever dimension it was
    sizes = dict.fromkeys(
        part.split(" ", 1)[1] for pad in pads for part in pad.split(", ") if " " in part
    )
    pads = list(sizes)
    if not pads:
        return (
            "The misaligned dimension is the number of rows (batch x tokens): pick a batch or "
            "sequence length that is a multiple of 8 where the data allows; weights are aligned."
        )
    return (
        f"Pad the weight dimensions a user controls ({'; '.join(pads)}): hidden sizes, "
        "vocabulary (e.g. 50257 -> 50304) and heads to multiples of 8 (16-bit) or 64."
    )


def _shape(row: dict[str, Any], tokens: frozenset[int]) -> dict[str, Any]:
    """One shape row with a padding suggestion for each misaligned dimension a user controls
    (not the batch x tokens rows)."""
    pads = []
    for dim in (row["misaligned"] or "").split(","):
        if dim:
            size = row[dim.lower()]
            if size in tokens:
                continue
            step = PAD_TO if size >= PAD_LARGE_FROM else row["align"]
            pads.append(f"{dim} {size} -> {-(-size // step) * step}")
    keys = ("op_name", "m", "n", "k", "dtype", "calls", "kernel_ns", "align", "misaligned")
    return {**{k: row[k] for k in keys}, "pad": ", ".join(pads)}
