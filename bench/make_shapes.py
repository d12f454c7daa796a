"""Make the trace-shape corpus: real traces scaled up, then rewritten in other JSON layouts.

Usage::

    python bench/make_shapes.py [--size-mb 200] [--cache-dir bench/.cache/shapes] [--utf16]

Two real torch.profiler traces of ``shared/traces`` (``$TRACEANALYZER_CORPUS``) are
scaled to about ``--size-mb`` MB by ``make_big_trace.py`` (their steps repeated with shifted
timestamps and ids), in Kineto's own indented layout:

* ``kineto.json``: the H100 bf16 training trace (``h100/train_bf16_healthy``,
  ``record_shapes``);
* ``stacks.json``: the H100 OWLv2 inference trace of TraceLens (``with_stack``: half of its
  events are ``python_function`` frames).

The same bytes are then rewritten, each layout a file of its own:

* ``minified.json``: ``json.dump`` with its default separators, one line (HTA's own files,
  and many exporters);
* ``crlf.json``: Kineto's layout with CRLF line ends;
* ``bom.json``: Kineto's layout after a UTF-8 byte-order mark;
* ``indent2.json``: ``json.dump(indent=2)`` (what other tools and ``jq .`` write);
* ``stacks_minified.json``: the stacks trace minified;
* ``utf16.json`` (with ``--utf16``): Kineto's layout as UTF-16 with a byte-order mark.

Files already made for the same size are reused. Prints the paths, one a line.
"""

from __future__ import annotations

import argparse
import codecs
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import orjson

MB = 1_000_000
BENCH_DIR = Path(__file__).resolve().parent
#: The shared corpus: $TRACEANALYZER_CORPUS, else ``shared/traces`` beside the repository.
TRACES = Path(os.environ.get("TRACEANALYZER_CORPUS", BENCH_DIR.parent.parent / "shared" / "traces"))
SOURCES = {
    "kineto": Path("h100") / "train_bf16_healthy.json.gz",
    "stacks": Path("public")
    / "tracelens"
    / "h100_owlv2_inference"
    / "google_owlv2-large-patch14-ensemble__1016001.json.gz",
}


def _minified(data: bytes) -> bytes:
    return json.dumps(orjson.loads(data)).encode()


def _indent2(data: bytes) -> bytes:
    return json.dumps(orjson.loads(data), indent=2).encode()


#: Layout -> (the scaled trace it rewrites, the rewrite).
REWRITES: dict[str, tuple[str, Callable[[bytes], bytes]]] = {
    "minified": ("kineto", _minified),
    "crlf": ("kineto", lambda data: data.replace(b"\n", b"\r\n")),
    "bom": ("kineto", lambda data: codecs.BOM_UTF8 + data),
    "indent2": ("kineto", _indent2),
    "stacks_minified": ("stacks", _minified),
}


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def make(cache_dir: Path, size_mb: float, utf16: bool = False) -> dict[str, Path]:
    """Make (or reuse) every shape of about `size_mb` MB under `cache_dir`; their paths."""
    folder = cache_dir / f"{size_mb:g}mb"
    folder.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    for name, src in SOURCES.items():
        path = folder / f"{name}.json"
        if not path.is_file():
            partial = path.with_suffix(".partial")
            cmd = [sys.executable, str(BENCH_DIR / "make_big_trace.py"), str(TRACES / src)]
            cmd.append(str(partial))
            _log(f"making {path}")
            subprocess.run([*cmd, "--size-mb", f"{size_mb:g}"], check=True, stdout=sys.stderr)
            partial.replace(path)
        paths[name] = path
    rewrites = dict(REWRITES)
    if utf16:
        rewrites["utf16"] = (
            "kineto",
            lambda data: codecs.BOM_UTF16_LE + data.decode().encode("utf-16-le"),
        )
    for name, (base, rewrite) in rewrites.items():
        path = folder / f"{name}.json"
        if not path.is_file():
            _log(f"making {path}")
            partial = path.with_suffix(".partial")
            partial.write_bytes(rewrite(paths[base].read_bytes()))
            partial.replace(path)
        paths[name] = path
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=float, default=200, help="size of the scaled traces")
    parser.add_argument("--cache-dir", type=Path, default=BENCH_DIR / ".cache" / "shapes")
    parser.add_argument("--utf16", action="store_true", help="also write a UTF-16 copy")
    args = parser.parse_args(argv)
    for path in make(args.cache_dir, args.size_mb, args.utf16).values():
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
