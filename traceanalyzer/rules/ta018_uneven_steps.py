"""TA018: the steady steps come in a fast and a slow kind."""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar

from traceanalyzer.rules.base import Context, Finding, Rule, Scope, Severity
from traceanalyzer.rules.causes import duration
from traceanalyzer.rules.examples import Event, cpu_op, launched, step


def _steps(slow_every: int, n: int) -> list[Event]:
    """`n` steps of 1 ms of GPU work; every `slow_every`-th step also logs (a 2 ms host range
    before its kernel)."""
    out: list[Event] = []
    t = 100.0
    for i in range(n):
        slow = slow_every and i % slow_every == slow_every - 1
        dur = 3100 if slow else 1100
        out.append(step(i + 1, t, dur))
        if slow:
            out.append(cpu_op(t + 10, 2000, "log_metrics"))
        start = t + (2020 if slow else 10)
        out += launched(start, start + 5, 1000, i + 1, "gemm")
        t += dur
    return out


#: Where the slow steps run the same work and their GPU waits for the host.
WAIT_ADVICE = (
    "The slow steps wait for the host: keep the input pipeline ahead of the GPU (more "
    "DataLoader workers, prefetch_factor, pin_memory=True) and move periodic host work "
    "(logging, checkpoints) off the step."
)
#: A name the slow steps add is listed when it takes this share of the kinds' difference.
MIN_WORK_SHARE = 0.05


class UnevenSteps(Rule):
    """The steady steps are of two kinds: a slow step every N steps.

    ## What it detects
    Steady steps whose times split into a fast and a slow kind (a jump of at least 25 %
    between them) where the slow steps repeat with a period read off the trace (every 2nd,
    3rd... step, over at least two full cycles), or a few slow steps at no period
    (outliers); and what the slow steps run that the fast ones do not: operators, ranges and
    runtime calls by name (logging, a checkpoint, an evaluation, the optimizer step of
    gradient accumulation, a loader that waits every other batch), or, where they run the same
    work, how much longer their GPU waits for the host. Slow steps that all lead are the host
    warming up: the report's notes say so, and no finding prices them.

    ## Why it matters
    One mean step time hides the slow kind: the fix is in what the slow steps do, and
    averaging the two kinds makes every per-step figure describe neither.

    ## How to fix
    Look at what the slow steps do that the fast ones do not (the evidence lists it): log
    and evaluate less often, checkpoint asynchronously, keep the loader ahead (more workers,
    prefetching). Where the slow steps do the same work more slowly, look for what they wait
    on (a loader, a collective, a host sync).

    ## Known false positives
    Work a loop must do every N steps (the optimizer step with gradient accumulation, a
    periodic evaluation): the finding prices it, but it may be the job's.

    ## Impact estimate
    The slow kind's extra time over the fast kind, spread over the steady steps:
    `(slow - fast) * slow steps / steps` (analyses/causes/step_kinds.py); at most that.
    """

    code = "TA018"
    slug = "uneven-steps"
    title = "Steady steps of two kinds, a fast and a slow one"
    category = "uneven_steps"
    claims = "slow_steps"
    default_severity = Severity.WARNING
    advice = (
        "Look at what the slow steps do that the fast ones do not: log and evaluate less "
        "often, checkpoint asynchronously, keep the loader ahead of the GPU."
    )

    example_bad: ClassVar[list[Event]] = _steps(2, 7)
    example_good: ClassVar[list[Event]] = _steps(0, 7)

    def check(self, ctx: Context, t: Rule.Thresholds) -> Iterable[Finding]:
        for r in ctx.metrics.causes.step_kinds.iter_rows(named=True):
            rank, pattern, period = r["rank"], r["pattern"], r["period"]
            if pattern not in ("periodic", "outliers"):
                continue  # trends are warm-up: a note of the report, not a diagnosis
            slow, fast, n = r["slow_ns"], r["fast_ns"], r["steps"]
            count = len(r["slow_steps"])
            diff = max(1, slow - fast)
            # the work the slow steps add that weighs at all (a name worth MIN_WORK_SHARE of
            # the difference): a stray allocator call is not what makes a step slow
            work = [
                w
                for w in ctx.metrics.causes.slow_work_of(rank)
                if w["extra_ns"] >= MIN_WORK_SHARE * diff
            ]
            # the slow steps' extra time that is not GPU work: the GPU waiting for the host
            waits = diff - max(0, r["slow_busy_ns"] - r["fast_busy_ns"])
            idle_bound = waits >= diff / 2
            if work:
                does = "they also run " + ", ".join(
                    f"{w['name']} ({w['extra_calls']:.0f}x, {duration(w['extra_ns'])})"
                    for w in work[:3]
                )
                # the names nest (a module's range holds its operators): the longest is what
                # the named work takes at least; the rest of the difference is unnamed
                unnamed = diff - max(w["extra_ns"] for w in work)
                if idle_bound and unnamed >= diff / 2:
                    does += (
                        f"; and {duration(unnamed)} more of host time in each that the trace "
                        "does not name (a loader, a sleep, Python)"
                    )
            elif idle_bound:
                does = (
                    f"they run the same work, and the GPU waits {duration(waits)} longer in "
                    "each for host work the trace does not name (a loader, a sleep, Python)"
                )
            else:
                does = "they run the same work, more slowly"
            per_cycle = count * period // n if period else 0
            if period and per_cycle <= 1:
                every = f"every {period}{_nth(period)} step"
            elif period:
                every = f"{per_cycle} of every {period} steps"
            else:
                every = f"{count} of {n} steps"
            takes = "takes" if every.startswith("every") else "take"
            words = f"{every} {takes} {duration(slow)} against {duration(fast)}"
            yield self.finding(
                ctx,
                f"rank {rank}: the steady steps are of two kinds: {words}; {does}",
                {
                    "pattern": pattern,
                    "period": period,
                    "steps": n,
                    "slow_steps": r["slow_steps"],
                    "slow_ns": slow,
                    "fast_ns": fast,
                    "slow_busy_ns": r["slow_busy_ns"],
                    "fast_busy_ns": r["fast_busy_ns"],
                    "slow_work": work,
                    # where the slow steps' extra time is the GPU waiting, it is the host
                    # wait TA001 prices: this finding names it, and TA001 keeps the rest
                    "explains": ["TA001"] if idle_bound else [],
                    "bound_by": "host" if idle_bound else "mixed",
                    "cause_words": words,
                },
                Scope(rank=rank),
                r["extra_ns"],
                WAIT_ADVICE if idle_bound and not work else None,
                ceiling_ns=r["extra_ns"],
            )


def _nth(n: int) -> str:
    return {1: "st", 2: "nd", 3: "rd"}.get(n if n < 20 else n % 10, "th")
