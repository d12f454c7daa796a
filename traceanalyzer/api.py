"""The library API the CLI is a thin shell over: load, analyze, build a report, write it."""

from __future__ import annotations

from pathlib import Path

from traceanalyzer import __version__
from traceanalyzer.analyses import DEFAULT_TOP_KERNELS, Metrics, analyze
from traceanalyzer.analyses.idle import LAUNCH_GAP_MAX_NS
from traceanalyzer.model import Timeline
from traceanalyzer.readers import read
from traceanalyzer.render import pick, write_report
from traceanalyzer.report import Report, build_report


def load(path: str | Path) -> Timeline:
    """Read a trace file or a folder of per-rank files."""
    return read(path)


def report(
    path: str | Path,
    top_n: int = DEFAULT_TOP_KERNELS,
    step_pattern: str | None = None,
    launch_gap_max_ns: int = LAUNCH_GAP_MAX_NS,
) -> Report:
    """Load, analyze and build the report of one trace."""
    timeline = load(path)
    metrics: Metrics = analyze(
        timeline, top_n=top_n, step_pattern=step_pattern, launch_gap_max_ns=launch_gap_max_ns
    )
    return build_report(timeline.meta, metrics, tool_version=__version__)


def write(rep: Report, fmt: str | None = None, out: str | None = None) -> None:
    """Render a report to `out` (stdout when None or '-') in `fmt` (or by out's suffix)."""
    write_report(rep, pick(fmt, out), out)


__all__ = ["analyze", "build_report", "load", "report", "write"]
