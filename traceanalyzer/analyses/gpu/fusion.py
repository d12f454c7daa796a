"""What fixing memory-bound time can save: the passes over memory a fusion removes, and the
roof no fix goes past.

A memory-bound kernel's time is its bytes over the bandwidth it reaches. Two things can
shorten it, and this module prices both from the bytes the recorded shapes give
(`bandwidth.operator_bytes`):

- **Fusion** removes passes over memory. Consecutive memory-bound operators on one stream
  inside one step, with no other kernel between them, form a *chain* (a hand-written
  activation or normalisation and its backward, a residual add after a norm, a dropout
  after a softmax, an unfused optimizer's per-parameter updates). A fused kernel reads the
  chain's inputs and writes its result once; each separate operator reads and writes its
  own tensors again. A chain's fused traffic is taken to be that of its largest operator
  (the one that touches the most bytes: a fused GELU reads x and writes y, as the largest of
  its eight operators nearly does), and the rest of its traffic is what fusion removes
  (`intermediate_bytes`); the time it costs is taken at the bandwidth the trace reaches on
  these operators (`achieved_gbps`), not at the peak. An operator that writes into an
  `out=` tensor, a fill and a copy break chains: their output is a tensor kept, not a
  temporary (a benchmark's loop of `torch.add(a, b, out=c)` on separate tensors has
  nothing to fuse). The share of the memory-bound traffic that fusion removes
  (`fusible_share`) is the model: fusion saves that share of the memory-bound kernel time.
- **The roof**: whatever the fix, the bytes that stay (`fused_bytes`) take at least
  fused_bytes / peak bandwidth. The most any fix can save (`ceiling_ns`) is the memory-bound
  kernel time less that: elementwise work already at 91 % of the HBM peak can lose 9 % of
  its time to a better kernel, and the rest only to fewer bytes.

Operators without recorded shapes, and those whose estimate is above the peak (data from
the L2 cache, or bytes the shapes over-count), have no bytes: they count as kernel time with
the known operators' fusible share, and no floor (`unknown_ns`). A device with no known
bytes at all gets no model (null `fusible_share`): its finding falls back on the critical
path's halving what-if.

Kineto records no tensor identities, so a chain is told by position: independent
out-of-place operators that happen to run back to back on one stream would be taken for a
chain.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import polars as pl

from traceanalyzer.analyses.gpu.bandwidth import operator_bytes, peak_bandwidth_gbps
from traceanalyzer.analyses.gpu.operators import launch_ops
from traceanalyzer.analyses.timeline.frames import Schemas, check_frames
from traceanalyzer.analyses.timeline.windows import DEVICE_KEY, StepCounts
from traceanalyzer.model import DeviceInfo, Timeline

#: An operator that writes a tensor that outlives it (in place, into `out`, a fill): not a
#: temporary a fused kernel could keep in registers.
KEEPS_OUTPUT = (
    r"_$|^aten::(?:copy_|fill_|zero_|zeros|zeros_like|ones|ones_like|full|full_like|empty\w*)$"
)

#: Chain patterns kept per device (the ones whose fusion saves most).
TOP_PATTERNS = 5

#: `memory_bound_model`'s second frame: the operators' sequences of the chains, by saving.
PATTERN_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "device": pl.Int32(),
    "pattern": pl.String(),
    "chains": pl.Int64(),
    "ops": pl.Int64(),
    "kernel_ns": pl.Int64(),
    "saving_ns": pl.Int64(),
}

SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(),
    "device": pl.Int32(),
    "memory_bound_ns": pl.Int64(),
    "cast_ns": pl.Int64(),
    "known_ns": pl.Int64(),
    "unknown_ns": pl.Int64(),
    "bytes": pl.Int64(),
    "intermediate_bytes": pl.Int64(),
    "fused_bytes": pl.Int64(),
    "chains": pl.Int64(),
    "chain_ops": pl.Int64(),
    "achieved_gbps": pl.Float64(),
    "peak_gbps": pl.Float64(),
    "floor_ns": pl.Int64(),
    "fusible_share": pl.Float64(),
    "saving_ns": pl.Int64(),
    "ceiling_ns": pl.Int64(),
}


def memory_bound_model(
    timeline: Timeline, kernels: pl.DataFrame, devices: tuple[DeviceInfo, ...]
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Per (rank, device) with memory-bound kernels (SCHEMA), over the whole window:
    memory_bound_ns (their time), cast_ns (the copy/cast kernels inside chains,
    `_chained_casts`: priced with them), known_ns / unknown_ns (of operators with / without
    bytes, casts included),
    bytes (the known operators' traffic), intermediate_bytes (what fused chains would no
    longer move), fused_bytes (bytes - intermediate_bytes), chains and chain_ops
    (chains of two operators or more, and their operators), achieved_gbps, peak_gbps,
    floor_ns (fused_bytes at the peak), fusible_share (intermediate_bytes / bytes),
    saving_ns (fusible_share of memory_bound_ns + cast_ns) and ceiling_ns (the same less
    floor_ns).
    And per device the chains' operator sequences whose fusion saves most (PATTERN_SCHEMA:
    pattern "pow > mul > add > mul > tanh > add > mul > mul", how many chains repeat it,
    its operators, their kernel time and the saving at the trace's bandwidth, window).

    `kernels`: the kernels inside the windows with kernel_class and clipped_ns."""
    if kernels.height == 0:
        return pl.DataFrame(schema=SCHEMA), pl.DataFrame(schema=PATTERN_SCHEMA)
    ordered = (
        kernels.lazy()
        .filter(pl.col("kernel_class").cast(pl.String) != "comm")
        .select(
            *DEVICE_KEY,
            "stream",
            "start_ns",
            "step",
            "correlation",
            "clipped_ns",
            mb=pl.col("kernel_class").cast(pl.String) == "memory_bound",
            cast=pl.col("kernel_class").cast(pl.String) == "copy_cast",
        )
        .join(launch_ops(timeline), on=["rank", "correlation"], how="left")
    )
    wanted = (
        ordered.filter(pl.col("mb") | pl.col("cast")).select("rank", external_id="op_link").unique()
    )
    ops = operator_bytes(timeline, wanted).select(
        "rank",
        "op_start",
        "op_end",
        "op_name",
        "bytes",
        "tensor_elems",
        op_link="external_id",
        kept=pl.col("into_out") | pl.col("op_name").str.contains(KEEPS_OUTPUT),
    )
    peaks = _peaks(devices)
    stream = [*DEVICE_KEY, "stream"]
    linked = (
        ordered.join(ops, on=["rank", "op_link"], how="left")
        # a link counts only where the launch started inside the operator
        .with_columns(
            _linked=pl.col("bytes").is_not_null()
            & pl.col("launch_ns").is_between(pl.col("op_start"), pl.col("op_end"))
        )
        .sort(*DEVICE_KEY, "stream", "start_ns")
        .pipe(_chained_casts, stream)
        .with_columns(known=(pl.col("mb") | pl.col("cast")) & pl.col("_linked"))
    )
    # an operator whose traffic is above the peak at its own kernel time has no bytes
    plausible = (
        linked.filter(pl.col("known"))
        .group_by("rank", "op_link")
        .agg(pl.col("clipped_ns").sum(), pl.col("bytes").first(), pl.col("device").first())
        .join(peaks.lazy(), on=DEVICE_KEY, how="left")
        .filter(
            pl.col("peak_gbps").is_null()
            | (pl.col("bytes") <= pl.col("peak_gbps") * pl.col("clipped_ns"))
        )
        .select("rank", "op_link", plausible=pl.lit(True))
    )
    runs = (
        linked.join(plausible, on=["rank", "op_link"], how="left")
        .with_columns(known=pl.col("known") & pl.col("plausible").fill_null(False))
        .sort(*DEVICE_KEY, "stream", "start_ns")  # joins do not keep the order shifts need
        .with_columns(
            # a new chain at every kernel that is not a known memory-bound operator's, at
            # every operator that writes a tensor kept after it, and at every step boundary
            chain=(
                ~pl.col("known")
                | pl.col("kept").fill_null(True)
                | pl.col("step").ne_missing(pl.col("step").shift(1).over(stream))
            )
            .cum_sum()
            .over(stream),
            # a new operator where the launching operator changes
            new_op=pl.col("op_link").ne_missing(pl.col("op_link").shift(1).over(stream)),
        )
    )
    # read twice below (the chains, then the memory-bound total): made once, as the plan
    # made it twice (on a 741 MB trace with stacks, 0.26 s against 0.19 s for this model here)
    runs = runs.collect().lazy()
    per_op = (
        runs.filter(pl.col("known"))
        .with_columns(op_seq=pl.col("new_op").cum_sum().over(stream))
        .group_by(*stream, "chain", "op_seq")
        .agg(
            kernel_ns=pl.col("clipped_ns").sum(),
            bytes=pl.col("bytes").first(),
            op_name=pl.col("op_name").first(),
            start_ns=pl.col("start_ns").min(),
        )
    )
    chains = (
        per_op.group_by(*stream, "chain")
        .agg(
            kernel_ns=pl.col("kernel_ns").sum(),
            bytes=pl.col("bytes").sum(),
            fused=pl.col("bytes").max(),
            size=pl.len(),
            pattern=pl.col("op_name")
            .sort_by("start_ns")
            .str.replace(r"^aten::", "")
            .str.join(" > "),
        )
        .collect()
        .lazy()
    )
    patterns = (
        chains.filter(pl.col("size") > 1)
        .with_columns(saving=pl.col("kernel_ns") * (1 - pl.col("fused") / pl.col("bytes")))
        .group_by(*DEVICE_KEY, "pattern")
        .agg(
            chains=pl.len().cast(pl.Int64),
            ops=pl.col("size").first().cast(pl.Int64),
            kernel_ns=pl.col("kernel_ns").sum(),
            saving_ns=pl.col("saving").sum().round().cast(pl.Int64),
        )
        .sort(["saving_ns", "pattern"], descending=[True, False])
        .group_by(DEVICE_KEY, maintain_order=True)
        .head(TOP_PATTERNS)
        .collect()
    )
    known = chains.group_by(DEVICE_KEY).agg(
        known_ns=pl.col("kernel_ns").sum(),
        bytes=pl.col("bytes").sum(),
        intermediate_bytes=(pl.col("bytes") - pl.col("fused")).sum(),
        chains=(pl.col("size") > 1).sum().cast(pl.Int64),
        chain_ops=pl.col("size").filter(pl.col("size") > 1).sum().cast(pl.Int64),
    )
    total = (
        runs.filter(pl.col("mb") | pl.col("cast"))
        .group_by(DEVICE_KEY)
        .agg(
            memory_bound_ns=pl.col("clipped_ns").filter(~pl.col("cast")).sum(),
            cast_ns=pl.col("clipped_ns").filter(pl.col("cast")).sum(),
        )
    )
    share = pl.col("intermediate_bytes") / pl.col("bytes")
    fused = pl.col("bytes") - pl.col("intermediate_bytes")
    model = (
        total.join(known, on=DEVICE_KEY, how="left")
        .join(peaks.lazy(), on=DEVICE_KEY, how="left")
        .with_columns(
            pl.col("known_ns", "bytes", "intermediate_bytes", "chains", "chain_ops").fill_null(0)
        )
        .with_columns(
            unknown_ns=pl.col("memory_bound_ns") + pl.col("cast_ns") - pl.col("known_ns"),
            fused_bytes=fused,
            achieved_gbps=pl.when(pl.col("known_ns") > 0).then(
                pl.col("bytes") / pl.col("known_ns")
            ),
            floor_ns=(fused / pl.col("peak_gbps")).round().cast(pl.Int64),
            fusible_share=pl.when(pl.col("bytes") > 0).then(share),
        )
        .with_columns(
            saving_ns=(pl.col("fusible_share") * (pl.col("memory_bound_ns") + pl.col("cast_ns")))
            .round()
            .cast(pl.Int64),
            ceiling_ns=pl.col("memory_bound_ns")
            + pl.col("cast_ns")
            - pl.col("floor_ns").fill_null(0),
        )
        .select(list(SCHEMA))
        .sort(DEVICE_KEY)
        .collect()
        .cast(SCHEMA)  # type: ignore[arg-type]
    )
    return model, patterns.select(list(PATTERN_SCHEMA)).cast(PATTERN_SCHEMA)  # type: ignore[arg-type]


def _chained_casts(kernels: pl.LazyFrame, stream: list[str]) -> pl.LazyFrame:
    """The copy/cast kernels that are a memory-bound chain's own (`cast` true, not a kept
    output): a cast or copy of a tensor of the elements of the memory-bound operator before or
    after it on the stream (autocast's fp32 cast of a hand-written activation's input, and of
    its result back to bf16). Other copies and casts (weights, a layout) drop out of the
    sequence: they neither join nor break a chain. Sorted by stream and start."""
    elems = pl.col("tensor_elems")
    mb_elems = pl.when(pl.col("mb") & pl.col("_linked")).then(elems)
    member = (
        pl.col("cast")
        & pl.col("_linked")
        & ((elems == pl.col("_before")) | (elems == pl.col("_after"))).fill_null(False)
    )
    return (
        kernels.with_columns(
            _before=mb_elems.forward_fill().over(stream),
            _after=mb_elems.backward_fill().over(stream),
        )
        .with_columns(_member=member)
        .filter(~pl.col("cast") | pl.col("_member"))
        .with_columns(
            cast=pl.col("_member"),
            kept=pl.when(pl.col("_member")).then(False).otherwise(pl.col("kept")),
        )
        .drop("_before", "_after", "_member")
    )


def _peaks(devices: tuple[DeviceInfo, ...]) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "rank": [d.rank for d in devices],
            "device": [d.device for d in devices],
            "peak_gbps": [peak_bandwidth_gbps(d.name, d.memory_bytes) for d in devices],
        },
        schema={"rank": pl.Int32, "device": pl.Int32, "peak_gbps": pl.Float64},
    ).unique(subset=DEVICE_KEY)


def price_per_step(
    model: dict[str, int | float | None],
    steps: int,
    half_saving_ns: int | None,
    path_memory_bound_ns: float | None,
) -> tuple[int | None, int | None]:
    """TA004's price and ceiling per step for one device's `memory_bound_model` row, over
    `steps` steps (1 for a window without step markers).

    The fix saves `fusible_share` of the memory-bound time. On the critical path that is
    the `memory_bound_2x` what-if (`half_saving_ns`, the saving when they take half the time)
    scaled to the share, and no more than the share of the memory-bound time on the path
    (`path_memory_bound_ns` per step): a host-bound step gains nothing from faster kernels.
    Without a critical path, the share of the kernels' time per step. Never above the ceiling
    (`ceiling_ns` per step). A device without bytes (null share) keeps the halving what-if,
    under a ceiling of all its memory-bound time."""
    # the chains' casts are memory passes the what-if of faster memory-bound kernels did not
    # shorten: taken on the critical path in the same proportion as the kernels around them
    bound, casts = int(model["memory_bound_ns"] or 0), int(model.get("cast_ns") or 0)
    total = bound + casts
    with_casts = total / bound if bound else 1.0
    share = model["fusible_share"]
    ceiling_ns = model["ceiling_ns"] if share is not None else total
    ceiling = int(ceiling_ns or 0) // steps if steps else None
    if share is None:
        share = 0.5
    share = float(share)
    if half_saving_ns is not None and path_memory_bound_ns is not None:
        price = min(half_saving_ns * share / 0.5, path_memory_bound_ns * share) * with_casts
    else:
        price = total * share / steps if steps else 0.0
    if ceiling is not None:
        price = min(price, ceiling)
    return max(0, round(price)), ceiling


@dataclass(frozen=True, slots=True)
class MemoryImpact:
    """What fusing the memory-bound kernels saves, on the device where it saves most (TA004's
    impact model, `memory_impact`).

    - `model`: that device's `memory_bound_model` row (Metrics.fusion.model; None without
      memory-bound kernels);
    - `impact_ns`, `ceiling_ns`: its price and ceiling per step (`price_per_step`);
    - `top_chain`: its chain pattern whose fusion saves most (pattern, chains_per_step, ops,
      kernel_ns_per_step, saving_ns_per_step; None without patterns), and `patterns`: all
      its listed patterns, most saving first;
    - `cast_ns`: the casts that are the chains' own (`_chained_casts`), every device.
    """

    model: dict[str, Any] | None
    impact_ns: int | None
    ceiling_ns: int | None
    top_chain: dict[str, Any] | None
    patterns: tuple[str, ...]
    #: the copy/cast kernel time inside memory-bound chains, every device, the window's
    cast_ns: int = 0


def memory_impact(
    model: pl.DataFrame,
    patterns: pl.DataFrame,
    critical_steps: pl.DataFrame,
    savings: Mapping[tuple[int, str], int],
    counts: StepCounts,
) -> MemoryImpact:
    """The MemoryImpact of the device whose fix saves most (the first such in `model`'s order
    on a tie). Each device is priced by `price_per_step` over its steps (`counts`), with the
    rank's `memory_bound_2x` what-if (`savings`) and the rank's mean memory-bound time on
    the critical path (`critical_steps`). `model`, `patterns`: Metrics.fusion.model and
    .patterns."""
    best: tuple[int | None, int | None, dict[str, Any] | None] = (None, None, None)
    for row in model.iter_rows(named=True):
        rank, device = row["rank"], row["device"]
        path = critical_steps.filter(pl.col("rank") == rank)
        path_ns = path["gpu_memory_bound_ns"].mean() if path.height else None
        price, ceiling = price_per_step(
            row,
            counts.on(rank, device),
            savings.get((rank, "memory_bound_2x")),
            float(path_ns) if path_ns is not None else None,  # type: ignore[arg-type]
        )
        if best[0] is None or (price or 0) > best[0]:
            best = (price, ceiling, row)
    chain, listed = _top_pattern(patterns, best[2], counts)
    casts = int(model["cast_ns"].sum() or 0) if model.height else 0
    return MemoryImpact(
        model=best[2],
        impact_ns=best[0],
        ceiling_ns=best[1],
        top_chain=chain,
        patterns=listed,
        cast_ns=casts,
    )


def _top_pattern(
    patterns: pl.DataFrame, model: dict[str, Any] | None, counts: StepCounts
) -> tuple[dict[str, Any] | None, tuple[str, ...]]:
    """The chain pattern of the priced device whose fusion saves most (per step), and all
    its listed patterns, most saving first."""
    if not model:
        return None, ()
    rank, device = model["rank"], model["device"]
    rows = patterns.filter((pl.col("rank") == rank) & (pl.col("device") == device))
    if not rows.height:
        return None, ()
    top = rows.row(0, named=True)
    steps = counts.on(rank, device) or 1
    return {
        "pattern": top["pattern"],
        "chains_per_step": top["chains"] / steps,
        "ops": top["ops"],
        "kernel_ns_per_step": top["kernel_ns"] // steps,
        "saving_ns_per_step": top["saving_ns"] // steps,
    }, tuple(rows["pattern"].to_list())


#: Chains that are a known layer written by hand, recognised by their operators (each a
#: regex over the pattern's text): what they are and the one-kernel replacement.
HAND_WRITTEN: tuple[tuple[str, str, str], ...] = (
    (
        r"\btanh(?:_backward)?\b.*\bpow\b|\bpow\b.*\btanh(?:_backward)?\b",
        "a hand-written tanh GELU",
        'F.gelu(x, approximate="tanh")',
    ),
    (r"\berf\b", "a hand-written GELU", "F.gelu(x)"),
    (
        r"\bmean\b.*\b(?:var|pow)\b.*\b(?:sqrt|rsqrt)\b",
        "a hand-written LayerNorm or RMSNorm",
        "F.layer_norm / F.rms_norm (torch.nn.LayerNorm, torch.nn.RMSNorm)",
    ),
    (r"\bsigmoid > mul\b|\bmul > sigmoid\b", "a hand-written SiLU (x * sigmoid(x))", "F.silu(x)"),
)


def named_layer(patterns: Sequence[str]) -> tuple[str, str] | None:
    """(what it is, its fused replacement) for the first known layer written by hand that
    one of `patterns` (chains' operators, "pow > mul > add > mul > tanh > add > mul", most
    saving first) holds."""
    for pattern in patterns:
        for regex, what, fix in HAND_WRITTEN:
            if re.search(regex, pattern):
                return what, fix
    return None


@dataclass(frozen=True, slots=True)
class Fusion:
    """The memory-bound kernels' traffic and what fusing them saves (Metrics.fusion).

    - `model`: rank, device, memory_bound_ns, known_ns, unknown_ns, bytes,
      intermediate_bytes, fused_bytes, chains, chain_ops, achieved_gbps, peak_gbps,
      floor_ns, fusible_share, saving_ns, ceiling_ns: per device, the traffic, the part a
      fusion removes and the roof (`memory_bound_model`, SCHEMA).
    - `patterns`: rank, device, pattern, chains, ops, kernel_ns, saving_ns: the operator
      sequences of the chains whose fusion saves most (PATTERN_SCHEMA).

    Its frames are checked against `SCHEMAS` when it is built.
    """

    SCHEMAS: ClassVar[Schemas] = {"model": SCHEMA, "patterns": PATTERN_SCHEMA}

    model: pl.DataFrame
    patterns: pl.DataFrame

    def __post_init__(self) -> None:
        check_frames(self, "Metrics.fusion", self.SCHEMAS)
