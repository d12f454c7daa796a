"""TA025: kernels launched too small to fill the GPU keep it busy but mostly idle."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from traceanalyzer.rules.base import Context, Finding, Rule, Scope, Severity
from traceanalyzer.rules.causes import duration
from traceanalyzer.rules.examples import (
    Event,
    device_properties,
    launched,
    step,
    synchronize,
)

#: Advice by who chose the launch shape (launch_shapes.origin).
ADVICE_BY_ORIGIN = {
    "custom": (
        "Launch at least one block per SM, better several waves: split the kernel's loop over "
        "more blocks or programs (for a Triton kernel, grid = (triton.cdiv(n, BLOCK),) "
        "instead of a loop inside one program; for a reduction, split it and combine the "
        "partial results)."
    ),
    "library": (
        "Give each launch more work: batch the requests or micro-batches that run one at a "
        "time, fuse the small operators (torch.compile), or run independent small kernels "
        "concurrently on separate streams; capture the rest in CUDA graphs so that their "
        "launches cost less."
    ),
    "compiled": (
        "The compiled kernels are sized by the tensors: give each step more work (a larger "
        "batch, or several micro-batches at once), or run independent parts concurrently; "
        "mode='max-autotune' may pick split reductions for the small grids."
    ),
}


def _shape_words(k: dict[str, Any], sms: int | None) -> str:
    """`name: 1 block x 1024 threads on 132 SMs (1% of the SMs)`."""
    blocks = k["blocks"]
    words = (
        f"{k['name'][:80]}: {blocks} block{'s' if blocks != 1 else ''} x "
        f"{k['threads_per_block']} threads"
    )
    if sms:
        words += f" on {sms} SMs ({k['sm_fill_share']:.0%} filled)"
    if k["occupancy_share"] is not None:
        words += f", theoretical occupancy {k['occupancy_share']:.0%}"
    return words


def _cause_words(k: dict[str, Any], sms: int | None) -> str:
    """The verdict's phrase: a grid below the SM count, or a last wave left mostly empty."""
    blocks = k["blocks"]
    if sms and blocks >= sms:
        waves = f"{k['waves']:.2f} waves"
        return f"kernels whose last wave leaves most SMs idle ({blocks} blocks, {waves})"
    plural = "s" if blocks != 1 else ""
    return f"kernels launched too small to fill the GPU ({blocks} block{plural} on {sms} SMs)"


class UnderfilledLaunches(Rule):
    """Kernels launched with too few blocks to fill the GPU: busy, but most SMs idle.

    ## What it detects
    Kernels (communication left out) whose launches leave most of the GPU's SMs idle, taking
    at least `min_kernel_share` of the kernel time: a grid of fewer blocks than a quarter of
    the SMs (a block runs on one SM), or a grid just past one wave whose last wave leaves
    most of them idle; each launch running at least 20 us. The shapes come from the trace
    (grid, block, registers, shared memory; Kineto and Nsight record them for every kernel)
    against the device's SM count and limits.

    ## Why it matters
    The timeline counts a GPU busy while one kernel is resident, however few SMs it uses: a
    Triton kernel launched with grid (1,) over a long array is 100 % busy on one SM of 132.
    The GPU's throughput scales with the SMs at work, so such a kernel runs tens of times
    slower than the same work spread over the GPU.

    ## How to fix
    By who chose the shape. A kernel of the program's own (Triton or CUDA): a larger grid,
    the loop split over more programs (`grid = (triton.cdiv(n, BLOCK),)`), a reduction split
    and combined. A library kernel at a small batch: more work per launch (batching, fused
    operators), independent kernels on concurrent streams, CUDA graphs for the launches.

    ## Known false positives
    Small reductions by design (a final reduction of a few partial sums) take little time and
    stay under the threshold. Persistent and cluster GEMMs are sized to the SM count, NCCL's
    grid is its channel count and warp-specialised kernels' low occupancy is their design:
    none is flagged (occupancy is evidence, never the trigger). Kernels that fill the GPU
    together on concurrent streams are priced only for the time they run alone.

    ## Impact estimate
    A launch filling `f` of the SMs would take `f` of its time with its work spread over
    all of them, never less than a kernel's fixed cost (2 us): the model removes the rest, of
    the time it runs alone (analyses/counters/launch_shapes.py), scaled by the share of the
    kernel time that bounds the step (the critical path's `gpu_compute_2x` what-if); at most
    the underfilled kernels' time per step. With an Nsight Compute export (`--ncu`) the
    evidence adds what it measured of the first kernel (`measured`: SM throughput, achieved
    occupancy, registers): a kernel whose SMs work at a few per cent of their throughput is
    the GPU left idle, measured.
    """

    code = "TA025"
    slug = "underfilled-launches"
    title = "Kernels launched too small to fill the GPU"
    category = "underfilled_launches"
    advice_neutral = (
        "Give each launch more work: launch at least one block per SM (better, several waves) for "
        "the program's own kernels, batch the work behind library calls, or run independent small "
        "kernels concurrently on streams."
    )
    default_severity = Severity.WARNING
    advice = ADVICE_BY_ORIGIN["custom"]

    @dataclass(frozen=True, slots=True)
    class Thresholds:
        min_kernel_share: float = field(
            default=0.05,
            metadata={"help": "underfilled kernels' share of the kernel time that triggers it"},
        )

    example_bad: ClassVar[list[Event]] = [
        device_properties(),
        step(1, 100, 1940),
        *launched(110, 120, 1900, 1, "loop_kernel", grid=[1, 1, 1], block=[1024, 1, 1]),
        synchronize(115, 1910),
    ]
    example_good: ClassVar[list[Event]] = [
        device_properties(),
        step(1, 100, 1940),
        *launched(110, 120, 1900, 1, "loop_kernel", grid=[16384, 1, 1], block=[1024, 1, 1]),
        synchronize(115, 1910),
    ]

    def check(self, ctx: Context, t: Thresholds) -> Iterable[Finding]:
        shapes = ctx.metrics.launch_shapes
        sms = {(r["rank"], r["device"]): r for r in shapes.per_device.iter_rows(named=True)}
        best: dict[int, Any] = {}
        for m in ctx.metrics.underfill_model:  # the device where filling saves most
            held = best.get(m.rank)
            if held is None or m.impact_ns > held.impact_ns:
                best[m.rank] = m
        for rank, m in sorted(best.items()):
            share = m.kernel_share
            if share < t.min_kernel_share or not m.removed_ns:
                continue
            dev = sms[(rank, m.device)]
            top = shapes.underfilled(rank, m.device)
            if not top:
                continue
            filled = dev["sm_fill_share"]
            first = top[0]
            measured = ctx.metrics.ncu.measured(rank, m.device, str(first["name"]))
            ncu_words = ""
            if measured and measured["sm_throughput_share"] is not None:
                ncu_words = f"; Nsight Compute: SM throughput {measured['sm_throughput_share']:.0%}"
                if measured["achieved_occupancy_share"] is not None:
                    ncu_words += f", achieved occupancy {measured['achieved_occupancy_share']:.0%}"
            yield self.finding(
                ctx,
                f"rank {rank} GPU {m.device}: kernels that leave most of the {dev['sms']} SMs "
                f"idle run {duration(m.underfilled_ns)} per step ({share:.0%} of kernel time); "
                f"{_shape_words(first, dev['sms'])}{ncu_words}"
                + (f"; {len(top) - 1} more kernels" if len(top) > 1 else "")
                + f": filling the GPU removes {duration(m.removed_ns)} of GPU time per step",
                {
                    "underfilled_ns_per_step": m.underfilled_ns,
                    "kernel_share": share,
                    "gpu_ns_removed_per_step": m.removed_ns,
                    "bound_share": m.bound_share,
                    "sm_count": dev["sms"],
                    "limits_source": dev["limits"],
                    "sm_fill_share": filled,
                    "kernels": [
                        {
                            key: k[key]
                            for key in (
                                "name",
                                "op_name",
                                "origin",
                                "count",
                                "total_ns",
                                "blocks",
                                "threads_per_block",
                                "registers_per_thread",
                                "shared_mem_bytes",
                                "local_mem_bytes",
                                "blocks_per_sm",
                                "limited_by",
                                "occupancy_share",
                                "waves",
                                "sm_fill_share",
                                "underfilled_ns",
                                "removed_ns",
                            )
                        }
                        for k in top
                    ],
                    # what Nsight Compute measured of the first kernel (--ncu), else null
                    "measured": measured,
                    "explains": ["TA004"],
                    "bound_by": "gpu_compute",
                    "cause_words": _cause_words(first, dev["sms"]),
                    "threshold_share": t.min_kernel_share,
                },
                Scope(rank=rank, device=m.device),
                m.impact_ns,
                advice=ADVICE_BY_ORIGIN.get(str(first["origin"]), self.advice),
                ceiling_ns=m.ceiling_ns,
            )
