"""What the cause rules share: picking their impact models, and the cause-first pass that
turns a wall's time a cause explains into that cause's evidence.

A cause finding (TA014-TA017) names the work behind a wall and its fix; it carries
`evidence.explains` (the wall rules whose time it accounts for), `evidence.bound_by` (the wall,
in the verdict's words) and `evidence.cause_words` (the verdict's phrase). `cause_first`
takes each explained wall finding's impact down by the causes' impacts on its rank: the
critical path claims the time once. A wall whose remaining impact is under the policy's
floor is left out, and its message becomes the cause's evidence (`evidence.wall`); one whose
time the causes explain at least half of advises fixing them first instead of its own advice
(no "use torch.compile" against a recompile, an allocator call or a sync).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from traceanalyzer.analyses.causes.impact import CauseImpact
from traceanalyzer.rules.base import Context, Finding, severity_for

#: The causes' categories (a cause behind a wall: the verdict names it, `verdict.cause`).
CAUSE_CATEGORIES = (
    "recompilation",
    "allocator_churn",
    "anomaly_detection",
    "layout_conversion",
    "uneven_steps",
    "activation_recompute",
    "zero_grad_fill",
    "host_built_batch",
    "library_setup",
    "graph_breaks",
    "ddp_no_sync",
    "underfilled_launches",
)


def models(ctx: Context, cause: str) -> dict[int, CauseImpact]:
    """The cause's impact model on each rank: its device where removing it saves most."""
    best: dict[int, CauseImpact] = {}
    for m in ctx.metrics.cause_model:
        if m.cause != cause:
            continue
        held = best.get(m.rank)
        if held is None or (m.impact_ns or 0) > (held.impact_ns or 0):
            best[m.rank] = m
    return dict(sorted(best.items()))


def duration(ns: int) -> str:
    """A time in words: ms below a second, s above."""
    return f"{ns / 1e9:.1f} s" if ns >= 1_000_000_000 else f"{ns / 1e6:.1f} ms"


def cause_first(ctx: Context, findings: Iterable[Finding]) -> list[Finding]:
    """The findings with each wall's time that causes explain claimed by the causes (see the
    module docstring): a wall finding's impact less the causes' on its rank; a wall left
    under the floor is dropped and its message kept in the first cause's `evidence.wall`."""
    found = list(findings)
    causes = [f for f in found if f.category in CAUSE_CATEGORIES and f.impact_ns]
    if not causes:
        return found
    out: list[Finding] = []
    walls: dict[int, list[dict[str, Any]]] = {}
    for f in found:
        mine = [
            c
            for c in causes
            if f.rule in c.evidence.get("explains", ())
            and (c.scope.rank is None or f.scope.rank is None or c.scope.rank == f.scope.rank)
        ]
        if not mine or f.impact_ns is None:
            out.append(f)
            continue
        claimed = sum(c.impact_ns or 0 for c in mine)
        left = max(0, f.impact_ns - claimed)
        share = ctx.share_of_step(f.scope.rank, left)
        by = [{"rule": c.rule, "impact_ns": c.impact_ns} for c in mine]
        if share is not None and share < ctx.policy.min_share:
            walls.setdefault(id(mine[0]), []).append(
                {"rule": f.rule, "message": f.message, "impact_ns": f.impact_ns}
            )
            continue
        advice = f.advice
        if claimed * 2 >= f.impact_ns:
            # most of this wall is the causes': their fixes come first, and the wall's own
            # advice (torch.compile, CUDA graphs...) would be advice against the cause
            codes = ", ".join(c.rule for c in mine)
            advice = (
                f"Fix {codes} first: it explains {duration(min(claimed, f.impact_ns))} of the "
                f"{duration(f.impact_ns)} per step priced here; profile again to see what is left."
            )
        out.append(
            dataclasses.replace(
                f,
                advice=advice,
                impact_ns=left,
                severity=severity_for(share, f.severity, ctx.policy),
                evidence={
                    **f.evidence,
                    "impact_share_of_step": share,
                    "impact_before_causes_ns": f.impact_ns,
                    "explained_by": by,
                },
            )
        )
    return [
        dataclasses.replace(f, evidence={**f.evidence, "wall": walls[id(f)]})
        if id(f) in walls
        else f
        for f in out
    ]
