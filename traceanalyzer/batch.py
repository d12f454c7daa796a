"""Batch analysis of archived runs: one summary row per run, over all cores or a cluster.

Each run is analysed on its own (a worker process, or a dask.distributed worker): load,
analyze, diagnose, write the run's JSON (and HTML) report, return its summary row. A run
that fails becomes a row with its error; the batch goes on. Results are cached by the run's
content hash and the tool version, so a rerun over a growing archive pays only for new runs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import polars as pl

from traceanalyzer import parallel
from traceanalyzer.config import Settings
from traceanalyzer.errors import ConfigError, TraceAnalyzerError
from traceanalyzer.readers.archives import DEFAULT_MAX_UNPACKED, Run, discover
from traceanalyzer.render.base import write_text_atomic
from traceanalyzer.report import headline_numbers
from traceanalyzer.version import __version__

#: Columns of the summary table, in order (see `summary_row`).
SUMMARY_SCHEMA = pl.Schema(
    {
        "run": pl.String(),
        "path": pl.String(),
        "content_hash": pl.String(),
        "format": pl.String(),
        "ranks": pl.Int64(),
        "devices": pl.Int64(),
        "gpu": pl.String(),
        "basis": pl.String(),
        "bound_by": pl.String(),
        "cause": pl.String(),
        "steps": pl.Int64(),
        "step_ns": pl.Int64(),
        "window_ns": pl.Int64(),
        "busy_share": pl.Float64(),
        "idle_share": pl.Float64(),
        "host_wait_share": pl.Float64(),
        "sync_share": pl.Float64(),
        "launch_overhead_share": pl.Float64(),
        "other_idle_share": pl.Float64(),
        "kernel_count": pl.Int64(),
        "kernel_ns": pl.Int64(),
        "comm_ns": pl.Int64(),
        "exposed_comm_ns": pl.Int64(),
        "tc_share_of_gemm": pl.Float64(),
        "diagnoses": pl.String(),
        "worst_severity": pl.String(),
        "top_diagnosis": pl.String(),
        "top_impact_ns": pl.Int64(),
        "report": pl.String(),
        "seconds": pl.Float64(),
        "cached": pl.Boolean(),
        "error": pl.String(),
    }
)


def content_hash(path: Path) -> str:
    """SHA-256 of a run's bytes (a folder: of its files' names and bytes, sorted)."""
    h = hashlib.sha256()
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for f in files:
        if path.is_dir():
            h.update(str(f.relative_to(path)).encode())
        with f.open("rb") as fh:
            while chunk := fh.read(1 << 20):
                h.update(chunk)
    return h.hexdigest()


def _slug(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", label).strip("_")[:120] or "run"


def report_stems(labels: list[str]) -> list[str]:
    """A report file name per run: the label made file-safe, with a short hash of the label
    where two labels make the same name (`c/a_x.json.gz` and `c/a/x.json.gz`)."""
    slugs = [_slug(label) for label in labels]
    counts = Counter(slugs)
    return [
        f"{slug}-{hashlib.sha1(label.encode()).hexdigest()[:8]}" if counts[slug] > 1 else slug
        for slug, label in zip(slugs, labels, strict=True)
    ]


def summary_row(label: str, path: Path, digest: str, rep: Any, report_path: str) -> dict[str, Any]:
    """The run's headline numbers, from its report (the contract's fields)."""
    doc = rep.to_json_dict()
    devices = doc["devices"]
    head = headline_numbers(doc)
    findings = rep.findings
    worst = max((f.severity for f in findings), key=lambda s: s.rank, default=None)
    top = findings[0] if findings else None
    return {
        "run": label,
        "path": str(path),
        "content_hash": digest,
        "format": doc["source"]["format"],
        "ranks": len(doc["ranks"]),
        "devices": len(devices),
        "gpu": next((d["name"] for d in devices if d["name"]), None),
        "basis": doc["window"]["basis"],
        "bound_by": (doc.get("verdict") or {}).get("bound_by"),
        "cause": (doc.get("verdict") or {}).get("cause"),
        "steps": len({s["name"] for s in doc["steps"]}),
        **{k: v for k, v in head.items() if k != "other_share"},
        "other_idle_share": head["other_share"],
        "diagnoses": ",".join(sorted({f.category for f in findings})),
        "worst_severity": worst.value if worst is not None else None,
        "top_diagnosis": f"{top.rule} {top.title}" if top else None,
        "top_impact_ns": top.impact_ns if top else None,
        "report": report_path,
    }


@dataclass(frozen=True, slots=True)
class Job:
    """Everything a worker needs to analyse one run (picklable)."""

    run: Run
    out_dir: str
    html: bool
    cache: bool
    report_stem: str = ""  # the per-run report's file name, unique in the batch
    options: Options = field(default_factory=lambda: Options())


@dataclass(frozen=True, slots=True)
class Options:
    """What every run of a batch is analysed with, as `report` takes it (picklable)."""

    settings: Settings = field(default_factory=Settings)
    step_pattern: str | None = None
    all_steps: bool = False

    def key(self) -> str:
        """A short hash of everything that changes a report: part of the cache key, so a
        changed threshold or pattern analyses every run again."""
        settings = dataclasses.asdict(self.settings)
        settings.pop("source")  # where the settings came from does not change a report
        doc = {"settings": settings, "step_pattern": self.step_pattern, "all": self.all_steps}
        return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()[
            :12
        ]


def _cached_row(cached: Path) -> dict[str, Any] | None:
    """The saved summary row of a cache entry, or None when it cannot be used: missing,
    damaged (a run killed mid-write, a disk error), or its report file is gone."""
    try:
        saved = json.loads(cached.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(saved, dict) or not set(SUMMARY_SCHEMA.names()) - {"cached"} <= set(saved):
        return None
    report = saved.get("report")
    if not isinstance(report, str) or not Path(report).is_file():
        return None
    return saved


def analyse_run(job: Job) -> dict[str, Any]:
    """Analyse one run; never raises for a bad trace (the row carries the error)."""
    from traceanalyzer import api  # imported in the worker

    started = time.perf_counter()
    run = job.run
    out = Path(job.out_dir)
    row: dict[str, Any] = {"run": run.label, "path": str(run.path), "cached": False}
    if run.error:
        return {**row, "error": run.error, "seconds": 0.0}
    try:
        digest = content_hash(run.path)
        row["content_hash"] = digest
        report_path = out / "runs" / f"{job.report_stem or _slug(run.label)}.json"
        cached = out / ".cache" / f"{digest}-{__version__}-{job.options.key()}.json"
        saved = _cached_row(cached) if job.cache else None
        html_ok = not job.html or report_path.with_suffix(".html").is_file()
        if saved is not None and saved["report"] == str(report_path) and html_ok:
            return {**saved, "run": run.label, "path": str(run.path), "cached": True}
        opts = job.options
        rep = api.report(
            run.path,
            settings=opts.settings,
            step_pattern=opts.step_pattern,
            all_steps=opts.all_steps,
            export_dir=out / ".cache" / "exports",
            jobs=1,  # a run's ranks one after the other: the batch's workers are the parallelism
        )
        api.write(rep, "json", str(report_path))
        if job.html:
            api.write(rep, "html", str(report_path.with_suffix(".html")))
        row = {**summary_row(run.label, run.path, digest, rep, str(report_path)), "cached": False}
        row["seconds"] = time.perf_counter() - started
        row["error"] = None
        cached.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(cached, json.dumps(row), [])
    except TraceAnalyzerError as exc:
        row["error"] = exc.one_line()
    except Exception as exc:  # the one broad catch: a batch records what broke and goes on
        row["error"] = f"internal error: {type(exc).__name__}: {exc}"
    row.setdefault("seconds", time.perf_counter() - started)
    return row


def run_batch(
    args: list[str],
    out_dir: Path,
    *,
    jobs: int | None = None,
    html: bool = False,
    cache: bool = True,
    dask_scheduler: str | None = None,
    on_result: Callable[[dict[str, Any], int], None] | None = None,
    options: Options | None = None,
    max_unpacked: int = DEFAULT_MAX_UNPACKED,
) -> pl.DataFrame:
    """Analyse every run found in `args`; return the summary (one row per run, in order).

    `jobs`: worker processes (default: all cores); `dask_scheduler`: address of a
    dask.distributed scheduler to send the runs to instead. `on_result(row, total)` is called
    as each run finishes (progress display). `options`: the settings, step pattern and
    window every run is analysed with (as `report` takes them; part of the cache key).
    `max_unpacked`: the most bytes an archive may unpack to.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "runs").mkdir(exist_ok=True)  # the per-run reports: batch's own folder
    with tempfile.TemporaryDirectory(prefix="traceanalyzer-batch-") as scratch:
        runs = discover(args, Path(scratch), max_unpacked)
        if not runs:
            raise ConfigError("no traces found", hint="give trace files, folders or archives")
        stems = report_stems([r.label for r in runs])
        opts = options or Options()
        batch = [
            Job(r, str(out_dir), html, cache, s, opts) for r, s in zip(runs, stems, strict=True)
        ]
        results: dict[str, dict[str, Any]] = {}
        for row in _execute(batch, jobs, dask_scheduler):
            results[row["run"]] = row
            if on_result:
                on_result(row, len(batch))
    rows = [results[j.run.label] for j in batch]
    return pl.DataFrame(
        [{k: r.get(k) for k in SUMMARY_SCHEMA.names()} for r in rows], schema=SUMMARY_SCHEMA
    )


def _execute(batch: list[Job], jobs: int | None, scheduler: str | None) -> Iterator[dict[str, Any]]:
    for _i, row in parallel.run_all(analyse_run, batch, jobs, scheduler):
        yield row


def write_summary(summary: pl.DataFrame, out_dir: Path, fmt: str) -> Path:
    """Write the summary table (parquet or csv) atomically; return its path."""
    target = out_dir / f"summary.{fmt}"
    tmp = target.with_suffix(f".{fmt}.partial")
    if fmt == "csv":
        summary.write_csv(tmp)
    else:
        summary.write_parquet(tmp)
    tmp.replace(target)
    return target
