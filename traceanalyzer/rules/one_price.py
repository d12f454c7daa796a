"""One interval, one price; one cause, one finding: the pass after the rules (and after the
causes have claimed the walls' time, `causes.cause_first`) that folds findings which price
the same time into one.

- **One cause on several ranks** is one finding: a rule's priced findings on two ranks or
  more (one each) become the finding of the rank where it costs most, with the others in
  `evidence.per_rank` and every rank in `evidence.ranks`. Its price is that rank's: every
  rank of a synchronous job waits for the slowest in its collectives, so the job saves what
  its worst rank saves, not the sum. Its scope names no rank where every rank of the job has
  it.
- **One interval, one price**: findings of different rules that price the same stall fold
  into the one that is surer and larger (severity, then price), the other kept as its
  evidence (`evidence.same_interval`), its time never added:
  - a straggler's stall on its own rank (TA001 for its host, TA002 for its syncs) and the
    others' wait for it (TA008, slow for that cause);
  - a copy to or from pageable memory (TA009) and the sync that is that copy's own wait
    (TA002 whose every call site is a copy operator on the same rank).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

from traceanalyzer.rules.base import Context, Finding, Scope

#: A slow rank's cause (TA008's `evidence.cause`) -> the rules that price the same stall on
#: that rank.
SAME_STALL = {"host": ("TA001",), "sync": ("TA002",)}

#: The operators whose syncs are a copy's own wait (`.to()`, `.cpu()`, `copy_`).
COPY_OPS = frozenset({"aten::to", "aten::_to_copy", "aten::copy_", "aten::cpu"})


def one_price(ctx: Context, findings: Iterable[Finding]) -> list[Finding]:
    """The findings with one finding per cause across ranks and one price per interval (see
    the module docstring); the order is left to the caller."""
    merged = _across_ranks(ctx, list(findings))
    return _same_interval(merged)


def ranks_of(f: Finding) -> list[int]:
    """The ranks a finding is about: its `evidence.ranks`, else its scope's rank."""
    ranks = f.evidence.get("ranks")
    if ranks:
        return list(ranks)
    return [] if f.scope.rank is None else [f.scope.rank]


def _key(f: Finding) -> tuple[int, int]:
    return f.severity.rank, -1 if f.impact_ns is None else f.impact_ns


def _across_ranks(ctx: Context, found: list[Finding]) -> list[Finding]:
    groups: dict[tuple[str, str], list[Finding]] = {}
    for f in found:
        if f.impact_ns is not None and f.scope.rank is not None:
            groups.setdefault((f.rule, f.title), []).append(f)
    merged: dict[int, Finding] = {}
    dropped: set[int] = set()
    for members in groups.values():
        ranks = [f.scope.rank for f in members]
        if len(members) < 2 or len(set(ranks)) < len(ranks):
            continue  # one rank, or several findings of the rule on a rank: each its own
        lead = max(members, key=_key)
        merged[id(lead)] = _one_finding(ctx, lead, members)
        dropped.update(id(f) for f in members if f is not lead)
    return [merged.get(id(f), f) for f in found if id(f) not in dropped]


def _one_finding(ctx: Context, lead: Finding, members: Sequence[Finding]) -> Finding:
    ranks = sorted(f.scope.rank for f in members if f.scope.rank is not None)
    others = sorted((f for f in members if f is not lead), key=lambda f: f.scope.rank or 0)
    if len(others) <= 2:
        also = " and ".join(f"rank {f.scope.rank} ({_ms(f.impact_ns)})" for f in others)
    else:
        prices = sorted(f.impact_ns or 0 for f in others)
        also = f"{len(others)} other ranks ({_ms(prices[0])} to {_ms(prices[-1])})"
    everywhere = set(ranks) >= set(ctx.step_ns) and len(ctx.step_ns) > 1
    scope = Scope(window=lead.scope.window) if everywhere else lead.scope
    return dataclasses.replace(
        lead,
        scope=scope,
        severity=max((f.severity for f in members), key=lambda s: s.rank),
        message=f"{lead.message}; the same on {also}: priced once, by rank "
        f"{lead.scope.rank}, where it costs most",
        evidence={
            **lead.evidence,
            "ranks": ranks,
            "per_rank": [
                {
                    "rank": f.scope.rank,
                    "device": f.scope.device,
                    "severity": f.severity.value,
                    "impact_ns": f.impact_ns,
                    "message": f.message,
                }
                for f in sorted(members, key=lambda f: f.scope.rank or 0)
            ],
        },
    )


def _same_interval(found: list[Finding]) -> list[Finding]:
    pairs: list[tuple[Finding, Finding]] = []
    for f in found:
        if f.rule == "TA008" and f.impact_ns is not None:
            slow = f.evidence.get("slowest_rank")
            rules = SAME_STALL.get(f.evidence.get("cause") or "", ())
            pairs += [
                (f, g)
                for g in found
                if g.rule in rules and g.impact_ns is not None and slow in ranks_of(g)
            ]
        if f.rule == "TA009" and f.impact_ns is not None:
            pairs += [(f, g) for g in found if _copy_wait(g, f)]
    out = {id(f): f for f in found}
    folded: set[int] = set()
    for a, b in pairs:
        if id(a) in folded or id(b) in folded:
            continue  # each finding folds once
        lead, other = (a, b) if _key(a) >= _key(b) else (b, a)
        out[id(lead)] = _fold(out[id(lead)], other)
        folded.add(id(other))
    return [out[id(f)] for f in found if id(f) not in folded]


def _copy_wait(sync: Finding, copies: Finding) -> bool:
    """A TA002 on the copies' rank whose every call site is a copy operator."""
    sites: list[dict[str, Any]] = sync.evidence.get("sites") or []
    return (
        sync.rule == "TA002"
        and bool(sites)
        and all(s.get("op") in COPY_OPS for s in sites)
        and bool(set(ranks_of(sync)) & set(ranks_of(copies)))
    )


def _fold(lead: Finding, other: Finding) -> Finding:
    held = list(lead.evidence.get("same_interval", ()))
    held.append(
        {
            "rule": other.rule,
            "title": other.title,
            "ranks": ranks_of(other),
            "impact_ns": other.impact_ns,
            "message": other.message,
        }
    )
    return dataclasses.replace(
        lead,
        message=f"{lead.message}; the same time is {other.rule}'s ({_lower(other.title)}, "
        f"{_ms(other.impact_ns)}{_on(other)}): priced once, here",
        evidence={**lead.evidence, "same_interval": held},
    )


def _on(f: Finding) -> str:
    ranks = ranks_of(f)
    return f" on rank {ranks[0]}" if len(ranks) == 1 else ""


def _lower(title: str) -> str:
    """A title inside a sentence: its first word in lower case, unless an acronym (GPU)."""
    return title if title[1:2].isupper() else title[:1].lower() + title[1:]


def _ms(ns: int | None) -> str:
    return "unpriced" if ns is None else f"{ns / 1e6:.2f} ms"
