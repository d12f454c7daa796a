"""One entry per rule across ranks, for the text renderers (terminal, Markdown).

A job of 8 ranks gives one finding per rank per rule: 43 findings that say the same thing 8
times. The text renderers show a rule's findings as one entry that names the ranks and the
range of their savings, with the most impactful rank's message and advice; the JSON keeps
one finding per scope (the contract).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from traceanalyzer.rules.base import Finding, Severity


@dataclass(frozen=True, slots=True)
class FindingGroup:
    """The findings of one rule (and title) across scopes, in report order."""

    members: tuple[Finding, ...]

    @property
    def lead(self) -> Finding:
        """The member shown in full: the largest saving (the first on a tie, or with none)."""
        return max(self.members, key=lambda f: -1 if f.impact_ns is None else f.impact_ns)

    @property
    def severity(self) -> Severity:
        """The worst member's severity."""
        return max((f.severity for f in self.members), key=lambda s: s.rank)

    @property
    def ranks(self) -> list[int]:
        """The ranks the members are about: each one's scope, or the ranks a finding folded
        from several names (`evidence.ranks`); job-wide findings name none."""
        ranks = {f.scope.rank for f in self.members if f.scope.rank is not None}
        for f in self.members:
            ranks.update(f.evidence.get("ranks") or ())
        return sorted(ranks)

    @property
    def impacts(self) -> list[int]:
        """The members' savings per step, where they have one."""
        return sorted(f.impact_ns for f in self.members if f.impact_ns is not None)


def group_findings(findings: Sequence[Finding]) -> list[FindingGroup]:
    """Findings grouped by (rule, title), each group where its first member stood."""
    groups: dict[tuple[str, str], list[Finding]] = {}
    for f in findings:
        groups.setdefault((f.rule, f.title), []).append(f)
    return [FindingGroup(tuple(members)) for members in groups.values()]


def ranks_text(ranks: list[int]) -> str:
    """`[0, 1, 2, 3, 5, 7]` -> `ranks 0-3, 5, 7`; one rank -> `rank 5`."""
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    runs: list[str] = []
    start = prev = ranks[0]
    for r in [*ranks[1:], None]:
        if r is not None and r == prev + 1:
            prev = r
            continue
        if start == prev:
            runs.append(str(start))
        elif prev == start + 1:
            runs += [str(start), str(prev)]
        else:
            runs.append(f"{start}-{prev}")
        if r is not None:
            start = prev = r
    return "ranks " + ", ".join(runs)
