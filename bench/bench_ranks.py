"""Time `traceanalyzer report JOB/` on a folder of many rank files, against `orjson.loads`.

Usage::

    python bench/bench_ranks.py [--ranks 32] [--size-mb 100] [--folder DIR] [--jobs N]
                                [--repeat 1] [--no-baseline] [--check-ranks 4]
                                [--dask]

The folder comes from ``bench/make_rank_folder.py`` (real rank traces re-ranked; made first
when missing, under ``--folder``, default ``bench/.cache/ranks/job_<ranks>x<size>mb``). Then,
each in a subprocess of its own:

* baseline: one process that ``orjson.loads`` every rank file in turn (each dropped before the
  next), the plain parse of the same bytes;
* ``python -m traceanalyzer report DIR --format json -o OUT [--jobs N]``, process start to
  exit (``--dask``: with ``--dask-scheduler`` on a local scheduler and two workers, each of
  one thread, started by this script).

Peak memory is the highest sum of the resident sets of the command and every process under
it (its rank workers), sampled every 20 ms: the job's memory, not one process's. Prints the
folder's size, the seconds, aggregate MB/s, that peak and its ratio to one rank file, and the
time as a multiple of the baseline's; then the goals: at least 150 MB/s, at most 2 GB.

``--check-ranks K`` (default 4) also checks that the per-rank reduction changes nothing: the
report of the first K ranks in a folder of their own, reduced by 2 workers, must equal, byte
for byte, the report of the same timeline read whole and analysed in one process
(``traceanalyzer.api.run(api.load(DIR))``).
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_report import MB, REPO_ROOT, log
from make_rank_folder import BENCH_DIR, make

GOAL_MB_PER_S = 150.0
GOAL_PEAK_MB = 2000.0

BASELINE_CODE = (
    "import orjson, sys\n"
    "for path in sys.argv[1:]:\n"
    "    data = orjson.loads(open(path, 'rb').read())\n"
    "    del data\n"
)
PAGE = os.sysconf("SC_PAGE_SIZE")


def _tree_rss(root: int) -> int:
    """Bytes resident in `root` and every process under it."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                ppid = int(f.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, []))
        try:
            with open(f"/proc/{pid}/statm", "rb") as f:
                total += int(f.read().split()[1]) * PAGE
        except (OSError, IndexError, ValueError):
            pass
    return total


def run_tree(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, float, str]:
    """Run `cmd`; its wall seconds, the peak RSS of its process tree (MB) and its stderr."""
    peak = 0
    with tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=err, env=env)
        done = threading.Event()

        def sample() -> None:
            nonlocal peak
            while not done.is_set():
                peak = max(peak, _tree_rss(proc.pid))
                done.wait(0.02)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        code = proc.wait()
        seconds = time.perf_counter() - start
        done.set()
        sampler.join()
        err.seek(0)
        text = err.read().decode(errors="replace")
    if code != 0:
        sys.stderr.write(text[-4000:])
        sys.exit(f"exit status {code}: {shlex.join(cmd)}")
    return seconds, peak / MB, text


def check(folder: Path, ranks: int) -> bool:
    """The reduced report of the first `ranks` ranks equals the whole-timeline report."""
    files = sorted(folder.glob("rank*.json"), key=lambda p: int(p.stem.removeprefix("rank")))
    with tempfile.TemporaryDirectory(prefix="bench-ranks-") as tmp:
        sub = Path(tmp) / "job"
        sub.mkdir()
        for f in files[:ranks]:
            (sub / f.name).symlink_to(f)
        reduced, whole = Path(tmp) / "reduced.json", Path(tmp) / "whole.json"
        py = sys.executable
        cmd = [py, "-m", "traceanalyzer", "report", str(sub), "--format", "json", "--jobs", "2"]
        subprocess.run(
            [*cmd, "-o", str(reduced)],
            cwd=REPO_ROOT,
            check=True,
        )
        code = (
            "import sys; from traceanalyzer import api; "
            "api.write(api.run(api.load(sys.argv[1])).report, 'json', sys.argv[2])"
        )
        subprocess.run([py, "-c", code, str(sub), str(whole)], cwd=REPO_ROOT, check=True)
        same = reduced.read_bytes() == whole.read_bytes()
    log(f"check: {ranks} ranks reduced in 2 workers == read whole, one process: {same}")
    return same


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=32)
    ap.add_argument("--size-mb", type=float, default=100)
    ap.add_argument("--folder", type=Path, default=None)
    ap.add_argument("--jobs", type=int, default=None)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--no-baseline", action="store_true")
    ap.add_argument("--check-ranks", type=int, default=4)
    ap.add_argument("--dask", action="store_true", help="also run on a local dask cluster")
    args = ap.parse_args(argv)

    name = f"job_{args.ranks}x{int(args.size_mb)}mb"
    folder = args.folder or BENCH_DIR / ".cache" / "ranks" / name
    make(folder, args.ranks, args.size_mb, BENCH_DIR / ".cache" / "ranks")
    files = sorted(folder.glob("rank*.json"))
    size_mb = sum(f.stat().st_size for f in files) / MB
    largest = max(f.stat().st_size for f in files) / MB
    log(f"{folder}: {len(files)} rank files, {size_mb:.0f} MB (largest {largest:.1f} MB)")
    ok = True
    if args.check_ranks:
        ok &= check(folder, args.check_ranks)

    base_s = None
    if not args.no_baseline:
        base_s, base_rss, _ = run_tree([sys.executable, "-c", BASELINE_CODE, *map(str, files)])
        log(
            f"orjson.loads of every rank file in turn: {base_s:.2f} s "
            f"({size_mb / base_s:.0f} MB/s), peak {base_rss:.0f} MB"
        )
    runs: list[tuple[str, list[str], dict[str, str] | None]] = []
    with tempfile.TemporaryDirectory(prefix="bench-ranks-") as tmp:
        out = Path(tmp) / "report.json"
        cmd = [sys.executable, "-m", "traceanalyzer", "report", str(folder), "--format", "json"]
        cmd += ["-o", str(out)] + (["--jobs", str(args.jobs)] if args.jobs else [])
        env = {**os.environ, "TRACEANALYZER_TIMINGS": "1"}
        runs.append(("report", cmd, env))
        cluster = None
        if args.dask:
            cluster = _local_cluster()
            address = cluster.scheduler_address
            runs.append(("report --dask-scheduler", [*cmd, "--dask-scheduler", address], env))
        try:
            for name, command, environ in runs:
                best, peak, timings = float("inf"), 0.0, ""
                for _ in range(args.repeat):
                    seconds, rss, timings = run_tree(command, environ)
                    best, peak = min(best, seconds), max(peak, rss)
                for line in timings.splitlines():
                    if line.startswith("timing: ") and "ranks" in line:
                        log(f"  {line}")
                ratio = f", {best / base_s:.2f}x orjson.loads" if base_s else ""
                dask = "--dask-scheduler" in command
                extra = " (the dask workers' memory is not counted)" if dask else ""
                log(
                    f"{name}: {best:.2f} s, {size_mb / best:.0f} MB/s aggregate, peak "
                    f"{peak:.0f} MB{extra} ({peak / largest:.1f}x one rank file){ratio}"
                )
                if name == "report":
                    ok &= size_mb / best >= GOAL_MB_PER_S and peak <= GOAL_PEAK_MB
                    log(
                        f"goal: >= {GOAL_MB_PER_S:.0f} MB/s: {size_mb / best >= GOAL_MB_PER_S}; "
                        f"peak <= {GOAL_PEAK_MB:.0f} MB: {peak <= GOAL_PEAK_MB}"
                    )
        finally:
            if cluster is not None:
                cluster.close()
    return 0 if ok else 1


def _local_cluster():  # type: ignore[no-untyped-def]
    """A local dask.distributed cluster: a scheduler and two worker processes."""
    from dask.distributed import LocalCluster

    return LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)


if __name__ == "__main__":
    raise SystemExit(main())
