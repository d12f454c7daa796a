"""Comparing two runs: what changed between a before and an after.

Takes two runs (trace files or folders, analysed here) or two rows of a batch summary (by
their reports' JSON), and reports the differences that matter: step time, idle by cause,
the kernels that gained or lost the most time, Tensor Core share, exposed communication, and
the diagnoses that appeared or disappeared.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl

from traceanalyzer.config import SEVERITIES
from traceanalyzer.errors import TraceFormatError
from traceanalyzer.report import FORMAT_VERSION, headline_numbers

TOP_CHANGES = 10


def load_report(source: str) -> dict[str, Any]:
    """A report's JSON: from a report file (`.json` written by `report --format json` or a
    batch), `SUMMARY.parquet#RUN` (a batch summary row), or a trace (analysed now)."""
    if "#" in source and source.split("#", 1)[0].endswith((".parquet", ".csv")):
        table, run = source.split("#", 1)
        return _report_of_row(Path(table), run)
    path = Path(source)
    if path.is_file() and path.suffix == ".json" and _is_report(path):
        return _read_report(path)
    from traceanalyzer import api

    return api.report(path).to_json_dict()


def _report_of_row(table: Path, run: str) -> dict[str, Any]:
    """The report of one batch summary row. The row's report path was written relative to
    the folder batch ran in; from elsewhere it is found beside the summary (`runs/`)."""
    if not table.is_file():
        raise TraceFormatError(
            "no such batch summary", path=table, hint="check the path (batch --out-dir)"
        )
    try:
        rows = pl.read_parquet(table) if table.suffix == ".parquet" else pl.read_csv(table)
    except (pl.exceptions.PolarsError, OSError) as exc:
        raise TraceFormatError(
            f"cannot read the batch summary ({exc})", path=table, hint="is it a batch summary?"
        ) from exc
    if "run" not in rows.columns or "report" not in rows.columns:
        raise TraceFormatError(
            "not a batch summary (no run and report columns)",
            path=table,
            hint="give the summary.parquet or summary.csv that batch wrote",
        )
    row = rows.filter(pl.col("run") == run)
    if row.height != 1 or row["report"][0] is None:
        raise TraceFormatError(
            f"no analysed run {run!r} in the summary",
            path=table,
            hint="use the run column of the summary",
        )
    written = Path(row["report"][0])
    for candidate in (written, table.parent / "runs" / written.name):
        if candidate.is_file():
            return _read_report(candidate)
    raise TraceFormatError(
        f"the report of run {run!r} is gone ({written})",
        path=table,
        hint="run the batch again to write it",
    )


def _is_report(path: Path) -> bool:
    with path.open("rb") as fh:
        return b'"format_version"' in fh.read(256)


def _read_report(path: Path) -> dict[str, Any]:
    """A report JSON file, checked to be one this version reads."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise TraceFormatError(
            f"cannot read the report ({exc})", path=path, hint="is it a report JSON file?"
        ) from exc
    version = doc.get("format_version") if isinstance(doc, dict) else None
    if version != FORMAT_VERSION:
        raise TraceFormatError(
            f"report format_version {version!r}; this traceanalyzer reads {FORMAT_VERSION}",
            path=path,
            hint="write both reports with the same traceanalyzer version (or compare the traces)",
        )
    report: dict[str, Any] = doc
    return report


def _totals(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in headline_numbers(doc).items() if k in METRICS}


def _kernel_times(doc: dict[str, Any]) -> pl.DataFrame:
    return pl.DataFrame(
        [
            {"name": k["name"], "total_ns": k["total_ns"], "count": k["count"]}
            for k in doc["kernels"]["top"]
        ],
        schema={"name": pl.String, "total_ns": pl.Int64, "count": pl.Int64},
    )


#: Each headline number: its label, unit ("ns" or "share") and which way is better
#: (-1: lower is better, +1: higher, 0: neither, e.g. the window's length).
METRICS: dict[str, tuple[str, str, int]] = {
    "step_ns": ("Step time", "ns", -1),
    "window_ns": ("Analysed window", "ns", 0),
    "idle_share": ("GPU idle", "share", -1),
    "host_wait_share": ("Idle waiting for the host", "share", -1),
    "sync_share": ("Idle in host syncs", "share", -1),
    "launch_overhead_share": ("Idle between tiny launches", "share", -1),
    "other_share": ("Other idle", "share", -1),
    "tc_share_of_gemm": ("GEMM time on Tensor Cores", "share", 1),
    "exposed_comm_ns": ("Exposed communication", "ns", -1),
    "kernel_ns": ("Kernel time", "ns", -1),
}
#: Changes smaller than these are noise (run-to-run jitter of one job, measured on the
#: samples' steps: a few % of time, under 1 percentage point of a share).
NOISE_RELATIVE = 0.02
NOISE_SHARE_PP = 0.01
#: A kernel's change is noise below this share of the larger run's kernel time.
KERNEL_NOISE_SHARE = 0.01


def _metric(key: str, before: Any, after: Any) -> dict[str, Any]:
    label, unit, better_when = METRICS[key]
    change = after - before if before is not None and after is not None else None
    ratio = after / before if change is not None and before else None
    if change is None:
        noise = True
    elif unit == "share":
        noise = abs(change) < NOISE_SHARE_PP
    else:
        noise = abs(change) <= NOISE_RELATIVE * max(abs(before), abs(after))
    if noise or better_when == 0 or change is None:
        verdict = "same" if noise else "changed"
    else:
        verdict = "better" if (change < 0) == (better_when < 0) else "worse"
    return {
        "label": label,
        "unit": unit,
        "before": before,
        "after": after,
        "change": change,
        "ratio": ratio,
        "verdict": verdict,
    }


def compare(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """The changes from report `a` (before) to report `b` (after): each headline number
    with its change, ratio and whether it got better or worse (or moved within noise), the
    kernels whose time changed beyond noise, and the diagnoses that appeared, disappeared
    or changed severity."""
    ta, tb = _totals(a), _totals(b)
    metrics = {k: _metric(k, ta[k], tb[k]) for k in METRICS}
    floor = KERNEL_NOISE_SHARE * max(a["kernels"]["total_ns"], b["kernels"]["total_ns"], 1)
    kernels = (
        _kernel_times(a)
        .join(_kernel_times(b), on="name", how="full", coalesce=True, suffix="_after")
        .with_columns(pl.col("total_ns", "total_ns_after").fill_null(0))
        .with_columns(change_ns=pl.col("total_ns_after") - pl.col("total_ns"))
        .filter(pl.col("change_ns").abs() >= floor)
        .sort(pl.col("change_ns").abs(), descending=True)
        .head(TOP_CHANGES)
        .rename({"total_ns": "before_ns", "total_ns_after": "after_ns"})
        .select("name", "before_ns", "after_ns", "change_ns")
    )
    worst_a, worst_b = _worst(a["diagnoses"]), _worst(b["diagnoses"])
    changed = [
        {"diagnosis": f"{r} {t}", "before": worst_a[(r, t)], "after": worst_b[(r, t)]}
        for r, t in sorted(worst_a.keys() & worst_b.keys())
        if worst_a[(r, t)] != worst_b[(r, t)]
    ]
    return {
        "before": a["source"]["path"],
        "after": b["source"]["path"],
        "metrics": metrics,
        "kernels": kernels.to_dicts(),
        "diagnoses_appeared": [f"{r} {t}" for r, t in sorted(worst_b.keys() - worst_a.keys())],
        "diagnoses_disappeared": [f"{r} {t}" for r, t in sorted(worst_a.keys() - worst_b.keys())],
        "severity_changed": changed,
        "note": (
            "kernel changes cover the kernels in either run's top list, beyond "
            f"{KERNEL_NOISE_SHARE:.0%} of kernel time; metrics within "
            f"{NOISE_RELATIVE:.0%} (shares: {NOISE_SHARE_PP * 100:.0f} pp) are noise"
        ),
    }


def _worst(diagnoses: list[dict[str, Any]]) -> dict[tuple[str, str], str]:
    """(rule, title) -> the worst severity of its findings (across ranks)."""
    worst: dict[tuple[str, str], str] = {}
    for d in diagnoses:
        key = (d["rule"], d["title"])
        if key not in worst or SEVERITIES.index(d["severity"]) > SEVERITIES.index(worst[key]):
            worst[key] = d["severity"]
    return worst
