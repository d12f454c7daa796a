"""Annotate: write a trace back, for Perfetto or chrome://tracing, with what the analysis found.

Pipeline position: after `api.run` (the one pipeline: load -> analyze -> rules -> report,
critical path included) and ahead of a trace viewer. For each (rank, device) it adds
counter tracks ("ph": "C") at the report's timeline-bin resolution (busy and each idle cause
as a % of the bin; exposed communication); each finding gets a track of its own on its
device's process, with a slice ("ph": "X") over every time span it is about (the gaps, the
syncs, the collectives: see spans.py) carrying the message and advice, and one
instant marker ("ph": "i") at its first span. A Chrome trace keeps every original event; an
Nsight export becomes a new Chrome trace holding the timeline's GPU work and host calls
(processes and threads named) plus the annotations. The input is never modified; outputs
are gzip-compressed, written atomically, with the usual permissions (0666 less the umask).
"""

from __future__ import annotations

import gzip
import os
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import polars as pl

from traceanalyzer import api
from traceanalyzer.analyses.gpu.idle import CAUSES, LAUNCH_GAP_MAX_NS
from traceanalyzer.config import Settings
from traceanalyzer.errors import ReportWriteError, TraceFormatError
from traceanalyzer.model import Timeline
from traceanalyzer.readers.base import UTF8_BOM, UTF16_BOMS
from traceanalyzer.render.base import current_umask, output_target
from traceanalyzer.report import Report
from traceanalyzer.rules.base import Finding
from traceanalyzer.spans import finding_spans
from traceanalyzer.version import __version__

#: Counter names as a viewer shows them.
BUSY_COUNTER = "traceanalyzer: busy / idle by cause (% of bin)"
COMM_COUNTER = "traceanalyzer: exposed communication (% of window)"
COMM_BIN_COUNTER = "traceanalyzer: exposed communication (% of bin)"
MARKER_CATEGORY = "traceanalyzer"
#: Process id of (rank, device) in a trace written from an Nsight export: clear of host pids,
#: one process per GPU even where ranks share device ordinals.
NSYS_DEVICE_PID = 1 << 30
PidOf = Callable[[int, int], int]
#: Timeline kinds an Nsight export keeps in the written trace, and their Kineto categories.
NSYS_KIND_CATEGORY = {
    "kernel": "kernel",
    "memcpy": "gpu_memcpy",
    "memset": "gpu_memset",
    "runtime": "cuda_runtime",
    "annotation": "user_annotation",
}


@dataclass(frozen=True, slots=True)
class Annotated:
    """One file written: its path, and how many counter samples and markers it gained."""

    path: Path
    counters: int
    markers: int


def annotate(
    path: str | Path,
    output: str | Path,
    *,
    settings: Settings | None = None,
    step_pattern: str | None = None,
    launch_gap_max_ns: int = LAUNCH_GAP_MAX_NS,
    all_steps: bool = False,
) -> list[Annotated]:
    """Analyse the trace at `path` and write it, annotated, to `output` (gzip JSON).

    A folder of per-rank traces writes one file per rank into the folder `output`, named
    after each input file (`<stem>.annotated.json.gz`).
    """
    done = api.run(
        api.load(path),
        settings=settings,
        step_pattern=step_pattern,
        launch_gap_max_ns=launch_gap_max_ns,
        all_steps=all_steps,
    )
    timeline, metrics, report = done.timeline, done.metrics, done.report
    spans = {id(f): finding_spans(f, metrics, timeline) for f in report.findings}
    src = Path(path)
    out = Path(output)
    if src.is_dir():
        written = []
        out.mkdir(parents=True, exist_ok=True)  # the folder of annotated rank files
        for rank in report.ranks:
            stem = Path(rank["path"]).name.removesuffix(".gz").removesuffix(".json")
            target = out / f"{stem}.annotated.json.gz"
            written.append(_one(report, timeline, spans, rank["rank"], Path(rank["path"]), target))
        return written
    ranks = [r["rank"] for r in report.ranks] or [0]
    return [_one(report, timeline, spans, ranks[0], src, out, all_ranks=True)]


def _one(
    report: Report,
    timeline: Timeline,
    spans: dict[int, pl.DataFrame],
    rank: int,
    src: Path,
    target: Path,
    *,
    all_ranks: bool = False,
) -> Annotated:
    """Annotate one input file (one rank, or every rank of a single-file trace)."""
    mine = (lambda r: True) if all_ranks else (lambda r: r == rank)
    chrome = report.source["format"] == "chrome"
    # Kineto puts each GPU's work on the process whose pid is the device ordinal.
    pid = _kineto_pid if chrome else _nsys_pid
    counters = counter_events(report, mine, pid)
    markers = marker_events(report, mine, pid, spans)
    tracks = finding_tracks(report, mine, pid, spans)
    if chrome:
        doc = _chrome_doc(src)
        events = doc["traceEvents"] if isinstance(doc, dict) else doc
        events.extend(counters)
        events.extend(markers)
        events.extend(tracks)
        payload = orjson.dumps(doc)
    else:
        payload = _new_trace(timeline, report, mine, [*counters, *markers, *tracks])
    inputs = [report.source["path"], *(r["path"] for r in report.ranks)]
    _write_gzip(target, payload, inputs)
    return Annotated(target, len(counters), len(markers))


def _chrome_doc(src: Path) -> Any:
    data = src.read_bytes()
    if data[:2] == b"\x1f\x8b":  # gzip by its magic bytes, whatever the suffix
        data = gzip.decompress(data)
    if data.startswith(UTF8_BOM):  # read as the reader reads it (readers/base.ByteSource)
        data = data[len(UTF8_BOM) :]
    elif data[:2] in UTF16_BOMS:
        data = data.decode("utf-16", "replace").encode("utf-8")
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise TraceFormatError(f"not valid JSON ({exc})", path=src) from exc
    if (isinstance(doc, dict) and isinstance(doc.get("traceEvents"), list)) or isinstance(
        doc, list
    ):
        return doc
    raise TraceFormatError("no traceEvents list to annotate", path=src)


def _us(ns: int) -> float:
    """Trace Event Format times are microseconds (the reader read ts * 1000 as ns)."""
    return ns / 1000


def _kineto_pid(rank: int, device: int) -> int:
    return device


def _nsys_pid(rank: int, device: int) -> int:
    return NSYS_DEVICE_PID + rank * 1000 + device


def counter_events(report: Report, mine: Any, pid: PidOf = _kineto_pid) -> list[dict[str, Any]]:
    """Counter samples per (rank, device): one per timeline bin, then a zero at the end."""
    events: list[dict[str, Any]] = []
    layers = ["busy", *CAUSES]
    by_device: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for b in report.timeline_bins:
        if mine(b["rank"]):
            by_device.setdefault((b["rank"], b["device"]), []).append(b)
    for (rank, device), bins in sorted(by_device.items()):
        p = pid(rank, device)
        bins.sort(key=lambda b: b["bin"])
        for b in bins:
            width = max(b["end_ns"] - b["start_ns"], 1)
            args = {k: round(100 * (b[f"{k}_ns"] or 0) / width, 2) for k in layers}
            events.append(_counter(BUSY_COUNTER, p, b["start_ns"], args))
            if "exposed_comm_ns" in b:
                share = round(100 * (b["exposed_comm_ns"] or 0) / width, 2)
                events.append(_counter(COMM_BIN_COUNTER, p, b["start_ns"], {"exposed": share}))
        end = bins[-1]["end_ns"]
        events.append(_counter(BUSY_COUNTER, p, end, dict.fromkeys(layers, 0)))
    for d in report.devices:
        key = (d["rank"], d["device"])
        if not mine(d["rank"]) or key not in by_device or "exposed_comm_ns" in by_device[key][0]:
            continue
        # The report has exposed communication per device window, not per bin yet: one level
        # over the window (a per-bin track replaces it once the bins carry the number).
        bins = by_device[key]
        share = round(100 * d["exposed_comm_ns"] / max(d["window_ns"], 1), 2)
        p = pid(*key)
        events.append(_counter(COMM_COUNTER, p, bins[0]["start_ns"], {"exposed": share}))
        events.append(_counter(COMM_COUNTER, p, bins[-1]["end_ns"], {"exposed": 0}))
    return events


def _counter(name: str, pid: int, ns: int, args: dict[str, Any]) -> dict[str, Any]:
    return {
        "ph": "C",
        "cat": MARKER_CATEGORY,
        "name": name,
        "pid": pid,
        "ts": _us(ns),
        "args": args,
    }


#: Thread ids of the finding tracks: clear of real thread and stream ids.
TRACK_TID = 1 << 40


def _finding_args(n: int, f: Finding) -> dict[str, Any]:
    return {
        "rank_in_report": n,
        "rule": f.rule,
        "slug": f.slug,
        "severity": f.severity.value,
        "message": f.message,
        "advice": f.advice,
        "impact_ns": f.impact_ns,
        "docs": f"traceanalyzer rule {f.rule}",
    }


def finding_tracks(
    report: Report, mine: Any, pid: PidOf, spans: dict[int, pl.DataFrame]
) -> list[dict[str, Any]]:
    """Per finding, a named track (thread) on its device's process, with one slice over
    each span the finding is about (see spans.py)."""
    starts = _device_starts(report)
    events: list[dict[str, Any]] = []
    for n, f in enumerate(report.findings, start=1):
        if f.scope.rank is not None and not mine(f.scope.rank):
            continue
        found = spans.get(id(f))
        if found is None or found.height == 0:
            continue
        _ts, key = _where(f, starts, report.window["start_ns"])
        p = pid(*key) if key is not None else 0
        tid = TRACK_TID + n
        name = f"traceanalyzer: {f.rule} {f.title} [{f.severity.value}]"
        events.append(
            {"ph": "M", "name": "thread_name", "pid": p, "tid": tid, "args": {"name": name}}
        )
        events.append(
            {
                "ph": "M",
                "name": "thread_sort_index",
                "pid": p,
                "tid": tid,
                "args": {"sort_index": -n},
            }
        )
        args = _finding_args(n, f)
        for start, end, what in found.iter_rows():
            events.append(
                {
                    "ph": "X",
                    "cat": MARKER_CATEGORY,
                    "name": f"{f.rule}: {what}",
                    "pid": p,
                    "tid": tid,
                    "ts": _us(start),
                    "dur": _us(max(end - start, 0)),
                    "args": args,
                }
            )
    return events


def _device_starts(report: Report) -> dict[tuple[int, int], int]:
    starts: dict[tuple[int, int], int] = {}
    for b in report.timeline_bins:
        dev = (b["rank"], b["device"])
        starts[dev] = min(starts.get(dev, b["start_ns"]), b["start_ns"])
    return starts


def marker_events(
    report: Report,
    mine: Any,
    pid: PidOf = _kineto_pid,
    spans: dict[int, pl.DataFrame] | None = None,
) -> list[dict[str, Any]]:
    """One instant marker per finding, at the first span it is about (else at the start of
    its scope's window, of its device's, rank's or the report's window), on its device's
    process where it has one."""
    starts = _device_starts(report)
    events = []
    for n, f in enumerate(report.findings, start=1):
        rank = f.scope.rank
        if rank is not None and not mine(rank):
            continue
        ts, key = _where(f, starts, report.window["start_ns"])
        found = (spans or {}).get(id(f))
        if found is not None and found.height:
            first = found["start_ns"].min()
            ts = first if isinstance(first, int) else ts
        event: dict[str, Any] = {
            "ph": "i",
            "cat": MARKER_CATEGORY,
            "name": f"{f.rule} {f.title}",
            "ts": _us(ts),
            "pid": pid(*key) if key is not None else 0,
            "tid": 0,
            "s": "p" if key is not None else "g",
            "args": _finding_args(n, f),
        }
        events.append(event)
    return events


def _where(
    f: Finding, starts: dict[tuple[int, int], int], default_ns: int | None
) -> tuple[int, tuple[int, int] | None]:
    s = f.scope
    devices = sorted(
        k
        for k in starts
        if (s.rank is None or k[0] == s.rank) and (s.device is None or k[1] == s.device)
    )
    key = devices[0] if devices and (s.device is not None or s.rank is not None) else None
    if s.window is not None:
        return s.window[0], key
    if devices:
        return min(starts[k] for k in devices), key
    return default_ns or 0, key


def _new_trace(
    timeline: Timeline, report: Report, mine: Any, annotations: list[dict[str, Any]]
) -> bytes:
    """A Chrome trace of the timeline's GPU work (pid = device, tid = stream) plus the
    annotations: what an Nsight export becomes so that Perfetto can open it."""
    ranks = sorted({r["rank"] for r in report.ranks if mine(r["rank"])} or {0})
    device_work = pl.col("device").is_not_null()
    work = (
        timeline.events.filter(
            pl.col("kind").cast(pl.String).is_in(list(NSYS_KIND_CATEGORY))
            & pl.col("rank").is_in(ranks)
        )
        .select(
            ph=pl.lit("X"),
            cat=pl.col("kind").cast(pl.String).replace_strict(NSYS_KIND_CATEGORY),
            name=pl.col("name").cast(pl.String),
            # GPU work on the device's process (pid = device, tid = stream), host ranges and
            # runtime calls on their own process and thread.
            pid=pl.when(device_work)
            .then(NSYS_DEVICE_PID + pl.col("rank").cast(pl.Int64) * 1000 + pl.col("device"))
            .otherwise("pid"),
            tid=pl.when(device_work).then("stream").otherwise("tid"),
            ts=pl.col("start_ns") / 1000,
            dur=(pl.col("end_ns") - pl.col("start_ns")) / 1000,
            args=pl.struct("device", "stream", "correlation"),
        )
        .sort("ts")
    )
    # Serialise the events column-wise (no Python object per event), then splice.
    lines = work.write_ndjson().strip().replace("\n", ",") if work.height else ""
    names = [
        {"ph": "M", "name": "process_name", "pid": _nsys_pid(d["rank"], d["device"]), "tid": 0,
         "args": {"name": f"rank {d['rank']} GPU {d['device']}"}}
        for d in report.devices
        if mine(d["rank"])
    ]  # fmt: skip
    names += _host_names(work)
    extra = orjson.dumps([*names, *annotations])[1:-1].decode("utf-8")
    body = ",".join(x for x in (lines, extra) if x)
    head = orjson.dumps(
        {
            "displayTimeUnit": "ns",
            "traceanalyzer": {"version": __version__, "source": report.source["path"]},
        }
    ).decode("utf-8")[:-1]
    return f'{head},"traceEvents":[{body}]}}'.encode()


def _host_names(work: pl.DataFrame) -> list[dict[str, Any]]:
    """Names for the host processes and threads of a trace written from an Nsight export
    (Perfetto shows bare numbers otherwise)."""
    host = (
        work.filter(pl.col("pid") < NSYS_DEVICE_PID)
        .select("pid", "tid")
        .unique()
        .sort("pid", "tid")
    )
    names: list[dict[str, Any]] = []
    for pid in host["pid"].unique().sort().to_list():
        names.append(
            {"ph": "M", "name": "process_name", "pid": pid, "tid": 0,
             "args": {"name": f"host process {pid}"}}
        )  # fmt: skip
    for pid, tid in host.select("pid", "tid").iter_rows():
        names.append(
            {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
             "args": {"name": f"host thread {tid}"}}
        )  # fmt: skip
    return names


def _write_gzip(target: Path, payload: bytes, inputs: list[str]) -> None:
    """Write gzip-compressed `payload` to `target` atomically (temp file, then rename); see
    render.base.output_target for links, devices, inputs and missing folders."""
    target, atomic = output_target(target, inputs)
    if not atomic:
        with target.open("wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as out:
            out.write(payload)
        return
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    except OSError as exc:
        raise ReportWriteError(
            f"cannot write the annotated trace ({exc.strerror})",
            path=target,
            hint="check the output path",
        ) from exc
    try:
        with (
            os.fdopen(fd, "wb") as raw,
            gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6, mtime=0) as out,
        ):
            out.write(payload)
        os.chmod(tmp, 0o666 & ~current_umask())  # mkstemp makes 0600: give the usual permissions
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
