"""How `traceanalyzer report` scales with cores: seconds at 2, 4, 8 and 16 cores per trace
shape and size, peak RSS, and the ratio to ``orjson.loads`` of the same bytes on the same
cores, in the same run.

Usage (made for the GPU machine's 16-core host; runs anywhere)::

    python bench/bench_scaling.py --stacks-src REAL.json --sizes 144,725 [--threads 2,4,8,16]
        [--plain-src sample_traces/train_bf16_healthy.json.gz] [--gzip 725] [--minified 725]
        [--repeat 1] [--work DIR] [--timings] [--json OUT.json]

The traces are made first (reused when present) by ``make_big_trace.py``, which repeats the
steps of a real trace: ``stacks_<N>mb.json`` from ``--stacks-src`` (a torch.profiler trace
with shapes, Python stacks and memory recorded: ``record_scaling_trace.py`` records one),
``plain_<N>mb.json`` from ``--plain-src`` (shapes only), ``stacks_<N>mb.json.gz`` for the
sizes in ``--gzip`` (gzip level 6, Python's default), ``stacks_minified_<N>mb.json`` for
those in ``--minified`` (one line, ``json.dump``'s separators).

Each cell runs in a process of its own, pinned to the first T cores (``taskset``; the tool
sizes polars' pool from the affinity mask, as it does for a user, ``entry.polars_threads``,
and ``NUMBA_NUM_THREADS`` is set to T): ``python -m traceanalyzer report FILE --format json
-o OUT``, process start to exit, and the baseline ``orjson.loads`` of the file's bytes
(gunzipped first for a ``.gz``: the bytes the report parses; it runs on one thread, so it is
timed once per trace, on all the cores). Peak RSS is ``ru_maxrss`` of the report's process
and its children. Every report must be byte-identical across thread counts ("same"; a change
of any number is a bug). ``--timings`` prints the report's stages
(``TRACEANALYZER_TIMINGS=1``) at the highest thread count, and ``--root DIR`` runs the
report from DIR (a folder holding another version's ``traceanalyzer/`` package: the code
before a change, on the same machine in the same run). The fixed cost (``traceanalyzer
--version``: interpreter start, imports, exit; best of 3) is printed first. The sources are
byte-compiled first, as an installed package's are (`compile_sources`). MB are 10^6 bytes.
"""

from __future__ import annotations

import argparse
import compileall
import gzip
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
MB = 1_000_000

BASELINE = (
    "import gzip, orjson, sys; p = sys.argv[1]; data = open(p, 'rb').read(); "
    "data = gzip.decompress(data) if p.endswith('.gz') else data; orjson.loads(data)"
)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@dataclass
class Cell:
    """One trace at one thread count: the report's and the baseline's best seconds."""

    trace: str
    size_mb: float
    threads: int
    report_s: float
    orjson_s: float
    rss_mb: float
    same: str = "-"

    @property
    def ratio(self) -> float:
        return self.report_s / self.orjson_s


def measure(
    cmd: list[str], threads: int, env: dict[str, str], cwd: Path = REPO
) -> tuple[float, float, str]:
    """Wall seconds, peak RSS (MB) and stderr of `cmd` pinned to the first `threads` cores."""
    cores = sorted(os.sched_getaffinity(0))[:threads]
    pinned = ["taskset", "-c", ",".join(map(str, cores)), *cmd]
    full_env = {**os.environ, **env, "NUMBA_NUM_THREADS": str(threads)}
    full_env.pop("POLARS_MAX_THREADS", None)
    with tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(
            pinned, cwd=cwd, stdout=subprocess.DEVNULL, stderr=err, env=full_env
        )
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        err.seek(0)
        text = err.read().decode(errors="replace")
    if os.waitstatus_to_exitcode(status) != 0:
        sys.stderr.write(text[-4000:])
        sys.exit(f"failed: {' '.join(pinned)}")
    return wall, usage.ru_maxrss * 1024 / MB, text


def make_traces(args: argparse.Namespace) -> dict[str, Path]:
    """Every trace of the run, made once (name -> path)."""
    args.work.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    sources = {"stacks": args.stacks_src, "plain": args.plain_src}
    for size in args.sizes:
        for kind, src in sources.items():
            if src is None:
                continue
            path = args.work / f"{kind}_{size:g}mb.json"
            if not path.is_file():
                log(f"making {path}")
                tmp = path.with_suffix(".partial")
                cmd = [sys.executable, str(BENCH / "make_big_trace.py"), str(src), str(tmp)]
                subprocess.run([*cmd, "--size-mb", f"{size:g}"], check=True, stdout=sys.stderr)
                tmp.replace(path)
            paths[path.name] = path
    for size in args.gzip:
        src_path = args.work / f"stacks_{size:g}mb.json"
        path = src_path.with_name(src_path.name + ".gz")
        if not path.is_file():
            log(f"making {path}")
            tmp = path.with_suffix(".partial")
            with src_path.open("rb") as fin, gzip.open(tmp, "wb", compresslevel=6) as out:
                shutil.copyfileobj(fin, out, 16 << 20)
            tmp.replace(path)
        paths[path.name] = path
    for size in args.minified:
        sys.path.insert(0, str(BENCH))
        from make_shapes import REWRITES

        src_path = args.work / f"stacks_{size:g}mb.json"
        path = args.work / f"stacks_minified_{size:g}mb.json"
        if not path.is_file():
            log(f"making {path}")
            tmp = path.with_suffix(".partial")
            REWRITES["stacks_minified"][1](src_path, tmp)
            tmp.replace(path)
        paths[path.name] = path
    return paths


def _size_mb(path: Path) -> float:
    """The JSON's size (uncompressed, for a .gz: from its trailer, exact below 4 GB)."""
    if path.suffix == ".gz":
        with path.open("rb") as f:
            f.seek(-4, os.SEEK_END)
            return int.from_bytes(f.read(4), "little") / MB
    return path.stat().st_size / MB


def compile_sources(root: Path) -> None:
    """Byte-compile the package under test (`root`'s traceanalyzer/) and the pure-Python
    packages it imports, as `pip install` does: a source tree without `__pycache__` (a
    checkout, a carried copy, or any machine with PYTHONDONTWRITEBYTECODE set) would compile
    every module in every run, which is no cost of the tool (0.6 s of the 1.1 s `--version`
    on the 2-core machine). Folders that cannot be written are left as they are."""
    targets = [root / "traceanalyzer"]
    for name in ("polars", "click", "numpy", "networkx", "jinja2", "rich"):
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.submodule_search_locations:
            targets += [Path(p) for p in spec.submodule_search_locations]
    for target in targets:
        compileall.compile_dir(target, quiet=2, workers=0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stacks-src", type=Path, required=True)
    parser.add_argument(
        "--plain-src", type=Path, default=REPO / "sample_traces" / "train_bf16_healthy.json.gz"
    )
    parser.add_argument("--sizes", type=lambda s: [float(x) for x in s.split(",")], default=[144])
    parser.add_argument("--gzip", type=lambda s: [float(x) for x in s.split(",")], default=[])
    parser.add_argument("--minified", type=lambda s: [float(x) for x in s.split(",")], default=[])
    parser.add_argument(
        "--threads", type=lambda s: [int(x) for x in s.split(",")], default=[2, 4, 8, 16]
    )
    parser.add_argument("--only", help="comma-separated trace names to run (default: all)")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--work", type=Path, default=BENCH / ".cache" / "scaling")
    parser.add_argument(
        "--root",
        type=Path,
        default=REPO,
        help="run the report from here (a folder holding another version's traceanalyzer/)",
    )
    parser.add_argument("--timings", action="store_true")
    parser.add_argument("--json", type=Path, help="write the cells here too")
    parser.add_argument("--keep-reports", type=Path, help="write each trace's report here")
    args = parser.parse_args(argv)
    args.threads = [t for t in args.threads if t <= len(os.sched_getaffinity(0))]

    compile_sources(args.root)
    fixed = min(
        measure(
            [sys.executable, "-m", "traceanalyzer", "--version"], max(args.threads), {}, args.root
        )[0]
        for _ in range(3)
    )
    log(f"fixed cost (--version): {fixed:.2f} s")
    paths = make_traces(args)
    if args.only:
        wanted = set(args.only.split(","))
        paths = {k: v for k, v in paths.items() if k in wanted}
    cells: list[Cell] = []
    stage_lines: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, path in paths.items():
            first: bytes | None = None
            # orjson runs on one thread whatever the cores: timed once per trace, on all of them
            base = [sys.executable, "-c", BASELINE, str(path)]
            best_b = min(measure(base, max(args.threads), {})[0] for _ in range(args.repeat))
            for threads in args.threads:
                out = Path(tmp) / "report.json"
                report = [sys.executable, "-m", "traceanalyzer", "report", str(path)]
                report += ["--format", "json", "-o", str(out)]
                best_r, rss = float("inf"), 0.0
                for _ in range(args.repeat):
                    timed = args.timings and threads == max(args.threads)
                    env = {"TRACEANALYZER_TIMINGS": "1"} if timed else {}
                    wall_r, rss_r, err = measure(report, threads, env, args.root)
                    best_r, rss = min(best_r, wall_r), max(rss, rss_r)
                    if timed:
                        stage_lines[name] = "\n".join(
                            ln for ln in err.splitlines() if ln.startswith("timing:")
                        )
                got = out.read_bytes()
                if first is None and args.keep_reports:
                    args.keep_reports.mkdir(parents=True, exist_ok=True)
                    (args.keep_reports / f"{name}.report.json").write_bytes(got)
                first = first if first is not None else got
                cell = Cell(name, _size_mb(path), threads, best_r, best_b, rss)
                cell.same = "same" if got == first else "DIFFERS"
                cells.append(cell)
                log(
                    f"{name} T={threads}: report {best_r:.2f} s, orjson {best_b:.2f} s, "
                    f"RSS {rss:.0f} MB, {cell.same}"
                )

    print(f"best of {args.repeat}; MB = 10^6 bytes of JSON; cores pinned with taskset")
    print(f"fixed cost (traceanalyzer --version, best of 3): {fixed:.2f} s")
    print(
        "| trace | MB | cores | report s | MB/s | x orjson | orjson s | peak RSS MB "
        "| RSS/size | speed-up | report |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for cell in cells:
        fewest = [c for c in cells if c.trace == cell.trace and c.threads == min(args.threads)]
        two = fewest[0] if fewest else cell
        print(
            f"| {cell.trace} | {cell.size_mb:.0f} | {cell.threads} | {cell.report_s:.2f} | "
            f"{cell.size_mb / cell.report_s:.0f} | {cell.ratio:.2f} | {cell.orjson_s:.2f} | "
            f"{cell.rss_mb:.0f} | {cell.rss_mb / cell.size_mb:.2f} | "
            f"{two.report_s / cell.report_s:.2f}x | {cell.same} |"
        )
    for name, text in stage_lines.items():
        print(f"\nstages of {name} at {max(args.threads)} cores:\n{text}")
    if args.json:
        args.json.write_text(json.dumps([asdict(c) for c in cells], indent=1))
    return 1 if any(c.same != "same" for c in cells) else 0


if __name__ == "__main__":
    sys.exit(main())
