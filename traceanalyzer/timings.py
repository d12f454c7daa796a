"""Where a run's time goes: wall-clock stages, printed to stderr when asked.

Set `TRACEANALYZER_TIMINGS=1` and every command prints, on exit, one line per stage it went
through (read, each analysis stage, the critical path's halves, rules, report, output): its
start and end in seconds since the process started timing, so stages that overlap (the
critical path's solve runs on a thread) show it, and the process's peak resident memory when
the stage ended (so the stage that set the peak shows). The bench scripts read these lines;
nothing is recorded when the variable is unset.
"""

from __future__ import annotations

import os
import resource
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

ENABLED = bool(os.environ.get("TRACEANALYZER_TIMINGS"))
_origin = time.perf_counter()
_stages: list[tuple[str, float, float, int]] = []
_lock = threading.Lock()


@contextmanager
def stage(name: str) -> Iterator[None]:
    """Record the wall time of the block as stage `name` (when timings are enabled)."""
    if not ENABLED:
        yield
        return
    start = time.perf_counter()
    try:
        yield
    finally:
        end = time.perf_counter() - _origin
        peak = _peak_mb()
        with _lock:
            _stages.append((name, start - _origin, end, peak))


def _peak_mb() -> int:
    """The process's peak resident memory so far, MB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 // 10**6


def lines() -> list[str]:
    """`timing: <stage> <start> -> <end> (<seconds> s) peak <MB> MB`, in order of start."""
    with _lock:
        done = sorted(_stages, key=lambda s: s[1])
    return [f"timing: {n} {a:.3f} -> {b:.3f} ({b - a:.3f} s) peak {m} MB" for n, a, b, m in done]


def print_lines() -> None:
    """Print the recorded stages to stderr (nothing when timings are disabled)."""
    for line in lines():
        print(line, file=sys.stderr)
