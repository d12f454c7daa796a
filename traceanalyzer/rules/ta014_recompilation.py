"""TA014: torch.compile compiles inside the steady steps (recompilation)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import ClassVar

from traceanalyzer.rules.base import Context, Finding, Rule, Scope, Severity
from traceanalyzer.rules.causes import duration, models
from traceanalyzer.rules.examples import Event, cpu_op, launched, step


class Recompilation(Rule):
    """torch.compile compiles again inside the steady steps: the loop pays compilation.

    ## What it detects
    torch.compile's compile phases (Dynamo's tracing, AOTAutograd, Inductor's lowering and
    code generation, Triton's compile and autotuning: the `(dynamo_timed)` ranges, or the
    phases' own names in older versions) inside steady steps, in at least half of them, with
    the compiled graphs' ids (`Torch-Compiled Region: 0/7`, `0/8`...: frame 0 compiled a new
    graph) as corroboration: recompiles per step, the graphs run, and the frames (more than
    one frame per step: graph breaks). Compilation only in the first steps is start-up: the
    steady state leaves those steps out and TA012 names them.

    ## Why it matters
    A compile takes from a fraction of a second to minutes of host time, and the GPU idles
    through it. A guard that fails every step (a new sequence length with `dynamic=False`, a
    Python int that changes, a new dtype or device) recompiles every step: compiling costs
    more than the model. After `torch._dynamo.config.recompile_limit` (8 by default)
    recompiles of a frame, Dynamo stops compiling it and runs it eagerly: the steps stay
    slow, without compile ranges.

    ## How to fix
    Find the failing guard: `TORCH_LOGS=recompiles` prints why each recompile happened. For
    changing shapes, compile with `dynamic=True` or mark the dimension dynamic
    (`torch._dynamo.mark_dynamic(x, 1)`); or pad or bucket lengths to a few sizes. Do not
    raise the recompile limit for shapes that keep changing (each new one compiles again);
    raise it only where a few shapes recur. CUDA graphs (`mode="reduce-overhead"`) do not help:
    they re-record for every new shape.

    ## Known false positives
    A run profiled while it still compiles (a first call, or the first steps of a schedule
    without warm-up): the compile is one-time, not the loop's, however often it appears in
    the few steps recorded. A deliberate compile of a new graph inside the loop (a model
    switched to eval, a new layer added) recompiles once, not every step.

    A compiled frame that has stopped compiling shows as Dynamo's guard check
    (`TorchDynamo Cache Lookup`) in every steady step with no compiled region run and no
    compile work after it: the frame runs eagerly. That is reported at info, unpriced
    (what compiling would save is not in the trace): raise the limit only where a few
    shapes recur, else make the shape dynamic.

    ## Impact estimate
    The GPU idle the compile phases explain: the part of each idle gap during which the host
    was inside a compile range (their union), per steady step, at most the device's idle
    (analyses/causes/host_work.py).
    """

    code = "TA014"
    slug = "recompilation"
    title = "torch.compile recompiles inside the steady steps"
    category = "recompilation"
    claims = "host_wait_idle"
    default_severity = Severity.WARNING
    advice = (
        "Find the guard that fails with TORCH_LOGS=recompiles; for changing shapes compile "
        "with dynamic=True or torch._dynamo.mark_dynamic(x, dim), or pad/bucket lengths to a "
        'few sizes. CUDA graphs (mode="reduce-overhead") would re-record for every new shape.'
    )

    @dataclass(frozen=True, slots=True)
    class Thresholds:
        min_steps_share: float = field(
            default=0.5,
            metadata={"help": "share of steady steps holding compile work that triggers it"},
        )

    example_bad: ClassVar[list[Event]] = [
        step(1, 100, 3000),
        cpu_op(110, 2000, "_compile.compile_inner (dynamo_timed)"),
        cpu_op(2120, 900, "Torch-Compiled Region: 0/5"),
        *launched(2130, 2140, 800, 1, "triton_poi_fused_add_0"),
        step(2, 3100, 3000),
        cpu_op(3110, 2000, "_compile.compile_inner (dynamo_timed)"),
        cpu_op(5120, 900, "Torch-Compiled Region: 0/6"),
        *launched(5130, 5140, 800, 2, "triton_poi_fused_add_0"),
    ]
    example_good: ClassVar[list[Event]] = [
        step(1, 100, 1000),
        cpu_op(110, 900, "Torch-Compiled Region: 0/1"),
        *launched(120, 130, 900, 1, "triton_poi_fused_add_0"),
        step(2, 1100, 1000),
        cpu_op(1110, 900, "Torch-Compiled Region: 0/1"),
        *launched(1120, 1130, 900, 2, "triton_poi_fused_add_0"),
    ]

    def check(self, ctx: Context, t: Thresholds) -> Iterable[Finding]:
        yield from self._fallen_back(ctx)
        for rank, m in models(ctx, "compilation").items():
            if m.every_step_share < t.min_steps_share:
                continue
            regions = ctx.metrics.causes.regions_of(rank) or {}
            steps = m.steps or 1
            new = int(regions.get("new_graphs") or 0)
            frames = int(regions.get("frames") or 0)
            phases = ctx.metrics.causes.names_of(rank, "compilation", 3)
            every = (
                "every step" if m.steps_with == m.steps else f"{m.steps_with} of {m.steps} steps"
            )
            graphs = (
                f"; {new / steps:.1f} new graphs per step (last {regions.get('last_graph')})"
                if new
                else ""
            )
            breaks = f"; {frames} compiled frames run per step (graph breaks)" if frames > 1 else ""
            advice = self.advice + (
                " Remove the graph breaks too (TORCH_LOGS=graph_breaks)." if frames > 1 else ""
            )
            yield self.finding(
                ctx,
                f"rank {rank}: torch.compile compiles in {every}: "
                f"{duration(m.work_ns)} of compile work per step, "
                f"{duration(m.explained_ns)} of it with GPU {m.device} idle{graphs}{breaks}",
                {
                    "steps": m.steps,
                    "steps_with_compile": m.steps_with,
                    "compile_ns_per_step": m.work_ns,
                    "idle_explained_ns": m.explained_ns,
                    "new_graphs_per_step": new / steps,
                    "graphs": regions.get("graphs"),
                    "frames": frames,
                    "last_graph": regions.get("last_graph"),
                    "phases": [
                        {"name": p["name"], "count": p["count"], "total_ns": p["total_ns"]}
                        for p in phases
                    ],
                    "explains": ["TA001", "TA003"],
                    "bound_by": "host",
                    "cause_words": "torch.compile recompiles "
                    + ("every step" if m.steps_with == m.steps else "inside the steps"),
                    "threshold_steps_share": t.min_steps_share,
                },
                Scope(rank=rank, device=m.device),
                m.impact_ns,
                advice,
                ceiling_ns=m.ceiling_ns,
            )

    def _fallen_back(self, ctx: Context) -> Iterable[Finding]:
        """A frame that looks up its compiled graphs every step and runs none: the recompile
        limit was hit and it runs eagerly (the class docstring)."""
        for r in ctx.metrics.causes.regions.iter_rows(named=True):
            steps = r["steps"] or 0
            if not steps or r["runs"] or r["lookups"] < steps:
                continue
            rank = r["rank"]
            yield self.finding(
                ctx,
                f"rank {rank}: torch.compile runs no compiled graph: each steady step checks "
                f"a compiled frame's guards ({r['lookups'] / steps:.1f} TorchDynamo Cache "
                "Lookup per step) and runs it eagerly. The frame stopped compiling: its "
                "recompile limit was hit (shapes or guards that change)",
                {
                    "steps": steps,
                    "cache_lookups_per_step": r["lookups"] / steps,
                    "compiled_regions": 0,
                    "fallen_back": True,
                },
                Scope(rank=rank),
                None,
                "The frame fell back to eager after torch._dynamo.config.recompile_limit "
                "(8) recompiles: make the changing shape dynamic (dynamic=True or "
                "torch._dynamo.mark_dynamic) or pad/bucket it to a few sizes; raise "
                "recompile_limit only where a few shapes recur. TORCH_LOGS=recompiles "
                "shows the guard that fails.",
                severity=Severity.INFO,
            )
