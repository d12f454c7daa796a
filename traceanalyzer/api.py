"""The library API the CLI is a thin shell over: load, analyze, build a report, write it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from traceanalyzer import ranks
from traceanalyzer.analyses import DEFAULT_TOP_KERNELS, Metrics, analyze
from traceanalyzer.analyses.context import decide
from traceanalyzer.analyses.critical_path.critical_path import PATH_KINDS, mean_savings, per_rank
from traceanalyzer.analyses.distributed.rank import Options
from traceanalyzer.analyses.gpu.idle import LAUNCH_GAP_MAX_NS
from traceanalyzer.config import Settings
from traceanalyzer.errors import ConfigError
from traceanalyzer.model import Timeline, TraceMeta
from traceanalyzer.model.ncu import NcuExport
from traceanalyzer.readers import read
from traceanalyzer.readers.ncu import read_ncu
from traceanalyzer.render import pick, write_report
from traceanalyzer.report import Report, build_report
from traceanalyzer.rules import Context, Finding, Severity, run_rules
from traceanalyzer.timings import stage
from traceanalyzer.version import __version__


def load(path: str | Path, export_dir: Path | None = None) -> Timeline:
    """Read a trace file or a folder of per-rank files (`export_dir`: see `readers.read`)."""
    with stage("read"):
        return read(path, export_dir)


def load_ncu(
    paths: Sequence[str | Path], ncu_path: str | Path | None = None
) -> tuple[NcuExport, ...]:
    """Read Nsight Compute exports (`--ncu`: `--page raw` CSVs, or `.ncu-rep` reports through
    the `ncu_report` module of the install at `ncu_path`)."""
    with stage("read ncu"):
        return tuple(read_ncu(p, ncu_path) for p in paths)


@dataclass(frozen=True, slots=True)
class Analysis:
    """Everything one run of the pipeline made: the timeline read, the analyses' metrics and
    the report (findings included). `report` is what renderers see; `annotate` also needs
    the timeline and the metrics (to place each finding on the timeline)."""

    timeline: Timeline
    metrics: Metrics
    report: Report


def report(
    path: str | Path,
    top_n: int = DEFAULT_TOP_KERNELS,
    step_pattern: str | None = None,
    launch_gap_max_ns: int = LAUNCH_GAP_MAX_NS,
    settings: Settings | None = None,
    all_steps: bool = False,
    export_dir: Path | None = None,
    jobs: int | None = None,
    dask_scheduler: str | None = None,
    ncu: Sequence[str | Path] = (),
    ncu_path: str | Path | None = None,
) -> Report:
    """Load, analyze, diagnose and build the report of one trace (`export_dir`: where the
    SQLite exports of Nsight Systems reports are kept; default: a temporary folder).

    A folder of per-rank traces is reduced rank by rank (`ranks.analyze_folder`): each rank
    read and analysed alone in `jobs` worker processes (default: all cores; 1: one after
    the other, here), or on the dask.distributed scheduler at `dask_scheduler`.

    `ncu`: Nsight Compute exports of the same program (`load_ncu`; `ncu_path`: the Nsight
    Compute install whose `ncu_report` module reads `.ncu-rep` reports), joined to the
    trace's kernels (analyses/counters/ncu_join.py)."""
    return analyze_path(
        path,
        top_n=top_n,
        step_pattern=step_pattern,
        launch_gap_max_ns=launch_gap_max_ns,
        settings=settings,
        all_steps=all_steps,
        export_dir=export_dir,
        jobs=jobs,
        dask_scheduler=dask_scheduler,
        ncu=ncu,
        ncu_path=ncu_path,
    ).report


@dataclass(frozen=True, slots=True)
class Done:
    """What `analyze_path` made: the trace's meta, the metrics, the report, and the timeline
    where it was read whole (one file; None for a folder reduced rank by rank)."""

    meta: TraceMeta
    metrics: Metrics
    report: Report
    timeline: Timeline | None


def analyze_path(
    path: str | Path,
    *,
    top_n: int = DEFAULT_TOP_KERNELS,
    step_pattern: str | None = None,
    launch_gap_max_ns: int = LAUNCH_GAP_MAX_NS,
    settings: Settings | None = None,
    all_steps: bool = False,
    export_dir: Path | None = None,
    jobs: int | None = None,
    dask_scheduler: str | None = None,
    ncu: Sequence[str | Path] = (),
    ncu_path: str | Path | None = None,
) -> Done:
    """`report`'s pipeline, keeping what it made (the notebook API's `analyze`)."""
    opts = Options(top_n, step_pattern, launch_gap_max_ns, all_steps)
    exports = load_ncu(ncu, ncu_path) if ncu else ()
    if ranks.is_rank_folder(Path(path)):
        if exports:
            raise ConfigError(
                "--ncu joins Nsight Compute's kernels to one trace file, not a folder of ranks",
                path=path,
                hint="give the trace of the rank ncu profiled (e.g. the folder's rank0 file)",
            )
        with stage("read and analyze ranks"):
            meta, metrics = ranks.analyze_folder(Path(path), opts, jobs, dask_scheduler)
        return Done(meta, metrics, diagnose(meta, metrics, settings), None)
    timeline = load(path, export_dir)
    done = run(
        timeline,
        top_n=top_n,
        step_pattern=step_pattern,
        launch_gap_max_ns=launch_gap_max_ns,
        settings=settings,
        all_steps=all_steps,
        ncu=exports,
    )
    return Done(timeline.meta, done.metrics, done.report, timeline)


def run(
    timeline: Timeline,
    top_n: int = DEFAULT_TOP_KERNELS,
    step_pattern: str | None = None,
    launch_gap_max_ns: int = LAUNCH_GAP_MAX_NS,
    settings: Settings | None = None,
    all_steps: bool = False,
    ncu: Sequence[NcuExport] = (),
) -> Analysis:
    """The one pipeline: analyze a timeline, diagnose, build the report. `report`,
    `annotate`, `batch` and `compare` (through `report`) and the rule docs all come here.
    `ncu`: Nsight Compute exports read (`load_ncu`) to join to the trace's kernels."""
    metrics: Metrics = analyze(
        timeline,
        top_n=top_n,
        step_pattern=step_pattern,
        launch_gap_max_ns=launch_gap_max_ns,
        all_steps=all_steps,
        ncu=ncu,
    )
    return Analysis(timeline, metrics, diagnose(timeline.meta, metrics, settings))


def diagnose(meta: TraceMeta, metrics: Metrics, settings: Settings | None = None) -> Report:
    """The rules' findings on the metrics, and the report."""
    with stage("rules"):
        ctx = context(metrics, meta)
        findings = run_rules(ctx, settings or Settings())
    with stage("report"):
        return _report(meta, metrics, findings, ctx, per_rank(metrics.critical_path.steps))


def _report(
    meta: TraceMeta,
    metrics: Metrics,
    findings: list[Finding],
    ctx: Context,
    paths: pl.DataFrame,
) -> Report:
    totals = metrics.steps.counts.ranks
    periods = {r["rank"]: r for r in metrics.periods.per_rank.iter_rows(named=True)}
    return build_report(
        meta,
        metrics,
        tool_version=__version__,
        findings=findings,
        context=ctx.run,
        critical_path=[
            {
                "rank": r["rank"],
                "steps": r["steps"],
                "steps_total": totals.get(r["rank"], r["steps"]),
                "step_ns": r["step_ns"],
                "path_ns": r["path_ns"],
                "by_kind": {k: r[f"{k}_ns"] for k in PATH_KINDS},
                "share_by_kind": {k: r[f"{k}_share"] for k in PATH_KINDS},
                "period": _period(periods.get(r["rank"])),
            }
            for r in paths.iter_rows(named=True)
        ],
    )


def _period(row: dict[str, Any] | None) -> dict[str, Any] | None:
    """A critical_path entry's `period`: the loop's period and how it was measured."""
    if row is None:
        return None
    keys = ("period_ns", "host_period_ns", "gpu_period_ns", "steps", "min_ns", "max_ns")
    return {k: row[k] for k in keys}


def context(metrics: Metrics, meta: TraceMeta) -> Context:
    """What the rules read: metrics, meta, the mean saving per step of each what-if, the
    steady step (the loop's period, `steady.loop_periods`, the slowest rank's for every rank
    of a job; without step markers, each rank's window: one step), and the run context."""
    steps = metrics.critical_path.steps.group_by("rank").agg(pl.col("step_ns").mean())
    if metrics.periods.per_rank.height:  # the loop's period, where the steps tell it
        steps = metrics.periods.per_rank.select("rank", step_ns="period_ns").filter(
            pl.col("step_ns") > 0
        )
    if metrics.basis == "trace":  # no step markers: the whole window is one step
        steps = metrics.devices.summary.group_by("rank").agg(step_ns=pl.col("window_ns").max())
        per_rank = {r: round(v) for r, v in steps.iter_rows()}
    else:
        # one step for the job: the collectives couple the ranks, so each rank's step is the
        # slowest rank's period (the verdict's), and every price is a share of it
        per_rank = {r: round(v) for r, v in steps.iter_rows()}
        if per_rank:
            job = max(per_rank.values())
            per_rank = dict.fromkeys(per_rank, job)
    return Context(
        metrics=metrics,
        meta=meta,
        what_if=mean_savings(metrics.critical_path.what_if),
        step_ns=per_rank,
        run=decide(metrics.facts, meta, metrics),
    )


def gate(rep: Report, settings: Settings) -> bool:
    """True when a finding is at or above the `fail_on` severity (the CI gate trips)."""
    if settings.fail_on is None:
        return False
    floor = Severity(settings.fail_on).rank
    return any(f.severity.rank >= floor for f in rep.findings)


def write(rep: Report, fmt: str | None = None, out: str | None = None) -> None:
    """Render a report to `out` (stdout when None or '-') in `fmt` (or by out's suffix)."""
    with stage("output"):
        write_report(rep, pick(fmt, out), out)


__all__ = [
    "Analysis",
    "Done",
    "analyze",
    "analyze_path",
    "build_report",
    "gate",
    "load",
    "load_ncu",
    "report",
    "run",
    "write",
]
