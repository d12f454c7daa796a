"""Time `traceanalyzer report` on a big trace, against a plain ``orjson.loads`` of it.

Usage::

    python bench/bench_report.py [--size-mb 1000] [--trace PATH] [--repeat N] [--json]
                                 [--cmd "python -c pass"]

Without ``--trace`` it makes (or reuses) ``bench/.cache/big_<size>mb.json`` with
``bench/make_big_trace.py``. Then it runs, each in a subprocess of its own so that the peak
RSS (``ru_maxrss`` from ``os.wait4``) is that process's alone:

* baseline: ``python -c "orjson.loads(open(path, 'rb').read())"``;
* ``python -m traceanalyzer report PATH --format json``, stdout to /dev/null (``--cmd``
  runs another command instead: ``{trace}`` in it is replaced by the path, else the path is
  appended).

It prints, for each, the file size, the best wall time of ``--repeat`` runs, MB/s
(uncompressed JSON size / seconds), the peak RSS (the highest of the runs) and its ratio to
the file size, then checks the goal for the report: at least 150 MB/s and a peak RSS of at
most twice the file size. MB are 10^6 bytes.

On Linux a child's ru_maxrss starts from its parent's RSS at the time of the spawn, so this
script keeps itself small: it makes the trace in a subprocess and never loads it.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

MB = 1_000_000
BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
MAKE_BIG_TRACE = BENCH_DIR / "make_big_trace.py"

GOAL_MB_PER_S = 150.0
GOAL_RSS_RATIO = 2.0

BASELINE_CODE = "import orjson, sys; orjson.loads(open(sys.argv[1], 'rb').read())"


@dataclass
class Result:
    """The measures of one command on the trace."""

    name: str
    cmd: list[str]
    size_mb: float
    seconds: float = float("inf")  # best of the runs
    times: list[float] = field(default_factory=list)
    peak_rss_mb: float = 0.0  # highest of the runs

    @property
    def mb_per_s(self) -> float:
        return self.size_mb / self.seconds

    @property
    def rss_ratio(self) -> float:
        return self.peak_rss_mb / self.size_mb


def run_measured(cmd: list[str]) -> tuple[float, float]:
    """Run ``cmd`` (stdout to /dev/null); its wall seconds and peak RSS in MB."""
    seconds, rss, _stages = run_staged(cmd, stages=False)
    return seconds, rss


def run_staged(cmd: list[str], stages: bool = True) -> tuple[float, float, list[str]]:
    """`run_measured`, with ``TRACEANALYZER_TIMINGS=1`` when ``stages``: also the
    ``timing:`` lines the command printed (where its time went, stage by stage)."""
    env = {**os.environ, "TRACEANALYZER_TIMINGS": "1"} if stages else None
    with tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=err, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            err.seek(0)
            sys.stderr.write(err.read().decode(errors="replace")[-4000:])
            sys.exit(f"exit status {proc.returncode}: {shlex.join(cmd)}")
        err.seek(0)
        lines = [
            line
            for line in err.read().decode(errors="replace").splitlines()
            if line.startswith("timing: ")
        ]
    return seconds, usage.ru_maxrss * 1024 / MB, lines  # ru_maxrss is in KiB on Linux


def right_size(path: Path, size_mb: float) -> bool:
    """Whether ``path`` is a big trace made for ``size_mb`` (it ends past it by < 1 copy)."""
    if not path.is_file():
        return False
    size = path.stat().st_size
    return size_mb * MB <= size <= (1.1 * size_mb + 10) * MB


def big_trace(size_mb: float, cache_dir: Path, src: Path | None) -> Path:
    """The cached big trace of ``size_mb`` MB, made first if missing or of the wrong size."""
    path = cache_dir / f"big_{size_mb:g}mb.json"
    if right_size(path, size_mb):
        log(f"reusing {path}")
        return path
    cache_dir.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".json.partial")
    cmd = [sys.executable, str(MAKE_BIG_TRACE), *([str(src)] if src else [])]
    cmd += [str(partial), "--size-mb", f"{size_mb:g}"]
    log(f"making {path}: {shlex.join(cmd)}")
    subprocess.run(cmd, check=True, stdout=sys.stderr)
    partial.replace(path)
    return path


def report_cmd(cmd: str | None, trace: Path) -> list[str]:
    """The command to measure: ``traceanalyzer report``, or ``--cmd`` with the trace path."""
    if cmd is None:
        return [sys.executable, "-m", "traceanalyzer", "report", str(trace), "--format", "json"]
    if "{trace}" in cmd:
        return shlex.split(cmd.replace("{trace}", shlex.quote(str(trace))))
    return [*shlex.split(cmd), str(trace)]


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=float, default=1000, help="size of the big trace")
    parser.add_argument("--trace", type=Path, help="measure this trace instead of a big one")
    parser.add_argument(
        "--src", type=Path, help="source of the big trace (delete the cached one to change it)"
    )
    parser.add_argument("--cache-dir", type=Path, default=BENCH_DIR / ".cache")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each; the best counts")
    parser.add_argument(
        "--cmd",
        help='command to measure instead of the report, e.g. "python -c pass"; '
        "{trace} in it is replaced by the path of the trace, else the path is appended",
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)

    trace = (
        args.trace.resolve() if args.trace else big_trace(args.size_mb, args.cache_dir, args.src)
    )
    size_mb = trace.stat().st_size / MB
    results = [
        Result("orjson.loads", [sys.executable, "-c", BASELINE_CODE, str(trace)], size_mb),
        Result(
            "traceanalyzer report" if args.cmd is None else args.cmd,
            report_cmd(args.cmd, trace),
            size_mb,
        ),
    ]
    for result in results:
        for i in range(args.repeat):
            log(f"run {i + 1}/{args.repeat}: {shlex.join(result.cmd)}")
            seconds, rss_mb = run_measured(result.cmd)
            result.times.append(seconds)
            result.seconds = min(result.seconds, seconds)
            result.peak_rss_mb = max(result.peak_rss_mb, rss_mb)

    report = results[1]
    speed_ok = report.mb_per_s >= GOAL_MB_PER_S
    rss_ok = report.rss_ratio <= GOAL_RSS_RATIO
    if args.json:
        out = {
            "trace": str(trace),
            "size_mb": round(size_mb, 3),
            "bench_process_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / MB,
            "results": [
                {
                    **asdict(r),
                    "mb_per_s": round(r.mb_per_s, 1),
                    "rss_ratio": round(r.rss_ratio, 3),
                }
                for r in results
            ],
            "goal": {
                "min_mb_per_s": GOAL_MB_PER_S,
                "max_rss_ratio": GOAL_RSS_RATIO,
                "speed_ok": speed_ok,
                "rss_ok": rss_ok,
                "met": speed_ok and rss_ok,
            },
        }
        print(json.dumps(out, indent=2))
        return 0

    print(f"trace: {trace} ({size_mb:.1f} MB), best of {args.repeat}")
    print(f"{'':24} {'size MB':>9} {'seconds':>8} {'MB/s':>8} {'peak RSS MB':>12} {'RSS/size':>9}")
    for r in results:
        print(
            f"{r.name[:24]:24} {r.size_mb:9.1f} {r.seconds:8.2f} {r.mb_per_s:8.1f} "
            f"{r.peak_rss_mb:12.1f} {r.rss_ratio:9.2f}"
        )
    verdict = {True: "ok", False: "MISSED"}
    print(
        f"goal for {report.name}: >= {GOAL_MB_PER_S:g} MB/s {verdict[speed_ok]}, "
        f"peak RSS <= {GOAL_RSS_RATIO:g}x file size {verdict[rss_ok]}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
