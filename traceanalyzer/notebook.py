"""The Python API for notebooks: the analysis as objects and polars DataFrames.

    import traceanalyzer as ta
    a = ta.analyze("run/")            # a trace file or a folder of rank files
    a.verdict["headline"]; a.diagnoses[0].evidence
    a.kernels.head(); a.ranks; a.gaps.filter(pl.col("cause") == "sync")
    g = a.critical_path(rank=0)       # networkx.DiGraph of one step
    a                                 # in Jupyter: the verdict, findings and timeline

The same pipeline as `traceanalyzer report` (api.analyze_path): the CLI and this module are
two shells over one analysis. The names here and the columns of every DataFrame are a
public interface, documented in docs/python-api.md (`COLUMNS`, pinned by the tests).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from traceanalyzer import api
from traceanalyzer.analyses import DEFAULT_TOP_KERNELS
from traceanalyzer.analyses.distributed.imbalance import RANK_FIGURES
from traceanalyzer.analyses.gpu.idle import CAUSES, LAUNCH_GAP_MAX_NS
from traceanalyzer.analyses.host.host_phases import ALL_PHASES
from traceanalyzer.analyses.metrics import Metrics
from traceanalyzer.config import Settings
from traceanalyzer.model import Timeline, TraceMeta
from traceanalyzer.report import Report
from traceanalyzer.rules import Finding

if TYPE_CHECKING:
    import networkx as nx

#: The columns of each DataFrame of an `Analysis`, in order (docs/python-api.md).
COLUMNS: dict[str, tuple[str, ...]] = {
    "devices": (
        "rank",
        "device",
        "name",
        "window_ns",
        "busy_ns",
        "idle_ns",
        "idle_share",
        *(f"{c}_ns" for c in CAUSES),
        "kernel_count",
        "kernel_ns",
        "comm_ns",
        "overlapped_comm_ns",
        "exposed_comm_ns",
        "overlap_share",
        "tc_ns",
        "gemm_ns",
        "tc_share_of_gemm",
        "model_flops_per_step",
        "achieved_tflops",
        "peak_tflops",
        "mfu",
    ),
    "steps": (
        "rank",
        "device",
        "name",
        "start_ns",
        "end_ns",
        "busy_ns",
        "idle_share",
        "kernel_count",
        "warmup",
        *(f"{c}_ns" for c in CAUSES),
    ),
    "ranks": (
        "rank",
        "path",
        "world_size",
        *RANK_FIGURES,
        "comm_bytes",
        "busbw_gbps",
        *(f"host_{p}_ns" for p in ALL_PHASES),
    ),
    "kernels": ("name", "count", "total_ns", "share"),
    "gaps": (
        "rank",
        "device",
        "start_ns",
        "end_ns",
        "gap_ns",
        "cause",
        "before",
        "after",
        "sync_name",
    ),
    "syncs": ("rank", "name", "op", "site", "count", "steps", "per_step", "idle_ns"),
    "collectives": (
        "rank",
        "collective",
        "collectives",
        "matched",
        "comm_ns",
        "wait_ns",
        "transfer_ns",
        "exposed_wait_ns",
        "crowded_wait_ns",
        "exposed_transfer_ns",
        "bytes",
        "busbw_gbps",
    ),
    "operators": (
        "rank",
        "device",
        "op_name",
        "kind",
        "precision",
        "shape",
        "calls",
        "kernel_ns",
        "flops",
        "bytes",
        "tflops",
        "gbps",
        "share_of_roof",
        "source",
    ),
    "ncu": (
        "rank",
        "device",
        "name",
        "grid",
        "block",
        "kernel_class",
        "trace_kernels",
        "ncu_kernels",
        "kernel_ns",
        "trace_mean_ns",
        "ncu_mean_ns",
        "dram_bytes",
        "dram_source",
        "dram_gbps",
        "registers_per_thread",
        "shared_mem_bytes",
        "achieved_occupancy_share",
        "warps_active",
        "sm_throughput_share",
        "tensor_pipe_share",
    ),
}


class Findings(list[Finding]):
    """The findings of an analysis: a list, shown as a table in a notebook cell."""

    def _repr_html_(self) -> str:
        from traceanalyzer.render.notebook import table_html

        rows = [
            {
                "rule": f.rule,
                "severity": f.severity.value,
                "title": f.title,
                "saves per step": "" if f.impact_ns is None else f"{f.impact_ns / 1e6:.2f} ms",
                "where": f"rank {f.scope.rank}" if f.scope.rank is not None else "job",
                "message": f.message,
                "advice": f.advice,
            }
            for f in self
        ]
        return table_html(
            rows, ("rule", "severity", "title", "saves per step", "where", "message", "advice")
        )


@dataclass(frozen=True)
class Analysis:
    """One trace (or job of rank files) analysed: its verdict, diagnoses, context and the
    numbers behind them as DataFrames (`COLUMNS`), a step's critical path as a graph, and
    the report to write. Made by `analyze`."""

    path: Path
    meta: TraceMeta
    metrics: Metrics
    _report: Report
    _options: Mapping[str, Any] = field(default_factory=dict)
    _timeline: list[Timeline] = field(default_factory=list, repr=False)

    # --- what the report says
    @property
    def verdict(self) -> dict[str, Any]:
        """`{headline, bound_by, step_ns, busy_share, top_saving_ns, mfu, ...}`."""
        return dict(self._report.verdict or {})

    @property
    def diagnoses(self) -> Findings:
        """The findings, most impactful first: rule, severity, title, message, scope,
        impact_ns, evidence, advice (a list; a table in a notebook cell)."""
        return Findings(self._report.findings)

    @property
    def context(self) -> dict[str, Any]:
        """What the run already uses (torch_compile, cuda_graphs, ddp, fsdp, amp_dtype...)."""
        return dict(self._report.context or {})

    # --- the numbers behind it
    @property
    def devices(self) -> pl.DataFrame:
        """One row per (rank, device): window, busy and idle time by cause, kernels,
        communication and its overlap, Tensor Core time, FLOPs and MFU."""
        rows = []
        for d in self._report.devices:
            f = d.get("flops") or {}
            t = d["tensor_core"]
            rows.append(
                {
                    "rank": d["rank"],
                    "device": d["device"],
                    "name": d["name"],
                    "window_ns": d["window_ns"],
                    "busy_ns": d["busy_ns"],
                    "idle_ns": d["idle_ns"],
                    "idle_share": d["idle_share"],
                    **{f"{c}_ns": d["idle_by_cause"][c] for c in CAUSES},
                    "kernel_count": d["kernel_count"],
                    "kernel_ns": d["kernel_ns"],
                    "comm_ns": d["comm_ns"],
                    "overlapped_comm_ns": d["overlapped_comm_ns"],
                    "exposed_comm_ns": d["exposed_comm_ns"],
                    "overlap_share": d["overlap_share"],
                    "tc_ns": t["tc_ns"],
                    "gemm_ns": t["gemm_ns"],
                    "tc_share_of_gemm": t["share_of_gemm"],
                    "model_flops_per_step": f.get("model_flops_per_step"),
                    "achieved_tflops": f.get("achieved_tflops"),
                    "peak_tflops": f.get("peak_tflops"),
                    "mfu": f.get("mfu"),
                }
            )
        return _frame(rows, "devices", _DEVICE_TYPES)

    @property
    def steps(self) -> pl.DataFrame:
        """One row per step and device, warm-up steps (`warmup`) included."""
        rows: list[dict[str, Any]] = []
        for s in self._report.steps:
            row: dict[str, Any] = dict(s)
            causes = row.pop("idle_by_cause")
            rows.append({**row, **{f"{c}_ns": causes.get(c) for c in CAUSES}})
        return _frame(rows, "steps", _STEP_TYPES)

    @property
    def ranks(self) -> pl.DataFrame:
        """One row per rank: its steady step, own time, GPU work, waits for its host and its
        peers, bus bandwidth and host time by phase (medians per steady step)."""
        rows = []
        for entry in self._report.ranks:
            r: dict[str, Any] = dict(entry)
            phases = r.get("host_phases") or {}
            rows.append(
                {
                    **{k: r.get(k) for k in COLUMNS["ranks"] if not k.startswith("host_")},
                    "host_wait_ns": r.get("host_wait_ns"),
                    "host_between_steps_ns": r.get("host_between_steps_ns"),
                    "host_blocked_ns": r.get("host_blocked_ns"),
                    **{f"host_{p}_ns": phases.get(p) for p in ALL_PHASES},
                }
            )
        return _frame(rows, "ranks", _RANK_TYPES)

    @property
    def kernels(self) -> pl.DataFrame:
        """One row per kernel name: count, total_ns inside the windows, share of kernel time."""
        return self.metrics.kernels.names.select(COLUMNS["kernels"])

    @property
    def gaps(self) -> pl.DataFrame:
        """Idle gaps with their cause (the longest per device, and every gap during a sync,
        for a folder of ranks; every gap for one file)."""
        return self.metrics.idle.gaps.with_columns(pl.col("cause").cast(pl.String)).select(
            COLUMNS["gaps"]
        )

    @property
    def syncs(self) -> pl.DataFrame:
        """Host-device syncs by call site: count, per step, the GPU idle they cause."""
        return self.metrics.idle.sync_sites.select(COLUMNS["syncs"])

    @property
    def collectives(self) -> pl.DataFrame:
        """Per rank and collective kind: matched across ranks, waiting for peers and
        transfer, exposed or not, bytes and bus bandwidth."""
        return self.metrics.collective_split.per_kind.select(COLUMNS["collectives"])

    @property
    def operators(self) -> pl.DataFrame:
        """Operators whose work is known from their shapes: matrix and attention operators
        (`kind` "flops": FLOPs, TFLOP/s, against their roof) and memory-bound ones (`kind`
        "memory": bytes, GB/s, against the GPU's bandwidth); `source` "ncu" where the bytes
        are Nsight Compute's measured DRAM bytes, "shapes" where estimated."""
        roof = self.metrics.flops.roofline.select(
            "rank",
            "device",
            "op_name",
            kind=pl.lit("flops"),
            precision="precision",
            shape="shape",
            calls="calls",
            kernel_ns="kernel_ns",
            flops="flops",
            bytes="bytes",
            tflops="achieved_tflops",
            gbps=pl.lit(None, pl.Float64),
            share_of_roof="share_of_roof",
            source="source",
        )
        memory = self.metrics.bandwidth.operators.select(
            "rank",
            "device",
            "op_name",
            kind=pl.lit("memory"),
            precision=pl.lit(None, pl.String),
            shape=pl.lit(None, pl.String),
            calls="ops",
            kernel_ns="kernel_ns",
            flops=pl.lit(None, pl.Float64),
            bytes=pl.col("bytes").cast(pl.Float64),
            tflops=pl.lit(None, pl.Float64),
            gbps="gbps",
            share_of_roof="share_of_peak",
            source="source",
        )
        return pl.concat([roof, memory], how="vertical_relaxed").sort("kernel_ns", descending=True)

    @property
    def ncu(self) -> pl.DataFrame:
        """Nsight Compute's measurements on the trace's kernels (`analyze(path, ncu=[...])`),
        one row per kernel name and launch shape: launches matched, the trace's time, DRAM
        bytes and GB/s, registers, shared memory, achieved occupancy, SM and Tensor Core pipe
        shares; empty without `ncu`."""
        return self.metrics.ncu.kernels.select(COLUMNS["ncu"])

    @property
    def events(self) -> pl.DataFrame:
        """Every event read, in the timeline schema (`traceanalyzer schema`): for queries of
        your own. A folder of ranks is read whole here (it was reduced rank by rank)."""
        return self.timeline().events

    def timeline(self) -> Timeline:
        """The timeline read from the trace (read again for a folder of ranks)."""
        if not self._timeline:
            self._timeline.append(api.load(self.path))
        return self._timeline[0]

    # --- a step's critical path
    def critical_path(self, rank: int = 0, step: int | None = None) -> nx.DiGraph:
        """One steady step's dependency graph as a `networkx.DiGraph` (the first analysed step
        of `rank` when `step` is None). Nodes are points in time: GPU operation starts and
        ends (`kind` "gpu_start"/"gpu_end", `name`, `device`, `stream`), host points (launch
        and sync calls' ends, a thread's first and last event: `kind` "host", `label`),
        step sources and sinks, collective arrivals; each with `rank` and `t_ns` (its time
        on the longest path from the step's start). Edges carry the dependency `role` (op,
        stream, launch, thread, wait, xstream, arrive, collective, ...), `work_kind`,
        `weight_ns` and `on_path`; the graph's `path_ns` is the step's critical path, as the
        report counts it (`critical_path` entries)."""
        from traceanalyzer.analyses.critical_path import critical_path

        steps = self.metrics.critical_path.steps.filter(pl.col("rank") == rank)
        if steps.height == 0:
            raise ValueError(f"no critical path was analysed for rank {rank}")
        chosen = int(steps["step"][0]) if step is None else step
        if chosen not in steps["step"].to_list():
            raise ValueError(
                f"step {chosen} of rank {rank} was not analysed; these were: "
                f"{steps['step'].to_list()}"
            )
        return critical_path.step_digraph(
            self.timeline(),
            self.metrics.critical_path,
            rank,
            chosen,
            step_pattern=self._options.get("step_pattern"),
        )

    # --- the report
    def report(self) -> Report:
        """The report, as the renderers see it."""
        return self._report

    def to_json(self) -> dict[str, Any]:
        """The JSON report (docs/report.md), as a dict."""
        return self._report.to_json_dict()

    def write(self, path: str | Path, format: str | None = None) -> None:
        """Write the report to `path` in `format` (terminal, json, md, html; by default from
        the suffix)."""
        api.write(self._report, format, str(path))

    def _repr_html_(self) -> str:
        from traceanalyzer.render.notebook import cell_html

        return cell_html(self._report)


def analyze(
    path: str | Path,
    *,
    step_pattern: str | None = None,
    all_steps: bool = False,
    settings: Settings | None = None,
    jobs: int | None = None,
    dask_scheduler: str | None = None,
    top_n: int = DEFAULT_TOP_KERNELS,
    launch_gap_max_ns: int = LAUNCH_GAP_MAX_NS,
    ncu: str | Path | Sequence[str | Path] = (),
    ncu_path: str | Path | None = None,
) -> Analysis:
    """Analyse a trace file or a folder of rank files, as `traceanalyzer report` does (the
    same options); returns an `Analysis`. `ncu`: Nsight Compute exports of the same program
    (one path or several: `--page raw` CSVs, or `.ncu-rep` reports read with the
    `ncu_report` module of the install at `ncu_path`), joined to the trace's kernels."""
    exports = [ncu] if isinstance(ncu, str | Path) else list(ncu)
    done = api.analyze_path(
        path,
        top_n=top_n,
        step_pattern=step_pattern,
        launch_gap_max_ns=launch_gap_max_ns,
        settings=settings,
        all_steps=all_steps,
        jobs=jobs,
        dask_scheduler=dask_scheduler,
        ncu=exports,
        ncu_path=ncu_path,
    )
    return Analysis(
        path=Path(path),
        meta=done.meta,
        metrics=done.metrics,
        _report=done.report,
        _options={"step_pattern": step_pattern, "all_steps": all_steps},
        _timeline=[done.timeline] if done.timeline is not None else [],
    )


def compare(before: Analysis, after: Analysis) -> dict[str, Any]:
    """What changed from `before` to `after` (as `traceanalyzer compare`): step time, idle by
    cause, kernels, Tensor Core share, communication, and diagnoses gone or new."""
    from traceanalyzer.comparison import compare as diff

    return diff(before.to_json(), after.to_json())


_DEVICE_TYPES: dict[str, Any] = {
    "rank": pl.Int64,
    "device": pl.Int64,
    "name": pl.String,
    "idle_share": pl.Float64,
    "overlap_share": pl.Float64,
    "tc_share_of_gemm": pl.Float64,
    "model_flops_per_step": pl.Float64,
    "achieved_tflops": pl.Float64,
    "peak_tflops": pl.Float64,
    "mfu": pl.Float64,
}
_STEP_TYPES: dict[str, Any] = {
    "rank": pl.Int64,
    "device": pl.Int64,
    "name": pl.String,
    "idle_share": pl.Float64,
    "warmup": pl.Boolean,
}
_RANK_TYPES: dict[str, Any] = {
    "rank": pl.Int64,
    "path": pl.String,
    "world_size": pl.Int64,
    "comm_bytes": pl.Int64,
    "busbw_gbps": pl.Float64,
}


def _frame(rows: list[dict[str, Any]], name: str, types: dict[str, Any]) -> pl.DataFrame:
    """Rows as a DataFrame with `COLUMNS[name]` in order: columns `types` does not name are
    integers (ns, counts), null where a row has none."""
    cols = COLUMNS[name]
    schema = {c: types.get(c, pl.Int64) for c in cols}
    return pl.DataFrame([{c: r.get(c) for c in cols} for r in rows], schema=schema, orient="row")
