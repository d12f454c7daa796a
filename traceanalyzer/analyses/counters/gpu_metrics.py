"""Nsight GPU metrics per device: over the steady window, per steady step, inside each class
of kernel, and in bins for the figure.

The samples (`Timeline.gpu_metrics`, one per ~100 µs per GPU) say what the timeline cannot:
a GPU "busy" 100 % of the window only had a kernel resident; the counters say how much of it
worked. Definitions (every figure is a plain mean of samples, each sample a period of the
counter's own, `[start_ns, end_ns)`):

- a sample is **in** a window or step when its whole period lies inside it;
- a sample is **busy** when GPU work (kernels, copies, memsets: the timeline's busy union)
  covers at least `BUSY_SAMPLE_MIN_SHARE` (90 %) of its period. The busy figures are the
  means over busy samples: idle clocks are low by design and idle SMs are not the work's,
  so a clock or an SM share is judged where the GPU works. A sample half over a kernel's
  end reads half its SMs Active; left out, it does not dilute the figure (on gappy work
  with kernels shorter than a sample few samples are busy: the figures say how many);
- a sample is **inside a class** of kernels (`gemm`, `memory_bound` with the copy/cast
  kernels) when that class's kernels cover 90 % of its period: the DRAM bandwidth the
  memory-bound kernels reach and the tensor pipes the GEMMs keep active are measured there,
  not estimated (kernels shorter than a sample have no such sample: then nothing is
  measured for them, and the figures say so by a count of 0);
- the clock's maximum is the device's from the export's target info (`DeviceInfo.max_clock_hz`,
  source `target_info`), else the highest sample of the device in the whole capture
  (`max_sample`); `busy_clock_share` is the busy samples' mean clock over it.

A share the device's metric set lacks stays null, never 0: no figure is made of it.
Known limits: the counters are the whole GPU's (work of another process on the same GPU
counts); a sample of two classes' kernels running together (two streams) is inside both.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import polars as pl

from traceanalyzer.analyses.gpu.devices import busy_in_spans
from traceanalyzer.analyses.timeline.frames import Schemas, check_frames
from traceanalyzer.analyses.timeline.windows import DEVICE_KEY, StepCounts
from traceanalyzer.model import GPU_METRIC_SHARES, DeviceInfo

#: A sample is busy when GPU work covers at least this share of its period (and inside a
#: class of kernels when that class's kernels do).
BUSY_SAMPLE_MIN_SHARE = 0.9
#: The figure's bins per device window, at most (a bin is never shorter than a sample).
FIGURE_BINS = 600
#: The kernels whose samples are measured apart: group -> (kernel classes, Tensor Core
#: verdict or None for any): the memory-bound kernels (with the copy/cast ones), the
#: GEMM-class kernels, and the GEMM-class kernels the Tensor Core analysis judged off the
#: Tensor Cores (gpu/tensor_cores.py: verdict "no").
CLASS_GROUPS: dict[str, tuple[tuple[str, ...], str | None]] = {
    "memory_bound": (("memory_bound", "copy_cast"), None),
    "gemm": (("gemm",), None),
    "gemm_off_tensor_cores": (("gemm",), "no"),
}
#: The figures: the clock (Hz) and every share a sample may carry.
FIGURES: tuple[str, ...] = ("gpc_clock_hz", *GPU_METRIC_SHARES)
#: The kernel classes the SM clock does not speed up: memory-bound kernels wait for DRAM,
#: copies for their link, collectives for their peers.
NOT_CLOCK_BOUND: tuple[str, ...] = ("memory_bound", "copy_cast", "comm")

_I64, _F64, _S = pl.Int64, pl.Float64, pl.String
_KEY = {"rank": pl.Int32, "device": pl.Int32}
_SPAN = {"start_ns": _I64, "end_ns": _I64}
_COUNTS = {"samples": _I64, "busy_samples": _I64}
_MEANS = {c: _F64 for c in FIGURES}
_BUSY = {f"busy_{c}": _F64 for c in FIGURES}
_CLOCK = {"busy_min_gpc_clock_hz": _I64, "max_clock_hz": _I64, "busy_clock_share": _F64}


@dataclass(frozen=True, slots=True)
class GpuMetrics:
    """The job's GPU metrics (Metrics.gpu_metrics); every frame is empty for a trace without.

    - `devices`: one row per (rank, device) with samples: its window (start_ns, end_ns), the
      sampling period (median, period_ns), the samples in the window and the busy ones, the
      kernel time in the window and the part of it in kernels the SM clock speeds up
      (clock_bound_ns: every class but NOT_CLOCK_BOUND), the clock's maximum and where it
      comes from (max_clock_source: `target_info` or `max_sample`), the lowest busy clock
      and busy_clock_share, then each figure's mean over the window's samples (`<figure>`)
      and over its busy samples (`busy_<figure>`).
    - `steps`: the same per steady step (rank, device, step, name, start_ns, end_ns), without
      the kernel times.
    - `classes`: per (rank, device, kernel_class) of CLASS_GROUPS (a group's name), the
      window's samples inside that group's kernels and each figure's mean over them (the
      measured DRAM bandwidth of the memory-bound kernels, the tensor pipes of the GEMMs and
      of the GEMMs judged off the Tensor Cores).
    - `series`: each device's window in at most FIGURE_BINS bins: start_ns, end_ns, the
      timeline's busy share of the bin and each figure's mean over the samples that start in
      it, clock_share (the bin's clock over the maximum): the figure's data.

    Its frames are checked against `SCHEMAS` when it is built.
    """

    SCHEMAS: ClassVar[Schemas] = {
        "devices": {
            **_KEY,
            **_SPAN,
            "period_ns": _I64,
            **_COUNTS,
            "kernel_ns": _I64,
            "clock_bound_ns": _I64,
            "max_clock_source": _S,
            **_CLOCK,
            **_MEANS,
            **_BUSY,
        },
        "steps": {
            **_KEY,
            "step": _I64,
            "name": _S,
            **_SPAN,
            **_COUNTS,
            **_CLOCK,
            **_MEANS,
            **_BUSY,
        },
        "classes": {**_KEY, "kernel_class": _S, "samples": _I64, **_MEANS},
        "series": {**_KEY, **_SPAN, "busy_share": _F64, **_MEANS, "clock_share": _F64},
    }

    devices: pl.DataFrame
    steps: pl.DataFrame
    classes: pl.DataFrame
    series: pl.DataFrame

    def __post_init__(self) -> None:
        check_frames(self, "Metrics.gpu_metrics", self.SCHEMAS)

    @classmethod
    def empty(cls) -> GpuMetrics:
        """The result of a trace without GPU metrics."""
        return cls(**empty_frames())

    def device(self, rank: int, device: int) -> dict[str, Any] | None:
        """The `devices` row of (rank, device), or None where it has no samples."""
        rows = self.devices.filter((pl.col("rank") == rank) & (pl.col("device") == device))
        return rows.row(0, named=True) if rows.height else None

    def dram(self, rank: int, device: int) -> dict[str, Any] | None:
        """The device's measured DRAM: `read_share`, `write_share` of the peak bandwidth, the
        `samples` they are the mean of and `where`: over the samples inside its memory-bound
        kernels ("inside the memory-bound kernels"), else over its busy samples ("while
        busy"); None without both figures (the report's verdict reads the same:
        report.measured_dram)."""
        inside, row = self.of_class(rank, device, "memory_bound"), self.device(rank, device)
        for figures, prefix, count, where in (
            (inside, "", "samples", "inside the memory-bound kernels"),
            (row, "busy_", "busy_samples", "while busy"),
        ):
            if not figures or not figures[count]:
                continue
            read, write = figures[f"{prefix}dram_read_share"], figures[f"{prefix}dram_write_share"]
            if read is not None and write is not None:
                return {"read_share": read, "write_share": write, "samples": figures[count],
                        "where": where}  # fmt: skip
        return None

    def of_class(self, rank: int, device: int, kernel_class: str) -> dict[str, Any] | None:
        """The `classes` row of (rank, device, kernel_class), or None where no sample of the
        window lies inside that class's kernels."""
        rows = self.classes.filter(
            (pl.col("rank") == rank)
            & (pl.col("device") == device)
            & (pl.col("kernel_class") == kernel_class)
            & (pl.col("samples") > 0)
        )
        return rows.row(0, named=True) if rows.height else None


def empty_frames() -> dict[str, pl.DataFrame]:
    """Each of GpuMetrics' frames, with no rows."""
    return {name: pl.DataFrame(schema=dict(cols)) for name, cols in GpuMetrics.SCHEMAS.items()}


def gpu_metric_frames(
    samples: pl.DataFrame,
    work: pl.LazyFrame,
    windows: pl.DataFrame,
    steps: pl.DataFrame,
    kernels: pl.DataFrame,
    infos: Sequence[DeviceInfo],
) -> dict[str, pl.DataFrame]:
    """GpuMetrics' frames of one rank (see the module docstring).

    `samples`: the rank's `Timeline.gpu_metrics`; `work`: its GPU work; `windows`, `steps`:
    each device's window and steady steps; `kernels`: the kernels in the windows with their
    `kernel_class`; `infos`: the trace's devices (their maximum clock).
    """
    if samples.height == 0 or windows.height == 0:
        return empty_frames()
    covered = _coverage(samples.lazy(), work, kernels)
    top = _max_clock(samples, infos)
    in_window = _inside(covered, windows.lazy()).collect()
    if in_window.height == 0:
        return empty_frames()
    share = clock_share("busy_gpc_clock_hz").alias("busy_clock_share")
    devices = (
        _summary(in_window.lazy(), DEVICE_KEY)
        .join(top, on=DEVICE_KEY, how="left")
        .with_columns(share)
    )
    wins = windows.select(*DEVICE_KEY, "start_ns", "end_ns")
    spans = steps.lazy().select(*DEVICE_KEY, "step", "name", "start_ns", "end_ns")
    by_step = (
        _summary(_inside(in_window.lazy(), spans.drop("name")), [*DEVICE_KEY, "step"])
        .join(spans, on=[*DEVICE_KEY, "step"])
        .join(top, on=DEVICE_KEY, how="left")
        .with_columns(share)
    )
    periods = (
        in_window.lazy()
        .group_by(DEVICE_KEY)
        .agg(period_ns=(pl.col("end_ns") - pl.col("start_ns")).median().round().cast(_I64))
    )
    kernel_time = (
        kernels.lazy()
        .group_by(DEVICE_KEY)
        .agg(
            kernel_ns=pl.col("clipped_ns").sum().cast(_I64),
            clock_bound_ns=pl.col("clipped_ns")
            .filter(~pl.col("kernel_class").cast(_S).is_in(NOT_CLOCK_BOUND))
            .sum()
            .cast(_I64),
        )
    )
    frames = pl.collect_all(
        [
            devices.join(wins.lazy(), on=DEVICE_KEY)
            .join(periods, on=DEVICE_KEY)
            .join(kernel_time, on=DEVICE_KEY, how="left")
            .with_columns(pl.col("kernel_ns", "clock_bound_ns").fill_null(0))
            .select(GpuMetrics.SCHEMAS["devices"].keys())
            .sort(DEVICE_KEY),
            by_step.select(GpuMetrics.SCHEMAS["steps"].keys()).sort([*DEVICE_KEY, "start_ns"]),
            _classes(in_window.lazy()),
            _series(in_window, work, wins, top),
        ]
    )
    return {
        name: frame.cast(dict(GpuMetrics.SCHEMAS[name]))  # type: ignore[arg-type]
        for name, frame in zip(GpuMetrics.SCHEMAS, frames, strict=True)
    }


def _coverage(samples: pl.LazyFrame, work: pl.LazyFrame, kernels: pl.DataFrame) -> pl.LazyFrame:
    """The samples with `busy` (GPU work covers BUSY_SAMPLE_MIN_SHARE of the period) and
    `in_<group>` for each class group of CLASS_GROUPS (that group's kernels do)."""
    covers = pl.col("busy_ns") >= BUSY_SAMPLE_MIN_SHARE * (pl.col("end_ns") - pl.col("start_ns"))
    out = busy_in_spans(work, samples).with_columns(busy=covers).drop("busy_ns")
    for group, (classes, verdict) in CLASS_GROUPS.items():
        mine = kernels.lazy().filter(pl.col("kernel_class").cast(_S).is_in(classes))
        if verdict is not None:
            mine = mine.filter(pl.col("verdict").cast(_S) == verdict)
        out = (
            busy_in_spans(mine.select(*DEVICE_KEY, "start_ns", "end_ns"), out)
            .with_columns(covers.alias(f"in_{group}"))
            .drop("busy_ns")
        )
    return out


def _inside(samples: pl.LazyFrame, spans: pl.LazyFrame) -> pl.LazyFrame:
    """The samples whose whole period lies inside one of `spans` (rank, device, start_ns,
    end_ns and any other columns, disjoint within a device), with that span's other columns
    (its `step`)."""
    keys = [c for c in spans.collect_schema().names() if c not in ("start_ns", "end_ns")]
    right = spans.select(*keys, _s_start="start_ns", _s_end="end_ns").sort("_s_start")
    return (
        samples.sort("start_ns")
        .join_asof(
            right,
            left_on="start_ns",
            right_on="_s_start",
            by=DEVICE_KEY,
            strategy="backward",
            check_sortedness=False,
        )
        .filter(pl.col("_s_start").is_not_null() & (pl.col("end_ns") <= pl.col("_s_end")))
        .drop("_s_start", "_s_end")
    )


def _summary(samples: pl.LazyFrame, by: list[str]) -> pl.LazyFrame:
    """Per `by` group: the samples, the busy ones, each figure's mean over all and over the
    busy ones, the lowest busy clock."""
    busy = pl.col("busy")
    return samples.group_by(by).agg(
        pl.len().cast(_I64).alias("samples"),
        busy.sum().cast(_I64).alias("busy_samples"),
        pl.col("gpc_clock_hz").filter(busy).min().alias("busy_min_gpc_clock_hz"),
        *(pl.col(c).mean().alias(c) for c in FIGURES),
        *(pl.col(c).filter(busy).mean().alias(f"busy_{c}") for c in FIGURES),
    )


def _max_clock(samples: pl.DataFrame, infos: Sequence[DeviceInfo]) -> pl.LazyFrame:
    """rank, device, max_clock_hz, max_clock_source: the device's maximum clock from the
    export's target info, else its highest sample in the whole capture."""
    known = pl.DataFrame(
        [(d.rank, d.device, d.max_clock_hz) for d in infos if d.max_clock_hz],
        schema={"rank": pl.Int32, "device": pl.Int32, "_info_hz": _I64},
        orient="row",
    )
    seen = samples.group_by(DEVICE_KEY).agg(_seen_hz=pl.col("gpc_clock_hz").max())
    return (
        seen.join(known, on=DEVICE_KEY, how="left")
        .select(
            *DEVICE_KEY,
            max_clock_hz=pl.coalesce("_info_hz", "_seen_hz"),
            max_clock_source=pl.when(pl.col("_info_hz").is_not_null())
            .then(pl.lit("target_info"))
            .when(pl.col("_seen_hz").is_not_null())
            .then(pl.lit("max_sample")),
        )
        .lazy()
    )


def clock_share(clock: str) -> pl.Expr:
    """`clock` over the device's maximum clock (null where either is unknown)."""
    top = pl.col("max_clock_hz")
    return pl.when(top > 0).then(pl.col(clock) / top)


def _classes(samples: pl.LazyFrame) -> pl.LazyFrame:
    """Per device and class group: the samples inside that group's kernels and each
    figure's mean over them."""
    return pl.concat(
        [
            samples.filter(pl.col(f"in_{group}"))
            .group_by(DEVICE_KEY)
            .agg(
                pl.lit(group).alias("kernel_class"),
                pl.len().cast(_I64).alias("samples"),
                *(pl.col(c).mean().alias(c) for c in FIGURES),
            )
            .select(GpuMetrics.SCHEMAS["classes"].keys())
            for group in CLASS_GROUPS
        ]
    ).sort([*DEVICE_KEY, "kernel_class"])


def _series(
    samples: pl.DataFrame, work: pl.LazyFrame, windows: pl.DataFrame, top: pl.LazyFrame
) -> pl.LazyFrame:
    """Each device's window in at most FIGURE_BINS bins of whole sampling periods: the
    figures' means over the samples starting in each bin, and the timeline's busy share of
    the bin."""
    period = (pl.col("end_ns") - pl.col("start_ns")).median().over(DEVICE_KEY)
    span = pl.col("_w_end") - pl.col("_w_start")
    width = pl.max_horizontal((span + FIGURE_BINS - 1) // FIGURE_BINS, period.round().cast(_I64))
    binned = (
        samples.lazy()
        .join(windows.lazy().rename({"start_ns": "_w_start", "end_ns": "_w_end"}), on=DEVICE_KEY)
        .with_columns(_width=width.clip(lower_bound=1))
        .with_columns(_bin=(pl.col("start_ns") - pl.col("_w_start")) // pl.col("_width"))
        .group_by(*DEVICE_KEY, "_bin")
        .agg(
            (pl.col("_w_start").first() + pl.col("_bin").first() * pl.col("_width").first()).alias(
                "start_ns"
            ),
            pl.col("_width").first(),
            pl.col("_w_end").first(),
            *(pl.col(c).mean().alias(c) for c in FIGURES),
        )
        .with_columns(end_ns=pl.min_horizontal(pl.col("start_ns") + pl.col("_width"), "_w_end"))
    )
    bins = busy_in_spans(work, binned)
    return (
        bins.join(top, on=DEVICE_KEY, how="left")
        .with_columns(
            busy_share=pl.col("busy_ns") / (pl.col("end_ns") - pl.col("start_ns")),
            clock_share=clock_share("gpc_clock_hz"),
        )
        .select(GpuMetrics.SCHEMAS["series"].keys())
        .sort([*DEVICE_KEY, "start_ns"])
    )


@dataclass(frozen=True, slots=True)
class ClockImpact:
    """What a device's clock held below its maximum while busy costs per steady step
    (`clock_impact`; Metrics.clock_model), with the figures TA026 words it by.

    The model: a kernel the SM clock bounds takes time inversely to the clock, so at the
    maximum clock its time would shrink by `1 - clock_share`; memory-bound, copy and
    communication kernels (NOT_CLOCK_BOUND) do not speed up. `impact_ns` = busy time per step
    x (1 - busy_clock_share) x the clock-bound share of the kernel time; `ceiling_ns` the
    same with every busy nanosecond sped up (never above the busy time). None where the
    clock or its maximum is unknown."""

    rank: int
    device: int
    busy_samples: int
    sampled_busy_ns: int
    busy_ns: int
    clock_hz: float | None
    min_clock_hz: int | None
    max_clock_hz: int | None
    max_clock_source: str | None
    clock_share: float | None
    sm_active_share: float | None
    sm_issue_share: float | None
    tensor_active_share: float | None
    clock_bound_share: float | None
    steps: int
    impact_ns: int | None
    ceiling_ns: int | None


def clock_impact(
    metrics: GpuMetrics, devices: pl.DataFrame, counts: StepCounts
) -> tuple[ClockImpact, ...]:
    """The ClockImpact of every device with GPU metrics, by rank and device.

    `metrics`: the job's GpuMetrics; `devices`: Metrics.devices.summary (each device's busy
    time in its window); `counts`: the steady steps each window holds."""
    busy = {(r, d): b for r, d, b in devices.select(*DEVICE_KEY, "busy_ns").iter_rows()}
    out = []
    for row in metrics.devices.iter_rows(named=True):
        key = (row["rank"], row["device"])
        share = row["busy_clock_share"]
        bound = row["clock_bound_ns"] / row["kernel_ns"] if row["kernel_ns"] else None
        busy_ns = int(busy.get(key, 0))
        slow = None if share is None else max(0.0, 1.0 - share)
        out.append(
            ClockImpact(
                rank=key[0],
                device=key[1],
                busy_samples=row["busy_samples"],
                sampled_busy_ns=row["busy_samples"] * row["period_ns"],
                busy_ns=busy_ns,
                clock_hz=row["busy_gpc_clock_hz"],
                min_clock_hz=row["busy_min_gpc_clock_hz"],
                max_clock_hz=row["max_clock_hz"],
                max_clock_source=row["max_clock_source"],
                clock_share=share,
                sm_active_share=row["busy_sm_active_share"],
                sm_issue_share=row["busy_sm_issue_share"],
                tensor_active_share=row["busy_tensor_active_share"],
                clock_bound_share=bound,
                steps=counts.on(*key),
                impact_ns=None
                if slow is None or bound is None
                else counts.per_step(round(busy_ns * slow * bound), *key),
                ceiling_ns=None if slow is None else counts.per_step(round(busy_ns * slow), *key),
            )
        )
    return tuple(out)
