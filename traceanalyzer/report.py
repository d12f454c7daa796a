"""Report: everything the renderers show, built once from the timeline's meta and the metrics.

JSON format versions (`FORMAT_VERSION`):
- 1: format_version, source, window, devices (rank, device, window_ns, busy_ns, idle_ns,
  idle_share, kernel_count, kernel_ns), steps, kernels (count, total_ns, duration_histogram,
  top), critical_path (empty until that analysis exists), diagnoses, data_quality.
  Devices carry idle_by_cause, comm/overlap fields and tensor_core (contract); beyond the
  contract: steps carry kernel_count and idle_by_cause, kernels carry classes,
  launch_size_histogram and small_kernels, and the sections idle, communication, copies and
  memory_bandwidth. critical_path entries add steps_total (steps in the window; the graph
  is built for at most 24 evenly spread steps per rank, counted in `steps`); matmul_shapes,
  memory_growth and timeline_bins (each window in 240 bins: busy and idle by cause);
  ncu (Nsight Compute joined: null without --ncu), tensor_core.measured, and `source` and
  `estimated_bytes` on memory_bandwidth and roofline rows.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NotRequired, TypedDict

import polars as pl

from traceanalyzer.analyses.counters.gpu_metrics import BUSY_SAMPLE_MIN_SHARE, FIGURES
from traceanalyzer.analyses.counters.ncu_join import MIN_NAME_OVERLAP_SHARE
from traceanalyzer.analyses.counters.ncu_results import MIN_TENSOR_PIPE_SHARE
from traceanalyzer.analyses.distributed.imbalance import RANK_FIGURES
from traceanalyzer.analyses.gpu.idle import CAUSES, LONGEST_GAPS, longest_first
from traceanalyzer.analyses.gpu.kernels import SMALL_KERNEL_NS
from traceanalyzer.analyses.host.host_phases import host_phase_medians
from traceanalyzer.analyses.metrics import Metrics
from traceanalyzer.model import TraceMeta
from traceanalyzer.rules.base import Finding
from traceanalyzer.rules.causes import CAUSE_CATEGORIES

FORMAT_VERSION = 1


class SourceDict(TypedDict):
    path: str
    format: str
    producer: str | None
    producer_version: str | None


class ExcludedStepDict(TypedDict):
    rank: int
    name: str
    step_ns: int
    reason: str


class WindowDict(TypedDict):
    start_ns: int | None
    end_ns: int | None
    basis: str
    iterations_from: str | None
    excluded_steps: list[ExcludedStepDict]


class MeasuredTensorCoreDict(TypedDict):
    gemm_ns: int
    tc_ns: int
    tensor_pipe_share: float | None
    tc_share_of_gemm: float | None


class TensorCoreDict(TypedDict):
    tc_ns: int
    gemm_ns: int
    kernel_ns: int
    share_of_gemm: float | None
    share_of_kernel: float | None
    unknown_ns: int
    measured: MeasuredTensorCoreDict | None


class NcuDict(TypedDict):
    files: list[dict[str, Any]]
    matched_kernels: int
    unmatched_kernels: int
    matched_trace_kernels: int
    kernel_ns: int
    covered_ns: int
    covered_share: float | None
    min_name_overlap_share: float
    min_tensor_pipe_share: float
    kernels: list[dict[str, Any]]
    notes: list[str]


class DeviceDict(TypedDict):
    rank: int
    device: int
    name: str | None
    window_ns: int
    busy_ns: int
    idle_ns: int
    idle_share: float | None
    idle_by_cause: dict[str, int]
    idle_share_by_cause: dict[str, float | None]
    gap_count: int
    longest_gap_ns: int | None
    kernel_count: int
    kernel_ns: int
    comm_ns: int
    overlapped_comm_ns: int
    exposed_comm_ns: int
    overlap_share: float | None
    comm_wait_ns: int
    tensor_core: TensorCoreDict
    flops: dict[str, Any] | None
    memory: dict[str, Any] | None
    launch: dict[str, Any] | None
    #: only for a device with GPU metrics (Nsight's --gpu-metrics-devices): absent otherwise
    gpu_metrics: NotRequired[dict[str, Any]]


class StepDict(TypedDict):
    rank: int
    device: int
    name: str
    start_ns: int
    end_ns: int
    busy_ns: int
    idle_share: float | None
    kernel_count: int
    idle_by_cause: dict[str, int]
    warmup: bool


class BinDict(TypedDict):
    lo_ns: int
    hi_ns: int
    count: int
    total_ns: int


class TopKernelDict(TypedDict):
    name: str
    count: int
    total_ns: int
    share: float | None


class KernelsDict(TypedDict):
    count: int
    total_ns: int
    duration_histogram: list[BinDict]
    top: list[TopKernelDict]
    classes: list[dict[str, Any]]
    launch_size_histogram: list[dict[str, Any]]
    small_kernels: dict[str, Any]
    launch_shapes: list[dict[str, Any]]


class IdleDict(TypedDict):
    launch_gap_max_ns: int
    gap_histogram: list[dict[str, Any]]
    longest_gaps: list[dict[str, Any]]
    syncs_per_step: list[dict[str, Any]]
    sync_sites: list[dict[str, Any]]


class CommDict(TypedDict):
    per_collective: list[dict[str, Any]]
    ranks: list[dict[str, Any]]
    slowest_rank: int | None
    by_rank: list[dict[str, Any]]
    imbalance: dict[str, Any] | None


class RankDict(TypedDict, total=False):
    rank: int
    rank_source: str
    path: str
    world_size: int | None
    steps: int | None
    step_ns: int | None
    own_ns: int | None
    gpu_work_ns: int | None
    host_wait_ns: int | None
    host_between_steps_ns: int | None
    sync_ns: int | None
    wait_ns: int | None
    exposed_wait_ns: int | None
    crowded_wait_ns: int | None
    exposed_transfer_ns: int | None
    host_blocked_ns: int | None
    slowest_steps: int | None
    comm_bytes: int | None
    busbw_gbps: float | None
    host_phases: dict[str, int] | None


class VerdictDict(TypedDict):
    headline: str
    bound_by: str
    cause: str | None
    step_ns: int | None
    busy_share: float | None
    top_saving_ns: int | None
    mfu: float | None
    achieved_tflops: float | None
    peak_tflops: float | None


class QualityDict(TypedDict):
    truncated: bool
    truncated_files: list[str]
    skipped_files: list[str]
    dropped_events: dict[str, int]
    dropped_gpu_events: int
    dropped_gpu_example: str | None
    notes: list[str]
    outside_window: list[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class Report:
    """The analysed trace as plain values: what every renderer draws from."""

    source: SourceDict
    window: WindowDict
    ranks: list[RankDict]
    devices: list[DeviceDict]
    steps: list[StepDict]
    kernels: KernelsDict
    idle: IdleDict
    communication: CommDict
    copies: list[dict[str, Any]]
    bandwidth: list[dict[str, Any]]
    quality: QualityDict
    tool_version: str
    findings: tuple[Finding, ...] = ()
    critical_path: tuple[dict[str, Any], ...] = ()
    timeline_bins: tuple[dict[str, Any], ...] = ()
    memory_growth: tuple[dict[str, Any], ...] = ()
    memory_steps: tuple[dict[str, Any], ...] = ()
    matmul_shapes: tuple[dict[str, Any], ...] = ()
    roofline: tuple[dict[str, Any], ...] = ()
    context: dict[str, Any] | None = None
    verdict: VerdictDict | None = None
    ncu: NcuDict | None = None
    #: each device's window in bins of GPU metrics (the HTML figure's data; not in the JSON)
    gpu_metric_series: tuple[dict[str, Any], ...] = ()

    def to_json_dict(self) -> dict[str, Any]:
        """The contract's JSON object (keys in a stable order)."""
        return {
            "format_version": FORMAT_VERSION,
            "tool_version": self.tool_version,
            "verdict": self.verdict,
            "source": self.source,
            "context": self.context or {},
            "window": self.window,
            "ranks": self.ranks,
            "devices": self.devices,
            "steps": self.steps,
            "kernels": self.kernels,
            "idle": self.idle,
            "communication": self.communication,
            "copies": self.copies,
            "memory_bandwidth": self.bandwidth,
            "matmul_shapes": list(self.matmul_shapes),
            "roofline": list(self.roofline),
            "ncu": self.ncu,
            "memory_growth": list(self.memory_growth),
            "memory_steps": list(self.memory_steps),
            "timeline_bins": list(self.timeline_bins),
            "critical_path": list(self.critical_path),
            "diagnoses": [_diagnosis(f, self.window["basis"]) for f in self.findings],
            "data_quality": self.quality,
        }


TOP_BANDWIDTH_OPS = 15


#: The memory-bound model's figures in `devices[].memory` (analyses/gpu/fusion.py).
MEMORY_FIGURES = (
    "memory_bound_ns",
    "cast_ns",
    "bytes",
    "achieved_gbps",
    "peak_gbps",
    "fusible_share",
    "floor_ns",
    "unknown_ns",
)


def _memory_rows(metrics: Metrics) -> dict[tuple[int, int], dict[str, Any]]:
    """Per device with memory-bound kernels: their time, the bytes their operators move,
    the bandwidth they reach against the peak, the share of the bytes a fusion removes, the
    time the bytes left after it take at the peak, and the time of operators without bytes
    (the model: analyses/gpu/fusion.py)."""
    return {
        (r["rank"], r["device"]): {k: r[k] for k in MEMORY_FIGURES}
        for r in metrics.fusion.model.iter_rows(named=True)
    }


def _launch_rows(metrics: Metrics) -> dict[tuple[int, int], dict[str, Any]]:
    """Per device with recorded launch shapes: its SM count, where the SM limits came from,
    the kernel time with a shape, the share of the SMs its kernels kept busy over that time
    (time-weighted SM fill) and the underfilled launches' count and time."""
    out = {}
    for r in metrics.launch_shapes.per_device.iter_rows(named=True):
        if not r["shaped_ns"]:
            continue
        out[(r["rank"], r["device"])] = {
            "sm_count": r["sms"],
            "limits_source": r["limits"],
            "shaped_ns": r["shaped_ns"],
            "sm_fill_share": r["sm_fill_share"],
            "underfilled_count": r["underfilled_count"],
            "underfilled_ns": r["underfilled_ns"],
            "removed_ns": r["removed_ns"],
        }
    return out


def _figures(row: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """The GPU-metric figures of a frame row (`<prefix><figure>`), the clock in whole Hz."""
    out = {c: row[f"{prefix}{c}"] for c in FIGURES}
    if out["gpc_clock_hz"] is not None:
        out["gpc_clock_hz"] = round(out["gpc_clock_hz"])
    return out


def _gpu_metric_rows(metrics: Metrics) -> dict[tuple[int, int], dict[str, Any]]:
    """Each device's `gpu_metrics` entry (docs/report.md): absent (null) without samples."""
    g = metrics.gpu_metrics
    steps: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for s in g.steps.iter_rows(named=True):
        steps.setdefault((s["rank"], s["device"]), []).append(
            {
                **{k: s[k] for k in ("step", "name", "start_ns", "end_ns", "samples")},
                "busy_samples": s["busy_samples"],
                "busy_clock_share": s["busy_clock_share"],
                "busy": _figures(s, "busy_"),
            }
        )
    inside: dict[tuple[int, int], dict[str, Any]] = {}
    for c in g.classes.iter_rows(named=True):
        inside.setdefault((c["rank"], c["device"]), {})[c["kernel_class"]] = {
            "samples": c["samples"],
            **_figures(c),
        }
    return {
        (r["rank"], r["device"]): {
            "samples": r["samples"],
            "busy_samples": r["busy_samples"],
            "period_ns": r["period_ns"],
            "busy_sample_min_share": BUSY_SAMPLE_MIN_SHARE,
            "max_clock_hz": r["max_clock_hz"],
            "max_clock_source": r["max_clock_source"],
            "busy_clock_share": r["busy_clock_share"],
            "busy_min_gpc_clock_hz": r["busy_min_gpc_clock_hz"],
            "window": _figures(r),
            "busy": _figures(r, "busy_"),
            "inside": inside.get((r["rank"], r["device"]), {}),
            "steps": steps.get((r["rank"], r["device"]), []),
        }
        for r in g.devices.iter_rows(named=True)
    }


def _diagnosis(f: Finding, basis: str) -> dict[str, Any]:
    """The contract's diagnosis object, with `impact_per`: "step" where the window is made
    of steps, "window" where the trace has no step markers (the impact is the window's)."""
    out = f.to_json()
    keys = list(out)
    at = keys.index("impact_ns") + 1
    out["impact_per"] = {"steps": "step", "iterations": "iteration"}.get(basis, "window")
    return {k: out[k] for k in [*keys[:at], "impact_per", *keys[at:]]}


def _rows(frame: pl.DataFrame) -> list[dict[str, Any]]:
    return frame.to_dicts()


def _rank_figures(metrics: Metrics, rank: int) -> dict[str, Any]:
    """A rank's figures per steady step (RANK_FIGURES), its collectives' bytes per step and
    bus bandwidth, and its host time by phase; null where the rank has none."""
    rows = metrics.balance.ranks.filter(pl.col("rank") == rank).to_dicts()
    comm = metrics.collective_split.per_rank.filter(pl.col("rank") == rank).to_dicts()
    row = rows[0] if rows else {}
    c = comm[0] if comm else {}
    return {
        **{k: row.get(k) for k in RANK_FIGURES},
        "comm_bytes": c["bytes"] // row["steps"] if c.get("bytes") and row.get("steps") else None,
        "busbw_gbps": c.get("busbw_gbps"),
        "host_phases": host_phase_medians(metrics.host_phases.steps, rank),
    }


#: The matched kernels listed in the `ncu` section: the most kernel time first.
TOP_NCU_KERNELS = 15


def _ncu(metrics: Metrics) -> NcuDict | None:
    """The `ncu` section (docs/report.md): null without `--ncu`."""
    files = metrics.ncu.files
    if files.height == 0:
        return None
    per_device = files.group_by("rank", "device").agg(pl.col("kernel_ns").max())
    kernel_ns = int(per_device["kernel_ns"].sum() or 0)
    covered = int(metrics.ncu.devices["covered_ns"].sum() or 0)
    notes: list[str] = []
    several = files["path"].n_unique() > 1
    for path, file_notes in (
        files.select("path", "notes").unique("path", maintain_order=True).rows()
    ):
        notes.extend(f"{path}: {n}" if several else n for n in file_notes)
    rows = [
        {
            "path": f["path"],
            "process": f["process"],
            "ncu_device": f["ncu_device"],
            "rank": f["rank"],
            "device": f["device"],
            "alignment": f["alignment"],
            "launch_thread": f["launch_thread"],
            "ncu_kernels": f["ncu_kernels"],
            "matched_ncu_kernels": f["matched_ncu_kernels"],
            "unmatched_ncu_kernels": f["ncu_kernels"] - f["matched_ncu_kernels"],
            "name_overlap_share": f["name_overlap_share"],
            "trace_kernels": f["trace_kernels"],
            "matched_trace_kernels": f["matched_trace_kernels"],
            "kernel_ns": f["kernel_ns"],
            "covered_ns": f["covered_ns"],
            "covered_share": f["covered_share"],
            "dram_source": f["dram_source"],
            "counters": {"present": f["present"], "missing": f["missing"]},
        }
        for f in files.iter_rows(named=True)
    ]
    return {
        "files": rows,
        "matched_kernels": int(files["matched_ncu_kernels"].sum()),
        "unmatched_kernels": int((files["ncu_kernels"] - files["matched_ncu_kernels"]).sum()),
        "matched_trace_kernels": int(files["matched_trace_kernels"].sum()),
        "kernel_ns": kernel_ns,
        "covered_ns": covered,
        "covered_share": covered / kernel_ns if kernel_ns else None,
        "min_name_overlap_share": MIN_NAME_OVERLAP_SHARE,
        "min_tensor_pipe_share": MIN_TENSOR_PIPE_SHARE,
        "kernels": _rows(metrics.ncu.kernels.head(TOP_NCU_KERNELS)),
        "notes": list(dict.fromkeys(notes)),
    }


def _measured_tensor_cores(metrics: Metrics) -> dict[tuple[int, int], MeasuredTensorCoreDict]:
    """Each device's `tensor_core.measured`: Nsight Compute's Tensor Core pipe on the matched
    GEMM-class kernels (none without `--ncu`)."""
    return {
        (r["rank"], r["device"]): {
            "gemm_ns": r["gemm_ns"],
            "tc_ns": r["tc_ns"],
            "tensor_pipe_share": r["tensor_pipe_share"],
            "tc_share_of_gemm": r["tc_share_of_gemm"],
        }
        for r in metrics.ncu.devices.iter_rows(named=True)
    }


#: The roofline's operators in the JSON and the HTML page: the most kernel time first.
TOP_ROOFLINE_OPS = 30


def _flop_rows(metrics: Metrics) -> dict[tuple[int, int], dict[str, Any]]:
    """Each device's `flops` entry (docs/report.md): absent (null) without recorded shapes."""
    return {
        (r["rank"], r["device"]): {
            "model_flops_per_step": r["model_flops_per_step"],
            "achieved_tflops": r["achieved_tflops"],
            "gemm_tflops": r["gemm_tflops"],
            "peak_tflops": r["peak_tflops"],
            "peak_gbps": r["peak_gbps"],
            "dtype": r["dtype"],
            "coverage": r["coverage"],
            "mfu": r["mfu"],
            "gemm_efficiency": r["gemm_efficiency"],
            "hardware_flops_per_step": r["hardware_flops_per_step"],
            "hfu": r["hfu"],
        }
        for r in metrics.flops.devices.iter_rows(named=True)
    }


def _imbalance(metrics: Metrics) -> dict[str, Any] | None:
    """The ranks compared (analyses/distributed/imbalance.py); null for a single rank."""
    b = metrics.balance
    if b.slowest is None:
        return None
    return {
        "slowest_rank": b.slowest,
        "slowest_share": b.slowest_share,
        "own_ns": b.ranks.filter(pl.col("rank") == b.slowest)["own_ns"].item(),
        "others_own_ns": b.others_own_ns,
        "mean_own_ns": b.mean_own_ns,
        "gap_ns": b.gap_ns,
        "cause": b.cause,
        "differences_ns": dict(b.differences),
        "impact_ns": b.impact_ns,
    }


def _causes(row: dict[str, Any]) -> dict[str, int]:
    return {c: int(row[f"{c}_ns"] or 0) for c in CAUSES}


#: What bounds the job, by the category of a finding that fires at warning or above.
BOUND_BY_CATEGORY: dict[str, str] = {
    "gpu_starvation": "host",
    "launch_overhead": "launch",
    "host_sync": "sync",
    "memory_bound": "memory",
    "no_tensor_cores": "gpu_compute",
    "odd_shapes": "gpu_compute",
    "comm_not_overlapped": "communication",
    # waiting for a slow rank is not communication: TA008 names what bounds the slow rank
    # (`evidence.bound_by`); where it cannot, the job is bound by a mix
    "rank_imbalance": "mixed",
    # the score tensors go through memory once per kernel: attention bound by bandwidth
    "unfused_attention": "memory",
    # causes: the wall they put the job against (each finding's `evidence.bound_by` says)
    "recompilation": "host",
    "allocator_churn": "host",
    "anomaly_detection": "sync",
    "layout_conversion": "gpu_compute",
    "uneven_steps": "mixed",
    "activation_recompute": "host",
    "zero_grad_fill": "host",
    "host_built_batch": "host",
    "library_setup": "host",
    "graph_breaks": "host",
    "ddp_no_sync": "host",
    "underfilled_launches": "gpu_compute",
    # copies hold the step: neither the host's compute nor the GPU's
    "pageable_memcpy": "copy",
    "managed_memory": "copy",
    "copy_bound": "copy",
    # compute slowed by a clock below its maximum (a warning only where no heavy GEMM load
    # explains it: power capping of dense GEMMs is an info)
    "clock_throttling": "gpu_compute",
}
#: Findings that come first in the headline but say nothing of what bounds the job (cast
#: kernels that take 10-20 % of a GPU-bound step do not
#: make it memory-bound, TA004 says when it is): the bound then comes from the critical
#: path or busy share.
HEADLINE_ONLY = {"dtype_casts"}
#: ... and by the critical path's largest kind, where no such finding fires.
BOUND_BY_PATH: dict[str, str] = {
    "cpu": "host",
    "gpu_compute": "gpu_compute",
    "comm": "communication",
    "copy": "copy",
    "sync_wait": "sync",
    "idle": "idle",
}
BOUND_WORDS: dict[str, str] = {
    "host": "host-bound",
    "gpu_compute": "GPU-compute-bound",
    "memory": "memory-bound",
    "communication": "communication-bound",
    "launch": "launch-bound",
    "sync": "sync-bound",
    "copy": "copy-bound",
    "idle": "GPU mostly idle",
    "mixed": "mixed",
}
#: Under this share of the SMs kept at work by a busy GPU's kernels (time-weighted SM fill of
#: their launch shapes), the headline says so beside the busy share.
LOW_FILL_SHARE = 0.5
#: ... said of devices busy at least this share of their window (an idle GPU is not working
#: either way).
LOW_FILL_BUSY_SHARE = 0.5
#: With this many steady steps or fewer, the headline gives the steps' range: a rough period.
FEW_STEPS = 3
#: ... and calls it rough where its steps differ by more than this share of the period.
ROUGH_SPREAD = 0.10
#: A critical-path kind bounds the job when it holds at least this share of the path.
BOUND_SHARE = 0.5
#: A finding names what bounds the job when it is critical or saves at least this share.
BOUND_FINDING_SHARE = 0.10
#: Without such a finding, a GPU busy at least this share of the window is GPU-bound.
BUSY_GPU_BOUND = 0.85
#: ... and memory-bound where memory-bound kernels hold at least this share of its kernels'.
MEMORY_BOUND_SHARE = 0.5


def headline_numbers(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The job's headline numbers from a report's JSON (all devices together): the one place
    `compare` and batch's summary row take them from. Step time as `job_step_ns`; shares of
    the summed windows; kernel, communication and Tensor Core totals."""
    devices = doc["devices"]
    window = sum(d["window_ns"] for d in devices)
    gemm = sum(d["tensor_core"]["gemm_ns"] for d in devices)

    def share(ns: int) -> float | None:
        return ns / window if window else None

    return {
        "step_ns": job_step_ns(doc["critical_path"]),
        "window_ns": window,
        "busy_share": share(sum(d["busy_ns"] for d in devices)),
        "idle_share": share(sum(d["idle_ns"] for d in devices)),
        **{f"{c}_share": share(sum(d["idle_by_cause"][c] for d in devices)) for c in CAUSES},
        "kernel_count": doc["kernels"]["count"],
        "kernel_ns": doc["kernels"]["total_ns"],
        "comm_ns": sum(d["comm_ns"] for d in devices),
        "exposed_comm_ns": sum(d["exposed_comm_ns"] for d in devices),
        "tc_share_of_gemm": sum(d["tensor_core"]["tc_ns"] for d in devices) / gemm
        if gemm
        else None,
    }


def job_step_ns(paths: Sequence[Mapping[str, Any]]) -> int | None:
    """The job's step time (docs/report.md, Definitions): each rank's loop period over its
    steady steps (`critical_path[].period`, `steady.loop_periods`), else its mean steady
    step on the critical path; the slowest rank's."""
    steps = [
        (p.get("period") or {}).get("period_ns") or p["step_ns"] / p["steps"]
        for p in paths
        if p["steps"]
    ]
    return round(max(steps)) if steps else None


def _step_words(paths: Sequence[Mapping[str, Any]], step: int) -> str:
    """ "12.3 ms steps (12 steps: 11.9-12.8 ms)": the job's step time with the number of
    steady steps and the range of single steps by the same measure (steady.loop_periods),
    "rough" where three or fewer differ by more than ROUGH_SPREAD of the period (a period
    from so few steps is only as sure as they agree)."""
    text = f"{step / 1e6:.1f} ms steps"
    periods = [p["period"] for p in paths if p.get("period") and p["steps"]]
    if not periods:
        return text
    q = max(periods, key=lambda q: q["period_ns"] or 0)  # the job's: the slowest rank's
    n = q["steps"]
    spread = ""
    if q["min_ns"] and q["max_ns"] and round(q["min_ns"] / 1e5) != round(q["max_ns"] / 1e5):
        few = n <= FEW_STEPS and q["max_ns"] - q["min_ns"] > ROUGH_SPREAD * step
        spread = f": {q['min_ns'] / 1e6:.1f}-{q['max_ns'] / 1e6:.1f} ms" + (
            ", rough" if few else ""
        )
    return text + f" ({n} step{'s' if n > 1 else ''}{spread})"


#: Devices whose busy shares differ by this much are named apart in the headline.
BUSY_SPREAD = 0.10


def _busy_words(devices: Sequence[Mapping[str, Any]], busy: float) -> str:
    """ "GPU busy 63%"; with several devices whose shares differ by BUSY_SPREAD or more,
    each device's (two) or their range, never their average alone: a 4 % device beside a
    92 % one is not 48 % busy."""
    shares = [d["busy_ns"] / d["window_ns"] for d in devices if d.get("window_ns")]
    if len(shares) < 2 or max(shares) - min(shares) < BUSY_SPREAD:
        return f"GPU busy {busy:.0%}" + _work_words(devices)
    if len(shares) == 2:
        return f"GPUs busy {shares[0]:.0%} and {shares[1]:.0%}" + _work_words(devices)
    return f"GPUs busy {min(shares):.0%}-{max(shares):.0%} ({len(shares)} devices)" + (
        _work_words(devices)
    )


def _clock_words(findings: Sequence[Finding]) -> str:
    """ ", GPC clock 1350 of 1980 MHz while busy: the power limit of a dense GEMM load
    (TA026, info)": the clock held below its maximum (TA026's lowest), with its likely
    reason and the finding's severity; "" where no device's clock was."""
    clocks = [f for f in findings if f.rule == "TA026" and f.evidence.get("clock_words")]
    if not clocks:
        return ""
    low = min(clocks, key=lambda f: f.evidence["clock_share"])
    return f", {low.evidence['clock_words']} ({low.rule}, {low.severity.value})"


def _work_words(devices: Sequence[Mapping[str, Any]]) -> str:
    """What of a busy GPU works: the SMs active measured by its GPU metrics (`_sm_words`),
    the SMs its kernels' launch shapes fill (`_fill_words`) in parentheses beside them; the
    launch shapes alone where the trace has no GPU metrics."""
    measured, shaped = _sm_words(devices), _fill_words(devices)
    if measured and shaped:
        return f"{measured} (measured; {shaped.removeprefix(', but ')})"
    return measured or shaped


#: The headline names the SMs at work beside the busy share where the GPU metrics' busy
#: samples show at most this share of the SMs active ("GPU busy 100%, but 1% of SMs
#: active": a kernel was resident, on few SMs) ...
FEW_SMS_SHARE = 0.5
#: ... over at least this many busy samples (about a millisecond of work at 10 kHz).
MIN_BUSY_SAMPLES = 10


def _sm_words(devices: Sequence[Mapping[str, Any]]) -> str:
    """ ", but 1% of SMs active": the lowest SMs Active over the busy samples of a device
    (`devices[].gpu_metrics`) where it is FEW_SMS_SHARE or less; named where several
    devices have GPU metrics; "" without GPU metrics."""
    seen = [
        (g["busy"]["sm_active_share"], d["rank"], d["device"])
        for d in devices
        if (g := d.get("gpu_metrics"))
        and g["busy_samples"] >= MIN_BUSY_SAMPLES
        and g["busy"]["sm_active_share"] is not None
    ]
    if not seen:
        return ""
    low, rank, device = min(seen)
    if low > FEW_SMS_SHARE:
        return ""
    where = f" on rank {rank} GPU {device}" if len(seen) > 1 else ""
    return f", but {_share(low)} of SMs active{where}"


def _fill_words(devices: Sequence[Mapping[str, Any]]) -> str:
    """ ", but its kernels fill 1% of the SMs": where the busy devices' kernels keep under
    LOW_FILL_SHARE of the SMs at work over their time (launch shapes: `devices[].launch`),
    the least filled device's, among those busy LOW_FILL_BUSY_SHARE of their window or more:
    busy is not working."""
    fills = [
        (d["launch"]["sm_fill_share"], d)
        for d in devices
        if d.get("launch")
        and d["launch"]["sm_fill_share"] is not None
        and d.get("window_ns")
        and d["busy_ns"] >= LOW_FILL_BUSY_SHARE * d["window_ns"]
    ]
    if not fills:
        return ""
    fill, _ = min(fills, key=lambda f: f[0])
    if fill >= LOW_FILL_SHARE:
        return ""
    which = "its" if len(devices) == 1 else "a GPU's"
    return f", but {which} kernels fill {fill:.0%} of the SMs"


#: A step as a unit in the headline ("12.3 ms steps (4 steps: ...)", "per step").
_STEP_UNIT = re.compile(r"\b(\d+ )?steps?\b(?=[ :);,]|$)")


def per_iteration(v: VerdictDict, basis: str) -> VerdictDict:
    """The verdict of a trace whose steps are its repeated calls (no step markers): said in
    iterations, never in steps."""
    if basis != "iterations":
        return v
    words = _STEP_UNIT.sub(
        lambda m: (m.group(1) or "") + ("iterations" if m.group(0).endswith("s") else "iteration"),
        v["headline"],
    )
    return {**v, "headline": words}


def verdict(
    devices: list[DeviceDict],
    paths: list[dict[str, Any]],
    findings: list[Finding],
    context: Mapping[str, Any] | None = None,
) -> VerdictDict:
    """One line on what bounds the job over the steady steps: the worst finding's category
    (the first at warning or above in the report's order) where it is critical or saves at
    least BOUND_FINDING_SHARE of a step; else the critical path's largest kind where it holds
    half the path, else `mixed`, where a GPU busy BUSY_GPU_BOUND of the window is
    `gpu_compute`; with the mean steady step (the slowest rank's), the GPU busy share of the
    window and the top finding's saving."""
    step = job_step_ns(paths)
    window = sum(d["window_ns"] for d in devices)
    busy = sum(d["busy_ns"] for d in devices) / window if window else None
    damaged = next((f for f in findings if f.rule == "TA012" and f.evidence.get("damaged")), None)
    if damaged is not None:  # a timeline with holes: the verdict is about the trace
        return {
            "headline": (
                f"the trace is damaged ({damaged.rule}): {damaged.evidence['dropped_gpu']} GPU "
                "events could not be read; no verdict on performance"
            ),
            "bound_by": "mixed",
            "cause": None,
            "step_ns": step,
            "busy_share": busy,
            "top_saving_ns": None,
            "mfu": None,
            "achieved_tflops": None,
            "peak_tflops": None,
        }
    serious = [
        f
        for f in findings
        if f.severity.rank >= 1 and (f.category in BOUND_BY_CATEGORY or f.category in HEADLINE_ONLY)
    ]
    top = serious[0] if serious else None
    share = top.evidence.get("impact_share_of_step") if top is not None else None
    if (
        top is not None
        and top.category in BOUND_BY_CATEGORY
        and (top.severity.rank == 2 or (share is not None and share >= BOUND_FINDING_SHARE))
    ):
        # a finding may say what bounds it (TA008: the resource that bounds the slowest
        # rank, which the others wait for: its host, its GPU's work)
        bound = top.evidence.get("bound_by") or BOUND_BY_CATEGORY[top.category]
        if bound not in BOUND_WORDS:
            bound = BOUND_BY_CATEGORY[top.category]
    else:
        totals: dict[str, int] = {}
        for p in paths:
            for kind, ns in p["by_kind"].items():
                totals[kind] = totals.get(kind, 0) + ns
        path = sum(totals.values())
        kind, ns = max(sorted(totals.items()), key=lambda kv: kv[1], default=("", 0))
        bound = BOUND_BY_PATH.get(kind, "mixed") if path and ns / path >= BOUND_SHARE else "mixed"
        if busy is not None and busy >= BUSY_GPU_BOUND and bound in ("host", "idle", "mixed"):
            # a GPU this busy is not waiting for anything: busy with kernels, or with copies
            kernels = sum(
                d["busy_ns"] if d.get("kernel_ns") is None else d["kernel_ns"] for d in devices
            )
            busy_ns = sum(d["busy_ns"] for d in devices)
            bound = "copy" if 2 * (busy_ns - kernels) > busy_ns else "gpu_compute"
        if bound == "gpu_compute" and _memory_share(devices) >= MEMORY_BOUND_SHARE:
            bound = "memory"  # busy with kernels that wait for memory, not for the SMs
    facts = []
    cause = next((f for f in serious if f.category in CAUSE_CATEGORIES), None)
    if cause is not None and cause.evidence.get("cause_words"):
        # the cause first: what put the job against its wall, and how much of a step it holds
        # (named by its rule where another finding leads the report)
        words = str(cause.evidence["cause_words"])
        if cause.impact_ns and step:
            of = f"{_duration(cause.impact_ns)} of {_duration(step)} per step"
            words += f": {of}" if cause is top else f" ({cause.rule}: {of})"
        facts.append(words)
    if step is not None:
        kinds = "" if cause is not None and cause.rule == "TA018" else _kinds_words(findings)
        facts.append(_step_words(paths, step) + kinds)
    if busy is not None:
        facts.append(_busy_words(devices, busy) + _clock_words(findings))
    saving = top.impact_ns if top is not None else None
    if top is not None:
        fix = f"fixing {top.rule} ({top.title})"
        per = "per step" if step is not None else "over the window (no step markers)"
        facts.append(
            f"{fix} saves up to {saving / 1e6:.1f} ms {per}" if saving else fix + " comes first"
        )
    elif warned := [f for f in findings if f.severity.rank >= 1]:
        # never "no finding" above a warning: name what warns (a trace-quality finding)
        facts.append(
            f"no performance finding at warning or above ({warned[0].rule} warns: "
            f"{warned[0].title})"
        )
    else:
        facts.append("no finding at warning or above")
    risks = [
        f
        for f in findings
        if f.severity.rank == 2 and f.category not in {*BOUND_BY_CATEGORY, *HEADLINE_ONLY}
    ]
    facts += [f"also {f.rule} ({f.title})" for f in risks[:1]]
    if bound in HOST_BOUNDS and (note := _profiled_host_words(context or {})):
        facts.append(note)
    mfu, achieved, peak, dtype = job_mfu(devices)
    how_far = ""
    if mfu is not None and achieved is not None and peak is not None:
        how_far = f" at {_share(mfu)} MFU ({_rate(achieved)} of {peak:.0f} TFLOP/s {dtype})"
        hfu = job_hfu(devices)
        if hfu is not None and hfu > 1.05 * mfu:
            # recomputed forwards (activation checkpointing) are hardware FLOPs, not the model's
            how_far += f", {_share(hfu)} hardware FLOPs utilisation with the recompute"
    if bound == "memory" and (bandwidth := _bandwidth_words(devices)):
        how_far = bandwidth + (f" and {_share(mfu)} MFU" if mfu is not None else "")
    return {
        "headline": _cut_words(findings)
        + _startup_words(findings)
        + f"{BOUND_WORDS[bound]}{how_far}: "
        + "; ".join(facts),
        "bound_by": bound,
        "cause": cause.rule if cause is not None else None,
        "step_ns": step,
        "busy_share": busy,
        "top_saving_ns": saving,
        "mfu": mfu,
        "achieved_tflops": achieved,
        "peak_tflops": peak,
    }


def _memory_share(devices: Sequence[Mapping[str, Any]]) -> float:
    """Memory-bound kernel time over kernel time, all devices."""
    kernel = sum(d.get("kernel_ns") or 0 for d in devices)
    bound = sum((d.get("memory") or {}).get("memory_bound_ns") or 0 for d in devices)
    return bound / kernel if kernel else 0.0


def _bandwidth_words(devices: Sequence[Mapping[str, Any]]) -> str:
    """ " at 91% of peak bandwidth (3056 of 3350 GB/s)" for a memory-bound job: its
    memory-bound operators' bandwidth over the devices with known bytes and peak; measured
    where the GPU metrics have the DRAM figures (`_dram_words`)."""
    if measured := _dram_words(devices):
        return measured
    rows = [
        d["memory"]
        for d in devices
        if d.get("memory") and d["memory"]["achieved_gbps"] and d["memory"]["peak_gbps"]
    ]
    if not rows:
        return ""
    achieved = sum(r["achieved_gbps"] for r in rows) / len(rows)
    peak = sum(r["peak_gbps"] for r in rows) / len(rows)
    return f" at {achieved / peak:.0%} of peak bandwidth ({achieved:.0f} of {peak:.0f} GB/s)"


def measured_dram(gpu_metrics: Mapping[str, Any] | None) -> tuple[float, float, str] | None:
    """A device's measured DRAM read and write shares of the peak and where they were
    measured: over the samples inside its memory-bound kernels ("inside the memory-bound
    kernels"), else over its busy samples ("while busy"); None without both figures."""
    if not gpu_metrics:
        return None
    for figures, where in (
        ((gpu_metrics["inside"] or {}).get("memory_bound"), "inside the memory-bound kernels"),
        (gpu_metrics["busy"] if gpu_metrics["busy_samples"] else None, "while busy"),
    ):
        read = figures["dram_read_share"] if figures else None
        write = figures["dram_write_share"] if figures else None
        if read is not None and write is not None:
            return read, write, where
    return None


def _dram_words(devices: Sequence[Mapping[str, Any]]) -> str:
    """ " at 89% of peak DRAM bandwidth (measured: read 59% + write 30% ...)": the devices'
    measured DRAM (`measured_dram`, their mean); "" where no device has it."""
    found = [m for d in devices if (m := measured_dram(d.get("gpu_metrics")))]
    if not found:
        return ""
    read = sum(m[0] for m in found) / len(found)
    write = sum(m[1] for m in found) / len(found)
    return (
        f" at {read + write:.0%} of peak DRAM bandwidth (measured: read {read:.0%} + write "
        f"{write:.0%} {found[0][2]})"
    )


def _cut_words(findings: list[Finding]) -> str:
    """The headline's opening for a trace cut off (TA012): what was read of it."""
    for f in findings:
        e = f.evidence
        if f.rule == "TA012" and e.get("truncated_files"):
            read = e.get("read_span_ns")
            return (
                f"the trace is incomplete ({f.rule}: {len(e['truncated_files'])} file(s) cut "
                f"off; {e.get('kernels_read', 0)} kernels read"
                + (f", {read / 1e6:.1f} ms of GPU time" if read else "")
                + "); "
            )
    return ""


def _startup_words(findings: list[Finding]) -> str:
    """The headline's opening where one-time work fills most of a device's window (TA012):
    the numbers after it describe start-up, not the loop."""
    for f in findings:
        e = f.evidence
        if f.rule == "TA012" and e.get("dominates"):
            first = (e.get("calls") or [{}])[0]
            what = first.get("op_name") or first.get("name") or "one-time work"
            return (
                f"the trace shows start-up, not the loop ({f.rule}: "
                f"{e['startup_ns'] / 1e6:.0f} ms of the "
                f"{e['window_ns'] / 1e6:.0f} ms window is one-time work, the longest in "
                f"{what}; profile steady steps); "
            )
    return ""


def _kinds_words(findings: list[Finding]) -> str:
    """The headline's note where the steady steps come in two kinds (TA018): each kind's
    time, so that the mean step is not read as every step's."""
    for f in findings:
        e = f.evidence
        if f.rule == "TA018" and e.get("pattern") in ("periodic", "outliers"):
            slow, fast = _duration(e["slow_ns"]), _duration(e["fast_ns"])
            if e.get("period"):
                k = len(e["slow_steps"]) * e["period"] // max(1, e["steps"])
                which = f"every {e['period']} steps" if k <= 1 else f"{k} of every {e['period']}"
                return f" of two kinds: {slow} {which}, {fast} the others"
            return f" of two kinds: {len(e['slow_steps'])} steps of {slow}, the others {fast}"
    return ""


#: Walls whose prices are host time, which the profiler inflates.
HOST_BOUNDS = frozenset({"host", "launch", "sync"})


def _profiled_host_words(context: Mapping[str, Any]) -> str:
    """The headline's warning where a host-bound verdict rests on a trace recorded with
    Python stacks or memory: the profiler's own host time is in every host price."""
    overhead = context.get("profiler_overhead") or {}
    what = [w for k, w in (("stacks", "Python stacks"), ("memory", "memory")) if overhead.get(k)]
    if not what:
        return ""
    return (
        f"recorded with {' and '.join(what)}: the profiler slows the host, so host prices are "
        "high; profile again without with_stack/profile_memory before trusting them"
    )


def _duration(ns: int) -> str:
    """A time in the headline: ms below a second, s above."""
    return f"{ns / 1e9:.1f} s" if ns >= 1_000_000_000 else f"{ns / 1e6:.1f} ms"


def _share(x: float) -> str:
    """A share in the headline: whole percent, two significant digits below 10 %."""
    return f"{x:.0%}" if x >= 0.1 else f"{x * 100:.2g}%"


def _rate(tflops: float) -> str:
    """TFLOP/s in the headline: whole units, more digits below 10."""
    return f"{tflops:.0f}" if tflops >= 10 else f"{tflops:.2g}"


def job_mfu(
    devices: Sequence[Mapping[str, Any]],
) -> tuple[float | None, float | None, float | None, str | None]:
    """The job's MFU, achieved and peak TFLOP/s per device and the precision they are
    counted in: the mean over the devices whose FLOPs and peak are known (every GPU of a
    data-parallel job does the same work); all None where none is."""
    known = [d["flops"] for d in devices if d.get("flops") and d["flops"]["mfu"] is not None]
    if not known:
        return None, None, None, None
    n = len(known)
    return (
        sum(f["mfu"] for f in known) / n,
        sum(f["achieved_tflops"] for f in known) / n,
        sum(f["peak_tflops"] for f in known) / n,
        known[0]["dtype"],
    )


def job_hfu(devices: Sequence[Mapping[str, Any]]) -> float | None:
    """The job's hardware FLOPs utilisation (every FLOP run, recomputed forwards too): the
    mean over the devices whose MFU is known; None where none is."""
    known = [
        d["flops"]["hfu"]
        for d in devices
        if d.get("flops") and d["flops"]["mfu"] is not None and d["flops"].get("hfu") is not None
    ]
    return sum(known) / len(known) if known else None


def _step(r: dict[str, Any], *, warmup: bool) -> StepDict:
    """One `steps[]` entry; warm-up steps were left out of the idle analysis: no causes."""
    return {
        "rank": r["rank"],
        "device": r["device"],
        "name": r["name"] if r["name"] is not None else f"step {r['step']}",
        "start_ns": r["start_ns"],
        "end_ns": r["end_ns"],
        "busy_ns": r["busy_ns"],
        "idle_share": r["idle_share"],
        "kernel_count": r["kernel_count"],
        "idle_by_cause": {} if warmup else _causes(r),
        "warmup": warmup,
    }


#: The reason given a step left out because the trace was cut off before its end.
CUT_REASON = "lost to the cut: the trace file ends before this step was recorded whole"


def _excluded(metrics: Metrics, truncated: bool) -> list[dict[str, Any]]:
    """The steps left out of the window; in a trace that was cut off, those after the last
    steady step of their rank were lost to the cut, whatever they looked like (empty, or an
    outlier: partly recorded), and say so."""
    rows = metrics.steps.excluded.to_dicts()
    if not truncated or not rows:
        return rows
    last = {
        r["rank"]: r["step"]
        for r in metrics.steps.steady.group_by("rank").agg(pl.col("step").max()).to_dicts()
    }
    for r in rows:
        if r["rank"] in last and r["step"] > last[r["rank"]]:
            r["reason"] = CUT_REASON
    return rows


def excluded_words(excluded: Sequence[Mapping[str, Any]], unit: str = "step") -> list[str]:
    """The steps left out, in words: the warm-up/outlier steps, and the steps lost to the cut
    of a cut-off trace (their names, at most four each); `unit` names the periods ("step",
    or "iteration" where they are repeated calls)."""

    def names(rows: list[Mapping[str, Any]]) -> str:
        shown = sorted({str(r["name"]) for r in rows})
        return ", ".join(shown[:4]) + (", ..." if len(shown) > 4 else "")

    lost = [r for r in excluded if r["reason"] == CUT_REASON]
    left = [r for r in excluded if r["reason"] != CUT_REASON]
    words = []
    if left:
        n = len({r["name"] for r in left})
        words.append(
            f"{n} warm-up/outlier {unit}(s) left out of the window ({names(left)}; --all-steps "
            "keeps them)"
        )
    if lost:
        n = len({r["name"] for r in lost})
        words.append(f"{n} {unit}(s) lost to the cut ({names(lost)}: the file ends before them)")
    return words


def _outside_notes(
    outside: list[dict[str, Any]], metrics: Metrics, truncated: bool = False
) -> list[str]:
    """One note per device with GPU work outside the window, and one for excluded steps."""
    notes = [
        f"rank {o['rank']} GPU {o['device']}: {o['before_count']} GPU operation(s) "
        f"({o['before_ns'] / 1e6:.2f} ms) before the window and {o['after_count']} "
        f"({o['after_ns'] / 1e6:.2f} ms) after it are not analysed"
        for o in outside
    ]
    unit = "iteration" if metrics.basis == "iterations" else "step"
    notes += excluded_words(_excluded(metrics, truncated), unit)
    return notes


def _step_kind_notes(metrics: Metrics) -> list[str]:
    """Notes where the steady steps trend (the host still warming up, or slowing down) or
    vary at no pattern: the mean step describes neither kind (TA018 prices the periodic
    kinds and the outliers)."""
    notes = []
    for r in metrics.causes.step_kinds.iter_rows(named=True):
        slow, fast = _duration(r["slow_ns"]), _duration(r["fast_ns"])
        n, k = r["steps"], len(r["slow_steps"])
        if r["pattern"] == "trend: warm-up":
            extra = metrics.causes.slow_work_of(r["rank"])
            what = (
                f"they also run {extra[0]['name']}" if extra else "the same calls, each step faster"
            )
            notes.append(
                f"rank {r['rank']}: the first {k} of {n} steady steps take {slow}, the rest "
                f"{fast}: the host is still warming up ({what}); profile after a longer "
                "warm-up for the loop's own step time"
            )
        elif r["pattern"] == "trend: slowing":
            notes.append(
                f"rank {r['rank']}: the last {k} of {n} steady steps take {slow}, the ones "
                f"before {fast}: the loop slows down as it runs"
            )
        elif r["pattern"] == "irregular":
            notes.append(
                f"rank {r['rank']}: {k} of {n} steady steps take {slow}, the others {fast}, "
                "at no period: the mean step describes neither"
            )
    return notes


def _flops_notes(metrics: Metrics) -> list[str]:
    """One note where convolutions launched GEMM-class work whose FLOPs are unknown (the
    trace records no Concrete Inputs: analyses/gpu/flops.py)."""
    unknown = metrics.flops.unknown
    if unknown.height == 0:
        return []
    names = ", ".join(sorted(set(unknown["op_name"].to_list())))
    calls, kernel_ns = unknown.select(pl.col("calls", "kernel_ns").sum()).row(0)
    return [
        f"{calls} convolution call(s) ({names}; "
        f"{kernel_ns / 1e6:.2f} ms of GEMM-class kernels) have unknown FLOPs: "
        "the trace records no Concrete Inputs (stride, padding, dilation, which gradients a "
        "backward computes; torch.profiler writes them with record_shapes=True from torch "
        "2.1 on), so they are left out of FLOPs, achieved TFLOP/s and MFU"
    ]


def build_report(
    meta: TraceMeta,
    metrics: Metrics,
    tool_version: str,
    findings: list[Finding] | None = None,
    critical_path: list[dict[str, Any]] | None = None,
    context: dict[str, Any] | None = None,
) -> Report:
    """Assemble the report from the trace's meta, the analyses' results and the findings."""
    names = {(d.rank, d.device): d.name for d in meta.devices}
    flop_rows = _flop_rows(metrics)
    memory_rows = _memory_rows(metrics)
    launch_rows = _launch_rows(metrics)
    measured_tc = _measured_tensor_cores(metrics)
    metric_rows = _gpu_metric_rows(metrics)
    devices: list[DeviceDict] = [
        {
            "rank": r["rank"],
            "device": r["device"],
            "name": names.get((r["rank"], r["device"])),
            "window_ns": r["window_ns"],
            "busy_ns": r["busy_ns"],
            "idle_ns": r["idle_ns"],
            "idle_share": r["idle_share"],
            "idle_by_cause": _causes(r),
            "idle_share_by_cause": {c: r[f"{c}_share"] for c in CAUSES},
            "gap_count": r["gap_count"],
            "longest_gap_ns": r["longest_gap_ns"],
            "kernel_count": r["kernel_count"],
            "kernel_ns": r["kernel_ns"],
            "comm_ns": r["comm_ns"] or 0,
            "overlapped_comm_ns": r["overlapped_comm_ns"] or 0,
            "exposed_comm_ns": r["exposed_comm_ns"] or 0,
            "overlap_share": r["overlap_share"],
            "comm_wait_ns": r["comm_wait_ns"],
            "tensor_core": {
                "tc_ns": r["tc_ns"] or 0,
                "gemm_ns": r["gemm_ns"] or 0,
                "kernel_ns": r["kernel_ns"],
                "share_of_gemm": r["share_of_gemm"],
                "share_of_kernel": r["share_of_kernel"],
                "unknown_ns": r["unknown_ns"] or 0,
                "measured": measured_tc.get((r["rank"], r["device"])),
            },
            "flops": flop_rows.get((r["rank"], r["device"])),
            "memory": memory_rows.get((r["rank"], r["device"])),
            "launch": launch_rows.get((r["rank"], r["device"])),
        }
        for r in metrics.devices.rows()
    ]
    for d in devices:
        if (found := metric_rows.get((d["rank"], d["device"]))) is not None:
            d["gpu_metrics"] = found
    steps = [_step(r, warmup=False) for r in metrics.steps.steady.iter_rows(named=True)]
    warm = [_step(r, warmup=True) for r in metrics.steps.warmup.iter_rows(named=True)]
    steps = sorted([*warm, *steps], key=lambda s: (s["rank"], s["device"], s["start_ns"]))
    outside = _rows(metrics.steps.outside_window)
    span = metrics.steps.windows.select(pl.col("start_ns").min(), pl.col("end_ns").max()).row(0)
    q = meta.quality
    longest = longest_first(metrics.idle.gaps).head(LONGEST_GAPS)
    return Report(
        source={
            "path": meta.path,
            "format": meta.format,
            "producer": meta.producer,
            "producer_version": meta.producer_version,
        },
        window={
            "start_ns": span[0],
            "end_ns": span[1],
            "basis": metrics.basis,
            "iterations_from": metrics.iterations,
            "excluded_steps": [
                {
                    "rank": r["rank"],
                    "name": r["name"],
                    "step_ns": r["step_ns"],
                    "reason": r["reason"],
                }
                for r in _excluded(metrics, q.truncated)
            ],
        },
        ranks=[
            {
                "rank": r.rank,
                "rank_source": r.rank_source,
                "path": r.path,
                "world_size": r.world_size,
                **_rank_figures(metrics, r.rank),  # type: ignore[typeddict-item]
            }
            for r in meta.ranks
        ],
        devices=devices,
        steps=steps,
        kernels={
            "count": metrics.kernels.count,
            "total_ns": metrics.kernels.total_ns,
            "duration_histogram": [
                {"lo_ns": lo, "hi_ns": hi, "count": c, "total_ns": t}
                for lo, hi, c, t in metrics.kernels.histogram.select(
                    "lo_ns", "hi_ns", "count", "total_ns"
                ).iter_rows()
            ],
            "top": [
                {"name": n, "count": c, "total_ns": t, "share": s}
                for n, c, t, s in metrics.kernels.top.select(
                    "name", "count", "total_ns", "share"
                ).iter_rows()
            ],
            "classes": _rows(metrics.kernels.classes),
            "launch_size_histogram": _rows(metrics.kernels.launch_size_histogram),
            "small_kernels": {
                "limit_ns": SMALL_KERNEL_NS,
                "count_share": metrics.kernels.small_count_share,
                "time_share": metrics.kernels.small_time_share,
            },
            "launch_shapes": _rows(metrics.launch_shapes.kernels),
        },
        idle={
            "launch_gap_max_ns": metrics.idle.launch_gap_max_ns,
            "gap_histogram": _rows(metrics.idle.gap_histogram),
            "longest_gaps": _rows(
                longest.select(
                    "rank",
                    "device",
                    "start_ns",
                    "gap_ns",
                    pl.col("cause").cast(pl.String),
                    "before",
                    "after",
                    "sync_name",
                )
            ),
            "syncs_per_step": _rows(metrics.idle.syncs_per_step),
            "sync_sites": _rows(metrics.idle.sync_sites),
        },
        communication={
            "per_collective": _rows(
                metrics.communication.collectives.with_columns(pl.col("collective").cast(pl.String))
            ),
            "ranks": _rows(metrics.communication.rank_waits),
            "slowest_rank": metrics.slowest_rank,
            "by_rank": _rows(metrics.collective_split.per_kind),
            "imbalance": _imbalance(metrics),
        },
        copies=_rows(metrics.copies.summary),
        bandwidth=_rows(metrics.bandwidth.operators.head(TOP_BANDWIDTH_OPS)),
        quality={
            "truncated": q.truncated,
            "truncated_files": list(q.truncated_files),
            "skipped_files": list(q.skipped_files),
            "dropped_events": dict(sorted(q.dropped.items())),
            "dropped_gpu_events": q.dropped_gpu,
            "dropped_gpu_example": q.dropped_gpu_example,
            "notes": [
                *q.notes,
                *_outside_notes(outside, metrics, q.truncated),
                *_flops_notes(metrics),
                *_step_kind_notes(metrics),
            ],
            "outside_window": outside,
        },
        tool_version=tool_version,
        findings=tuple(findings or ()),
        critical_path=tuple(critical_path or ()),
        context=dict(context or {}),
        verdict=per_iteration(
            verdict(devices, list(critical_path or ()), list(findings or ()), dict(context or {})),
            metrics.basis,
        ),
        timeline_bins=tuple(_rows(metrics.idle.timeline_bins)),
        memory_growth=tuple(_rows(metrics.memory.growth)),
        memory_steps=tuple(_rows(metrics.memory.peaks.sort("rank", "device", "step"))),
        matmul_shapes=tuple(_rows(metrics.shapes.matmuls.head(TOP_BANDWIDTH_OPS))),
        roofline=tuple(_rows(metrics.flops.roofline.head(TOP_ROOFLINE_OPS))),
        ncu=_ncu(metrics),
        gpu_metric_series=tuple(_rows(metrics.gpu_metrics.series)),
    )
