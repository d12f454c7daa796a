"""Where the CPU of a report goes, per trace shape, against the CPU that 150 MB/s allows.

Usage::

    python bench/bench_read_stages.py [--size-mb 200] [--shapes kineto,stacks_minified,...]

For each shape of ``bench/make_shapes.py``: the reader's three stages run one after the
other in this process, each timed in process CPU seconds (polars' parse runs on its own
thread pool, which process CPU time counts): the splitter (numpy, Kineto's layout or the
structural one), polars' NDJSON parse and the normalisation to the timeline's schema. Then
``traceanalyzer report --format json`` in a process of its own: its user + system CPU
seconds, and those of ``traceanalyzer --version`` (interpreter start and imports).

The budget is the CPU that 150 MB/s end to end allows on this machine: ``2 x size / 150``
core-seconds on 2 cores, were every stage perfectly parallel. The parse alone is polars'
NDJSON reader (simd-json), the fastest JSON parser among the project's dependencies; what it
takes of the budget is the part no change to our own stages can win back.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_report import GOAL_MB_PER_S, MB, REPO_ROOT
from make_shapes import BENCH_DIR, make

from traceanalyzer.readers.chrome_fields import Fields, Parsed, parse_ndjson
from traceanalyzer.readers.chrome_normalise import normalise
from traceanalyzer.readers.json_scan import EventSplitter
from traceanalyzer.readers.json_stream import StructuralSplitter

BLOCK = 16 << 20


def stages(path: Path) -> dict[str, float]:
    """CPU seconds of split, parse and normalise over the file's events, run serially."""
    data = path.read_bytes().removeprefix(b"\xef\xbb\xbf")
    at = data.index(b"[", data.index(b'"traceEvents"')) + 1
    splitter: EventSplitter | StructuralSplitter = EventSplitter()
    parsed = Parsed(path=path, header={}, fields=Fields())
    spent = {"split": 0.0, "parse": 0.0, "normalise": 0.0}
    while at < len(data):
        buf = bytearray(data[at : at + BLOCK])
        t = time.process_time()
        cut = splitter.split_in_place(buf, len(buf))
        spent["split"] += time.process_time() - t
        if cut is None:
            if isinstance(splitter, EventSplitter) and splitter.separator is None:
                splitter = StructuralSplitter()
                continue
            break
        end, rest = cut
        t = time.process_time()
        raw = parse_ndjson(bytes(buf[:end]), parsed, splitter.exact)
        spent["parse"] += time.process_time() - t
        t = time.process_time()
        normalise(raw)
        spent["normalise"] += time.process_time() - t
        at += rest
    return spent


def process_cpu(cmd: list[str]) -> float:
    """User + system CPU seconds of `cmd` run in a process of its own."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, cwd=REPO_ROOT, stdout=subprocess.DEVNULL, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=float, default=200, help="size of the scaled traces")
    parser.add_argument("--cache-dir", type=Path, default=BENCH_DIR / ".cache" / "shapes")
    parser.add_argument("--shapes", help="comma-separated shapes (default: all but utf16)")
    args = parser.parse_args(argv)
    files = make(args.cache_dir, args.size_mb)
    wanted = args.shapes.split(",") if args.shapes else list(files)
    cores = os.cpu_count() or 1
    tool = [sys.executable, "-m", "traceanalyzer"]
    start_cpu = min(process_cpu([*tool, "--version"]) for _ in range(3))
    print(f"{cores} cores; interpreter start and imports: {start_cpu:.2f} CPU s")
    print(
        f"{'shape':<16}{'MB':>6}{'budget':>8}{'split':>7}{'parse':>7}{'norm':>7}"
        f"{'report':>8}{'parse/budget':>14}"
    )
    for shape in wanted:
        path = files[shape]
        size = path.stat().st_size / MB
        budget = cores * size / GOAL_MB_PER_S
        spent = stages(path)
        report = process_cpu([*tool, "report", str(path), "--format", "json", "-o", os.devnull])
        print(
            f"{shape:<16}{size:6.0f}{budget:8.2f}{spent['split']:7.2f}{spent['parse']:7.2f}"
            f"{spent['normalise']:7.2f}{report:8.2f}{spent['parse'] / budget:14.0%}"
        )
    print("(CPU seconds; budget = cores x size / 150 MB/s; report = user + system, whole run)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
