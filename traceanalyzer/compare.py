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

from traceanalyzer.errors import TraceFormatError
from traceanalyzer.report import FORMAT_VERSION

CAUSES = ("host_wait", "sync", "launch_overhead", "other")
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
    devices = doc["devices"]
    window = sum(d["window_ns"] for d in devices)
    paths = doc["critical_path"]
    analysed = sum(p["steps"] for p in paths)
    gemm = sum(d["tensor_core"]["gemm_ns"] for d in devices)
    return {
        "step_ns": sum(p["step_ns"] for p in paths) // analysed if analysed else None,
        "window_ns": window,
        "idle_share": sum(d["idle_ns"] for d in devices) / window if window else None,
        **{
            f"{c}_share": sum(d["idle_by_cause"][c] for d in devices) / window if window else None
            for c in CAUSES
        },
        "tc_share_of_gemm": sum(d["tensor_core"]["tc_ns"] for d in devices) / gemm
        if gemm
        else None,
        "exposed_comm_ns": sum(d["exposed_comm_ns"] for d in devices),
        "kernel_ns": doc["kernels"]["total_ns"],
    }


def _kernel_times(doc: dict[str, Any]) -> pl.DataFrame:
    return pl.DataFrame(
        [
            {"name": k["name"], "total_ns": k["total_ns"], "count": k["count"]}
            for k in doc["kernels"]["top"]
        ],
        schema={"name": pl.String, "total_ns": pl.Int64, "count": pl.Int64},
    )


def compare(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """The changes from report `a` (before) to report `b` (after)."""
    ta, tb = _totals(a), _totals(b)
    metrics = {
        k: {
            "before": ta[k],
            "after": tb[k],
            "change": (tb[k] - ta[k]) if ta[k] is not None and tb[k] is not None else None,
        }
        for k in ta
    }
    kernels = (
        _kernel_times(a)
        .join(_kernel_times(b), on="name", how="full", coalesce=True, suffix="_after")
        .with_columns(pl.col("total_ns", "total_ns_after").fill_null(0))
        .with_columns(change_ns=pl.col("total_ns_after") - pl.col("total_ns"))
        .sort(pl.col("change_ns").abs(), descending=True)
        .head(TOP_CHANGES)
        .rename({"total_ns": "before_ns", "total_ns_after": "after_ns"})
        .select("name", "before_ns", "after_ns", "change_ns")
    )
    found_a = {(d["rule"], d["title"]) for d in a["diagnoses"]}
    found_b = {(d["rule"], d["title"]) for d in b["diagnoses"]}
    return {
        "before": a["source"]["path"],
        "after": b["source"]["path"],
        "metrics": metrics,
        "kernels": kernels.to_dicts(),
        "diagnoses_appeared": [f"{r} {t}" for r, t in sorted(found_b - found_a)],
        "diagnoses_disappeared": [f"{r} {t}" for r, t in sorted(found_a - found_b)],
        "note": "kernel changes cover the kernels in either run's top list",
    }


def render_text(diff: dict[str, Any]) -> str:
    """The comparison as aligned text."""
    from traceanalyzer.render.units import duration, percent, printable

    def fmt(key: str, v: Any) -> str:
        if v is None:
            return "n/a"
        return percent(v) if "share" in key else duration(int(v))

    lines = [
        f"before: {diff['before']}",
        f"after:  {diff['after']}",
        "",
        f"  {'':<22} {'before':>12} {'after':>12} {'change':>12}",
    ]
    for key, m in diff["metrics"].items():
        change = m["change"]
        sign = "" if change is None or change < 0 else "+"
        lines.append(
            f"  {key:<22} {fmt(key, m['before']):>12} {fmt(key, m['after']):>12}"
            f" {sign + fmt(key, change):>12}"
        )
    lines += ["", "Kernels that gained or lost the most time"]
    for k in diff["kernels"]:
        sign = "+" if k["change_ns"] >= 0 else ""
        lines.append(f"  {sign}{duration(k['change_ns']):>11}  {printable(k['name'], 90)}")
    lines += [
        "",
        "Diagnoses that appeared: " + (", ".join(diff["diagnoses_appeared"]) or "none"),
        "Diagnoses that disappeared: " + (", ".join(diff["diagnoses_disappeared"]) or "none"),
    ]
    return "\n".join(lines) + "\n"


def render_html(diff: dict[str, Any]) -> str:
    """The comparison as one self-contained HTML page (escaped, nothing fetched), with the
    comparison's JSON embedded (`script#compare-data`)."""
    from jinja2 import Environment, PackageLoader, select_autoescape
    from markupsafe import Markup

    from traceanalyzer.render.base import script_json, static_text
    from traceanalyzer.render.units import duration, percent

    def fmt(key: str, v: Any) -> str:
        if v is None:
            return "n/a"
        return percent(v) if "share" in key else duration(int(v))

    env = Environment(
        loader=PackageLoader("traceanalyzer", "render/templates"),
        autoescape=select_autoescape(["html", "j2"]),
    )
    css = static_text("report.css")
    data = script_json(diff)
    return env.get_template("compare.html.j2").render(
        diff=diff, fmt=fmt, dur=duration, css=Markup(css), data=Markup(data)
    )
