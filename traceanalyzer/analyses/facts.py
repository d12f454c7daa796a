"""The facts a run's context is read off (`context.decide`), per rank and mergeable: a
record of its own so that the metrics, which carry it, and the context, which reads it,
do not import each other."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RunFacts:
    """What the run context is read off, per rank and mergeable (`merge`): the distinct
    names of host events, Python frames and kernels, which kinds of record the trace holds,
    and kernel launches (all, and Inductor's)."""

    host: frozenset[str]
    frames: frozenset[str]
    kernels: frozenset[str]
    has: tuple[tuple[str, bool], ...]
    launches: int
    inductor_launches: int

    @staticmethod
    def merge(parts: list[RunFacts]) -> RunFacts:
        """The facts of a job, from each rank's."""
        if len(parts) == 1:
            return parts[0]
        keys = [k for k, _ in parts[0].has]
        return RunFacts(
            host=frozenset().union(*(p.host for p in parts)),
            frames=frozenset().union(*(p.frames for p in parts)),
            kernels=frozenset().union(*(p.kernels for p in parts)),
            has=tuple((k, any(dict(p.has)[k] for p in parts)) for k in keys),
            launches=sum(p.launches for p in parts),
            inductor_launches=sum(p.inductor_launches for p in parts),
        )
