"""Where the Chrome reader's threads spend a read: a timeline of every block.

Usage::

    python bench/bench_read_timeline.py TRACE [--repeat 3]

Reads TRACE with `read_file` (no analyses) and records, for each block, when the main thread
handed it out, when a worker started and finished it, and when the main thread kept it.
Prints the read's seconds, the mean and 90th-percentile time a worker spent on a block, how
many workers were busy over each tenth of the read, and when the first blocks ran: the
blocks read one at a time while the file's optional fields settle show as a start with one
worker busy. Set `TRACEANALYZER_READ_WORKERS` and `POLARS_MAX_THREADS` (or pin the process
with `taskset`) to compare. Made for the 16-core host (see `bench_scaling.py`); it wraps
the reader's internals, so it measures the reader as it is, with a few microseconds of
bookkeeping per block.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from traceanalyzer.readers import chrome_trace


def timeline(
    path: Path,
) -> tuple[float, dict[int, dict[str, float]], list[tuple[float, float]]]:
    """The read's seconds and, per block (by its offset), its times since the read began;
    the start and end of every block parsed again on the workers."""
    marks: dict[int, dict[str, float]] = {}
    again: list[tuple[float, float]] = []  # blocks parsed again on the workers: start, end
    read_block, submit, keep = (
        chrome_trace._read_block,
        chrome_trace.ThreadPoolExecutor.submit,
        chrome_trace._InOrder.keep,
    )

    def timed_read_block(task: Any, *args: Any) -> Any:
        start = time.perf_counter()
        block = read_block(task, *args)
        marks.setdefault(task.offset, {}).update(start=start, end=time.perf_counter())
        return block

    def timed_submit(pool: Any, fn: Any, task: Any, *args: Any) -> Any:
        if fn is not chrome_trace._read_block:  # a block parsed again (`_parsed_with`)
            return submit(pool, timed_again(fn), task, *args)
        marks.setdefault(task.offset, {})["submit"] = time.perf_counter()
        return submit(pool, fn, task, *args)

    def timed_again(fn: Any) -> Any:
        def run(*args: Any) -> Any:
            start = time.perf_counter()
            try:
                return fn(*args)
            finally:
                again.append((start, time.perf_counter()))

        return run

    def timed_keep(state: Any, block: Any) -> None:
        marks.setdefault(block.offset, {})["kept"] = time.perf_counter()
        keep(state, block)

    chrome_trace._read_block = timed_read_block  # type: ignore[assignment]
    chrome_trace.ThreadPoolExecutor.submit = timed_submit  # type: ignore[method-assign]
    chrome_trace._InOrder.keep = timed_keep  # type: ignore[method-assign]
    try:
        begin = time.perf_counter()
        chrome_trace.read_file(path)
        seconds = time.perf_counter() - begin
    finally:
        chrome_trace._read_block = read_block
        chrome_trace.ThreadPoolExecutor.submit = submit  # type: ignore[method-assign]
        chrome_trace._InOrder.keep = keep  # type: ignore[method-assign]
    blocks = {
        k: {name: t - begin for name, t in v.items()} for k, v in marks.items() if len(v) == 4
    }
    return seconds, blocks, [(a - begin, b - begin) for a, b in again]


def summary(
    seconds: float, marks: dict[int, dict[str, float]], again: list[tuple[float, float]]
) -> list[str]:
    rows = [marks[k] for k in sorted(marks)]
    start = np.array([r["start"] for r in rows])
    end = np.array([r["end"] for r in rows])
    took = (end - start) * 1e3
    at = np.linspace(0.0, seconds, 2000)
    busy = ((start[None, :] <= at[:, None]) & (end[None, :] > at[:, None])).sum(1)
    if again:  # a block parsed again keeps a worker busy too
        a, b = np.array(again).T
        busy += ((a[None, :] <= at[:, None]) & (b[None, :] > at[:, None])).sum(1)
    tenths = " ".join(f"{part.mean():.1f}" for part in np.array_split(busy, 10))
    first = " ".join(f"{r['start']:.2f}-{r['end']:.2f}" for r in rows[:6])
    return [
        f"read {seconds:.2f} s, {len(rows)} blocks, {len(again)} parsed again on the workers",
        f"worker per block: mean {took.mean():.1f} ms, p90 {np.percentile(took, 90):.1f} ms",
        f"workers busy per tenth of the read: {tenths}",
        f"first blocks (start-end s): {first}",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", type=Path)
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args(argv)
    for _ in range(args.repeat):
        print("\n".join(summary(*timeline(args.trace))), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
