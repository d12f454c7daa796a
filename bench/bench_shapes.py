"""Time `traceanalyzer report` on every trace shape of the corpus, against `orjson.loads`.

Usage::

    python bench/bench_shapes.py [--size-mb 200] [--repeat 1] [--shapes kineto,minified,...]
                                 [--utf16] [--no-check]

The shapes come from ``bench/make_shapes.py`` (real traces scaled up and rewritten in other
JSON layouts; made first when missing). For each, each run in a subprocess of its own (see
``bench_report.py``): a plain ``orjson.loads`` of the same bytes (UTF-16 decoded first), then
``python -m traceanalyzer report FILE --format json -o OUT``, process start to exit. Prints
the size, MB/s, peak RSS / file size and the report's wall and CPU (user + system) time as
multiples of orjson's (the machine's speed drifts up to 2x between minutes, and other jobs
share its 2 cores; the ratios, taken in the same run, drift less). Unless ``--no-check``,
every shape's report must equal, byte for byte, the report on the indented trace it was
rewritten from (the input's name aside).
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_report import GOAL_MB_PER_S, GOAL_RSS_RATIO, MB, REPO_ROOT, log
from make_shapes import BENCH_DIR, REWRITES, make

BASELINE_CODE = (
    "import codecs, orjson, sys; data = open(sys.argv[1], 'rb').read(); "
    "data = data.decode('utf-16').encode() if data[:2] in (codecs.BOM_UTF16_LE, "
    "codecs.BOM_UTF16_BE) else data.removeprefix(codecs.BOM_UTF8); orjson.loads(data)"
)


def _origin(shape: str) -> str:
    """The indented trace a shape was rewritten from (itself for the scaled originals)."""
    return REWRITES[shape][0] if shape in REWRITES else "kineto" if shape == "utf16" else shape


@dataclass
class Run:
    """One command's best wall and CPU seconds (user + system) and highest peak RSS."""

    wall_s: float = float("inf")
    cpu_s: float = float("inf")
    rss_mb: float = 0.0

    def add(self, cmd: list[str]) -> None:
        """Run `cmd` (stdout to /dev/null) in a process of its own and keep its measures."""
        with tempfile.TemporaryFile() as err:
            start = time.perf_counter()
            proc = subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=err)
            _, status, usage = os.wait4(proc.pid, 0)
            wall = time.perf_counter() - start
            if os.waitstatus_to_exitcode(status) != 0:
                err.seek(0)
                sys.stderr.write(err.read().decode(errors="replace")[-4000:])
                sys.exit(f"failed: {shlex.join(cmd)}")
        self.wall_s = min(self.wall_s, wall)
        self.cpu_s = min(self.cpu_s, usage.ru_utime + usage.ru_stime)
        self.rss_mb = max(self.rss_mb, usage.ru_maxrss * 1024 / MB)  # KiB on Linux


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=float, default=200, help="size of the scaled traces")
    parser.add_argument("--cache-dir", type=Path, default=BENCH_DIR / ".cache" / "shapes")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each; the best counts")
    parser.add_argument("--shapes", help="comma-separated shapes to run (default: all)")
    parser.add_argument("--utf16", action="store_true", help="also the UTF-16 copy")
    parser.add_argument("--no-check", action="store_true", help="do not compare the reports")
    args = parser.parse_args(argv)

    paths = make(args.cache_dir, args.size_mb, args.utf16)
    if args.shapes:
        wanted = args.shapes.split(",")
        paths = {k: v for k, v in paths.items() if k in wanted}
    rows = []
    reports: dict[str, bytes] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for shape, path in paths.items():
            size_mb = path.stat().st_size / MB
            out = Path(tmp) / f"{shape}.report.json"
            base = [sys.executable, "-c", BASELINE_CODE, str(path)]
            report = [sys.executable, "-m", "traceanalyzer", "report", str(path)]
            report += ["--format", "json", "-o", str(out)]
            base_run, report_run = Run(), Run()
            for i in range(args.repeat):
                log(f"{shape}: run {i + 1}/{args.repeat}")
                base_run.add(base)
                report_run.add(report)
            reports[shape] = out.read_bytes().replace(path.name.encode(), b"TRACE")
            rows.append((shape, size_mb, report_run, base_run))
    print(f"best of {args.repeat}; MB = 10^6 bytes; x orjson: the report's time / orjson.loads'")
    print(
        f"{'shape':16} {'size MB':>8} {'wall s':>7} {'MB/s':>7} {'RSS/size':>9} "
        f"{'x orjson':>9} {'cpu s':>6} {'cpu x orjson':>13} {'goal':>5} {'report':>7}"
    )
    missed = 0
    for shape, size_mb, run, base_run in rows:
        rate = size_mb / run.wall_s
        ok = rate >= GOAL_MB_PER_S and run.rss_mb / size_mb <= GOAL_RSS_RATIO
        origin = _origin(shape)
        same = "-" if args.no_check or origin not in reports else "same"
        if same == "same" and reports[shape] != reports[origin]:
            same, missed = "DIFFERS", missed + 1
        print(
            f"{shape:16} {size_mb:8.1f} {run.wall_s:7.2f} {rate:7.1f} "
            f"{run.rss_mb / size_mb:9.2f} {run.wall_s / base_run.wall_s:9.2f} "
            f"{run.cpu_s:6.2f} {run.cpu_s / base_run.cpu_s:13.2f} {'ok' if ok else 'MISS':>5} "
            f"{same:>7}"
        )
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
