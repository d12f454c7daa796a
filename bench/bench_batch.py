"""Batch throughput: runs per second with 1 and 2 workers, and a rerun with nothing changed.

Usage: python bench/bench_batch.py [--runs 200]

Makes `--runs` runs from the sample traces (each a copy made distinct by trailing whitespace,
so the content-hash cache cannot serve one run for another), then times
`traceanalyzer.batch.run_batch` with 1 worker and with 2 workers (fresh output folders), and
a third time on the 2-worker folder where every run is cached.
"""

from __future__ import annotations

import argparse
import gzip
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from traceanalyzer.batch import run_batch  # noqa: E402

SAMPLES = [
    ROOT / "sample_traces" / "train_bf16_healthy.json.gz",
    ROOT / "sample_traces" / "tiny_kernels.json.gz",
]


def make_runs(folder: Path, n: int) -> None:
    """`n` distinct runs: the samples decompressed, each with its own trailing whitespace."""
    texts = [gzip.decompress(p.read_bytes()) for p in SAMPLES]
    for i in range(n):
        data = texts[i % len(texts)] + b" " * (i + 1)
        (folder / f"run{i:04d}.json").write_bytes(data)


def timed(args: list[str], out: Path, jobs: int) -> tuple[float, int]:
    """Seconds for one batch, and how many runs failed."""
    t0 = time.perf_counter()
    summary = run_batch(args, out, jobs=jobs)
    return time.perf_counter() - t0, int(summary["error"].is_not_null().sum())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "runs"
        src.mkdir()
        make_runs(src, args.runs)
        size = sum(p.stat().st_size for p in src.iterdir()) / 1e6
        one, failed1 = timed([str(src)], Path(tmp) / "out1", 1)
        two, failed2 = timed([str(src)], Path(tmp) / "out2", 2)
        again, _ = timed([str(src)], Path(tmp) / "out2", 2)
        shutil.rmtree(src)
    print(f"{args.runs} runs ({size:.0f} MB of JSON), failures {failed1}/{failed2}")
    print(f"  1 worker : {one:7.2f} s  {args.runs / one:6.1f} runs/s")
    print(f"  2 workers: {two:7.2f} s  {args.runs / two:6.1f} runs/s  speed-up {one / two:.2f}x")
    print(f"  rerun, nothing changed (2 workers): {again:.2f} s")


if __name__ == "__main__":
    main()
