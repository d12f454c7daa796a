"""Chrome reader, normalisation: one block's raw events (as parsed) -> rows of the timeline's
event schema, with the counts of what was dropped and why (unknown categories, missing,
zero or out-of-range times, negative durations), copy kinds read off memcpy names, and
exact duplicate events counted once."""

from __future__ import annotations

from collections import Counter

import polars as pl

from traceanalyzer.model import KIND, Kind

#: Kineto `cat` -> timeline kind (the 2021 schema capitalises its categories).
KIND_BY_CAT: dict[str, str] = {
    "kernel": "kernel",
    "Kernel": "kernel",
    "gpu_memcpy": "memcpy",
    "Memcpy": "memcpy",
    "gpu_memset": "memset",
    "Memset": "memset",
    "cuda_runtime": "runtime",
    "Runtime": "runtime",
    "cuda_driver": "driver",
    "cpu_op": "cpu_op",
    "Operator": "cpu_op",
    "user_annotation": "annotation",
    "gpu_user_annotation": "gpu_annotation",
    "python_function": "python",
    "cuda_sync": "sync",
}


#: Convolution operators (`aten::convolution`, `aten::cudnn_convolution`, `aten::conv2d`,
#: `aten::convolution_backward`, `aten::_conv_depthwise2d`, ...): the operators whose
#: `Concrete Inputs` (their stride, padding, dilation...) the model keeps.
CONV_OP_NAME = r"^aten::\w*conv"


#: Categories that Kineto always writes and the model does not need: not worth a count.
IGNORED_CATS = frozenset({"trace", "overhead", "fwdbwd", "ac2g", "async", "async_cpu_to_gpu"})


#: The legacy `torch.autograd.profiler` export (torch 1.x, `use_kineto=False`): events with
#: no category whose `pid` names the side ("CPU functions": an operator; "CUDA functions",
#: "GPU functions": that operator's time on the GPU, measured with CUDA events, its `tid` the
#: device).
LEGACY_HOST_PID = "CPU functions"
LEGACY_DEVICE_PIDS = ("CUDA functions", "GPU functions")
#: The drop counter's key that marks a legacy export (keys in parentheses are not drops).
LEGACY = "(legacy autograd profiler)"


#: A `[memory]` instant event of a CUDA device (profile_memory=True; Device Type 1 is CUDA).
_CUDA_MEMORY_EVENT = (
    (pl.col("ph") == "i")
    & (pl.col("name") == "[memory]")  # compared as a category, not cast per row
    & (pl.col("Device Type") == 1)
)


_DEVICE_KINDS = ("kernel", "memcpy", "memset", "gpu_annotation", "sync")


#: One block's normalised events and the counts of what it dropped.
Frame = tuple[pl.DataFrame | None, Counter[str]]


def _int_of(col: pl.Expr, text: bool) -> pl.Expr:
    """An id as Int64; as text it may read `7`, `"7"`, `"stream 7"` or `"0x1f"`."""
    if not text:
        return col
    t = col.str.strip_chars()
    hexa = t.str.strip_prefix("0x").str.to_integer(base=16, strict=False)
    digits = t.str.extract(r"(-?\d+)(?:\.0+)?$", 1).str.to_integer(strict=False)
    return pl.when(t.str.starts_with("0x")).then(hexa).otherwise(digits).cast(pl.Int64)


def _int_list(col: pl.Expr) -> pl.Expr:
    """`[256, 1, 1]` (a JSON list of integers read as text) -> a list; anything else -> null."""
    return pl.when(col.str.starts_with("[")).then(
        col.str.extract_all(r"-?\d+").cast(pl.List(pl.Int32))
    )


#: The largest |ts| or dur, in µs, that is read: twice it still fits int64 nanoseconds, so
#: `start + dur` cannot overflow. Larger values (1e18, 1e26) are dropped and counted.
MAX_US = float(2**62 // 1000)


def _in_range(col: pl.Expr) -> pl.Expr:
    return col.is_finite() & (col.abs() <= MAX_US)


def _to_ns(col: pl.Expr) -> pl.Expr:
    """Float microseconds -> integer ns, exact to the ns for values below 2**43 µs.

    The integer part is converted exactly and only the fraction goes through floating point,
    so a timestamp like 4476047788645.790 becomes ...645790 ns, not ...645789. Values out of
    range (see `MAX_US`) become null.
    """
    col = pl.when(_in_range(col)).then(col)
    whole = col.floor()
    return whole.cast(pl.Int64) * 1000 + ((col - whole) * 1000).round().cast(pl.Int64)


#: GPU work in the timeline's kinds (kernels, copies, memsets).
GPU_WORK = [Kind.KERNEL.value, Kind.MEMCPY.value, Kind.MEMSET.value]
#: The pseudo-reasons under which `normalise` reports its dropped GPU events (their count
#: is also in the named reasons) and an example name; the reader moves them out of the
#: reasons into `DataQuality.dropped_gpu` / `dropped_gpu_example`.
GPU_DROPPED = "(GPU events among them)"
GPU_EXAMPLE = "(GPU event dropped, e.g.) "

#: An event of a known kind dropped for a bad time value.
_bad = pl.col("_range") | pl.col("_missing") | pl.col("_zero") | pl.col("_negative")


def normalise(raw: pl.DataFrame) -> Frame:
    """One raw frame in the event schema (rank set later), and the counts of what it drops."""
    dropped: Counter[str] = Counter()
    if raw.height == 0:
        return None, dropped
    if raw.schema["ts"] == pl.String:  # written as text by a converter: read as numbers
        raw = raw.with_columns(pl.col("ts", "dur").cast(pl.Float64, strict=False))
    text = raw.schema["pid"] == pl.String
    no_cat = pl.col("cat").is_null() if "cat" in raw.columns else pl.lit(True)
    legacy_host = no_cat & (pl.col("pid") == LEGACY_HOST_PID) if text else pl.lit(False)
    legacy_gpu = no_cat & pl.col("pid").is_in(LEGACY_DEVICE_PIDS) if text else pl.lit(False)
    known = pl.col("kind").is_not_null()
    start, dur = pl.col("start_ns"), pl.col("dur")
    tagged = (
        raw.lazy()
        .with_columns(_memory=_CUDA_MEMORY_EVENT)
        .filter((pl.col("ph") == "X") | pl.col("_memory"))
        .with_columns(_legacy_host=legacy_host, _legacy_gpu=legacy_gpu)
        .with_columns(
            kind=pl.when(pl.col("_memory"))
            .then(pl.lit(Kind.MEMORY.value, KIND))
            .when(pl.col("_legacy_host"))
            .then(pl.lit(Kind.CPU_OP.value, KIND))
            .when(pl.col("_legacy_gpu"))
            .then(pl.lit(Kind.KERNEL.value, KIND))
            .otherwise(pl.col("cat").replace_strict(KIND_BY_CAT, default=None, return_dtype=KIND)),
            start_ns=pl.coalesce(pl.col("tn"), _to_ns(pl.col("ts"))),
            dur=pl.when(pl.col("_memory")).then(pl.lit(0.0)).otherwise(pl.col("dur")),
        )
        .with_columns(
            # an event with no category at all counts as one of an unknown category
            _unknown=~known
            & ~pl.col("cat").str.to_lowercase().is_in(list(IGNORED_CATS)).fill_null(False),
            _range=known
            & (
                (pl.col("ts").is_not_null() & ~_in_range(pl.col("ts")))
                | (dur.is_not_null() & ~_in_range(dur))
            ),
        )
        .with_columns(
            _missing=known & ~pl.col("_range") & (start.is_null() | dur.is_null()),
            _zero=known & (start <= 0),
            _negative=known & (dur < 0),
        )
    )
    on_device = pl.col("kind").is_in(_DEVICE_KINDS)
    concrete = _concrete_inputs(raw)
    reserved = _reserved(raw)
    frame, flags = pl.collect_all(
        [
            tagged.filter(
                known
                & ~pl.col("_range")
                & start.is_not_null()
                & dur.is_not_null()
                & (start > 0)
                & (dur >= 0)
            ).select(
                rank=pl.lit(0, pl.Int32),
                # an ordinal beyond Int32 (a damaged or foreign trace) reads as unknown
                device=pl.when(pl.col("_memory"))
                .then(pl.col("Device Id").cast(pl.Int32, strict=False))
                .when(pl.col("_legacy_gpu"))
                .then(_int_of(pl.col("tid"), text))
                .when(on_device)
                .then(pl.coalesce(_int_of(pl.col("device"), text), _int_of(pl.col("pid"), text)))
                .cast(pl.Int32, strict=False),
                stream=pl.when(on_device).then(
                    pl.coalesce(_int_of(pl.col("stream"), text), _int_of(pl.col("tid"), text))
                ),
                pid=pl.when(pl.col("_legacy_host"))
                .then(pl.lit(0, pl.Int64))
                .when(~on_device)
                .then(_int_of(pl.col("pid"), text)),
                tid=pl.when(~on_device).then(_int_of(pl.col("tid"), text)),
                kind="kind",
                name=pl.col("name").fill_null(""),
                start_ns=start,
                end_ns=start + (dur * 1000).round().cast(pl.Int64),
                correlation=pl.col("correlation"),
                external_id=pl.coalesce(pl.col("External id"), pl.col("external id")),
                grid=_int_list(pl.col("grid")),
                block=_int_list(pl.col("block")),
                registers=pl.col("registers per thread").cast(pl.Int32),
                shared_mem_bytes=pl.col("shared memory"),
                local_mem_bytes=pl.lit(None, pl.Int64),
                bytes=pl.when(pl.col("_memory"))
                .then(pl.col("Total Allocated"))
                .otherwise(pl.col("bytes")),
                reserved_bytes=reserved,
                input_dims=pl.coalesce(pl.col("Input Dims"), pl.col("Input dims")),
                input_types=pl.col("Input type"),
                concrete_inputs=concrete,
                collective=pl.col("Collective name").cast(pl.Categorical),
                msg_nelems=pl.col("In msg nelems"),
                msg_dtype=pl.col("dtype").cast(pl.Categorical),
            ),
            tagged.select(
                pl.col("_unknown").sum(),
                pl.col("_missing").sum(),
                pl.col("_zero").sum(),
                pl.col("_negative").sum(),
                pl.col("_range").sum(),
                _gpu=(_bad & pl.col("kind").is_in(GPU_WORK)).sum(),
                _example=pl.col("name").filter(_bad & pl.col("kind").is_in(GPU_WORK)).first(),
                _legacy=(pl.col("_legacy_host") | pl.col("_legacy_gpu")).sum(),
            ),
        ]
    )
    unknown, missing, zero, negative, out_of_range, gpu, example, legacy = flags.row(0)
    if legacy:
        dropped[LEGACY] += legacy
    if gpu:  # GPU work (kernels, copies, memsets) among the dropped: the analyses miss it
        dropped[GPU_DROPPED] += gpu
        dropped[f"{GPU_EXAMPLE}{example}"] = 0
    for reason, n in (
        ("missing ts or dur", missing),
        ("ts or dur out of range", out_of_range),
        ("zero timestamp", zero),
        ("negative duration", negative),
    ):
        if n:
            dropped[reason] += n
    if unknown:  # rare: name the categories
        cats = tagged.filter("_unknown").group_by("cat").len().collect()
        for cat, n in cats.iter_rows():
            dropped[f"category {cat if cat is not None else '(none)'}"] += n
    return frame, dropped


def _reserved(raw: pl.DataFrame) -> pl.Expr:
    """The memory events' `Total Reserved`, null for every other event (a constant null where
    the block parsed none: most traces record no memory)."""
    column = raw.get_column("Total Reserved") if "Total Reserved" in raw.columns else None
    if column is None or column.null_count() == column.len():
        return pl.lit(None, pl.Int64)
    return pl.when(pl.col("_memory")).then(pl.col("Total Reserved"))


def _concrete_inputs(raw: pl.DataFrame) -> pl.Expr:
    """The `Concrete Inputs` of the convolution operators (`CONV_OP_NAME`), null for every
    other event: a block that parsed none (the field is parsed only in files that show a
    convolution) costs nothing; the operators are found among the block's distinct names."""
    column = raw.get_column("Concrete Inputs")
    if column.null_count() == column.len():
        return pl.lit(None, pl.String)
    names = raw.get_column("name").unique().cast(pl.String)
    conv = names.filter(names.str.contains(CONV_OP_NAME))
    return pl.when(pl.col("name").is_in(conv.to_list())).then(pl.col("Concrete Inputs"))


_COPY_NAME = r"^Memcpy (\w+) \((\w+) -> (\w+)\)$"


def with_copy_kinds(events: pl.DataFrame) -> pl.DataFrame:
    """Add copy_kind / src_memory / dst_memory, parsed from Kineto's memcpy names.

    `Memcpy HtoD (Pageable -> Device)` gives HtoD, pageable, device. Parsed once per distinct
    name, then joined back.
    """
    text = pl.col("name").cast(pl.String)
    kinds = (
        events.lazy()
        .filter(pl.col("kind") == "memcpy")
        .select("name")
        .unique()
        .with_columns(
            copy_kind=text.str.extract(_COPY_NAME, 1).cast(pl.Categorical),
            src_memory=text.str.extract(_COPY_NAME, 2).str.to_lowercase().cast(pl.Categorical),
            dst_memory=text.str.extract(_COPY_NAME, 3).str.to_lowercase().cast(pl.Categorical),
        )
        .collect()
    )
    if kinds.height == 0:
        return events.with_columns(
            copy_kind=pl.lit(None, pl.Categorical),
            src_memory=pl.lit(None, pl.Categorical),
            dst_memory=pl.lit(None, pl.Categorical),
        )
    # a few distinct names: a left join on the categorical name costs one hash probe per row
    return events.join(kinds, on="name", how="left", maintain_order="left")


DUPLICATE = "exact duplicate"


def without_duplicates(events: pl.DataFrame) -> tuple[pl.DataFrame, int]:
    """`events` with exact duplicate rows removed, and how many were removed.

    Two GPU activities on one stream cannot start in the same nanosecond, so a trace without
    such a pair has no duplicates and costs one hash pass over its GPU events; only a trace
    that has one pays for the full comparison of every event.
    """
    gpu = events.lazy().filter(pl.col("kind").is_in(["kernel", "memcpy", "memset"]))
    key = pl.struct("device", "stream", "start_ns", "end_ns")
    if not gpu.select(key.is_duplicated().any()).collect().item():
        return events, 0
    unique = events.unique(maintain_order=True)
    return unique, events.height - unique.height
