"""TA006: matrix multiplies with dimensions Tensor Cores do not like."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import polars as pl

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
        shapes = ctx.metrics.matmul_shapes
        # a GEMM of fewer rows than the tile (M = 1 when decoding one token per sequence) is
        # a matrix-vector product: padding M to 8 would do 8x the work in the same time
        gemv = (pl.col("misaligned") == "M") & (pl.col("m") < pl.col("align"))
        odd_shapes = shapes.filter(pl.col("misaligned").is_not_null() & ~gemv)
        names = {(d.rank, d.device): d.name for d in ctx.meta.devices}
        for d in ctx.devices():
            rank, device = d["rank"], d["device"]
            here = shapes.filter((pl.col("rank") == rank) & (pl.col("device") == device))
            mine = odd_shapes.filter((pl.col("rank") == rank) & (pl.col("device") == device))
            gemm = d["gemm_ns"] or 0
            odd = int(mine["kernel_ns"].sum() or 0)
            if not gemm or not odd or odd / gemm < t.min_misaligned_share:
                continue
            tokens = _token_rows(here)
            listed = [_shape(s, tokens) for s in mine.head(t.top_shapes).iter_rows(named=True)]
            text = "; ".join(
                f"{s['op_name']} {s['m']}x{s['n']}x{s['k']} {s['dtype']} ({s['misaligned']} "
                f"not multiples of {s['align']}"
                + (f": pad {s['pad']}" if s["pad"] else ": rows are batch x tokens")
                + ")"
                for s in listed
            )
            tput, basis = _throughput(here, names.get((rank, device)))
            excess = _excess_ns(mine, tput)
            impact = ctx.per_step(excess, rank, device) if tput else None
            whole = ctx.share_of_step(rank, ctx.per_step(odd, rank, device))
            if impact is None and whole is not None and whole < ctx.policy.min_share:
                continue  # unpriced, but even all of its time is under the floor
            pads = [p for s in mine.iter_rows(named=True) if (p := _shape(s, tokens)["pad"])]
            yield self.finding(
                ctx,
                f"rank {rank} GPU {device}: {odd / gemm:.0%} of GEMM time ({odd / 1e6:.2f} ms) "
                f"in {mine.height} misaligned matmul shape(s): {text}"
                + (
                    f"; at the {tput / 1e12:.0f} TFLOP/s of {basis} they would take "
                    f"{(odd - excess) / 1e6:.2f} ms"
                    if tput
                    else ""
                ),
                {
                    "misaligned_ns": odd,
                    "gemm_ns": gemm,
                    "misaligned_share_of_gemm": odd / gemm,
                    "shapes": listed,
                    "misaligned_share_of_kernel": odd / d["kernel_ns"] if d["kernel_ns"] else None,
                    "reference_tflops": tput / 1e12 if tput else None,
                    "reference": basis,
                    "excess_ns": excess if tput else None,
                    "threshold_share": t.min_misaligned_share,
                },
                Scope(rank, device),
                impact,
                _advice(pads),
                ceiling_ns=ctx.per_step(odd, rank, device),
            )


#: Dense 16-bit Tensor Core peak (FLOP/s) by device name; first match wins (field notes).
PEAK_FLOPS: tuple[tuple[str, float], ...] = (
    (r"B200|B100", 2250e12),
    (r"H100|H200|H800|GH200", 990e12),
    (r"A100|A800", 312e12),
    (r"V100", 125e12),
    (r"MI300X", 1307e12),
    (r"MI250", 383e12),
)
#: The share of the peak a well-shaped large GEMM reaches (an 8192^3 bf16 matmul on an H100
#: runs at about 790 of 990 TFLOP/s).
ACHIEVABLE = 0.8
#: Operators whose M, N, K describe the whole product (bmm shapes leave the batch out).
_FLOP_OPS = ["aten::mm", "aten::addmm", "aten::linear"]


def _flops() -> pl.Expr:
    """2 M N K per call, times the calls."""
    return 2 * pl.col("m").cast(pl.Float64) * pl.col("n") * pl.col("k") * pl.col("calls")


def _throughput(shapes: pl.DataFrame, device_name: str | None) -> tuple[float | None, str]:
    """FLOP/s that this device's aligned GEMMs reach (16-bit where it has them), else the
    GPU's achievable peak; None when neither is known."""
    aligned = shapes.filter(
        pl.col("misaligned").is_null()
        & pl.col("align").is_not_null()
        & pl.col("op_name").is_in(_FLOP_OPS)
        & (pl.col("kernel_ns") > 0)
    )
    half = aligned.filter(pl.col("align") >= 8)
    ref = half if half.height else aligned
    if ref.height:
        flops = float(ref.select(_flops().sum()).item() or 0.0)
        ns = float(ref["kernel_ns"].sum() or 0)
        if flops > 0 and ns > 0:
            return flops / ns * 1e9, "this trace's aligned GEMMs"
    for pattern, peak in PEAK_FLOPS:
        if device_name and re.search(pattern, device_name):
            return peak * ACHIEVABLE, f"{ACHIEVABLE:.0%} of the GPU's peak"
    return None, "unknown"


def _excess_ns(odd: pl.DataFrame, tput: float | None) -> int:
    """The misaligned GEMMs' time minus their time at `tput` FLOP/s (never negative)."""
    if not tput:
        return 0
    mine = odd.filter(pl.col("op_name").is_in(_FLOP_OPS))
    if not mine.height:
        return 0
    ideal = mine.with_columns(ideal_ns=_flops() / tput * 1e9)
    return int(
        ideal.select((pl.col("kernel_ns") - pl.col("ideal_ns")).clip(lower_bound=0).sum()).item()
        or 0
    )


def _token_rows(shapes: pl.DataFrame) -> set[int]:
    """Row counts of the linear layers' inputs (batch x tokens): a user cannot pad them the
    way they pad a weight, so padding advice leaves them out."""
    rows = shapes.filter(pl.col("op_name").is_in(["aten::linear", "aten::addmm"]))["m"]
    return {int(v) for v in rows.drop_nulls().to_list()}


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


def _shape(row: dict[str, Any], tokens: set[int]) -> dict[str, Any]:
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
