"""Achieved memory bandwidth of memory-bound kernels, against the GPU's peak.

Where the trace records the launching operator's input shapes and dtypes
(`record_shapes=True`), the bytes an operator moves are estimated from them: every tensor
input is read once, and the output is written once and taken to be as large as the largest
input (elementwise, normalisation, softmax and casts; `copy_` reads its source and writes its
destination, which are both inputs; a fill or random init only writes). Scalars and
non-tensor arguments move nothing. Operators that touch a few elements of a large input by
index (nll_loss, embedding, gather, scatter, index_*) get no estimate. Reductions (sum,
mean, var, amax...) read their input and write a result too small to count. An operator
near 100 % of the peak is at the memory wall: only fusion (fewer passes over memory) makes
it faster. An estimate above the peak is not a figure to show: the data came from the L2
cache (tensors smaller than L2, re-read right after being written) or the shapes
over-count the bytes (a broadcast input, a strided view); such rows keep their bytes, get
`beyond_peak` and no achieved bandwidth.

Achieved bandwidth = estimated bytes / time of the memory-bound and copy/cast kernels the
operator launched. Peaks come from a table of known GPUs, matched on the device name the trace
records and, for a name that covers several memories, its memory size (decimal GB/s, HBM or
GDDR, dense).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, ClassVar

import polars as pl

from traceanalyzer.analyses.gpu.operators import (
    SHAPE_TEXT,
    decoded_shapes,
    launch_ops,
    list_product,
    operator_rows,
    with_shapes,
)
from traceanalyzer.analyses.timeline.frames import Schemas, check_frames
from traceanalyzer.analyses.timeline.windows import DEVICE_KEY
from traceanalyzer.model import DeviceInfo, Timeline

#: (device-name pattern, peak memory bandwidth in GB/s); first match wins. Parts whose name
#: covers several memories are told apart by the memory the trace records (`MEMORY_VARIANTS`).
PEAK_BANDWIDTH_GBPS: tuple[tuple[str, float], ...] = (
    (r"B200", 8000.0),
    (r"B100", 8000.0),
    (r"GH200", 4900.0),
    (r"H200", 4800.0),
    (r"H100.*PCIe", 2000.0),
    (r"H100 NVL", 3900.0),
    (r"H100|H800", 3350.0),
    (r"A100.*80GB", 2039.0),
    (r"A100|A800", 1555.0),
    (r"V100", 900.0),
    (r"A40\b", 696.0),
    (r"A10\b", 600.0),
    (r"L40S?\b", 864.0),
    (r"L4\b", 300.0),
    (r"T4\b", 320.0),
    (r"RTX 2080 Ti", 616.0),
    (r"RTX 3090", 936.0),
    (r"RTX 3080", 760.0),
    (r"RTX 3060", 360.0),
    (r"RTX 4090", 1008.0),
    (r"MI300X", 5300.0),
    (r"MI250", 3277.0),
)

#: (device-name pattern, largest memory in GiB, peak GB/s): a part sold with several memories
#: whose name does not say which, told apart by the device memory the trace records; first
#: match wins. GH200 comes with 96 GB of HBM3 (4.0 TB/s; 94.5 GiB usable) or 144 GB of
#: HBM3e (4.9 TB/s); an "H100" with ~94 GB is the NVL part (3.9 TB/s), with 80 GB the SXM
#: (HBM3, 3.35 TB/s) unless its name says PCIe; an A100 with 80 GB is the 2.0 TB/s part
#: whatever its name says (NVIDIA datasheets).
MEMORY_VARIANTS: tuple[tuple[str, float, float], ...] = (
    (r"GH200", 100.0, 4000.0),
    (r"H100(?!.*PCIe)", 90.0, 3350.0),
    (r"H100(?!.*PCIe)", 100.0, 3900.0),
    (r"A100(?!.*PCIe)", 48.0, 1555.0),
    (r"A100(?!.*PCIe)", 90.0, 2039.0),
)

#: Bytes per element of the dtypes torch records in `Input type`.
DTYPE_BYTES: dict[str, int] = {
    "float": 4,
    "double": 8,
    "c10::Half": 2,
    "c10::BFloat16": 2,
    "long int": 8,
    "int": 4,
    "short int": 2,
    "signed char": 1,
    "unsigned char": 1,
    "bool": 1,
    "c10::Float8_e4m3fn": 1,
    "c10::Float8_e5m2": 1,
    "c10::complex<float>": 8,
    "c10::complex<double>": 16,
}

_BANDWIDTH_CLASSES = ["memory_bound", "copy_cast"]


def peak_bandwidth_gbps(device_name: str | None, memory_bytes: int | None = None) -> float | None:
    """The peak memory bandwidth of a known GPU, by its name and, for a name that covers
    parts with different memories (`MEMORY_VARIANTS`), the device memory; None when unknown."""
    if not device_name:
        return None
    if memory_bytes:
        gib = memory_bytes / 2**30
        for pattern, most, gbps in MEMORY_VARIANTS:
            if re.search(pattern, device_name) and gib <= most:
                return gbps
    for pattern, gbps in PEAK_BANDWIDTH_GBPS:
        if re.search(pattern, device_name):
            return gbps
    return None


#: Operators that write their output and read none of it (a fill, a random init): their
#: traffic is the output once (`fill_(self, v)` writes self; counting self as read too
#: doubled it: 196 % of the H100's peak on a real trace).
WRITE_ONLY_OPS = (
    r"^aten::(?:fill_|zero_|zeros|zeros_like|ones|ones_like|full|full_like|new_zeros|new_ones"
    r"|new_full|normal_|uniform_|bernoulli_|random_|exponential_|arange|linspace)$"
)
#: Operators that touch a few elements of a large input (by index, mask or target): their
#: traffic cannot be estimated from the input shapes (nll_loss reads one logit per row of an
#: N x vocabulary input: shapes made it 14x the H100's peak), so they get no bandwidth.
SPARSE_ACCESS_OPS = (
    r"^aten::(?:nll_loss|nll_loss2d|embedding|_embedding_bag|index|index_select|index_add"
    r"|index_copy|index_fill|index_put|gather|scatter|scatter_add|scatter_reduce|take"
    r"|masked_select|masked_scatter|nonzero|multinomial)"
    # compute-bound operators: a memory-bound kernel they launch (a split-K reduction, a
    # cast of the weights) moves a small part of their inputs: shapes made one 5.6x the peak
    r"|^aten::(?:mm|bmm|addmm|addmv|baddbmm|matmul|linear|_scaled_mm|conv\w*|cudnn_conv\w*"
    r"|_convolution\w*|\w*scaled_dot_product\w*|_flash_attention\w*|_efficient_attention\w*)$"
)


#: Reductions: they read their input and write a result far smaller (one value per reduced
#: row or the whole tensor): the output is not counted (taking it as large as the input made
#: a mean over the last dimension 330 % of an RTX 4090's peak).
REDUCTION_OPS = (
    r"^aten::(?:sum|mean|nansum|nanmean|var|std|var_mean|std_mean|amax|amin|aminmax|max|min"
    r"|argmax|argmin|norm|linalg_vector_norm|prod|logsumexp|all|any|count_nonzero)$"
)


#: Elementwise operators and the inputs their functional form records (tensors and scalars,
#: `alpha` included): a call recorded with one input more whose last input is a tensor as
#: large as the largest is the `out=` form, and that last input is its output, written, not
#: read (`torch.add(a, b, out=c)` records a, b, alpha and c: counting c as read and the
#: output again made it 133 % of the H100's peak).
ELEMENTWISE_ARITY: dict[str, int] = {
    **{
        f"aten::{op}": 1
        for op in [
            "neg",
            "abs",
            "exp",
            "exp2",
            "expm1",
            "log",
            "log1p",
            "log2",
            "log10",
            "sqrt",
            "rsqrt",
            "sin",
            "cos",
            "tan",
            "tanh",
            "sigmoid",
            "relu",
            "silu",
            "mish",
            "erf",
            "erfc",
            "reciprocal",
            "sign",
            "floor",
            "ceil",
            "round",
            "trunc",
            "bitwise_not",
            "logical_not",
            "isnan",
            "isinf",
            "sgn",
            "frac",
        ]
    },
    **{
        f"aten::{op}": 2
        for op in [
            "mul",
            "div",
            "pow",
            "maximum",
            "minimum",
            "fmax",
            "fmin",
            "eq",
            "ne",
            "lt",
            "le",
            "gt",
            "ge",
            "logical_and",
            "logical_or",
            "logical_xor",
            "bitwise_and",
            "bitwise_or",
            "bitwise_xor",
            "fmod",
            "remainder",
            "atan2",
            "hypot",
            "copysign",
            "xlogy",
            "gelu",
            "leaky_relu",
        ]
    },
    **{
        f"aten::{op}": 3
        for op in [
            "add",
            "sub",
            "rsub",
            "clamp",
            "where",
            "lerp",
            "threshold",
            "hardtanh",
            "softplus",
        ]
    },
    **{f"aten::{op}": 4 for op in ["addcmul", "addcdiv"]},
}


def operator_bytes(timeline: Timeline, wanted: pl.LazyFrame | None = None) -> pl.LazyFrame:
    """rank, external_id, op_name, op_start, op_end, bytes, written, into_out: the estimated
    traffic of each CPU operator whose shapes and dtypes were recorded, the part of it that
    is its output, and whether it wrote into an `out=` tensor (only those in `wanted`, rank
    and external_id, when given)."""
    candidates = timeline.events.lazy()
    if wanted is not None:
        candidates = candidates.join(wanted, on=["rank", "external_id"], how="semi")
    ops = operator_rows(candidates).collect()
    # the traffic of each distinct shape text, computed once (a trace repeats its shapes)
    shapes = (
        decoded_shapes(ops.lazy())
        .filter(pl.col("dims").list.len() == pl.col("types").list.len())
        .filter(pl.col("dims").list.len() > 0)
        .with_row_index("_shape")
        .collect()
    )
    size = pl.col("types").replace_strict(DTYPE_BYTES, default=None, return_dtype=pl.Int64)
    rank = shapes.select(pl.col("dims").explode().list.len().max()).item() or 0
    traffic = (
        shapes.lazy()
        .select("_shape", "dims", "types")
        .explode("dims", "types")
        .with_columns(
            nelems=list_product(pl.col("dims"), rank),
            nbytes=list_product(pl.col("dims"), rank) * size,
        )
        .group_by("_shape")
        .agg(
            read=pl.col("nbytes").sum(),
            largest=pl.col("nbytes").max(),
            largest_elems=pl.col("nelems").sort_by("nbytes").last(),
            last=pl.col("nbytes").last(),
            inputs=pl.len(),
        )
        .join(shapes.lazy().select("_shape", *SHAPE_TEXT), on="_shape")
        .drop("_shape")
    )
    name = pl.col("op_name")
    is_copy = name.str.contains(r"^aten::copy_$")
    arity = name.replace_strict(ELEMENTWISE_ARITY, default=None, return_dtype=pl.Int64)
    into_out = ((pl.col("inputs") == arity + 1) & (pl.col("last") == pl.col("largest"))).fill_null(
        False
    )
    return (
        with_shapes(ops.lazy(), traffic)
        .filter((pl.col("read") > 0) & ~name.str.contains(SPARSE_ACCESS_OPS))
        .select(
            "rank",
            "external_id",
            "op_name",
            "op_start",
            "op_end",
            bytes=pl.when(is_copy | into_out)
            .then(pl.col("read"))
            .when(name.str.contains(WRITE_ONLY_OPS))
            .then(pl.col("largest"))
            .when(name.str.contains(REDUCTION_OPS))
            .then(pl.col("read"))
            .otherwise(pl.col("read") + pl.col("largest")),
            # the output: as large as the largest input, none for a reduction
            written=pl.when(name.str.contains(REDUCTION_OPS))
            .then(pl.lit(0, pl.Int64))
            .otherwise(pl.col("largest")),
            into_out=into_out,
            # the elements of its largest tensor (a cast's, a copy's too)
            tensor_elems=pl.col("largest_elems"),
            # the arithmetic, at one FLOP per element of the largest tensor (a lower bound:
            # a norm or an activation does a few); a copy or a fill does none
            elements=pl.when(is_copy | name.str.contains(WRITE_ONLY_OPS))
            .then(pl.lit(0, pl.Int64))
            .otherwise(pl.col("largest_elems")),
        )
    )


def memory_bound_bandwidth(
    timeline: Timeline,
    kernels: pl.DataFrame,
    devices: tuple[DeviceInfo, ...],
    measured: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """Per (rank, device, op_name), for memory-bound and copy/cast kernels whose operator's
    traffic is known: ops (operator calls), kernel_ns, bytes, elements, gbps, peak_gbps,
    beyond_peak, share_of_peak (null where the GPU is unknown), source and estimated_bytes.
    Most kernel time first.

    `kernels`: kernels inside the windows with kernel_class, op_name and clipped_ns.
    `measured`: rank, device, correlation, dram_bytes of the kernels Nsight Compute measured
    (`ncu_join.Matched.measured_bytes`; None without `--ncu`). An operator all of whose
    calls' kernels were measured has ncu's DRAM bytes (`source` "ncu", the shapes' estimate
    beside them in `estimated_bytes`, null where a call has none); any other has the
    estimate from its calls with shapes (`source` "shapes").
    """
    launches = launch_ops(timeline)
    # a link counts only where the launch started inside the operator: some producers
    # write the correlation id as the launch's external id, which would hit unrelated ops
    linked = (
        kernels.lazy()
        .filter(pl.col("kernel_class").cast(pl.String).is_in(_BANDWIDTH_CLASSES))
        .select(*DEVICE_KEY, "correlation", "clipped_ns", kernel_op="op_name")
        .join(launches, on=["rank", "correlation"])
        .collect()
        .lazy()
    )
    wanted = linked.select("rank", external_id="op_link").unique()
    per_call = (
        linked.join(
            operator_bytes(timeline, wanted),
            left_on=["rank", "op_link"],
            right_on=["rank", "external_id"],
        )
        .filter(pl.col("launch_ns").is_between(pl.col("op_start"), pl.col("op_end")))
        .group_by(*DEVICE_KEY, "op_link", "op_name", "bytes", "elements")
        .agg(kernel_ns=pl.col("clipped_ns").sum())
        .with_columns(ncu_bytes=pl.lit(None, pl.Int64))
    )
    if measured is not None:
        per_call = _with_measured(per_call, linked, measured)
    peaks = pl.DataFrame(
        {
            "rank": [d.rank for d in devices],
            "device": [d.device for d in devices],
            "peak_gbps": [peak_bandwidth_gbps(d.name, d.memory_bytes) for d in devices],
        },
        schema={"rank": pl.Int32, "device": pl.Int32, "peak_gbps": pl.Float64},
    ).unique(subset=DEVICE_KEY)
    est = pl.col("bytes").is_not_null()
    ncu = pl.col("ncu_bytes").null_count() == 0
    return (
        per_call.group_by(*DEVICE_KEY, "op_name")
        .agg(
            _ncu=ncu,
            _ncu_ops=pl.len().cast(pl.Int64),
            _ncu_ns=pl.col("kernel_ns").sum(),
            _ncu_bytes=pl.col("ncu_bytes").sum(),
            _complete=pl.col("bytes").null_count() == 0,
            ops=est.sum().cast(pl.Int64),
            kernel_ns=pl.col("kernel_ns").filter(est).sum(),
            bytes=pl.col("bytes").filter(est).sum(),
            elements=pl.col("elements").filter(est).sum(),
        )
        .with_columns(
            source=pl.when("_ncu").then(pl.lit("ncu")).otherwise(pl.lit("shapes")),
            estimated_bytes=pl.when(pl.col("_complete") | ~pl.col("_ncu")).then("bytes"),
            elements=pl.when(pl.col("_complete") | ~pl.col("_ncu")).then("elements"),
        )
        .with_columns(
            ops=pl.when("_ncu").then("_ncu_ops").otherwise("ops"),
            kernel_ns=pl.when("_ncu").then("_ncu_ns").otherwise("kernel_ns"),
            bytes=pl.when("_ncu").then("_ncu_bytes").otherwise("bytes"),
        )
        .filter((pl.col("kernel_ns") > 0) & (pl.col("_ncu") | (pl.col("ops") > 0)))
        .drop("_ncu", "_ncu_ops", "_ncu_ns", "_ncu_bytes", "_complete")
        .with_columns(gbps=pl.col("bytes") / pl.col("kernel_ns"))
        .join(peaks.lazy(), on=DEVICE_KEY, how="left")
        .with_columns(beyond_peak=(pl.col("gbps") > pl.col("peak_gbps")).fill_null(False))
        .with_columns(
            # an estimate above the physical peak is not shown: the tensors came from the L2
            # cache (small, re-read right after being written) or the shapes over-count the
            # bytes (a broadcast input read once, a view); the bytes stay for the record.
            # ncu's bytes (cold caches) over the job's time can pass it too: L2 hits
            gbps=pl.when(pl.col("beyond_peak")).then(None).otherwise(pl.col("gbps")),
        )
        .with_columns(share_of_peak=pl.col("gbps") / pl.col("peak_gbps"))
        .select(*Bandwidth.SCHEMAS["operators"])
        .sort(
            ["kernel_ns", "rank", "device", "op_name", "source"],
            descending=[True, False, False, False, False],
        )
        .collect()
    )


def _with_measured(
    per_call: pl.LazyFrame, linked: pl.LazyFrame, measured: pl.DataFrame
) -> pl.LazyFrame:
    """Each operator call (rank, device, op_link) with ncu_bytes: the DRAM bytes of its
    kernels where every one of them was measured (else null); calls without shapes that ncu
    measured are added (their op_name from the kernels' launching operator)."""
    calls = (
        linked.join(measured.lazy(), on=[*DEVICE_KEY, "correlation"], how="left")
        .group_by(*DEVICE_KEY, "op_link")
        .agg(
            _op=pl.col("kernel_op").drop_nulls().first(),
            _ns=pl.col("clipped_ns").sum(),
            ncu_bytes=pl.when(pl.col("dram_bytes").null_count() == 0).then(
                pl.col("dram_bytes").sum()
            ),
        )
    )
    return (
        per_call.drop("ncu_bytes")
        .join(calls, on=[*DEVICE_KEY, "op_link"], how="full", coalesce=True)
        .with_columns(
            op_name=pl.coalesce("op_name", "_op"),
            kernel_ns=pl.coalesce("kernel_ns", "_ns"),
        )
        .filter(pl.col("op_name").is_not_null())
        .drop("_op", "_ns")
    )


def top_operators(bandwidth: pl.DataFrame, n: int) -> list[dict[str, Any]]:
    """The `n` memory-bound operators with the most kernel time (`memory_bound_bandwidth`
    sorts them: Metrics.bandwidth.operators), with their achieved bandwidth and share of
    the peak, and where their bytes come from (`source`: "ncu" or "shapes")."""
    cols = ["rank", "device", "op_name", "ops", "kernel_ns", "gbps", "share_of_peak", "source"]
    return bandwidth.head(n).select(cols).to_dicts()


@dataclass(frozen=True, slots=True)
class Bandwidth:
    """The memory-bound operators' achieved bandwidth, where shapes are recorded
    (Metrics.bandwidth).

    - `operators`: rank, device, op_name, ops, kernel_ns, bytes, elements (the largest
      tensor's elements: a lower bound on the arithmetic, 0 for copies and fills), gbps,
      peak_gbps,
      beyond_peak, share_of_peak, source ("ncu": Nsight Compute's DRAM bytes for every call;
      "shapes": estimated from the recorded shapes), estimated_bytes (the shapes' estimate):
      per device, operator and source, longest first (`memory_bound_bandwidth`).

    Its frame is checked against `SCHEMAS` when it is built.
    """

    SCHEMAS: ClassVar[Schemas] = {
        "operators": {
            "rank": pl.Int32,
            "device": pl.Int32,
            "op_name": pl.String,
            "ops": pl.Int64,
            "kernel_ns": pl.Int64,
            "bytes": pl.Int64,
            "elements": pl.Int64,
            "gbps": pl.Float64,
            "peak_gbps": pl.Float64,
            "beyond_peak": pl.Boolean,
            "share_of_peak": pl.Float64,
            "source": pl.String,
            "estimated_bytes": pl.Int64,
        }
    }

    operators: pl.DataFrame

    def __post_init__(self) -> None:
        check_frames(self, "Metrics.bandwidth", self.SCHEMAS)
