"""Attention computed by hand: separate kernels over T x S score tensors where no fused
attention kernel runs.

Rank stage, from recorded shapes (`record_shapes=True`). The **score shapes** of a rank are
the inputs of its softmax operators (`aten::_softmax`, `aten::softmax`,
`aten::_softmax_backward_data`) of at least three dimensions whose last two (T, S) are each
at least `MIN_SEQ`: n x T x S, n the product of the leading dimensions (batch x heads). The
**attention operators** are those that make or read such a tensor:

- a batched product `A[n, T, D] x B[n, D, S]` (Q·Kᵀ, and dO·Vᵀ in the backward), whose
  output is a score tensor;
- any operator with an input of the score shape (n, T, S) or its transpose (n, S, T):
  the scale, the mask (`masked_fill`, `where`, an added mask), the softmax, dropout, P·V,
  and the backward's products and softmax backward.

Their kernels inside the windows are the attention's time (`kernel_ns`). A score shape that
no Q·Kᵀ-shaped product makes is not attention (a softmax over a large activation): no row.
`d` is the head size (the Q·Kᵀ product's inner dimension), `causal` whether a mask is filled in
(`masked_fill`/`where` on a score tensor), `backward` whether the softmax has a backward.
`fused_ns` is the time of fused attention kernels on the device (`classify`'s `attention`
pattern: FlashAttention, memory-efficient attention, cuDNN SDPA): where some run, the model
uses the fast path already.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import polars as pl

from traceanalyzer.analyses.gpu.classify import CLASS_PATTERNS
from traceanalyzer.analyses.gpu.operators import launch_ops, shaped_ops
from traceanalyzer.analyses.timeline.frames import Schemas, check_frames
from traceanalyzer.analyses.timeline.windows import DEVICE_KEY
from traceanalyzer.model import Timeline

#: A score tensor's T and S are each at least this long (shorter softmaxes are not attention
#: worth fusing, or are not attention: a classifier's softmax over a few classes).
MIN_SEQ = 128

_SOFTMAX = ["aten::_softmax", "aten::softmax", "aten::_softmax_backward_data"]
_PRODUCTS = ["aten::bmm", "aten::baddbmm", "aten::matmul"]
_MASKS = ["aten::masked_fill", "aten::masked_fill_", "aten::where"]
FUSED_ATTENTION_REGEX = next(p.regex for p in CLASS_PATTERNS if p.key == "attention")

_SCHEMA = {
    "rank": pl.Int32,
    "device": pl.Int32,
    "n": pl.Int64,
    "t": pl.Int64,
    "s": pl.Int64,
    "d": pl.Int64,
    "causal": pl.Boolean,
    "backward": pl.Boolean,
    "ops": pl.Int64,
    "calls": pl.Int64,
    "kernel_ns": pl.Int64,
    "fused_ns": pl.Int64,
}


def _lead(shape: pl.Expr) -> pl.Expr:
    """The product of a shape's dimensions but the last two."""
    return shape.list.head(shape.list.len() - 2).list.eval(pl.element().product()).list.first()


def unfused_attention(timeline: Timeline, kernels: pl.DataFrame) -> pl.DataFrame:
    """Per (rank, device, n, t, s): d, causal, backward, ops, calls (forward softmaxes: one per
    attention), kernel_ns and fused_ns (see the module docstring); no rows where no softmax
    has a score shape.

    `kernels`: kernels inside the windows with correlation and clipped_ns."""
    ops = shaped_ops(timeline.events.lazy()).with_row_index("_op")
    scores = (
        ops.filter(pl.col("op_name").is_in(_SOFTMAX))
        .select("rank", shape=pl.col("dims").list.first())
        .filter(pl.col("shape").list.len() >= 3)
        .select(
            "rank",
            n=_lead(pl.col("shape")),
            t=pl.col("shape").list.get(-2),
            s=pl.col("shape").list.get(-1),
        )
        .filter((pl.col("t") >= MIN_SEQ) & (pl.col("s") >= MIN_SEQ))
        .unique()
        .collect()
    )
    if scores.height == 0:  # no softmax over score tensors: nothing to look for
        return pl.DataFrame(schema=_SCHEMA)
    scores_lazy = scores.lazy()
    inputs = (
        ops.select("_op", "rank", "op_name", "dims")
        .explode("dims")
        .filter(pl.col("dims").list.len() >= 3)
        .select(
            "_op",
            "rank",
            "op_name",
            n=_lead(pl.col("dims")),
            a=pl.col("dims").list.get(-2),
            b=pl.col("dims").list.get(-1),
        )
    )
    direct = pl.concat(
        [
            inputs.join(
                scores_lazy, left_on=["rank", "n", "a", "b"], right_on=["rank", "n", "t", "s"]
            ).select("_op", "rank", "n", t="a", s="b", name="op_name"),
            inputs.join(
                scores_lazy, left_on=["rank", "n", "a", "b"], right_on=["rank", "n", "s", "t"]
            ).select("_op", "rank", "n", t="b", s="a", name="op_name"),
        ]
    )
    # Q·Kᵀ-shaped products: A[n, T, D] x B[n, D, S], the output a score tensor
    first = pl.col("dims").list.get(0, null_on_oob=True)
    second = pl.col("dims").list.get(1, null_on_oob=True)
    products = (
        ops.filter(pl.col("op_name").is_in(_PRODUCTS))
        .filter((first.list.len() >= 3) & (second.list.len() >= 3))
        .select(
            "_op",
            "rank",
            name="op_name",
            n=_lead(first),
            t=first.list.get(-2),
            d=first.list.get(-1),
            d2=second.list.get(-2),
            s=second.list.get(-1),
        )
        .filter(pl.col("d") == pl.col("d2"))
        .join(scores_lazy, on=["rank", "n", "t", "s"], how="semi")
    )
    members = pl.concat(
        [
            direct.with_columns(d=pl.lit(None, pl.Int64)),
            products.select("_op", "rank", "n", "t", "s", "name", "d"),
        ]
    )
    per_score = members.group_by("rank", "n", "t", "s").agg(
        d=pl.col("d").drop_nulls().first(),
        causal=pl.col("name").is_in(_MASKS).any(),
        backward=(pl.col("name") == "aten::_softmax_backward_data").any(),
    )
    op_of = members.unique("_op").join(
        ops.select("_op", "external_id", "op_start", "op_end"), on="_op"
    )
    linked = (
        kernels.lazy()
        .select(*DEVICE_KEY, "correlation", "clipped_ns")
        .join(launch_ops(timeline), on=["rank", "correlation"])
        .join(op_of, left_on=["rank", "op_link"], right_on=["rank", "external_id"])
        .filter(pl.col("launch_ns").is_between(pl.col("op_start"), pl.col("op_end")))
        .group_by(*DEVICE_KEY, "n", "t", "s")
        .agg(
            ops=pl.col("_op").n_unique().cast(pl.Int64),
            calls=pl.col("_op")
            .filter(pl.col("name").is_in(["aten::_softmax", "aten::softmax"]))
            .n_unique()
            .cast(pl.Int64),
            kernel_ns=pl.col("clipped_ns").sum(),
        )
    )
    fused = (
        kernels.lazy()
        .filter(pl.col("name").cast(pl.String).str.contains("(?i)" + FUSED_ATTENTION_REGEX))
        .group_by(DEVICE_KEY)
        .agg(fused_ns=pl.col("clipped_ns").sum())
    )
    return (
        linked.join(per_score, on=["rank", "n", "t", "s"], how="left")
        # attention multiplies: a softmax over score-shaped tensors with no Q·Kᵀ product
        # making them is something else (a softmax over a big activation)
        .filter(pl.col("d").is_not_null())
        .join(fused, on=DEVICE_KEY, how="left")
        .with_columns(pl.col("fused_ns").fill_null(0))
        .select(list(_SCHEMA))
        .cast(_SCHEMA)  # type: ignore[arg-type]
        .sort(
            "kernel_ns",
            *DEVICE_KEY,
            "n",
            "t",
            "s",
            descending=[True, False, False, False, False, False],
        )
        .collect()
    )


#: The throughput a fused attention kernel reaches, as a share of a large GEMM's on the same
#: GPU (FlashAttention 2 and cuDNN SDPA run at 50-70 % of a bf16 GEMM's rate on an H100:
#: their softmax and online rescaling do not run on the Tensor Cores).
FUSED_SHARE_OF_GEMM = 0.6
#: ... and of the GPU's dense 16-bit peak, where the trace gives no GEMM rate.
FUSED_SHARE_OF_PEAK = 0.4


def fused_flops(rows: Iterable[Mapping[str, Any]]) -> float:
    """The FLOPs a fused kernel would do for the hand-written attention of `rows`
    (`unfused_attention` rows): 4·n·T·S·D per forward call, 2.5 times that again for its
    backward, half of both where a mask makes it causal (a fused kernel skips that half)."""
    return float(
        sum(
            r["calls"]
            * 4
            * r["n"]
            * r["t"]
            * r["s"]
            * r["d"]
            * (3.5 if r["backward"] else 1.0)
            * (0.5 if r["causal"] else 1.0)
            for r in rows
        )
    )


def fused_rate(flops: Mapping[str, Any] | None) -> tuple[float | None, str]:
    """The TFLOP/s a fused attention kernel would reach on a device (its `Flops.devices`
    row), and on what basis: FUSED_SHARE_OF_GEMM of the trace's GEMM rate, else
    FUSED_SHARE_OF_PEAK of the GPU's peak; None where neither is known."""
    if flops and flops.get("gemm_tflops"):
        return (
            flops["gemm_tflops"] * FUSED_SHARE_OF_GEMM,
            f"at {FUSED_SHARE_OF_GEMM:.0%} of this trace's GEMM rate",
        )
    if flops and flops.get("peak_tflops"):
        return (
            flops["peak_tflops"] * FUSED_SHARE_OF_PEAK,
            f"at {FUSED_SHARE_OF_PEAK:.0%} of the GPU's peak",
        )
    return None, "unknown"


@dataclass(frozen=True, slots=True)
class Attention:
    """Attention computed by hand over n x T x S score tensors (Metrics.attention).

    - `unfused`: rank, device, n, t, s, d, causal, backward, ops, calls, kernel_ns,
      fused_ns: per device and shape, its operators, calls and kernel time and what a fused
      kernel would take (`unfused_attention`).

    Its frame is checked against `SCHEMAS` when it is built.
    """

    SCHEMAS: ClassVar[Schemas] = {"unfused": _SCHEMA}

    unfused: pl.DataFrame

    def __post_init__(self) -> None:
        check_frames(self, "Metrics.attention", self.SCHEMAS)
