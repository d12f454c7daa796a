"""The per-rank table of a job, for every renderer: which ranks to show, and their cells.

A job's ranks are compared per steady step (docs/report.md, Ranks). Up to `SHOW_ALL`
ranks are all shown; a larger job shows its slowest, median and fastest rank and the
outliers (own time further than `OUTLIER_SHARE` of the median from it, the farthest
first), and says how many ranks that look alike were folded: a 256-rank job stays
readable.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from traceanalyzer.render.units import duration, noun
from traceanalyzer.report import Report

#: A job of at most this many ranks shows every rank.
SHOW_ALL = 8
#: A rank whose own time is further than this share of the median from it is an outlier.
OUTLIER_SHARE = 0.05
#: At most this many outliers are shown besides the slowest, median and fastest rank.
MAX_OUTLIERS = 8

#: The table's columns: heading, and the rank's cell.
HEADINGS: tuple[str, ...] = (
    "rank",
    "own",
    "GPU work",
    "host wait",
    "between",
    "sync",
    "peer wait",
    "exposed",
    "slowest in",
)


@dataclass(frozen=True, slots=True)
class RankTable:
    """The ranks to show (each with a label where some were folded: slowest, median,
    fastest, outlier) and how many were folded."""

    rows: tuple[tuple[str, Mapping[str, Any]], ...]
    folded: int
    total: int


def rank_table(ranks: Sequence[Mapping[str, Any]]) -> RankTable | None:
    """The table of a job's ranks (`Report.ranks`), or None for fewer than two ranks with
    steady steps."""
    timed = [r for r in ranks if r.get("own_ns") is not None]
    if len(timed) < 2:
        return None
    by_own = sorted(timed, key=lambda r: (r["own_ns"], r["rank"]))
    slowest, fastest = by_own[-1], by_own[0]
    median = by_own[(len(by_own) - 1) // 2]
    label = {id(slowest): "slowest", id(median): "median", id(fastest): "fastest"}
    if len(timed) <= SHOW_ALL:
        chosen = sorted(timed, key=lambda r: r["rank"])
    else:
        mid = median["own_ns"]
        far = sorted(
            (
                r
                for r in timed
                if id(r) not in label and abs(r["own_ns"] - mid) > OUTLIER_SHARE * mid
            ),
            key=lambda r: (-abs(r["own_ns"] - mid), r["rank"]),
        )[:MAX_OUTLIERS]
        for r in far:
            label[id(r)] = "outlier"
        chosen = sorted((r for r in timed if id(r) in label), key=lambda r: r["rank"])
    folded = len(timed) - len(chosen)
    return RankTable(
        rows=tuple((label.get(id(r), "") if folded else "", r) for r in chosen),
        folded=folded,
        total=len(timed),
    )


def _ns(value: Any) -> str:
    return "n/a" if value is None else duration(value)


def cells(row: Mapping[str, Any]) -> list[str]:
    """The cells of one rank, in HEADINGS' order."""
    return [
        str(row["rank"]),
        _ns(row.get("own_ns")),
        _ns(row.get("gpu_work_ns")),
        _ns(row.get("host_wait_ns")),
        _ns(row.get("host_between_steps_ns")),
        _ns(row.get("sync_ns")),
        _ns(row.get("wait_ns")),
        _ns(row.get("exposed_wait_ns")),
        f"{row.get('slowest_steps') or 0}/{row.get('steps') or 0}",
    ]


def folded_note(table: RankTable) -> str | None:
    """The line saying what was folded, where something was."""
    if not table.folded:
        return None
    return (
        f"{table.folded} of {table.total} ranks that look like the median rank are folded "
        f"(own time within {OUTLIER_SHARE:.0%} of it); the JSON report lists every rank"
    )


def step_heading(report: Report) -> str:
    """`per steady step of 96.3 ms`: the job's one step time (the verdict's: the collectives
    couple the ranks, so every rank's step is the job's), where the report has one."""
    step = report.verdict["step_ns"] if report.verdict else None
    unit = noun(report.window["basis"])
    return f"per steady {unit} of {duration(step)}" if step else f"per steady {unit}"
