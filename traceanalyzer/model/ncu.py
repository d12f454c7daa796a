"""NcuExport: the kernels of one Nsight Compute export, one row per profiled kernel.

Nsight Compute (`ncu`) profiles a program in a run of its own: it replays each kernel it
selects (`-k`, `--nvtx-include`, `-c`) several times, with the clocks locked to base and the
caches flushed between passes. What it measures that does not depend on those clocks (the
bytes a kernel moves to and from DRAM, its pipes' and SMs' utilisation, its registers and
occupancy) can be joined to a trace of the same program (`analyses/counters/ncu_join.py`);
its durations are not the job's. `readers/ncu.py` reads the CSV and `.ncu-rep` exports into
this shape.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import polars as pl

#: The columns of `NcuExport.kernels`, in order, with a one-line doc each. Every counter
#: column is null where the export lacks its counter (`NcuExport.missing` names them).
NCU_KERNEL_SCHEMA: dict[str, tuple[Any, str]] = {
    "id": (pl.Int64(), "ncu's ID of the profiled kernel (the order it profiled them in)"),
    "launch": (pl.Int64(), "0-based position in the export, by ID"),
    "process": (pl.Int64(), "the profiled process's ID; null where not exported"),
    "device": (pl.Int32(), "the CUDA device ordinal the kernel ran on; null where not exported"),
    "name": (pl.String(), "the kernel's (demangled) name as ncu wrote it"),
    "grid": (pl.String(), "grid size in blocks, `x,y,z`; null where not exported"),
    "block": (pl.String(), "block size in threads, `x,y,z`; null where not exported"),
    "registers_per_thread": (pl.Int64(), "registers per thread (`launch__registers_per_thread`)"),
    "shared_mem_bytes": (
        pl.Int64(),
        "shared memory per block the kernel asked for, static + dynamic, bytes",
    ),
    "ncu_duration_ns": (
        pl.Int64(),
        "the kernel's time under ncu (`gpu__time_duration.sum`): base clocks, cold caches",
    ),
    "dram_read_bytes": (pl.Int64(), "bytes read from DRAM (`dram__bytes_read.sum`)"),
    "dram_write_bytes": (pl.Int64(), "bytes written to DRAM (`dram__bytes_write.sum`)"),
    "dram_bytes": (
        pl.Int64(),
        "bytes moved to and from DRAM: read + write where counted, else derived from the DRAM "
        "throughput share (see `dram_source`)",
    ),
    "dram_source": (
        pl.String(),
        '"counters" (dram__bytes_read/write), "throughput" (the DRAM throughput share x the '
        "peak bandwidth x ncu's own duration), null where neither is known",
    ),
    "dram_throughput_share": (
        pl.Float64(),
        "DRAM throughput, share of the peak (`dram__throughput` or `gpu__dram_throughput`)",
    ),
    "dram_peak_bytes_per_s": (
        pl.Float64(),
        "the DRAM's peak bandwidth from the export's memory clock and bus width, bytes/s",
    ),
    "sm_throughput_share": (
        pl.Float64(),
        "SM throughput, share of the peak (`sm__throughput.avg.pct_of_peak_sustained_elapsed`)",
    ),
    "tensor_pipe_share": (
        pl.Float64(),
        "Tensor Core pipe active, share of the elapsed cycles (see `TENSOR_PIPE_COUNTERS`)",
    ),
    "achieved_occupancy_share": (
        pl.Float64(),
        "achieved occupancy: active warps over the SM's maximum "
        "(`sm__warps_active.avg.pct_of_peak_sustained_active`)",
    ),
    "warps_active": (
        pl.Float64(),
        "warps active per SM per active cycle (`sm__warps_active.avg.per_cycle_active`)",
    ),
}

NCU_KERNEL_COLUMNS: dict[str, Any] = {k: v[0] for k, v in NCU_KERNEL_SCHEMA.items()}


@dataclass(frozen=True, slots=True)
class NcuExport:
    """One Nsight Compute export read (`readers.ncu.read_ncu`).

    - `path`: the file, as given.
    - `kernels`: one row per profiled kernel (`NCU_KERNEL_SCHEMA`), in ncu's order.
    - `present`, `missing`: the counters the tool reads that the export holds, and those it
      lacks (their columns are null: `dram_bytes` from the throughput share instead of the
      byte counters, no tensor-pipe share, ...).
    - `notes`: what the reader had to say about the export, once each (counters missing,
      values that were not numbers, how DRAM bytes were obtained).
    - `device_name`: the GPU ncu ran on, where exported.
    """

    path: str
    kernels: pl.DataFrame
    present: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    device_name: str | None = None


def empty_kernels() -> pl.DataFrame:
    """An empty `NcuExport.kernels` frame with the full schema."""
    return pl.DataFrame(schema=NCU_KERNEL_COLUMNS)
