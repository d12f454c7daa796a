"""Time `traceanalyzer report` on an Nsight Systems export with one million kernels.

Usage::

    python bench/bench_nsys.py [--source X.sqlite] [--kernels 1000000] [--out PATH]
                               [--repeat N] [--json] [--build-only]

It builds (or reuses) ``bench/.cache/nsys_<kernels>.sqlite`` from a real export (by default
``$TRACEANALYZER_CORPUS/h100/nsys_train_bf16.sqlite``, else ``/work/shared/traces/...``): every
table is copied, and the event tables (kernels, runtime calls, memcpys, memsets,
synchronisations, NVTX ranges) are repeated as many times as it takes to reach ``--kernels``
kernels, each copy shifted in time by the span of the source (so copies follow one another
and never overlap) and in correlation id by the largest id of the source (so launches still
pair with their kernels, and no id repeats within a process). The whole copy is one SQL
statement per table: nothing crosses into Python.

Then it runs ``python -m traceanalyzer report PATH --format json`` in a subprocess of its own
(stdout to /dev/null) and reads its wall time and peak RSS from ``os.wait4``'s rusage. The goal
for one million kernels: at most 10 s and 2 GB peak RSS. (rusage gives the largest RSS in the
process tree, not the sum: the reader's helper process, which prints the runtime table, peaks
at about 85 MB, and runs while the report process is still under 0.5 GB.)

Until ``readers/__init__.py`` registers the reader under ``"nsys"``, the command is run through
a small shim that registers it in the child process first (``--shim`` forces it).
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
GOAL_SECONDS = 10.0
GOAL_RSS_MB = 2000.0
MB = 1_000_000

#: The tables that are repeated, and the columns shifted in each copy.
EVENT_TABLES = (
    "CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_RUNTIME",
    "CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET",
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
    "NVTX_EVENTS",
)

SHIM = (
    "import sys, runpy; import traceanalyzer.readers as r; "
    "from traceanalyzer.readers.nsys_sqlite import NsysSqliteReader; "
    "r.READERS.setdefault('nsys', NsysSqliteReader()); "
    "r.READERS.update({k: r.READERS.pop(k) for k in [k for k in r.READERS if k != 'nsys']}); "
    "sys.argv = ['traceanalyzer', *sys.argv[1:]]; "
    "runpy.run_module('traceanalyzer', run_name='__main__')"
)


def default_source() -> Path:
    """The real export the big one is made from."""
    corpus = os.environ.get("TRACEANALYZER_CORPUS", "/work/shared/traces")
    return Path(corpus) / "h100" / "nsys_train_bf16.sqlite"


def build(source: Path, out: Path, kernels: int) -> int:
    """Write an export with at least `kernels` kernels made of shifted copies of `source`.

    Returns the number of copies.
    """
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".partial")
    tmp.unlink(missing_ok=True)
    con = sqlite3.connect(f"file:{tmp}", uri=True)
    con.execute("PRAGMA journal_mode=OFF")
    con.execute("PRAGMA synchronous=OFF")
    con.execute("ATTACH DATABASE ? AS src", (f"file:{source}?mode=ro&immutable=1",))
    tables = con.execute(
        "SELECT name, sql FROM src.sqlite_master WHERE type='table' AND sql IS NOT NULL"
    ).fetchall()
    present = {name for name, _sql in tables}
    n_kernels = con.execute("SELECT count(*) FROM src.CUPTI_ACTIVITY_KIND_KERNEL").fetchone()[0]
    if not n_kernels:
        raise SystemExit(f"{source}: no kernels to repeat")
    copies = -(-kernels // int(n_kernels))
    spans = [
        con.execute(f"SELECT min(start), max(coalesce(end, start)) FROM src.{t}").fetchone()
        for t in EVENT_TABLES
        if t in present
    ]
    lo = min(s for s, _e in spans if s is not None)
    hi = max(e for _s, e in spans if e is not None)
    span = hi - lo + 1_000_000  # 1 ms between copies
    corr_step = 1 + max(
        con.execute(f"SELECT coalesce(max(correlationId), 0) FROM src.{t}").fetchone()[0]
        for t in EVENT_TABLES
        if t in present and t != "NVTX_EVENTS"
    )
    for name, sql in tables:
        con.execute(sql)
        if name not in EVENT_TABLES:
            con.execute(f"INSERT INTO main.{name} SELECT * FROM src.{name}")
            continue
        cols = [r[1] for r in con.execute(f"PRAGMA src.table_info('{name}')")]
        shifted = []
        for c in cols:
            if c in ("start", "end"):
                shifted.append(f"{c} + r.i * {span}")
            elif c == "correlationId":
                shifted.append(f"{c} + r.i * {corr_step}")
            else:
                shifted.append(c)
        con.execute(
            "WITH RECURSIVE r(i) AS "
            f"(SELECT 0 UNION ALL SELECT i + 1 FROM r WHERE i < {copies - 1}) "
            f"INSERT INTO main.{name} ({', '.join(cols)}) "
            f"SELECT {', '.join(shifted)} FROM r, src.{name} ORDER BY r.i, src.{name}.rowid"
        )
    con.commit()
    con.execute("DETACH DATABASE src")
    con.close()
    tmp.replace(out)
    return copies


def run_measured(cmd: list[str]) -> tuple[float, float]:
    """Run `cmd` (stdout to /dev/null); its wall seconds and peak RSS in MB."""
    with tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - start
        code = os.waitstatus_to_exitcode(status)
        if code != 0:
            err.seek(0)
            raise SystemExit(f"{' '.join(cmd)} exited {code}:\n{err.read().decode()}")
    return seconds, usage.ru_maxrss * 1024 / MB  # ru_maxrss is in KiB on Linux


def registered() -> bool:
    """Whether `readers/__init__.py` already registers the Nsight reader."""
    code = "import sys, traceanalyzer.readers as r; sys.exit(0 if 'nsys' in r.READERS else 1)"
    return subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT).returncode == 0


def main() -> None:
    """Build the export if needed, time the report on it, and check the goal."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--source", type=Path, default=default_source())
    ap.add_argument("--kernels", type=int, default=1_000_000)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    ap.add_argument("--build-only", action="store_true")
    ap.add_argument("--shim", action="store_true", help="register the reader in the child")
    args = ap.parse_args()
    out = args.out or BENCH_DIR / ".cache" / f"nsys_{args.kernels}.sqlite"
    if not out.exists():
        t0 = time.perf_counter()
        copies = build(args.source, out, args.kernels)
        print(
            f"built {out} ({copies} copies of {args.source.name}, "
            f"{out.stat().st_size / MB:.0f} MB) in {time.perf_counter() - t0:.1f} s",
            file=sys.stderr,
        )
    if args.build_only:
        return
    if args.shim or not registered():
        cmd = [sys.executable, "-c", SHIM, "report", str(out), "--format", "json"]
    else:
        cmd = [sys.executable, "-m", "traceanalyzer", "report", str(out), "--format", "json"]
    runs = [run_measured(cmd) for _ in range(args.repeat)]
    seconds = min(s for s, _r in runs)
    rss = max(r for _s, r in runs)
    ok = seconds <= GOAL_SECONDS and rss <= GOAL_RSS_MB
    result = {
        "trace": str(out),
        "size_mb": round(out.stat().st_size / MB, 1),
        "seconds": round(seconds, 2),
        "times": [round(s, 2) for s, _r in runs],
        "peak_rss_mb": round(rss, 1),
        "goal": {"seconds": GOAL_SECONDS, "peak_rss_mb": GOAL_RSS_MB},
        "ok": ok,
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(
            f"{out.name}: {result['size_mb']} MB, {seconds:.2f} s, peak RSS {rss:.0f} MB "
            f"(goal <= {GOAL_SECONDS:.0f} s, <= {GOAL_RSS_MB:.0f} MB): "
            f"{'ok' if ok else 'MISSED'}"
        )
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
