"""Compare two `traceanalyzer report --format json` documents, field by field.

Prints every path where they differ (`/source/path`, `/ranks[0]/path` ... included) and
exits 0 when every difference is under a key named in --ignore (default: `path`, the
input's own path), else 1.

usage: python3 compare_reports.py A.json B.json [--ignore KEY ...]
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def diff(a: Any, b: Any, path: str, out: list[tuple[str, str]]) -> None:
    if type(a) is not type(b):
        out.append((path, f"{a!r:.120} != {b!r:.120}"))
    elif isinstance(a, dict):
        for k in sorted(set(a) | set(b)):
            if k not in a or k not in b:
                out.append((f"{path}/{k}", "only in " + ("B" if k not in a else "A")))
            else:
                diff(a[k], b[k], f"{path}/{k}", out)
    elif isinstance(a, list):
        if len(a) != len(b):
            out.append((path, f"length {len(a)} != {len(b)}"))
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            diff(x, y, f"{path}[{i}]", out)
    elif a != b:
        out.append((path, f"{a!r:.120} != {b!r:.120}"))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--ignore", nargs="*", default=["path"])
    args = ap.parse_args()
    with open(args.a) as fa, open(args.b) as fb:
        a, b = json.load(fa), json.load(fb)
    out: list[tuple[str, str]] = []
    diff(a, b, "", out)
    bad = 0
    for path, what in out:
        leaf = path.rsplit("/", 1)[-1].split("[", 1)[0]
        ignored = leaf in args.ignore
        bad += not ignored
        print(("ignored " if ignored else "DIFF    ") + path + ": " + what)
    print(f"{len(out)} differences, {bad} outside {args.ignore}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
