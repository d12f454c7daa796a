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
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

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


Event = Any


def _parts(data: bytes) -> tuple[dict[str, Any], Iterator[Event], dict[str, Any]]:
    """The header keys, the events (decoded one at a time) and the trailer keys of a trace
    in ``make_big_trace.py``'s layout, where ``},`` newline, 2 spaces, ``{`` only ever
    separates two events."""
    key = data.index(b'"traceEvents": [')
    header = orjson.loads(data[:key].rstrip(b" \n,") + b"}")
    first = data.index(b"{", key)
    end = data.rindex(b"}\n  ]") + 1
    trailer = orjson.loads(b"{" + data[end:].lstrip(b" \n]").lstrip(b",") or b"{}")

    def events() -> Iterator[Event]:
        pos = first
        while pos < end:
            cut = data.find(b"},\n  {", pos, end)
            stop = end if cut < 0 else cut + 1
            yield orjson.loads(data[pos:stop])
            pos = stop + 4

    return header, events(), trailer


def _rewrite(src: Path, dst: Path, indent: int | None) -> None:
    """Write ``src`` as ``json.dump(doc, dst, indent=indent)`` would, one event at a time."""
    header, events, trailer = _parts(src.read_bytes())
    pad = "" if indent is None else "\n" + " " * indent
    sep = ", " if indent is None else ","

    def item(k: str, v: Any) -> str:
        return pad + json.dumps(k) + ": " + json.dumps(v, indent=indent).replace("\n", pad)

    with dst.open("w") as out:
        out.write("{" + sep.join(item(k, v) for k, v in header.items()) + sep)
        out.write(pad + '"traceEvents": [')
        inner = pad + " " * (indent or 0)
        for i, ev in enumerate(events):
            text = json.dumps(ev, indent=indent)
            out.write((sep if i else "") + inner + text.replace("\n", inner))
        out.write(pad + "]")
        out.write("".join(sep + item(k, v) for k, v in trailer.items()))
        out.write(("\n" if indent is not None else "") + "}")


def _copy(src: Path, dst: Path, head: bytes = b"", crlf: bool = False, utf16: bool = False) -> None:
    """``src`` copied to ``dst`` in blocks: after `head`, CRLF line ends, or as UTF-16 LE."""
    text = codecs.getincrementaldecoder("utf-8")()  # a block may end inside a character
    with src.open("rb") as fin, dst.open("wb") as out:
        out.write(head)
        while block := fin.read(64 << 20):
            if crlf:
                block = block.replace(b"\n", b"\r\n")
            if utf16:
                block = text.decode(block).encode("utf-16-le")
            out.write(block)


#: Layout -> (the scaled trace it rewrites, the rewrite from that file to the layout's).
REWRITES: dict[str, tuple[str, Callable[[Path, Path], None]]] = {
    "minified": ("kineto", lambda src, dst: _rewrite(src, dst, None)),
    "crlf": ("kineto", lambda src, dst: _copy(src, dst, crlf=True)),
    "bom": ("kineto", lambda src, dst: _copy(src, dst, head=codecs.BOM_UTF8)),
    "indent2": ("kineto", lambda src, dst: _rewrite(src, dst, 2)),
    "stacks_minified": ("stacks", lambda src, dst: _rewrite(src, dst, None)),
}
#: Made only when asked for (twice the size of the trace it copies).
UTF16 = ("kineto", lambda src, dst: _copy(src, dst, head=codecs.BOM_UTF16_LE, utf16=True))


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
    rewrites = {**REWRITES, **({"utf16": UTF16} if utf16 else {})}
    for name, (base, rewrite) in rewrites.items():
        path = folder / f"{name}.json"
        if not path.is_file():
            _log(f"making {path}")
            partial = path.with_suffix(".partial")
            rewrite(paths[base], partial)
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
