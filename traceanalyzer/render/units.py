"""Human-readable units for text renderers (the only place ns become ms)."""

from __future__ import annotations

import re

#: A window basis -> the unit of its savings: a step, an iteration (no step markers, but
#: calls that repeat), or the whole window.
UNIT = {"steps": "step", "iterations": "iteration"}


def noun(basis: str) -> str:
    """What the window's periods are called in headings: "iteration" where they are its
    repeated calls (no step markers), else "step"."""
    return UNIT.get(basis, "step")


def per(basis: str) -> str:
    """The unit of a saving: "/step" where the window is made of steps, "/iteration" where
    its repeated calls are (no step markers), " over the window" where neither (its savings
    are the window's, not a step's)."""
    return f"/{UNIT[basis]}" if basis in UNIT else " over the window"


def saving_text(impact_ns: int, basis: str = "steps") -> str:
    """A finding's estimated saving per step (or over the window, `basis` "trace"), in
    words; none where the critical path shows none (a host-bound step gains nothing from
    faster GPU work, for one)."""
    if impact_ns <= 0:
        return "no saving on this trace's critical path"
    return f"fixing it saves ~{duration(impact_ns)}{per(basis)}"


def saving_range_text(impacts: list[int], basis: str = "steps") -> str:
    """The savings of a rule's findings across ranks: one value, or the range."""
    lo, hi = min(impacts), max(impacts)
    if hi <= 0:
        return "no saving on this trace's critical path"
    if lo == hi:
        return saving_text(hi, basis)
    return f"fixing it saves ~{duration(lo)} to {duration(hi)}{per(basis)}"


def saves_heading(basis: str) -> str:
    """The heading of a table's saving column."""
    return f"saves/{UNIT[basis]}" if basis in UNIT else "saves (window)"


def duration(ns: int | None) -> str:
    """Format integer ns as s, ms, µs or ns with three significant figures or so."""
    if ns is None:
        return "n/a"
    a = abs(ns)
    if a >= 1_000_000_000:
        return f"{ns / 1e9:.2f} s"
    if a >= 1_000_000:
        return f"{ns / 1e6:.2f} ms"
    if a >= 1_000:
        return f"{ns / 1e3:.1f} µs"
    return f"{ns} ns"


def percent(share: float | None) -> str:
    """Format a 0..1 share as a percentage."""
    return "n/a" if share is None else f"{share * 100:.1f} %"


def printable(text: str, width: int) -> str:
    """Drop control characters (a trace's names are untrusted) and cut to `width`."""
    clean = "".join(ch if ch.isprintable() else "?" for ch in text)
    return clean if len(clean) <= width else clean[: width - 1] + "…"


def sentences(message: str) -> str:
    """A finding's message in short sentences, for a person to read: where, then what and
    how much. The rules write one line of clauses (`rank 0 GPU 0: idle 57% of ...; 28.6 ms
    inside steps ...`); the scope before the first `: ` becomes a sentence of its own
    (`Rank 0, GPU 0.`), and so does each clause after a `; ` outside parentheses. The JSON
    keeps the line."""
    parts: list[str] = []
    depth = 0
    start = 0
    i = 0
    while i < len(message):
        ch = message[i]
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth = max(0, depth - 1)
        elif depth == 0 and (
            message.startswith("; ", i)
            or (message.startswith(": ", i) and not parts and _SCOPE.fullmatch(message[:i]))
        ):
            parts.append(message[start:i])
            start = i + 2
            i += 1
        i += 1
    parts.append(message[start:])
    out = []
    for n, part in enumerate(p.strip() for p in parts):
        if not part:
            continue
        if n == 0 and _SCOPE.fullmatch(part):
            part = _SCOPE.sub(lambda m: ", ".join(x for x in m.groups() if x), part)
        part = part[0].upper() + part[1:]
        out.append(part if part.endswith((".", "?", "!")) else part + ".")
    return " ".join(out)


#: A message's scope prefix: `rank 0`, `rank 0 GPU 1`, `ranks 0, 1`.
_SCOPE = re.compile(r"(ranks? [\d, ]+?)(?: (GPU \d+))?")
