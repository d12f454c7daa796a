"""What the Nsight Compute join keeps (`NcuJoin`, Metrics.ncu), from the matched kernels of
each rank (`ncu_join.match`): per export the kernels matched and the time they cover, per
kernel name and launch shape the measured figures, per device the Tensor Core pipe."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import polars as pl

from traceanalyzer.analyses.timeline.frames import Schemas, check_frames

#: A GEMM-class kernel is measured on the Tensor Cores where its Tensor Core pipe is active
#: at least this share of the elapsed cycles (Hopper GEMMs: 50-90 %; SIMT FFMA ones: 0).
MIN_TENSOR_PIPE_SHARE = 0.05

DEVICE_KEY = ["rank", "device"]


def kernel_summary(matched: pl.DataFrame) -> pl.DataFrame:
    """NcuJoin.kernels of one rank's matched kernels (see NcuJoin)."""
    ns = pl.col("clipped_ns").cast(pl.Float64)

    def weighted(column: str) -> pl.Expr:
        known = pl.col(column).is_not_null()
        total = ns.filter(known).sum()
        return pl.when(total > 0).then((pl.col(column) * ns).filter(known).sum() / total)

    return (
        matched.group_by(*DEVICE_KEY, "name", "grid", "block")
        .agg(
            kernel_class=pl.col("kernel_class").first(),
            trace_kernels=pl.len().cast(pl.Int64),
            ncu_kernels=pl.col("ncu_launch").n_unique().cast(pl.Int64),
            kernel_ns=pl.col("clipped_ns").sum(),
            ncu_mean_ns=pl.col("ncu_duration_ns").mean(),
            dram_bytes=pl.when(pl.col("dram_bytes").null_count() == 0).then(
                pl.col("dram_bytes").sum()
            ),
            dram_source=pl.col("dram_source").drop_nulls().first(),
            registers_per_thread=pl.col("registers_per_thread").max(),
            shared_mem_bytes=pl.col("shared_mem_bytes").max(),
            achieved_occupancy_share=weighted("achieved_occupancy_share"),
            warps_active=weighted("warps_active"),
            sm_throughput_share=weighted("sm_throughput_share"),
            tensor_pipe_share=weighted("tensor_pipe_share"),
        )
        .with_columns(
            trace_mean_ns=pl.col("kernel_ns") / pl.col("trace_kernels"),
            dram_gbps=pl.when(pl.col("kernel_ns") > 0).then(
                pl.col("dram_bytes") / pl.col("kernel_ns")
            ),
        )
        .select(pl.col(c).cast(t) for c, t in NcuJoin.SCHEMAS["kernels"].items())
        .sort(["kernel_ns", "rank", "device", "name"], descending=[True, False, False, False])
    )


def device_summary(matched: pl.DataFrame, files: pl.DataFrame) -> pl.DataFrame:
    """NcuJoin.devices of one rank (see NcuJoin)."""
    gemm = pl.col("kernel_class") == "gemm"
    pipe = pl.col("tensor_pipe_share")
    ns = pl.col("clipped_ns")
    measured = gemm & pipe.is_not_null()
    per = matched.group_by(DEVICE_KEY).agg(
        gemm_ns=ns.filter(measured).sum(),
        tc_ns=ns.filter(measured & (pipe >= MIN_TENSOR_PIPE_SHARE)).sum(),
        _pipe_ns=(pipe * ns.cast(pl.Float64)).filter(measured).sum(),
    )
    totals = files.group_by(DEVICE_KEY).agg(
        kernel_ns=pl.col("kernel_ns").max(), covered_ns=pl.col("covered_ns").sum()
    )
    return (
        totals.join(per, on=DEVICE_KEY, how="left")
        .with_columns(pl.col("gemm_ns", "tc_ns").fill_null(0))
        .with_columns(
            covered_share=pl.when(pl.col("kernel_ns") > 0).then(
                (pl.col("covered_ns") / pl.col("kernel_ns")).clip(upper_bound=1.0)
            ),
            tensor_pipe_share=pl.when(pl.col("gemm_ns") > 0).then(
                pl.col("_pipe_ns") / pl.col("gemm_ns")
            ),
            tc_share_of_gemm=pl.when(pl.col("gemm_ns") > 0).then(
                pl.col("tc_ns") / pl.col("gemm_ns")
            ),
        )
        .select(pl.col(c).cast(t) for c, t in NcuJoin.SCHEMAS["devices"].items())
        .sort(DEVICE_KEY)
    )


@dataclass(frozen=True, slots=True)
class NcuJoin:
    """Nsight Compute's measurements joined to the trace (Metrics.ncu; empty frames without
    `--ncu`).

    - `files`: one row per ncu export, process and device: file (its place among the
      exports given), path, process, ncu_device, the trace's rank and device it was paired
      with, alignment ("steps": each steady step against ncu's sequence; "launch order":
      from the best anchor), launch_thread (in steps, the host thread whose launches were
      the candidates, where one thread's pair better than all: an NVTX push/pop range is
      per thread; null: all threads), ncu_kernels, matched_ncu_kernels (those paired with at least
      one trace kernel), name_overlap_share (its kernels sharing a match key with the
      device's: the refusal test), trace_kernels (the device's in the windows),
      matched_trace_kernels, kernel_ns (the device's kernel time in the windows), covered_ns
      (the matched kernels'), covered_share, dram_source ("counters", "throughput" or both),
      present and missing (the counters the export holds and lacks), notes (the reader's).
    - `kernels`: per (rank, device, name, grid, block) of the matched trace kernels:
      kernel_class, trace_kernels, ncu_kernels, kernel_ns (the trace's), trace_mean_ns,
      ncu_mean_ns (under ncu: base clocks, cold caches), dram_bytes (summed over the trace's
      kernels, null where one has none), dram_source, dram_gbps (over the trace's time),
      registers_per_thread, shared_mem_bytes, achieved_occupancy_share, warps_active,
      sm_throughput_share, tensor_pipe_share (weighted by the trace's time); most time
      first. The launch-shape rule reads registers and occupancy here.
    - `devices`: per (rank, device) with a matched export: kernel_ns, covered_ns,
      covered_share, gemm_ns (matched GEMM-class kernels with a tensor-pipe figure), tc_ns
      (those whose pipe is active at least MIN_TENSOR_PIPE_SHARE), tensor_pipe_share (their
      time-weighted mean), tc_share_of_gemm (tc_ns / gemm_ns).
    """

    SCHEMAS: ClassVar[Schemas] = {
        "files": {
            "file": pl.Int64,
            "path": pl.String,
            "process": pl.Int64,
            "ncu_device": pl.Int64,
            "rank": pl.Int32,
            "device": pl.Int32,
            "alignment": pl.String,
            "launch_thread": pl.Int64,
            "ncu_kernels": pl.Int64,
            "matched_ncu_kernels": pl.Int64,
            "name_overlap_share": pl.Float64,
            "trace_kernels": pl.Int64,
            "matched_trace_kernels": pl.Int64,
            "kernel_ns": pl.Int64,
            "covered_ns": pl.Int64,
            "covered_share": pl.Float64,
            "dram_source": pl.String,
            "present": pl.List(pl.String),
            "missing": pl.List(pl.String),
            "notes": pl.List(pl.String),
        },
        "kernels": {
            "rank": pl.Int32,
            "device": pl.Int32,
            "name": pl.String,
            "grid": pl.String,
            "block": pl.String,
            "kernel_class": pl.String,
            "trace_kernels": pl.Int64,
            "ncu_kernels": pl.Int64,
            "kernel_ns": pl.Int64,
            "trace_mean_ns": pl.Float64,
            "ncu_mean_ns": pl.Float64,
            "dram_bytes": pl.Int64,
            "dram_source": pl.String,
            "dram_gbps": pl.Float64,
            "registers_per_thread": pl.Int64,
            "shared_mem_bytes": pl.Int64,
            "achieved_occupancy_share": pl.Float64,
            "warps_active": pl.Float64,
            "sm_throughput_share": pl.Float64,
            "tensor_pipe_share": pl.Float64,
        },
        "devices": {
            "rank": pl.Int32,
            "device": pl.Int32,
            "kernel_ns": pl.Int64,
            "covered_ns": pl.Int64,
            "covered_share": pl.Float64,
            "gemm_ns": pl.Int64,
            "tc_ns": pl.Int64,
            "tensor_pipe_share": pl.Float64,
            "tc_share_of_gemm": pl.Float64,
        },
    }

    files: pl.DataFrame
    kernels: pl.DataFrame
    devices: pl.DataFrame

    def __post_init__(self) -> None:
        check_frames(self, "Metrics.ncu", self.SCHEMAS)

    def measured(self, rank: int, device: int, name: str) -> dict[str, Any] | None:
        """What Nsight Compute measured of one kernel name on one device (its launch shape
        with the most matched time): grid, block, registers_per_thread,
        achieved_occupancy_share, warps_active, sm_throughput_share, dram_gbps; None where
        no export matched it."""
        rows = self.kernels.filter(
            (pl.col("rank") == rank) & (pl.col("device") == device) & (pl.col("name") == name)
        )
        if not rows.height:
            return None
        keys = (
            "grid",
            "block",
            "registers_per_thread",
            "achieved_occupancy_share",
            "warps_active",
            "sm_throughput_share",
            "dram_gbps",
        )
        row = rows.sort("kernel_ns", descending=True).row(0, named=True)
        return {k: row[k] for k in keys}

    @classmethod
    def empty(cls) -> NcuJoin:
        """No export given."""
        return cls(**{k: pl.DataFrame(schema=v) for k, v in cls.SCHEMAS.items()})

    @classmethod
    def of(cls, parts: Sequence[tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]]) -> NcuJoin:
        """The job's from each rank's (files, kernels, devices)."""
        if not parts:
            return cls.empty()
        files, kernels, devices = (
            pl.concat([p[i] for p in parts], how="vertical_relaxed") for i in range(3)
        )
        return cls(
            files=files.sort("file", "rank", "device"),
            kernels=kernels.sort(
                ["kernel_ns", "rank", "device", "name"], descending=[True, False, False, False]
            ),
            devices=devices.sort(DEVICE_KEY),
        )
