"""EVENT_SCHEMA: the single source of truth for the timeline's columns.

Every reader emits exactly these columns, in this order, with these dtypes; a value the
source does not record is null. Times are integer nanoseconds, end-exclusive, in the
trace's own clock, converted once in the reader.
"""

from __future__ import annotations

from enum import StrEnum

import polars as pl


class Kind(StrEnum):
    """What the profiler recorded for one event."""

    KERNEL = "kernel"  # a GPU kernel
    MEMCPY = "memcpy"  # a GPU copy
    MEMSET = "memset"  # a GPU memset
    RUNTIME = "runtime"  # a CUDA (or HIP) runtime API call on the host
    DRIVER = "driver"  # a CUDA driver API call on the host
    CPU_OP = "cpu_op"  # a framework operator (aten::mm, ...)
    ANNOTATION = "annotation"  # a user range on the host (record_function, NVTX, ProfilerStep#N)
    GPU_ANNOTATION = "gpu_annotation"  # a user range projected onto a GPU stream
    PYTHON = "python"  # a Python frame (with_stack=True)
    SYNC = "sync"  # a CUPTI synchronisation record (stream/event/device synchronize)
    MEMORY = "memory"  # a GPU memory allocation or free (profile_memory=True), zero-length


KIND = pl.Enum([k.value for k in Kind])

#: GPU work in the contract's sense: kernels, memcpys and memsets.
GPU_KINDS: tuple[Kind, ...] = (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET)

#: column -> (dtype, one-line doc). `docs/schema.md` is generated from this table.
COLUMNS: dict[str, tuple[pl.DataType, str]] = {
    "rank": (pl.Int32(), "distributed rank; 0 where the trace names none"),
    "device": (pl.Int32(), "GPU ordinal on that rank; null for host events"),
    "stream": (pl.Int64(), "CUDA stream id; null for host events"),
    "pid": (pl.Int64(), "host process id; null for device events"),
    "tid": (pl.Int64(), "host thread id; null for device events"),
    "kind": (KIND, "what the profiler recorded (see Kind)"),
    "name": (pl.Categorical(), "kernel / operator / API / range name as recorded"),
    "start_ns": (pl.Int64(), "start, integer ns in the trace's clock"),
    "end_ns": (pl.Int64(), "end (exclusive), integer ns; end_ns >= start_ns"),
    "correlation": (
        pl.Int64(),
        "links a runtime launch to the GPU work it launched (unique per rank and process)",
    ),
    "external_id": (pl.Int64(), "links a CPU operator to the runtime calls it made"),
    "grid": (pl.List(pl.Int32()), "kernel grid size [x, y, z] in blocks"),
    "block": (pl.List(pl.Int32()), "kernel block size [x, y, z] in threads"),
    "registers": (pl.Int32(), "kernel registers per thread"),
    "shared_mem_bytes": (pl.Int64(), "kernel shared memory per block (static + dynamic), bytes"),
    "local_mem_bytes": (
        pl.Int64(),
        "kernel local memory per thread (register spills, stack), bytes; Nsight records it, "
        "Kineto does not",
    ),
    "bytes": (
        pl.Int64(),
        "bytes moved by a memcpy or set by a memset; for a memory event, the device's total "
        "allocated bytes after it",
    ),
    "reserved_bytes": (
        pl.Int64(),
        "for a memory event, the device's total bytes reserved by the caching allocator after "
        "it (allocated plus cached); null for every other event",
    ),
    "copy_kind": (pl.Categorical(), "memcpy direction: HtoD, DtoH, DtoD, HtoH, PtoP"),
    "src_memory": (pl.Categorical(), "memcpy source memory: pageable, pinned, device, managed"),
    "dst_memory": (pl.Categorical(), "memcpy destination memory: pageable, pinned, device"),
    "domain": (pl.Categorical(), "NVTX domain of an annotation, where recorded"),
    "collective": (pl.Categorical(), "collective of a communication kernel, as recorded"),
    "msg_nelems": (pl.Int64(), "elements in a collective's input message, where recorded"),
    "msg_dtype": (pl.Categorical(), "element type of a collective's message, where recorded"),
    "input_dims": (pl.String(), "recorded input shapes of a CPU operator, as JSON text"),
    "input_types": (pl.String(), "recorded input dtypes of a CPU operator, as JSON text"),
    "concrete_inputs": (
        pl.String(),
        "recorded scalar arguments of a convolution operator (stride, padding, dilation, "
        "...), as JSON text; null for every other event",
    ),
}

EVENT_SCHEMA: pl.Schema = pl.Schema({name: dtype for name, (dtype, _doc) in COLUMNS.items()})

#: The hardware counters a GPU-metrics sample may carry (Nsight Systems
#: `--gpu-metrics-devices`): column -> one-line doc. Each is a 0-1 share of the counter's
#: peak over the sample's period, null where the device's metric set lacks it.
GPU_METRIC_SHARES: dict[str, str] = {
    "gr_active_share": "share of the period the graphics/compute engine was active",
    "sm_active_share": "SMs Active: mean share of the SMs with at least one warp resident",
    "sm_issue_share": "SM Issue: mean share of cycles an SM sub-partition issued an instruction",
    "tensor_active_share": "Tensor Active: mean share of cycles the tensor pipes were active",
    "dram_read_share": "DRAM read bandwidth, as a share of the device's peak",
    "dram_write_share": "DRAM write bandwidth, as a share of the device's peak",
    "pcie_rx_share": "PCIe receive (host to device) throughput, as a share of the link's peak",
    "pcie_tx_share": "PCIe transmit (device to host) throughput, as a share of the link's peak",
    "nvlink_rx_share": "NVLink receive throughput (user data), as a share of the links' peak",
    "nvlink_tx_share": "NVLink transmit throughput (user data), as a share of the links' peak",
}

#: The GPU-metrics samples a reader may add to a timeline (`Timeline.gpu_metrics`): one row
#: per (rank, device, sample), in time order; empty for every trace without GPU metrics.
GPU_METRIC_COLUMNS: dict[str, tuple[pl.DataType, str]] = {
    "rank": (pl.Int32(), "distributed rank of the process that used the GPU"),
    "device": (pl.Int32(), "GPU ordinal on that rank (as the timeline's GPU work)"),
    "start_ns": (
        pl.Int64(),
        "start of the sample's period, integer ns in the trace's clock (may be negative: "
        "sampling starts before the session's zero)",
    ),
    "end_ns": (
        pl.Int64(),
        "end (exclusive) of the sample's period: the next sample's start, or the start plus "
        "the sampling period for the last sample and one before a hole in the sampling",
    ),
    "gpc_clock_hz": (pl.Int64(), "GPC (SM) clock frequency over the period, Hz"),
    **{name: (pl.Float64(), doc) for name, doc in GPU_METRIC_SHARES.items()},
}

GPU_METRIC_SCHEMA: pl.Schema = pl.Schema(
    {name: dtype for name, (dtype, _doc) in GPU_METRIC_COLUMNS.items()}
)


def schema_markdown() -> str:
    """Render the schema as a Markdown table (for `docs/schema.md` and `traceanalyzer schema`)."""
    lines = ["| column | dtype | meaning |", "| --- | --- | --- |"]
    for name, (dtype, doc) in COLUMNS.items():
        lines.append(f"| `{name}` | {dtype} | {doc} |")
    kinds = ", ".join(f"`{k.value}`" for k in Kind)
    lines.append("")
    lines.append(f"`kind` is one of {kinds}.")
    lines += [
        "",
        "## GPU metrics",
        "",
        "Nsight Systems exports recorded with `--gpu-metrics-devices` also hold hardware "
        "counters sampled every ~100 µs per GPU; the timeline carries them as a second table "
        "(`Timeline.gpu_metrics`), empty for every other trace:",
        "",
        "| column | dtype | meaning |",
        "| --- | --- | --- |",
    ]
    for name, (dtype, doc) in GPU_METRIC_COLUMNS.items():
        lines.append(f"| `{name}` | {dtype} | {doc} |")
    return "\n".join(lines) + "\n"
