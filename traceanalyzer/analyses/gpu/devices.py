"""Per-device busy and idle time inside the window (the job's `Devices`), and the same per
step."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import polars as pl

from traceanalyzer.analyses.timeline.frames import Schemas, check_frames
from traceanalyzer.analyses.timeline.intervals import (
    busy_before,
    clipped_ns,
    in_ranges,
    overlaps,
    union,
)
from traceanalyzer.analyses.timeline.windows import DEVICE_KEY
from traceanalyzer.model import Kind

_I64 = pl.Int64
_F64 = pl.Float64


@dataclass(frozen=True, slots=True)
class Devices:
    """Each device's time inside its window, every rank's devices together (Metrics.devices).

    - `summary`: one row per (rank, device), in that order: start_ns, end_ns, window_ns,
      busy_ns, idle_ns, idle_share, kernel_count, kernel_ns (`device_summary`);
      `<cause>_ns` and `<cause>_share` per idle cause, gap_count, longest_gap_ns and
      host_wait_between_steps_ns (gpu/idle.py); comm_ns, overlapped_comm_ns,
      exposed_comm_ns, overlap_share (distributed/overlap.py) and comm_wait_ns (the time
      waiting for other ranks inside collectives); tc_ns, gemm_ns, unknown_ns,
      no_tc_form_ns, share_of_gemm, share_of_kernel (gpu/tensor_cores.py).

    Its frame is checked against `SCHEMAS` when it is built.
    """

    SCHEMAS: ClassVar[Schemas] = {
        "summary": {
            "rank": pl.Int32,
            "device": pl.Int32,
            "start_ns": _I64,
            "end_ns": _I64,
            "window_ns": _I64,
            "busy_ns": _I64,
            "idle_ns": _I64,
            "kernel_count": _I64,
            "kernel_ns": _I64,
            "idle_share": _F64,
            "host_wait_ns": _I64,
            "sync_ns": _I64,
            "launch_overhead_ns": _I64,
            "other_ns": _I64,
            "gap_count": _I64,
            "longest_gap_ns": _I64,
            "host_wait_between_steps_ns": _I64,
            "comm_ns": _I64,
            "overlapped_comm_ns": _I64,
            "exposed_comm_ns": _I64,
            "overlap_share": _F64,
            "tc_ns": _I64,
            "gemm_ns": _I64,
            "share_of_gemm": _F64,
            "share_of_kernel": _F64,
            "unknown_ns": _I64,
            "no_tc_form_ns": _I64,
            "host_wait_share": _F64,
            "sync_share": _F64,
            "launch_overhead_share": _F64,
            "other_share": _F64,
            "comm_wait_ns": _I64,
        }
    }

    summary: pl.DataFrame

    def __post_init__(self) -> None:
        check_frames(self, "Metrics.devices", self.SCHEMAS)

    def rows(self) -> Iterator[dict[str, Any]]:
        """The summary's rows, one dict per device."""
        return self.summary.iter_rows(named=True)


def busy_in_spans(work: pl.LazyFrame, spans: pl.LazyFrame) -> pl.LazyFrame:
    """Add `busy_ns` to each span (rank, device, start_ns, end_ns, ...): the length of the
    union of GPU work inside it."""
    merged = union(work, DEVICE_KEY)
    lo = busy_before(spans, merged, DEVICE_KEY, "start_ns")
    both = busy_before(lo, merged, DEVICE_KEY, "end_ns")
    return both.with_columns(busy_ns=pl.col("end_ns_busy_ns") - pl.col("start_ns_busy_ns")).drop(
        "start_ns_busy_ns", "end_ns_busy_ns"
    )


def kernels_in_windows(work: pl.LazyFrame, windows: pl.LazyFrame) -> pl.LazyFrame:
    """Kernels overlapping their device's window, with `clipped_ns`: their time inside it."""
    return (
        work.filter(pl.col("kind") == Kind.KERNEL.value)
        .join(windows.rename({"start_ns": "w_start", "end_ns": "w_end"}), on=DEVICE_KEY)
        .filter(overlaps("start_ns", "end_ns", "w_start", "w_end"))
        .with_columns(clipped_ns=clipped_ns("start_ns", "end_ns", "w_start", "w_end"))
        .drop("w_start", "w_end")
    )


def device_summary(
    work: pl.LazyFrame, windows: pl.LazyFrame, kernels: pl.LazyFrame
) -> pl.LazyFrame:
    """rank, device, window_ns, busy_ns, idle_ns, idle_share, kernel_count, kernel_ns."""
    counts = kernels.group_by(DEVICE_KEY).agg(
        kernel_count=pl.len().cast(pl.Int64), kernel_ns=pl.col("clipped_ns").sum()
    )
    return (
        busy_in_spans(work, windows)
        .join(counts, on=DEVICE_KEY, how="left")
        .select(
            *DEVICE_KEY,
            "start_ns",
            "end_ns",
            window_ns=pl.col("end_ns") - pl.col("start_ns"),
            busy_ns="busy_ns",
            idle_ns=pl.col("end_ns") - pl.col("start_ns") - pl.col("busy_ns"),
            kernel_count=pl.col("kernel_count").fill_null(0),
            kernel_ns=pl.col("kernel_ns").fill_null(0),
        )
        .with_columns(idle_share=share(pl.col("idle_ns"), pl.col("window_ns")))
        .sort(DEVICE_KEY)
    )


def step_summary(work: pl.LazyFrame, steps: pl.LazyFrame, kernels: pl.LazyFrame) -> pl.LazyFrame:
    """rank, device, step, name, start_ns, end_ns, busy_ns, idle_share, kernel_count per
    device step (a kernel counts in the step during which it starts)."""
    counts = (
        in_ranges(kernels.select(*DEVICE_KEY, "start_ns"), steps, DEVICE_KEY)
        .group_by(*DEVICE_KEY, "step")
        .agg(kernel_count=pl.len().cast(pl.Int64))
    )
    return (
        busy_in_spans(work, steps)
        .with_columns(
            idle_share=share(
                pl.col("end_ns") - pl.col("start_ns") - pl.col("busy_ns"),
                pl.col("end_ns") - pl.col("start_ns"),
            )
        )
        .join(counts, on=[*DEVICE_KEY, "step"], how="left")
        .with_columns(pl.col("kernel_count").fill_null(0))
        .select(
            "rank",
            "device",
            "step",
            "name",
            "start_ns",
            "end_ns",
            "busy_ns",
            "idle_share",
            "kernel_count",
        )
        .sort("rank", "device", "start_ns")
    )


def share(part: pl.Expr, whole: pl.Expr) -> pl.Expr:
    """part / whole, null (never NaN) where whole is 0."""
    return pl.when(whole > 0).then(part / whole).otherwise(pl.lit(None, pl.Float64))
