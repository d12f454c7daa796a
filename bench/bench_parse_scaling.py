"""How each stage of a read worker scales with cores, alone: rewrite, parse, normalise.

Usage (made for the GPU machine's 16-core host; runs anywhere)::

    python bench/bench_parse_scaling.py TRACE [--blocks 28] [--configs 1:1:1,2:2:2,8:8:8,16:8:8]

TRACE is a Kineto Chrome trace in Kineto's own layout (``make_big_trace.py`` makes one). Its
first ``--blocks`` blocks of 4 MB (the reader's `BLOCK_BYTES`) are cut and rewritten to NDJSON
as the reader does (`json_scan.rewrite`), once, before anything is timed. Each configuration
``CORES:POOL:THREADS`` then runs in a process of its own, pinned to the first CORES cores
(``taskset``), with polars' pool of POOL threads (``POLARS_MAX_THREADS``) and THREADS Python
threads sharing the blocks out, as the reader's workers do, and times each stage of a
read worker's block on the same bytes:

- ``rewrite``: the block copied and rewritten to NDJSON in place (`WritableBytes`,
  `json_scan.rewrite`: numpy, a few dozen array operations, the interpreter's lock taken
  between them);
- ``parse``: polars' NDJSON parse alone (`chrome_fields.read_ndjson`, the reader's schema and
  the fields the file shows), the fastest JSON parser among the project's dependencies;
- ``block``: the parse with the checks for more fields (`parse_block`, the file's fields
  settled first, so that no block is parsed twice) and the normalisation (`normalise`).

Baseline, in the same process: ``orjson.loads`` of the same events (each block as a JSON
array), on one thread. Printed per configuration and stage: MB/s of JSON, CPU milliseconds
per MB (the process's user + system time: polars' own threads counted), peak RSS (the
process holds the blocks), and the wall time over orjson's. A stage whose MB/s stops
growing with the threads while the cores are there is held by the interpreter's lock; the
read cannot go faster than its slowest stage, and no faster than the stages' lock-held parts
added up. MB are 10^6 bytes.

On the H100 host (16 cores; 32 blocks of a 164 MB trace with Python stacks; 2 runs): the
rewrite 0.44-0.65 GB/s on one thread and 0.9-1.3 GB/s on 4 to 16 (held by the lock: the same
loop compiled without it, by numba, ran 7.9 GB/s on 16 threads); the parse 0.11-0.14 GB/s on
one thread, 0.8-1.1 GB/s on 16 cores; a whole block (parse, checks, normalisation)
0.07-0.11 GB/s on one thread, 0.49-0.69 GB/s on 16 cores. The report's read of the same
trace ran at 0.25-0.32 GB/s: each stage alone goes 2-4 times as fast as the read that runs
them together, on threads that share one lock.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

MB = 1_000_000


def blocks(
    path: Path, count: int
) -> tuple[list[bytes], list[bytes], list[tuple[bytearray, int, bytes]]]:
    """The first `count` blocks of whole events: rewritten to NDJSON as the reader does, as
    JSON arrays of the same events (orjson's input), and as the file holds them (with their
    length up to and with the separator after the last event, and the separator)."""
    from traceanalyzer.readers.chrome_trace import BLOCK_BYTES
    from traceanalyzer.readers.json_scan import SPACE, EventSplitter, WritableBytes, rewrite

    with path.open("rb") as f:  # only the blocks' bytes (and the header before them)
        head = f.read(1 << 20).removeprefix(b"\xef\xbb\xbf")
        data = bytearray(head + f.read((count + 1) * BLOCK_BYTES))
    at = data.index(b"[", data.index(b'"traceEvents"')) + 1
    splitter = EventSplitter()
    ndjson: list[bytes] = []
    arrays: list[bytes] = []
    raw: list[tuple[bytearray, int, bytes]] = []
    while len(ndjson) < count:
        window = data[at : at + BLOCK_BYTES]
        cut = splitter.cut(window, len(window))
        if cut is None:
            break
        end, rest = cut
        arrays.append(b"[" + bytes(window[:end]) + b"]")
        raw.append((window, rest + 1, splitter.separator or b""))
        block = WritableBytes(window, rest + 1)
        rewrite(block, rest + 1, splitter.separator or b"")
        block.view[end:] = SPACE
        ndjson.append(block.data)
        at += rest
    if not ndjson:
        sys.exit(f"{path}: no block of Kineto's layout found")
    return ndjson, arrays, raw


def child(args: argparse.Namespace) -> None:
    """One configuration, in this process: print its figures as a JSON line."""
    import orjson

    from traceanalyzer.readers.chrome_fields import Fields, parse_block, read_ndjson
    from traceanalyzer.readers.chrome_normalise import normalise
    from traceanalyzer.readers.json_scan import WritableBytes, rewrite

    ndjson, arrays, raw = blocks(args.trace, args.blocks)
    size = sum(map(len, arrays)) / MB
    fields = Fields()
    for block in ndjson:  # the fields the file shows, settled before anything is timed
        fields = parse_block(block, fields)[1]

    def parse(block: bytes) -> None:
        read_ndjson(block, fields.text_ids, fields.skipped(True), fields.text_times)

    def whole(block: bytes) -> None:
        normalise(parse_block(block, fields)[0])

    def rewritten(i: int) -> None:
        window, size, separator = raw[i]
        rewrite(WritableBytes(window, size), size, separator)

    def timed(work: object, threads: int, items: list[Any]) -> tuple[float, float]:
        def share(i: int) -> None:
            for block in items[i::threads]:
                work(block)  # type: ignore[operator]

        before = resource.getrusage(resource.RUSAGE_SELF)
        start = time.perf_counter()
        running = [threading.Thread(target=share, args=(i,)) for i in range(threads)]
        for thread in running:
            thread.start()
        for thread in running:
            thread.join()
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_SELF)
        cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
        return wall, cpu

    start = time.perf_counter()
    for array in arrays:
        orjson.loads(array)
    baseline = time.perf_counter() - start
    out = {"mb": size, "orjson_s": baseline}
    steps: list[tuple[str, Any, list[Any]]] = [
        ("rewrite", rewritten, list(range(len(raw)))),
        ("parse", parse, ndjson),
        ("block", whole, ndjson),
    ]
    for name, work, items in steps:
        work(items[0])  # warm: polars' pool and caches
        wall, cpu = timed(work, args.threads, items)
        out[f"{name}_s"], out[f"{name}_cpu_s"] = wall, cpu
    out["rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / MB
    print(json.dumps(out))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", type=Path)
    parser.add_argument("--blocks", type=int, default=28)
    parser.add_argument(
        "--configs", default="1:1:1,2:2:2,4:4:2,8:8:4,8:8:8,16:8:8,16:16:8,16:16:16"
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args)
        return 0
    usable = sorted(os.sched_getaffinity(0))
    print(f"{args.trace.name}: first {args.blocks} blocks; MB = 10^6 bytes of JSON")
    print("| cores | pool | threads | what | MB/s | CPU ms/MB | peak RSS MB | x orjson |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for config in args.configs.split(","):
        cores, pool, threads = (int(x) for x in config.split(":"))
        if cores > len(usable):
            continue
        pinned = ["taskset", "-c", ",".join(map(str, usable[:cores]))]
        cmd = [*pinned, sys.executable, __file__, str(args.trace), "--child"]
        cmd += ["--blocks", str(args.blocks), "--threads", str(threads)]
        env = {**os.environ, "POLARS_MAX_THREADS": str(pool)}
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
        row = json.loads(done.stdout.strip().splitlines()[-1])
        for what in ("rewrite", "parse", "block"):
            wall, cpu = row[f"{what}_s"], row[f"{what}_cpu_s"]
            print(
                f"| {cores} | {pool} | {threads} | {what} | {row['mb'] / wall:.0f} | "
                f"{cpu / row['mb'] * 1000:.1f} | {row['rss_mb']:.0f} | "
                f"{wall / row['orjson_s']:.2f} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
