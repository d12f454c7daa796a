"""Make a large torch.profiler trace of real shape by repeating the steps of a real one.

Usage::

    python bench/make_big_trace.py [SRC] OUT --size-mb 1000 [--check]

SRC is a Kineto Chrome-trace JSON file (plain or gzip, told apart by its magic bytes); by
default the healthy bf16 training trace of ``shared/traces/h100``. The span from the start of
the first ``ProfilerStep#N`` to the end of the last one is one *period*: every event that
starts in it (metadata ``ph: "M"`` events excepted) is written again and again, copy ``k``
shifted by ``k * P`` in time, with its correlation ids, ``External id`` and flow ids shifted by
``k * (max id + 1)`` and its ``ProfilerStep#N`` renamed ``ProfilerStep#(N + k * nsteps)``.
``P`` is the period's length, stretched so that the GPU work a period leaves running past its
last step never overlaps the next copy, plus the median gap between two steps.

Events outside the period are written once, after the copies: those before it as they are,
those after it (the final synchronisation, "Record Window End") shifted by as many periods as
the copies, and the profiler's ``Trace`` span is stretched to cover every copy.

The output is streamed to disk in Kineto's pretty-printed layout (the source's header, one
indented block per event, then the trailer keys) and stops after the copy that brings it to
``--size-mb`` megabytes (10^6 bytes) of uncompressed JSON (or after ``--copies`` copies).
``--check`` loads the result back and checks its events, steps, timestamps and ids.
"""

from __future__ import annotations

import argparse
import gzip
import re
import statistics
import sys
from collections import Counter, defaultdict
from itertools import pairwise
from pathlib import Path
from typing import Any

import orjson

MB = 1_000_000
REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SRC = REPO_ROOT.parent / "shared" / "traces" / "h100" / "train_bf16_healthy.json.gz"

STEP_RE = re.compile(r"ProfilerStep#(\d+)")
ARG_IDS = ("correlation", "External id")  # ids in "args" that tie events together

Event = dict[str, Any]


def read_json_bytes(path: Path) -> bytes:
    """The file's bytes, gunzipped when they start with the gzip magic bytes."""
    raw = path.read_bytes()
    return gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw


def step_number(ev: Event) -> int | None:
    """N for a ``ProfilerStep#N`` event, else None."""
    match = STEP_RE.fullmatch(str(ev.get("name", "")))
    return int(match.group(1)) if match else None


def to_ns(us: float) -> int:
    """A time in µs as whole nanoseconds, so that shifting it stays exact.

    Goes through the 3-decimal text: ``round(us * 1000)`` is off by one now and then, since
    a ts of 4.5e12 µs leaves a double too few bits for the product.
    """
    return int(f"{us:.3f}".replace(".", ""))


def fmt_ns(ns: int) -> str:
    """Nanoseconds written as µs with 3 decimals, e.g. ``4476047788645.790``."""
    sign = "-" if ns < 0 else ""
    whole, frac = divmod(abs(ns), 1000)
    return f"{sign}{whole}.{frac:03d}"


def dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


def render(ev: Event) -> str:
    """One event (ts in ns) as Kineto writes it: an indented block, ts and dur in µs with
    3 decimals, its args on lines of their own."""
    fields = []
    for key, value in ev.items():
        if key == "args":
            continue
        if key == "ts" and isinstance(value, int):
            text = fmt_ns(value)
        elif key == "dur" and isinstance(value, int | float):
            text = f"{value:.3f}"
        else:
            text = dumps(value)
        fields.append(f"{dumps(key)}: {text}")
    out = "  {\n    " + ", ".join(fields)
    args = ev.get("args")
    if isinstance(args, dict) and args:
        body = ", ".join(f"{dumps(k)}: {dumps(v)}" for k, v in args.items())
        out += ',\n    "args": {\n      ' + body + "\n    }"
    elif args is not None:
        out += f',\n    "args": {dumps(args)}'
    return out + "\n  }"


def shifted(ev: Event, dt_ns: int, id_shift: int, step_shift: int) -> Event:
    """A copy of ``ev`` moved by ``dt_ns``, its ids shifted and its step renumbered."""
    out = dict(ev)
    out["ts"] = ev["ts"] + dt_ns
    if "id" in ev and ev.get("ph") in ("s", "t", "f") and isinstance(ev["id"], int):
        out["id"] = ev["id"] + id_shift
    args = ev.get("args")
    if isinstance(args, dict) and any(isinstance(args.get(k), int) for k in ARG_IDS):
        out["args"] = new_args = dict(args)
        for key in ARG_IDS:
            if isinstance(args.get(key), int):
                new_args[key] = args[key] + id_shift
    n = step_number(ev)
    if n is not None:
        out["name"] = f"ProfilerStep#{n + step_shift}"
    return out


def max_id(events: list[Event]) -> int:
    """The largest correlation, External id or flow id in the trace."""
    best = 0
    for ev in events:
        if isinstance(ev.get("id"), int):
            best = max(best, ev["id"])
        args = ev.get("args")
        if isinstance(args, dict):
            for key in ARG_IDS:
                if isinstance(args.get(key), int):
                    best = max(best, args[key])
    return best


class Source:
    """The source trace split into its header, its one period of steps and the rest."""

    def __init__(self, path: Path) -> None:
        raw = read_json_bytes(path)
        doc = orjson.loads(raw)
        events: list[Event] = doc["traceEvents"]

        # The header as the source has it, up to and including "traceEvents": [
        start = raw.find(b"[", raw.find(b'"traceEvents"')) + 1
        self.header = raw[:start] + b"\n"
        after = list(doc)[list(doc).index("traceEvents") + 1 :]
        self.trailer = "\n  ]" + "".join(f",\n  {dumps(k)}: {dumps(doc[k])}" for k in after)
        self.trailer += "\n}\n"

        steps = [ev for ev in events if step_number(ev) is not None and ev.get("ph") == "X"]
        if not steps:
            sys.exit(f"{path}: no ProfilerStep#N events to repeat")
        numbers = [n for ev in steps if (n := step_number(ev)) is not None]
        self.nsteps = max(numbers) - min(numbers) + 1
        cpu_steps = [ev for ev in steps if ev.get("cat") != "gpu_user_annotation"] or steps
        first = min(to_ns(ev["ts"]) for ev in cpu_steps)
        last = max(to_ns(ev["ts"]) + to_ns(ev.get("dur", 0.0)) for ev in cpu_steps)

        self.period: list[Event] = []  # events that start within the steps
        self.before: list[Event] = []  # written once, as they are
        self.after: list[Event] = []  # written once, after the last copy
        self.metadata: list[Event] = []  # ph "M" and the profiler's Trace span, written once
        for ev in events:
            if isinstance(ev.get("ts"), int | float):
                ev = {**ev, "ts": to_ns(ev["ts"])}  # from here on, ts is in whole ns
            if ev.get("ph") == "M" or ev.get("cat") == "Trace" or "ts" not in ev:
                self.metadata.append(ev)
            elif ev["ts"] < first:
                self.before.append(ev)
            elif ev["ts"] <= last:
                self.period.append(ev)
            else:
                self.after.append(ev)

        # A period runs to the end of its last event (the GPU lags the CPU), plus the median
        # gap between two CPU steps, so that copies follow each other without overlapping.
        end = max(ev["ts"] + to_ns(ev.get("dur", 0.0)) for ev in self.period)
        cpu_steps.sort(key=lambda ev: ev["ts"])
        gaps = [b["ts"] - a["ts"] - a["dur"] for a, b in pairwise(cpu_steps)]
        self.period_ns = end - first + max(0, to_ns(statistics.median(gaps or [0.0])))
        self.id_stride = max_id(events) + 1


def write_big_trace(
    src: Source, out_path: Path, size_mb: float, copies_wanted: int | None = None
) -> dict[str, int]:
    """Stream copies of the period to ``out_path`` until it holds ``size_mb`` MB (or
    ``copies_wanted`` copies, where given)."""
    target = size_mb * MB
    copies = 0
    count = 0
    with out_path.open("wb") as out:
        written = out.write(src.header)
        sep = ""
        while (
            copies < copies_wanted
            if copies_wanted
            else copies == 0 or written + len(src.trailer) < target
        ):
            k = copies
            for ev in src.period:
                ev = shifted(ev, k * src.period_ns, k * src.id_stride, k * src.nsteps)
                written += out.write((sep + render(ev)).encode())
                sep = ",\n"
                count += 1
            copies += 1

        last = copies - 1
        extra_ns = last * src.period_ns
        tail = list(src.before)
        tail += [shifted(ev, extra_ns, last * src.id_stride, 0) for ev in src.after]
        for ev in src.metadata:
            if ev.get("cat") == "Trace" and isinstance(ev.get("dur"), int | float):
                ev = {**ev, "dur": ev["dur"] + extra_ns / 1000}
            tail.append(ev)
        for ev in tail:
            out.write((sep + render(ev)).encode())
            sep = ",\n"
            count += 1
        out.write(src.trailer.encode())
    return {
        "events": count,
        "copies": copies,
        "steps": copies * src.nsteps,
        "bytes": out_path.stat().st_size,
    }


def check(src: Source, out_path: Path, stats: dict[str, int]) -> list[str]:
    """Load the output back and list what is wrong with it (nothing, we hope)."""
    problems = []
    doc = orjson.loads(out_path.read_bytes())
    events: list[Event] = doc["traceEvents"]
    copies, n = stats["copies"], len(src.period)
    expected = copies * n + len(src.before) + len(src.after) + len(src.metadata)
    if len(events) != expected or len(events) != stats["events"]:
        problems.append(f"{len(events)} events, expected {expected}")

    # Step names are unique per category, and their ts increase with N.
    by_cat: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for ev in events:
        if (num := step_number(ev)) is not None:
            by_cat[str(ev.get("cat"))].append((num, ev["ts"]))
    for cat, steps in by_cat.items():
        dup = [num for num, c in Counter(num for num, _ in steps).items() if c > 1]
        if dup:
            problems.append(f"{cat}: ProfilerStep numbers repeated: {dup[:5]}")
        steps.sort()
        if any(b[1] <= a[1] for a, b in pairwise(steps)):
            problems.append(f"{cat}: ProfilerStep ts do not increase with N")

    # Copy k is events[k*n : (k+1)*n]: each copy lies after the one before it.
    spans = [
        (min(ts), max(ts))
        for k in range(copies)
        if (ts := [ev["ts"] for ev in events[k * n : (k + 1) * n]])
    ]
    for k, (a, b) in enumerate(pairwise(spans), start=1):
        if not (b[0] > a[0] and b[0] >= a[1]):
            problems.append(f"copy {k} starts at {b[0]}, before copy {k - 1} ends at {a[1]}")
            break

    # Kernel correlation ids stay unique.
    corr = [ev["args"].get("correlation") for ev in events if ev.get("cat") == "kernel"]
    if len(set(corr)) != len(corr):
        problems.append("kernel correlation ids are not unique")
    if not doc.keys() >= {"traceEvents", "schemaVersion"}:
        problems.append(f"top-level keys: {list(doc)}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("src", nargs="?", type=Path, default=DEFAULT_SRC, help="source trace")
    parser.add_argument("out", type=Path, help="trace to write (.json)")
    parser.add_argument("--size-mb", type=float, default=1000, help="size to reach, 10^6 B")
    parser.add_argument("--copies", type=int, default=None, help="copies (instead of a size)")
    parser.add_argument("--check", action="store_true", help="load the output back, check it")
    args = parser.parse_args(argv)

    src = Source(args.src)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    stats = write_big_trace(src, args.out, args.size_mb, args.copies)
    print(
        f"{args.out}: {stats['events']} events, {stats['steps']} steps "
        f"({stats['copies']} copies of {src.nsteps}), {stats['bytes']} bytes "
        f"({stats['bytes'] / MB:.1f} MB)"
    )
    if args.check:
        problems = check(src, args.out, stats)
        for problem in problems:
            print(f"check: {problem}", file=sys.stderr)
        if problems:
            return 1
        print("check: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
