"""How much the analyses add to the read: seconds and peak RSS of each stage, in one process.

Usage: python bench/bench_analyses.py [TRACE ...] [--repeat N]

Default traces: the 200 MB benchmark trace (made by bench_report.py / make_big_trace.py) and
the shared H100 Nsight export. For each trace it prints the time to read it into the timeline,
the time of `analyze()` (every analysis), and the time to build and render the JSON report,
with the process's peak RSS after each stage. The read is the baseline the analyses are
measured against.
"""

from __future__ import annotations

import argparse
import io
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from traceanalyzer import __version__  # noqa: E402
from traceanalyzer.analyses import analyze  # noqa: E402
from traceanalyzer.readers import read  # noqa: E402
from traceanalyzer.render import RENDERERS  # noqa: E402
from traceanalyzer.report import build_report  # noqa: E402

DEFAULTS = [
    ROOT / "bench" / ".cache" / "big_200mb.json",
    ROOT.parent / "shared" / "traces" / "h100" / "nsys_train_bf16.sqlite",
]


def peak_rss_mb() -> float:
    """Peak RSS of this process so far, MB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure(path: Path, repeat: int) -> dict[str, float]:
    """Best-of-`repeat` seconds per stage, and the peak RSS after the last run."""
    best = {"read_s": 1e9, "analyze_s": 1e9, "report_s": 1e9}
    events = 0
    for _ in range(repeat):
        t0 = time.perf_counter()
        timeline = read(path)
        t1 = time.perf_counter()
        metrics = analyze(timeline)
        t2 = time.perf_counter()
        out = io.StringIO()
        RENDERERS["json"].render(build_report(timeline.meta, metrics, __version__), out)
        t3 = time.perf_counter()
        events = timeline.events.height
        best["read_s"] = min(best["read_s"], t1 - t0)
        best["analyze_s"] = min(best["analyze_s"], t2 - t1)
        best["report_s"] = min(best["report_s"], t3 - t2)
    return {**best, "events": float(events), "peak_rss_mb": peak_rss_mb()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", nargs="*", type=Path)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    traces = args.traces or [p for p in DEFAULTS if p.exists()]
    print(
        f"{'trace':<32} {'events':>9} {'read s':>8} {'analyze s':>10} {'report s':>9}"
        f" {'analyze/read':>13} {'peak RSS MB':>12}"
    )
    for path in traces:
        m = measure(path, args.repeat)
        print(
            f"{path.name[:32]:<32} {int(m['events']):>9} {m['read_s']:>8.2f}"
            f" {m['analyze_s']:>10.2f} {m['report_s']:>9.3f}"
            f" {m['analyze_s'] / m['read_s']:>12.0%} {m['peak_rss_mb']:>12.0f}"
        )


if __name__ == "__main__":
    main()
