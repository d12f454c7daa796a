"""TA023: torch.compile's graph breaks, counted and placed, priced by the host time they add."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import ClassVar

from traceanalyzer.rules.base import Context, Finding, Rule, Scope, Severity
from traceanalyzer.rules.causes import duration, models
from traceanalyzer.rules.examples import Event, cpu_op, launched, step


def _step(n: int, t: float, breaks: bool) -> list[Event]:
    """A compiled step: frame 0's region, and with `breaks` four resumed frames nested in it,
    each entered through 100 µs of guards and wrappers around a 50 µs graph call."""
    out = [step(n, t, 1000), cpu_op(t + 5, 900, "Torch-Compiled Region: 0/0")]
    if breaks:
        for i in range(4):
            s = t + 20 + 200 * i
            out += [
                cpu_op(s, 150, "Torch-Compiled Region: 1/0"),
                cpu_op(s + 100, 50, "## Call CompiledFxGraph fabc ##"),
                *launched(s + 110, s + 115, 30, 10 * n + i, "triton_poi_fused_add_0"),
            ]
    else:
        out += [
            cpu_op(t + 20, 100, "## Call CompiledFxGraph fabc ##"),
            *launched(t + 30, t + 35, 800, 10 * n, "triton_poi_fused_add_0"),
        ]
    return out


class GraphBreaks(Rule):
    """torch.compile runs the step as several compiled graphs: graph breaks.

    ## What it detects
    Steady steps that run more compiled regions (`Torch-Compiled Region: F/G` ranges) than
    top-level calls of the compiled model: each graph break ends a graph, runs what Dynamo
    could not trace eagerly, and resumes in a frame of its own (`<resume in f>`), whose
    region runs nested in its caller's. The breaks are counted per step and placed by the
    graphs they split (`0/0 x1, 2/0 x4, 3/0 x4`: frame 0 calls frames 2 and 3 four times).

    ## Why it matters
    Every region's run pays Dynamo's guards, AOTAutograd's wrappers and its backward's
    bookkeeping on the host, and the code between the graphs runs eagerly; fusion stops at
    each break. Under a step that waits for the host, that time is the GPU's idle.

    ## How to fix
    Find each break with `TORCH_LOGS=graph_breaks` (or `torch._dynamo.explain(model)(x)`),
    and remove it: tensor ops instead of data-dependent Python (`.item()`, `print`, `if` on
    a tensor's value), `torch.cond` for branches, `torch.compiler.allow_in_graph` for a
    function Dynamo need not trace; `fullgraph=True` makes any break an error.

    ## Known false positives
    A model compiled in several parts on purpose (each part its own `torch.compile`) runs
    several top-level regions: those are not counted. A break that must stay (a
    collective, a host read the step needs) still costs what is priced here.

    ## Impact estimate
    The host time inside the compiled regions and outside their compiled graphs' calls
    (`## Call CompiledFxGraph`): guards, wrappers and eager code between graphs; the GPU
    idle under it, as for any host-side cause, times the share the breaks add
    (`(runs - top-level runs) / runs`: without breaks only the top-level runs remain;
    analyses/causes/compilation.py). On an H200 GPT with one break per block (9 regions per
    step) this priced 3.5 ms against 2.95 ms that removing the breaks saved without the
    profiler.
    """

    code = "TA023"
    slug = "graph-breaks"
    title = "torch.compile graph breaks in every step"
    category = "graph_breaks"
    claims = "host_wait_idle"
    default_severity = Severity.WARNING
    advice = (
        "Find the breaks with TORCH_LOGS=graph_breaks and remove them: tensor ops instead of "
        ".item()/print/if on tensor values, torch.cond for branches; fullgraph=True turns any "
        "break into an error."
    )

    @dataclass(frozen=True, slots=True)
    class Thresholds:
        min_breaks_per_step: float = field(
            default=1.0, metadata={"help": "nested compiled regions per steady step"}
        )

    example_bad: ClassVar[list[Event]] = [*_step(1, 100, True), *_step(2, 1100, True)]
    example_good: ClassVar[list[Event]] = [*_step(1, 100, False), *_step(2, 1100, False)]

    def check(self, ctx: Context, t: Thresholds) -> Iterable[Finding]:
        for rank, m in models(ctx, "graph_breaks").items():
            regions = ctx.metrics.causes.regions_of(rank) or {}
            steps = regions.get("steps") or m.steps or 1
            breaks = (int(regions.get("runs") or 0) - int(regions.get("top_runs") or 0)) / steps
            if breaks < t.min_breaks_per_step:
                continue
            yield self.finding(
                ctx,
                f"rank {rank}: torch.compile's graphs break {breaks:.0f} times per step: "
                f"{int(regions.get('runs') or 0) / steps:.0f} compiled regions per step "
                f"({regions.get('graph_runs')} over {steps} steps), "
                f"{duration(m.work_ns)} of host time per step in them outside the compiled "
                f"graphs, {duration(m.explained_ns)} of GPU {m.device} idle that the breaks add",
                {
                    "steps": steps,
                    "breaks_per_step": breaks,
                    "regions_per_step": int(regions.get("runs") or 0) / steps,
                    "top_level_per_step": int(regions.get("top_runs") or 0) / steps,
                    "frames": regions.get("frames"),
                    "graph_runs": regions.get("graph_runs"),
                    "glue_ns_per_step": m.work_ns,
                    "idle_explained_ns": m.explained_ns,
                    "explains": ["TA001", "TA003"],
                    "bound_by": "host",
                    "cause_words": "torch.compile's graph breaks",
                    "threshold_breaks_per_step": t.min_breaks_per_step,
                },
                Scope(rank=rank, device=m.device),
                m.impact_ns,
                ceiling_ns=m.ceiling_ns,
            )
