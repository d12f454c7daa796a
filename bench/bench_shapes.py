"""Time `traceanalyzer report` on every trace shape of the corpus, against `orjson.loads`.

Usage::

    python bench/bench_shapes.py [--size-mb 200] [--repeat 1] [--shapes kineto,minified,...]
                                 [--utf16] [--no-check]

The shapes come from ``bench/make_shapes.py`` (real traces scaled up and rewritten in other
JSON layouts; made first when missing). For each, each run in a subprocess of its own (see
``bench_report.py``): a plain ``orjson.loads`` of the same bytes (UTF-16 decoded first), then
``python -m traceanalyzer report FILE --format json -o OUT``, process start to exit. Prints
the size, MB/s, peak RSS / file size and the report's time as a multiple of orjson's (the
machine's speed drifts up to 2x between minutes; the ratio, taken in the same run, drifts
less). Unless ``--no-check``, every shape's report must equal, byte for byte, the report on
the indented trace it was rewritten from (the input's name aside).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_report import GOAL_MB_PER_S, GOAL_RSS_RATIO, MB, log, run_measured
from make_shapes import BENCH_DIR, REWRITES, make

BASELINE_CODE = (
    "import codecs, orjson, sys; data = open(sys.argv[1], 'rb').read(); "
    "data = data.decode('utf-16').encode() if data[:2] in (codecs.BOM_UTF16_LE, "
    "codecs.BOM_UTF16_BE) else data.removeprefix(codecs.BOM_UTF8); orjson.loads(data)"
)


def _origin(shape: str) -> str:
    """The indented trace a shape was rewritten from (itself for the scaled originals)."""
    return REWRITES[shape][0] if shape in REWRITES else "kineto" if shape == "utf16" else shape


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
            best = {"orjson": float("inf"), "report": float("inf")}
            rss = 0.0
            for i in range(args.repeat):
                log(f"{shape}: run {i + 1}/{args.repeat}")
                best["orjson"] = min(best["orjson"], run_measured(base)[0])
                seconds, rss_mb = run_measured(report)
                best["report"] = min(best["report"], seconds)
                rss = max(rss, rss_mb)
            reports[shape] = out.read_bytes().replace(path.name.encode(), b"TRACE")
            rows.append((shape, size_mb, best["report"], rss, best["orjson"]))
    print(f"best of {args.repeat}; MB = 10^6 bytes")
    print(
        f"{'shape':16} {'size MB':>8} {'seconds':>8} {'MB/s':>7} {'RSS/size':>9} "
        f"{'x orjson':>9} {'goal':>5} {'report':>7}"
    )
    missed = 0
    for shape, size_mb, seconds, rss, base_s in rows:
        ok = size_mb / seconds >= GOAL_MB_PER_S and rss / size_mb <= GOAL_RSS_RATIO
        origin = _origin(shape)
        same = "-" if args.no_check or origin not in reports else "same"
        if same == "same" and reports[shape] != reports[origin]:
            same, missed = "DIFFERS", missed + 1
        print(
            f"{shape:16} {size_mb:8.1f} {seconds:8.2f} {size_mb / seconds:7.1f} "
            f"{rss / size_mb:9.2f} {seconds / base_s:9.2f} {'ok' if ok else 'MISS':>5} {same:>7}"
        )
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
