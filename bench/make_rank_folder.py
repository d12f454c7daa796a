"""Make a job folder of many rank files by re-ranking real rank traces.

Usage::

    python bench/make_rank_folder.py OUT_DIR [--ranks 32] [--size-mb 100]
                                     [--cache-dir bench/.cache/ranks]

The two rank files of a real 2-rank job (HTA's ``sampled_2rank``, NCCL send/recv between
the ranks) are each scaled to about ``--size-mb`` MB by ``make_big_trace.py`` (their steps
repeated with shifted timestamps and ids, Kineto's indented layout). Rank ``k`` of the folder
is then a copy of source rank ``k % 2`` whose ``distributedInfo.rank`` says ``k``, written as
``rank{k}.json``: every rank issues the same collectives in the same order, as a real job's
ranks do. Files already there of the right size are kept. Prints the folder.
"""

from __future__ import annotations

import argparse
import gzip
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
TRACES = Path(os.environ.get("TRACEANALYZER_CORPUS", BENCH_DIR.parent.parent / "shared" / "traces"))
SOURCES = [Path("public") / "hta" / "sampled_2rank" / f"sampled_rank-{r}.json.gz" for r in (0, 1)]
MB = 1_000_000
_RANK = re.compile(rb'("distributedInfo"\s*:\s*\{[^}]*"rank"\s*:\s*)(\d+)')


def scaled(source: Path, size_mb: float, cache_dir: Path, copies: int | None = None) -> Path:
    """The source rank trace scaled to about `size_mb` MB, or to `copies` copies of its
    steps (made once, then reused); prints make_big_trace's line."""
    out = cache_dir / f"{source.name.split('.')[0]}_{int(size_mb)}mb.json"
    if not out.is_file() or abs(out.stat().st_size / MB - size_mb) > 0.2 * size_mb:
        cache_dir.mkdir(parents=True, exist_ok=True)
        how = ["--copies", str(copies)] if copies else ["--size-mb", str(size_mb)]
        subprocess.run(
            [sys.executable, str(BENCH_DIR / "make_big_trace.py"), str(source), str(out), *how],
            check=True,
        )
    return out


def markers(path: Path) -> int:
    """How many ProfilerStep events a trace (plain or gzip) holds."""
    with gzip.open(path, "rb") if path.suffix == ".gz" else path.open("rb") as f:
        return sum(chunk.count(b'"ProfilerStep#') for chunk in iter(lambda: f.read(1 << 24), b""))


def re_ranked(src: Path, dst: Path, rank: int) -> None:
    """Copy `src` to `dst` with its header's distributedInfo.rank set to `rank`."""
    with src.open("rb") as f, dst.open("wb") as out:
        head = f.read(1 << 16)
        new_head, n = _RANK.subn(lambda m: m.group(1) + str(rank).encode(), head, count=1)
        if n != 1:
            raise SystemExit(f"{src}: no distributedInfo.rank in the first 64 KiB")
        out.write(new_head)
        shutil.copyfileobj(f, out, 1 << 22)


def make(out_dir: Path, ranks: int, size_mb: float, cache_dir: Path) -> Path:
    # the same number of steps on every rank, as in a real job: the second source takes as
    # many copies of its steps as the first needed to reach the size
    first = scaled(TRACES / SOURCES[0], size_mb, cache_dir)
    copies = markers(first) // markers(TRACES / SOURCES[0])
    bases = [first, scaled(TRACES / SOURCES[1], size_mb, cache_dir, copies)]
    out_dir.mkdir(parents=True, exist_ok=True)
    for k in range(ranks):
        base = bases[k % len(bases)]
        dst = out_dir / f"rank{k}.json"
        if dst.is_file() and dst.stat().st_size == base.stat().st_size:
            continue
        re_ranked(base, dst, k)
    return out_dir


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--ranks", type=int, default=32)
    ap.add_argument("--size-mb", type=float, default=100)
    ap.add_argument("--cache-dir", type=Path, default=BENCH_DIR / ".cache" / "ranks")
    args = ap.parse_args(argv)
    print(make(args.out_dir, args.ranks, args.size_mb, args.cache_dir))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
