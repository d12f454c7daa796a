"""Where the copy and cast kernels come from, and what the fix named for each source removes.

Rank stage (`cast_sources`, `cast_passes`): every copy/cast kernel (kernel class `copy_cast`)
inside the windows is traced to the CPU operator that launched it (the launch call's External
id) and to that operator's enclosing operator of interest on the same thread (the one that
started last before it and still contains it), and given a source:

- `weight_cast`: a down-cast (fp32 -> bf16/fp16 `aten::copy_`) under an operator autocast
  runs in 16 bits (`aten::linear`, `matmul`, `mm`, `addmm`, `bmm`, `baddbmm`, convolutions)
  of a tensor shaped like one of that operator's weight or bias inputs: autocast casting an
  fp32 parameter;
- `weight_grad_cast`: an up-cast (bf16/fp16 -> fp32) under `ToCopyBackward` of a tensor
  shaped like a weight cast of the same rank: autograd casting that weight's gradient back
  to fp32;
- `activation_cast`: the same two for a tensor shaped like the operator's first input: autocast
  casting an fp32 activation (the residual stream of an fp32 model) into a 16-bit operator,
  and its gradient back;
- `logits_upcast`: an up-cast outside `ToCopyBackward` (or a down-cast under it: its
  gradient) of a tensor of at least 2 dimensions whose last one is the class dimension of a
  `cross_entropy_loss` / `log_softmax` input of the rank: the logits' `.float()` before the
  loss (explicit, or autocast's for its fp32 loss ops);
- `ddp_bucket_copy`: kernels launched inside DDP's `reducer::copy_bucket_to_grad` range;
- `other`: the rest (layout copies, `torch.cat`, casts without recorded shapes, kernels no
  operator launched).

Job stage (`CastSources.of`): the sources per steady step and the price of each named fix.
Without recorded shapes every kernel is `other`, and no fix is priced.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

import polars as pl

from traceanalyzer.analyses.gpu.kernels import CastImpact
from traceanalyzer.analyses.gpu.operators import SHAPE_TEXT, decoded_shapes, launch_ops
from traceanalyzer.analyses.timeline.frames import Schemas, check_frames, per_distinct
from traceanalyzer.analyses.timeline.intervals import busy_before, union
from traceanalyzer.analyses.timeline.windows import OPTIMIZER_RANGE, StepCounts
from traceanalyzer.model import Kind, Timeline

SOURCES: tuple[str, ...] = (
    "weight_cast",
    "weight_grad_cast",
    "activation_cast",
    "logits_upcast",
    "ddp_bucket_copy",
    "other",
)

#: Operators autocast runs in 16 bits (casting their fp32 inputs first); their weight and
#: bias are inputs 1 and 2.
AUTOCAST_OPS: tuple[str, ...] = (
    "aten::linear",
    "aten::matmul",
    "aten::mm",
    "aten::addmm",
    "aten::bmm",
    "aten::baddbmm",
    "aten::conv1d",
    "aten::conv2d",
    "aten::conv3d",
    "aten::convolution",
    "aten::conv_transpose1d",
    "aten::conv_transpose2d",
    "aten::conv_transpose3d",
)
#: Loss operators whose first input's last dimension is the logits' class dimension.
LOSS_OPS: tuple[str, ...] = ("aten::cross_entropy_loss", "aten::log_softmax", "aten::_log_softmax")
DDP_BUCKET_RANGE = "torch.distributed.ddp.reducer::copy_bucket_to_grad"
_TO_COPY_BACKWARD = r"^ToCopyBackward\d*$"
_HALF = ("c10::BFloat16", "c10::Half")

_SOURCE = pl.Enum(SOURCES)


def _shape_text(dims: pl.Expr) -> pl.Expr:
    return dims.cast(pl.List(pl.String)).list.join(",")


def _decoded(ops: pl.LazyFrame) -> pl.LazyFrame:
    """`ops` with dims and types decoded (distinct texts once; tensor lists left null): every
    row kept, unlike `operators.with_shapes`."""
    return ops.join(decoded_shapes(ops), on=list(SHAPE_TEXT), how="left", nulls_equal=True)


def _first_per_id(ops: pl.LazyFrame) -> pl.LazyFrame:
    """One operator per id and rank (a rank's processes could reuse an id): the first."""
    return ops.sort("rank", "external_id", "op_start").unique(
        subset=["rank", "external_id"], keep="first", maintain_order=True
    )


def classified_casts(timeline: Timeline, kernels: pl.DataFrame) -> pl.LazyFrame:
    """The copy/cast kernels inside the windows with their source: rank, device, step,
    launch_ns, clipped_ns, source. `kernels`: kernels inside the windows with kernel_class,
    correlation, clipped_ns and step."""
    events = timeline.events.lazy()
    casts = (
        kernels.lazy()
        .filter(pl.col("kernel_class").cast(pl.String) == "copy_cast")
        .select("rank", "device", "step", "correlation", "clipped_ns")
        .join(launch_ops(timeline), on=["rank", "correlation"], how="left")
    )
    ops = events.filter(pl.col("kind") == Kind.CPU_OP.value)
    cpu = ops.filter(pl.col("external_id").is_not_null())
    launched = casts.select("rank", external_id="op_link").unique()
    copies = _decoded(
        cpu.filter(pl.col("name") == "aten::copy_")
        .select(
            "rank",
            "tid",
            "external_id",
            "input_dims",
            "input_types",
            op_start="start_ns",
            op_end="end_ns",
        )
        # only the copies that launched one of these kernels
        .join(launched, on=["rank", "external_id"], how="semi")
    ).select("rank", "tid", "external_id", "op_start", "op_end", "dims", "types")
    copies = _first_per_id(copies)
    names = (
        ops.select(name=pl.col("name").unique())
        .filter(
            pl.col("name").is_in(AUTOCAST_OPS)
            | pl.col("name").cast(pl.String).str.contains(_TO_COPY_BACKWARD)
            | (pl.col("name") == DDP_BUCKET_RANGE)
        )
        .collect()
    )
    parents = _decoded(
        ops.join(names.lazy(), on="name", how="semi").select(
            "rank",
            "tid",
            "input_dims",
            "input_types",
            p_start="start_ns",
            p_end="end_ns",
            p_name=pl.col("name").cast(pl.String),
        )
    ).select("rank", "tid", "p_start", "p_end", "p_name", p_dims="dims")
    vocab = (
        _decoded(
            ops.filter(pl.col("name").is_in(LOSS_OPS)).select("rank", "input_dims", "input_types")
        )
        .select("rank", last=pl.col("dims").list.first().list.last())
        .filter(pl.col("last").is_not_null())
        .unique()
    )
    linked = (
        casts.join(
            copies, left_on=["rank", "op_link"], right_on=["rank", "external_id"], how="left"
        )
        .with_columns(  # an operator that does not hold the launch did not make it
            inside=pl.col("launch_ns").is_between(pl.col("op_start"), pl.col("op_end"))
        )
        .with_columns(
            pl.when(pl.col("inside")).then(pl.col(c)).alias(c)
            for c in ("tid", "op_start", "op_end", "dims", "types")
        )
        .drop("inside")
        .with_columns(
            shape=pl.col("dims").list.first(),
            dst=pl.col("types").list.get(0, null_on_oob=True),
            src=pl.col("types").list.get(1, null_on_oob=True),
        )
    )
    with_op = linked.filter(pl.col("op_start").is_not_null()).sort("op_start")
    with_parent = with_op.join_asof(
        parents.sort("p_start"),
        left_on="op_start",
        right_on="p_start",
        by=["rank", "tid"],
        strategy="backward",
        check_sortedness=False,
    ).with_columns(
        p_name=pl.when(pl.col("p_end") >= pl.col("op_end")).then(pl.col("p_name")),
    )
    rows = pl.concat(
        [
            with_parent.drop("p_start", "p_end", "tid", "op_start", "op_end", "dims", "types"),
            linked.filter(pl.col("op_start").is_null())
            .drop("tid", "op_start", "op_end", "dims", "types")
            .with_columns(
                p_name=pl.lit(None, pl.String), p_dims=pl.lit(None, pl.List(pl.List(pl.Int64)))
            ),
        ],
        how="diagonal_relaxed",
    )
    down = pl.col("dst").is_in(_HALF) & (pl.col("src") == "float")
    up = (pl.col("dst") == "float") & pl.col("src").is_in(_HALF)
    auto = pl.col("p_name").is_in(AUTOCAST_OPS).fill_null(False)
    tcb = pl.col("p_name").str.contains(_TO_COPY_BACKWARD).fill_null(False)
    weight_in = (pl.col("shape") == pl.col("p_dims").list.get(1, null_on_oob=True)) | (
        pl.col("shape") == pl.col("p_dims").list.get(2, null_on_oob=True)
    )
    first_in = pl.col("shape") == pl.col("p_dims").list.get(0, null_on_oob=True)
    rows = rows.with_columns(
        fwd=pl.when(down & auto & weight_in.fill_null(False))
        .then(pl.lit("weight_cast"))
        .when(down & auto & first_in.fill_null(False))
        .then(pl.lit("activation_cast")),
        key=_shape_text(pl.col("shape")),
        last=pl.col("shape").list.last(),
        wide=pl.col("shape").list.len() >= 2,
    )
    # read twice below (the forward shapes, then every row): made once, as the plan made it
    # twice (on a 741 MB trace with stacks, 0.33 s against 0.19 s here)
    rows = rows.collect().lazy()
    # the shapes autocast cast forward, per rank: a gradient cast back of one is its backward
    fwd_shapes = (
        rows.filter(pl.col("fwd").is_not_null())
        .group_by("rank", "key")
        .agg(fwd_of=pl.col("fwd").sort().first())
    )
    vocab_hit = vocab.select("rank", "last", hit=pl.lit(True))
    return (
        rows.join(fwd_shapes, on=["rank", "key"], how="left")
        .join(vocab_hit, on=["rank", "last"], how="left")
        .with_columns(
            source=pl.when(pl.col("fwd").is_not_null())
            .then(pl.col("fwd"))
            .when(up & tcb & (pl.col("fwd_of") == "weight_cast"))
            .then(pl.lit("weight_grad_cast"))
            .when(up & tcb & (pl.col("fwd_of") == "activation_cast"))
            .then(pl.lit("activation_cast"))
            .when(
                pl.col("wide").fill_null(False)
                & pl.col("hit").fill_null(False)
                & ((up & ~tcb) | (down & tcb))
            )
            .then(pl.lit("logits_upcast"))
            .when(pl.col("p_name") == DDP_BUCKET_RANGE)
            .then(pl.lit("ddp_bucket_copy"))
            .otherwise(pl.lit("other"))
            .cast(_SOURCE)
        )
        .select("rank", "device", "step", "launch_ns", "clipped_ns", "source")
    )


def cast_sources(classified: pl.LazyFrame) -> pl.DataFrame:
    """rank, device, source, kernels, kernel_ns: the copy/cast kernels inside the windows by
    source (`classified_casts`)."""
    return (
        classified.group_by("rank", "device", "source")
        .agg(kernels=pl.len().cast(pl.Int64), kernel_ns=pl.col("clipped_ns").sum().cast(pl.Int64))
        .with_columns(pl.col("source").cast(pl.String))
        .sort("rank", "device", "source")
        .collect()
    )


def cast_passes(classified: pl.LazyFrame) -> pl.DataFrame:
    """rank, step, passes: the forward passes of each step that cast weights (runs of weight
    casts between their gradient casts, in launch order): the micro-batches of a step under
    gradient accumulation. Steps without weight casts have no row; without step markers the
    window is one step (step null)."""
    weights = classified.filter(pl.col("source").is_in(["weight_cast", "weight_grad_cast"])).sort(
        "rank", "step", "launch_ns", nulls_last=True
    )
    fwd = pl.col("source") == "weight_cast"
    return (
        weights.with_columns(
            start=fwd & ~fwd.shift(1).over("rank", "step").fill_null(False),
        )
        .group_by("rank", "step")
        .agg(passes=pl.col("start").sum().cast(pl.Int64))
        .filter(pl.col("passes") > 0)
        .sort("rank", "step", nulls_last=True)
        .collect()
    )


#: Operators whose fp32 work stays fp32 after the bf16-parameter fix: the loss on the
#: logits (priced by its own fix, `logits_upcast`) and the optimizer's multi-tensor kernels
#: (the fix keeps an fp32 master copy: its update runs in fp32 as before).
_KEEPS_FP32 = r"log_softmax|nll_loss|cross_entropy|^aten::_foreach_|^aten::_fused_"
_FP32_DATA = r'^\[\s*"float"|^\[\s*"[^"]*"\s*,\s*"float"'
#: What bf16 parameters save of the fp32 memory-bound kernels autocast leaves: the share of
#: their time a what-if that halves them saves (half the bytes; measured on two recorded
#: GPT pairs: 47-51 %).
FP32_TRAFFIC_SAVING = 0.5


def fp32_traffic(timeline: Timeline, kernels: pl.DataFrame) -> pl.DataFrame:
    """rank, device, kernels, kernel_ns: the memory-bound kernels inside the windows (the
    norms, residual adds and their backward) launched by an operator whose first or second
    input is an fp32 tensor, outside the optimizer's ranges and the loss: the traffic that
    autocast with fp32 parameters leaves in fp32 and bf16 parameters halve. `kernels`:
    kernels inside the windows with kernel_class, correlation, clipped_ns. Without recorded
    shapes: no rows."""
    events = timeline.events.lazy()
    mb = (
        kernels.lazy()
        .filter(pl.col("kernel_class").cast(pl.String) == "memory_bound")
        .select("rank", "device", "correlation", "clipped_ns")
        .join(launch_ops(timeline), on=["rank", "correlation"], how="inner")
    )
    # only the operators that launched one of these kernels (a few of a trace's operators)
    launched = mb.select("rank", external_id="op_link").unique()
    ops = (
        events.filter(
            (pl.col("kind") == Kind.CPU_OP.value)
            & pl.col("external_id").is_not_null()
            & pl.col("input_types").is_not_null()
        )
        .select("rank", "external_id", "input_types", "name", op_start="start_ns", op_end="end_ns")
        .join(launched, on=["rank", "external_id"], how="semi")
    )
    ops = _first_per_id(ops)
    # the types as text once per distinct text: the data in fp32, one of the first two
    # inputs (a residual add's operands, a norm's input and its gradient; not the fp32
    # statistics a bf16 attention or norm backward also takes)
    ops = ops.with_columns(
        fp32=per_distinct(
            pl.col("input_types"),
            lambda t: t.cast(pl.String).str.contains(_FP32_DATA),
            pl.Boolean(),
        ),
        keeps=per_distinct(
            pl.col("name"), lambda n: n.cast(pl.String).str.contains(_KEEPS_FP32), pl.Boolean()
        ),
    ).filter(pl.col("fp32") & ~pl.col("keeps"))
    optimizer = (
        events.filter(
            pl.col("kind").is_in([Kind.ANNOTATION.value, Kind.CPU_OP.value])
            & per_distinct(
                pl.col("name"),
                lambda n: n.cast(pl.String).str.contains(OPTIMIZER_RANGE),
                pl.Boolean(),
            )
        )
        .select("rank", r_start="start_ns", r_end="end_ns")
        .sort("r_start")
    )
    linked = (
        mb.join(ops, left_on=["rank", "op_link"], right_on=["rank", "external_id"], how="inner")
        .filter(pl.col("launch_ns").is_between(pl.col("op_start"), pl.col("op_end")))
        .sort("launch_ns")
        .join_asof(
            optimizer,
            left_on="launch_ns",
            right_on="r_start",
            by="rank",
            strategy="backward",
            check_sortedness=False,
        )
        .filter(pl.col("r_end").is_null() | (pl.col("launch_ns") > pl.col("r_end")))
    )
    return (
        linked.group_by("rank", "device")
        .agg(kernels=pl.len().cast(pl.Int64), kernel_ns=pl.col("clipped_ns").sum().cast(pl.Int64))
        .sort("rank", "device")
        .collect()
    )


def fp32_savings(
    traffic: pl.DataFrame,
    memory_bound: pl.DataFrame,
    critical_steps: pl.DataFrame,
    savings: Mapping[tuple[int, str], int],
    counts: StepCounts,
) -> dict[tuple[int, int], tuple[int, int]]:
    """(rank, device) -> (the fp32 memory-bound kernels' time per steady step, what bf16
    parameters save of it per step). `traffic`: the ranks' `fp32_traffic` rows;
    `memory_bound`: Metrics.fusion.model (each device's memory-bound time); the rank's
    `memory_bound_2x` what-if (`savings`: the step's saving when every memory-bound kernel
    takes half the time) is scaled to these kernels' share of the memory-bound time; without
    it, FP32_TRAFFIC_SAVING of their time scaled by the share of memory-bound time on the
    critical path (`critical_steps`); all of it without a path. Devices without steps: none."""
    totals = {
        (r, d): ns
        for r, d, ns in memory_bound.select("rank", "device", "memory_bound_ns").iter_rows()
    }
    out: dict[tuple[int, int], tuple[int, int]] = {}
    for rank, device, ns in traffic.select("rank", "device", "kernel_ns").iter_rows():
        per = counts.per_step(ns, rank, device)
        n = counts.on(rank, device)
        total = (totals.get((rank, device)) or 0) / n if n else 0
        if not per or not total:
            continue
        share = min(1.0, per / total)
        half = savings.get((rank, "memory_bound_2x"))
        path = critical_steps.filter(pl.col("rank") == rank)["gpu_memory_bound_ns"]
        if half is not None:
            saved = half * share * FP32_TRAFFIC_SAVING / 0.5
        elif path.len():
            saved = per * FP32_TRAFFIC_SAVING * min(1.0, float(path.mean()) / total)  # type: ignore[arg-type]
        else:
            saved = per * FP32_TRAFFIC_SAVING
        out[(int(rank), int(device))] = (
            per,
            max(0, min(round(saved), round(per * FP32_TRAFFIC_SAVING))),
        )
    return out


_DDP_COPIES = {
    "rank": pl.Int32,
    "device": pl.Int32,
    "copies": pl.Int64,
    "copy_ns": pl.Int64,
    "exposed_ns": pl.Int64,
}


def ddp_bucket_copies(
    timeline: Timeline, linked: pl.DataFrame, *, by_steps: bool = True
) -> pl.DataFrame:
    """rank, device, copies, copy_ns, exposed_ns: the copies (memcpys) launched inside DDP's
    `reducer::copy_bucket_to_grad` ranges in the steady steps: each reduced bucket copied back
    into the gradients, a device-to-device memcpy per parameter, which
    `gradient_as_bucket_view=True` removes. `exposed_ns`: their time during which no other GPU
    work of the device runs (the rest runs beside the last buckets' all-reduce, or beside a
    collective waiting for a slower rank: removing it saves nothing). `linked`: the GPU work
    with its launches and steps (windows.linked_work); `by_steps`: whether step markers define
    the windows (else every copy counts: the window is the trace)."""
    ranges = (
        timeline.events.lazy()
        .filter((pl.col("kind") == Kind.CPU_OP.value) & (pl.col("name") == DDP_BUCKET_RANGE))
        .select("rank", "tid", r_start="start_ns", r_end="end_ns")
        .sort("r_start")
        .collect()
    )
    if ranges.height == 0:  # no DDP reducer (or its ranges were not recorded): no copies
        return pl.DataFrame(schema=_DDP_COPIES)
    work = linked.lazy().filter(pl.col("step").is_not_null() | (not by_steps))
    copies = (
        work.filter((pl.col("kind") == Kind.MEMCPY.value) & pl.col("launch_ns").is_not_null())
        .select("rank", "device", "launch_tid", "launch_ns", "start_ns", "end_ns")
        .sort("launch_ns")
        .join_asof(
            ranges.lazy(),
            left_on="launch_ns",
            right_on="r_start",
            by_left=["rank", "launch_tid"],
            by_right=["rank", "tid"],
            strategy="backward",
            check_sortedness=False,
        )
        .filter(pl.col("launch_ns") <= pl.col("r_end"))
        .select("rank", "device", "start_ns", "end_ns")
        .collect()
    )
    key = ["rank", "device"]
    others = union(
        work.select(*key, "start_ns", "end_ns").join(
            copies.lazy(), on=[*key, "start_ns", "end_ns"], how="anti", nulls_equal=True
        ),
        key,
    )
    timed = busy_before(busy_before(copies.lazy(), others, key, "start_ns"), others, key, "end_ns")
    dur = pl.col("end_ns") - pl.col("start_ns")
    return (
        timed.group_by(*key)
        .agg(
            copies=pl.len().cast(pl.Int64),
            copy_ns=dur.sum().cast(pl.Int64),
            exposed_ns=(dur - (pl.col("end_ns_busy_ns") - pl.col("start_ns_busy_ns")))
            .clip(lower_bound=0)
            .sum()
            .cast(pl.Int64),
        )
        .sort(*key)
        .collect()
    )


@dataclass(frozen=True, slots=True)
class CastSources:
    """Where the copy/cast kernels come from, and what each named fix removes per steady step
    (Metrics.cast_sources; TA010's prices).

    - `sources`: rank, device, source, kernels, kernel_ns (inside the windows), per_step_ns
      (null without steps): the copy/cast kernels by source (SOURCES);
    - `passes`: rank, step, passes: forward passes that cast weights per step (`cast_passes`);

    `rank`, `device`: the device priced; `pass_count`: its median forward passes per step
    that cast weights (1 where none does); `training`: whether its weights' gradients are cast
    back (a backward pass; else inference, where bf16 weights need no master copy);
    `by_source`: its copy/cast time per steady step by source (every one of SOURCES).

    Prices, of the (rank, device) whose named fixes remove the most, each the kernels' time
    per steady step scaled by `path_share` (the share of copy/cast time that lies on the
    critical path: CastImpact.impact_ns over its ceiling_ns), None where it is unknown:

    - `weights_ns`: autocast's weight casts and their gradient casts (`weight_cast` +
      `weight_grad_cast`), `activations_ns`: its activation casts (`activation_cast`);
    - `master_copy_ns`: what the fix adds back: an fp32 master copy in the optimizer casts
      every parameter down and its gradient up once per optimizer step, estimated as twice
      one pass's weight down-casts (`2 * weight_cast / passes`); 0 without gradient casts
      (inference: bf16 weights need no master copy);
    - `fp32_traffic_ns`: the memory-bound kernels per steady step that autocast leaves in
      fp32 (`fp32_traffic`: norms, residual adds, their backward), counted where weights are
      cast (0 elsewhere); `fp32_saving_ns`: what bf16 parameters save of them (`fp32_savings`:
      the halving what-if scaled to their share of the memory-bound time);
    - `bf16_params_ns`: what bf16 parameters with an fp32 master copy save:
      `weights_ns + activations_ns - master_copy_ns` (never below 0) plus `fp32_saving_ns`;
    - `logits_ns`: the logits' upcast before the loss and its gradient's cast back;
    - `ddp_bucket_ns`: DDP's copies of the buckets into the gradients
      (`gradient_as_bucket_view=True` removes them): copy kernels scaled as the others, plus
      `ddp_memcpy_ns`, the exposed time per step of the device-to-device memcpys of
      `ddp_bucket_copies` (not cast kernels: the time no other GPU work of the device runs
      beside them, unscaled);
    - `impact_ns`: the three fixes together; `other_ns`: the copy/cast time per step that no
      named fix removes;
    - `ceiling_ns`: the most they can save per step: the copy/cast model's ceiling, plus the
      DDP memcpys and the fp32 memory-bound kernels priced beside the cast kernels.
    """

    SCHEMAS: ClassVar[Schemas] = {
        "sources": {
            "rank": pl.Int32,
            "device": pl.Int32,
            "source": pl.String,
            "kernels": pl.Int64,
            "kernel_ns": pl.Int64,
            "per_step_ns": pl.Int64,
        },
        "passes": {"rank": pl.Int32, "step": pl.Int64, "passes": pl.Int64},
    }

    sources: pl.DataFrame
    passes: pl.DataFrame
    rank: int | None = None
    device: int | None = None
    path_share: float | None = None
    pass_count: int | None = None
    training: bool = False
    by_source: Mapping[str, int] = field(default_factory=dict)
    ddp_memcpy_ns: int = 0
    weights_ns: int | None = None
    activations_ns: int | None = None
    master_copy_ns: int | None = None
    fp32_traffic_ns: int = 0
    fp32_saving_ns: int = 0
    bf16_params_ns: int | None = None
    logits_ns: int | None = None
    ddp_bucket_ns: int | None = None
    other_ns: int | None = None
    impact_ns: int | None = None
    ceiling_ns: int | None = None

    def __post_init__(self) -> None:
        check_frames(self, "Metrics.cast_sources", self.SCHEMAS)

    @classmethod
    def of(
        cls,
        sources: pl.DataFrame,
        passes: pl.DataFrame,
        model: CastImpact,
        counts: StepCounts,
        ddp_copies: pl.DataFrame | None = None,
        fp32: Mapping[tuple[int, int], tuple[int, int]] | None = None,
    ) -> CastSources:
        """The job's CastSources from the ranks' `cast_sources` and `cast_passes` rows, the
        copy/cast impact model (for the critical path's share), the step counts and the
        ranks' `ddp_bucket_copies`."""
        memcpy: dict[tuple[int, int], int] = {}
        if ddp_copies is not None:
            for rank, device, ns in ddp_copies.select("rank", "device", "exposed_ns").iter_rows():
                memcpy[(rank, device)] = counts.per_step(ns, rank, device) or 0
        per_step = [  # a few rows: one per device and source
            counts.per_step(ns, rank, device)
            for rank, device, ns in sources.select("rank", "device", "kernel_ns").iter_rows()
        ]
        sources = sources.with_columns(per_step_ns=pl.Series(per_step, dtype=pl.Int64)).select(
            list(cls.SCHEMAS["sources"])
        )
        passes = passes.select(list(cls.SCHEMAS["passes"]))
        share = None
        if model.impact_ns is not None and model.ceiling_ns:
            share = min(1.0, model.impact_ns / model.ceiling_ns)
        best: CastSources | None = None
        for (rank, device), rows in sources.group_by("rank", "device", maintain_order=True):
            per = {s: 0 for s in SOURCES}
            for r in rows.iter_rows(named=True):
                per[r["source"]] += r["per_step_ns"] or 0
            mine = passes.filter(pl.col("rank") == rank)["passes"]
            k = max(1, round(float(mine.median()))) if mine.len() else 1  # type: ignore[arg-type]
            weights = per["weight_cast"] + per["weight_grad_cast"]
            # the master copy casts each parameter down and its gradient up once: twice one
            # pass's down-casts (the gradient casts of backward run slower than a plain cast)
            master = 2 * per["weight_cast"] // k if per["weight_grad_cast"] else 0
            saved = max(0, weights + per["activation_cast"] - master)
            # bf16 parameters also halve the fp32 traffic autocast leaves (only where it casts
            # fp32 weights: without them the parameters are not fp32 under autocast)
            traffic, traffic_saved = (fp32 or {}).get((int(rank), int(device)), (0, 0))
            if not per["weight_cast"]:
                traffic, traffic_saved = 0, 0

            def price(ns: int) -> int | None:
                return None if share is None else round(ns * share)

            # DDP's memcpys are not cast kernels: their exposed time, unscaled (they follow
            # each bucket's all-reduce; beside other work they cost the step nothing)
            ddp_memcpy = memcpy.get((int(rank), int(device)), 0)
            ddp = price(per["ddp_bucket_copy"])
            casts_saved = price(saved)
            named = [
                None if casts_saved is None else casts_saved + traffic_saved,
                price(per["logits_upcast"]),
                None if ddp is None else ddp + ddp_memcpy,
            ]
            total = None if share is None else sum(n or 0 for n in named)
            cand = cls(
                sources=sources,
                passes=passes,
                rank=int(rank),
                device=int(device),
                path_share=share,
                pass_count=k,
                training=per["weight_grad_cast"] > 0,
                by_source=per,
                ddp_memcpy_ns=ddp_memcpy,
                weights_ns=price(weights),
                activations_ns=price(per["activation_cast"]),
                master_copy_ns=price(master),
                fp32_traffic_ns=traffic,
                fp32_saving_ns=traffic_saved,
                bf16_params_ns=named[0],
                logits_ns=named[1],
                ddp_bucket_ns=named[2],
                other_ns=price(per["other"]),
                impact_ns=total,
                ceiling_ns=None
                if model.ceiling_ns is None
                else model.ceiling_ns + ddp_memcpy + traffic,
            )
            if best is None or (cand.impact_ns or 0) > (best.impact_ns or 0):
                best = cand
        return best or cls(sources=sources, passes=passes, ceiling_ns=model.ceiling_ns)
