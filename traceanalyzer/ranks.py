"""A folder of per-rank Chrome traces, reduced rank by rank (issue 15: jobs of many ranks).

Each rank's file is read and analysed alone, in a worker process or on a dask.distributed
worker (`analyses.distributed.rank.analyze_rank`), and only its part (small per-rank
tables: see `RankPart`) comes back; the job stage (`analyses.distributed.job`) merges the
parts. No process holds more than one rank's events at a time, so memory is bounded by the
largest rank, not by the job: peak memory is about the workers' (one rank each) plus the
parts.

The result equals analysing the folder read whole (`analyses.analyze` of `readers.read`):
the same pipeline runs either way.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from traceanalyzer import parallel
from traceanalyzer.analyses import finish, no_gpu_events
from traceanalyzer.analyses.distributed.job import settle
from traceanalyzer.analyses.distributed.rank import Flagged, Options, RankPart, analyze_rank
from traceanalyzer.analyses.metrics import Metrics
from traceanalyzer.model import TraceMeta, combine_meta
from traceanalyzer.readers import read
from traceanalyzer.readers.chrome_trace import (
    ChromeTraceReader,
    Skipped,
    check_ranks,
    with_skipped,
)


@dataclass(frozen=True, slots=True)
class Task:
    """One rank's file to analyse, with the steps the job leaves out and whether its windows
    come from steps (None: as its own steps say)."""

    path: str
    opts: Options
    flagged: Flagged | None = None
    job_steps: bool | None = None


def analyse_rank_file(task: Task) -> RankPart | Skipped:
    """Read and analyse one rank's file (in a worker: module level, picklable result)."""
    reader = ChromeTraceReader()
    timeline = reader.read_or_skip(Path(task.path), reader.read)
    if isinstance(timeline, Skipped):
        return timeline
    return analyze_rank(timeline, task.opts, task.flagged, job_steps=task.job_steps)


def is_rank_folder(path: Path) -> bool:
    """True for a folder (of per-rank Chrome traces: the only folders read)."""
    return path.is_dir()


def analyze_folder(
    folder: Path, opts: Options, jobs: int | None = None, scheduler: str | None = None
) -> tuple[TraceMeta, Metrics]:
    """The meta and metrics of a folder of per-rank traces, each rank read and analysed
    alone: in `jobs` worker processes (default: all cores; 1: here, one rank after the
    other), or on the dask.distributed scheduler at `scheduler`."""
    files = ChromeTraceReader().folder_files(folder)
    opts = dataclasses.replace(opts, all_gaps=False)  # each rank's part small: see Options

    def run(tasks: list[Task]) -> list[RankPart | Skipped]:
        done = dict(parallel.run_all(analyse_rank_file, tasks, jobs, scheduler))
        return [done[i] for i in range(len(tasks))]

    results = run([Task(str(f), opts) for f in files])
    skipped = [r.why for r in results if isinstance(r, Skipped)]
    read_ok = [(f, r) for f, r in zip(files, results, strict=True) if not isinstance(r, Skipped)]
    ranked = [(f, r.meta.ranks[0].rank, r.meta.ranks[0].rank_source) for f, r in read_ok]
    check_ranks(folder, ranked, skipped)
    meta = with_skipped(combine_meta([r.meta for _f, r in read_ok], str(folder)), skipped)
    analysed = [(str(f), r) for f, r in read_ok if isinstance(r, RankPart)]
    if not any(part.gpu_work for _path, part in analysed):
        raise no_gpu_events(read(folder))  # the error names what the job holds instead

    def rerun(again: list[int], flagged: Flagged, job_steps: bool | None) -> list[RankPart]:
        parts = run([Task(analysed[i][0], opts, flagged, job_steps) for i in again])
        return [p for p in parts if isinstance(p, RankPart)]

    settled, flagged = settle([part for _path, part in analysed], rerun)
    return meta, finish(settled, flagged, opts, str(folder))
