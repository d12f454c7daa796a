"""TA004: kernel time dominated by memory-bandwidth-bound kernels."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from traceanalyzer.analyses.gpu.bandwidth import top_operators
from traceanalyzer.analyses.gpu.fusion import named_layer
from traceanalyzer.rules import advice as advise
from traceanalyzer.rules.base import Context, Finding, Rule, Severity
from traceanalyzer.rules.examples import Event, launched, step

_POINTWISE = "void at::native::vectorized_elementwise_kernel<4, at::native::add_kernel>"
_NORM = "void at::native::layer_norm_kernel<float>"


class MemoryBound(Rule):
    """Most GPU compute time goes to memory-bandwidth-bound kernels.

    ## What it detects
    The share of compute kernel time (communication kernels left out) spent in the
    `memory_bound` class: pointwise/elementwise, normalisation, softmax, reductions,
    optimizer `multi_tensor_apply`, embedding and index kernels. Copy and cast kernels are
    reported by TA010. Where the trace records operator shapes (`record_shapes=True`), the
    evidence lists the top operators' achieved bandwidth and its share of the GPU's peak,
    estimated from the bytes their shapes move ("estimated" in the message).
    With `report --ncu`, an operator all of whose calls' kernels Nsight Compute measured
    gets ncu's DRAM bytes instead of the shapes' estimate (its evidence `source` is "ncu",
    and the message says "measured"), still over the trace's kernel time: ncu's durations,
    at base clocks with cold caches, are not the job's. It needs no recorded shapes then.
    Where the trace is an Nsight Systems export with GPU metrics (`--gpu-metrics-devices`),
    the DRAM read and write bandwidth the GPU's counters measured is given too, labelled
    measured: over the samples inside the memory-bound kernels, else over the busy samples
    (`evidence.dram_measured`; `evidence.bandwidth_source`: `measured` or `estimated`).

    ## Why it matters
    These kernels do under one FLOP per byte: their speed is set by memory bandwidth, not by
    the Tensor Cores. A step dominated by them uses a small part of the GPU's compute, and
    each separate kernel reads and writes its tensors from HBM again. An operator near 100 %
    of peak bandwidth cannot get faster on its own; only doing fewer passes over memory helps.

    ## How to fix
    Fuse: `torch.compile` fuses chains of pointwise and reduction ops into single kernels;
    use fused optimizers (`torch.optim.AdamW(fused=True)`), fused layer norm / RMSNorm,
    FlashAttention (`scaled_dot_product_attention`) instead of an explicit softmax; keep
    activations in 16-bit to halve the bytes moved.

    Under that share it still fires where what fusion removes (the model from the recorded
    shapes) is `min_fusion_saving_share` of the step or more: in a larger model the GEMMs
    grow faster than the pointwise work, and a hand-written GELU that holds 40 % of the
    kernel time still costs a third of the step.
    Copy/cast kernels inside a chain (autocast's fp32 cast of a hand-written activation's
    input and of its result back to bf16: a cast of a tensor of the elements of the
    memory-bound operator beside it) are passes the chain's fusion removes too: they are
    priced with it (not counted in the share that triggers the rule).

    ## Known false positives
    Small models and small batches are memory-bound by nature; so are embedding-heavy models
    (recommenders). The share alone does not say the time matters: the impact does.

    ## Impact estimate
    What fusion removes, under the roof (`analyses/gpu/fusion.py`). Memory-bound operators
    that run back to back on a stream form chains; a fused chain reads its inputs and writes its
    result once, taken as the traffic of its largest operator, so the rest of the chain's
    bytes (`fusible_share` of the memory-bound traffic) is what fusion removes, at the
    bandwidth the trace reaches: the saving is that share of the memory-bound kernel time,
    on the critical path (the `memory_bound_2x` what-if scaled to the share: a host-bound
    step gains nothing). The ceiling (`impact_ceiling_ns`) is the memory-bound time less
    the bytes left after fusion at the GPU's peak bandwidth: elementwise work already at the
    roof with nothing to fuse (separate `out=` writes) has nothing to save. Where no
    operator has bytes (no `record_shapes`), the what-if of kernels twice as fast, under a
    ceiling of all the memory-bound time. The chains' casts are priced in the same
    proportion: the what-if shortens the memory-bound kernels only, so the price is scaled by
    their time with the casts over their time without. Measured on H100 traces recorded for
    it: a hand-written tanh GELU priced 25.7 ms against 25.2 ms saved by `F.gelu`, a
    hand-written LayerNorm 19.5 against 20.3 ms saved by `F.layer_norm`; on H200, the tanh
    GELU under bf16 autocast (fp32 inside, cast in and out) in MLPs of width 1024, 2048 and
    4096: 3.41, 7.17 and 14.80 ms against 3.46, 6.67 and 12.77 ms saved.

    The message names the chain whose fusion saves most and, where the chains are a known
    layer written by hand (a tanh GELU, a LayerNorm or RMSNorm, a SiLU), the advice names
    its one-kernel replacement.
    """

    code = "TA004"
    slug = "memory-bound"
    title = "Memory-bandwidth bound: most kernel time in pointwise/normalisation kernels"
    category = "memory_bound"
    advice_neutral = (
        "Fuse the memory-bound kernels so that intermediates stay in registers or shared memory, "
        "and move fewer bytes (fewer passes, lower precision where it is safe)."
    )
    claims = "memory_bound_kernels"
    default_severity = Severity.WARNING
    advice = (
        "Fuse memory-bound ops: torch.compile, fused optimizers (fused=True), fused norms, "
        "FlashAttention via scaled_dot_product_attention; keep activations in 16-bit."
    )

    @dataclass(frozen=True, slots=True)
    class Thresholds:
        min_memory_bound_share: float = field(
            default=0.50,
            metadata={
                "help": "memory-bound kernel time as a share of compute (non-comm) kernel time"
            },
        )
        top_operators: int = field(
            default=3, metadata={"help": "operators listed with their achieved bandwidth"}
        )
        min_fusion_saving_share: float = field(
            default=0.30,
            metadata={
                "help": "under the memory-bound share, what fusion saves as a share of the "
                "step that triggers it all the same (a large model's hand-written activation)"
            },
        )

    # the host queues the step's work in 20 µs; the GPU then runs it back to back
    example_bad: ClassVar[list[Event]] = [
        step(1, 100, 20),
        *launched(105, 110, 40, 1, "sm90_xmma_gemm_bf16bf16_bf16f32"),
        *launched(110, 150, 150, 2, _POINTWISE),
        *launched(115, 300, 150, 3, _NORM),
    ]
    example_good: ClassVar[list[Event]] = [
        step(1, 100, 20),
        *launched(105, 110, 300, 1, "sm90_xmma_gemm_bf16bf16_bf16f32"),
        *launched(110, 410, 40, 2, _POINTWISE),
    ]

    def check(self, ctx: Context, t: Thresholds) -> Iterable[Finding]:
        classes = {r["kernel_class"]: r["total_ns"] for r in ctx.metrics.kernels.classes.to_dicts()}
        compute = sum(ns for c, ns in classes.items() if c != "comm")
        m = ctx.metrics.memory_impact_model
        bound = classes.get("memory_bound", 0)
        if not compute:
            return
        # under the share, only the fusion model's bytes (recorded shapes) can say it matters
        modelled = m.model is not None and m.model["fusible_share"] is not None
        saving = ctx.share_of_step(None, m.impact_ns) if modelled else None
        if bound / compute < t.min_memory_bound_share and (
            saving is None or saving < t.min_fusion_saving_share
        ):
            return
        top = top_operators(ctx.metrics.bandwidth.operators, t.top_operators)
        price, ceiling, model, chain = m.impact_ns, m.ceiling_ns, m.model, m.top_chain
        layer = named_layer(m.patterns)
        dram, where = _measured(ctx, model)
        seen = "; ".join(
            f"{o['op_name']} "
            + (f"{o['gbps']:.0f} GB/s" if o["gbps"] is not None else "above the peak (L2)")
            + (" measured" if o.get("source") == "ncu" else " estimated")
            + (f" ({o['share_of_peak']:.0%} of peak)" if o["share_of_peak"] is not None else "")
            for o in top
        )
        yield self.finding(
            ctx,
            f"{bound / compute:.0%} of compute kernel time ({bound / 1e6:.2f} ms) is in "
            f"memory-bound kernels; copy/cast kernels add "
            f"{classes.get('copy_cast', 0) / compute:.0%}"
            + (f" ({m.cast_ns / 1e6:.2f} ms of them casts inside the chains)" if m.cast_ns else "")
            + (f"; top operators: {seen}" if seen else "")
            + _model_words(model)
            + _dram_words(dram, where)
            + _chain_words(ctx, chain, layer),
            {
                "memory_bound_ns": bound,
                "compute_kernel_ns": compute,
                "memory_bound_share": bound / compute,
                "chained_cast_ns": m.cast_ns,
                "copy_cast_share": classes.get("copy_cast", 0) / compute,
                "operators": top,
                "threshold_share": t.min_memory_bound_share,
                "threshold_saving_share": t.min_fusion_saving_share,
                "model": _model_evidence(model),
                "top_chain": chain,
                # the DRAM bandwidth the GPU's counters measured (Nsight GPU metrics), and
                # where the figure the message gives comes from
                "dram_measured": dram and {**dram, **where},
                "bandwidth_source": "measured"
                if dram
                else "estimated"
                if model and model["achieved_gbps"]
                else None,
            },
            None,
            price,
            (
                f"Replace {layer[0]} with {layer[1]}, one kernel each way; or "
                + advise.fusion(ctx)[0].lower()
                + advise.fusion(ctx)[1:]
                if layer
                else advise.fusion(ctx)
            ),
            ceiling_ns=ceiling,
        )


def _model_evidence(model: dict[str, Any] | None) -> dict[str, Any] | None:
    keys = (
        "rank",
        "device",
        "bytes",
        "intermediate_bytes",
        "fused_bytes",
        "chains",
        "chain_ops",
        "achieved_gbps",
        "peak_gbps",
        "floor_ns",
        "fusible_share",
        "unknown_ns",
    )
    return {k: model[k] for k in keys} if model else None


def _model_words(model: dict[str, Any] | None) -> str:
    """What fusion can remove and how close the rest is to the roof, in words."""
    if not model or model["fusible_share"] is None:
        return ""
    words = (
        f"; fused kernels would not move {model['fusible_share']:.0%} of their "
        f"{model['bytes'] / 1e9:.1f} GB ({model['chain_ops']} operators run back to back in "
        f"{model['chains']} chains; fused, a chain reads its inputs and writes its result once)"
    )
    if model["achieved_gbps"] and model["peak_gbps"]:
        words += (
            f"; they move {model['achieved_gbps']:.0f} GB/s, "
            f"{model['achieved_gbps'] / model['peak_gbps']:.0%} of the peak (estimated from "
            "the operators' shapes)"
        )
    return words


def _measured(
    ctx: Context, model: dict[str, Any] | None
) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """The DRAM bandwidth measured by the GPU metrics (`GpuMetrics.dram`) of the device the
    model prices, else of the first device that has it; and which device that is."""
    g = ctx.metrics.gpu_metrics
    keys = [(model["rank"], model["device"])] if model else []
    keys += [(r["rank"], r["device"]) for r in g.devices.iter_rows(named=True)]
    for rank, device in keys:
        found = g.dram(rank, device)
        if found:
            return found, {"rank": rank, "device": device}
    return None, {}


def _dram_words(dram: dict[str, Any] | None, where: dict[str, Any]) -> str:
    """The measured DRAM in words."""
    if not dram:
        return ""
    read, write = dram["read_share"], dram["write_share"]
    return (
        f"; measured by the GPU's counters (rank {where['rank']} GPU {where['device']}): DRAM "
        f"read {read:.0%} + write {write:.0%} = {read + write:.0%} of the peak bandwidth "
        f"({dram['samples']} samples {dram['where']})"
    )


def _chain_words(ctx: Context, chain: dict[str, Any] | None, layer: tuple[str, str] | None) -> str:
    if not chain:
        return ""
    per = {"steps": "per step", "iterations": "per iteration"}.get(
        ctx.metrics.basis, "over the window"
    )
    return (
        f"; the chain that fusion shortens most: {chain['pattern']} "
        f"({chain['chains_per_step']:.0f} {per}, {chain['kernel_ns_per_step'] / 1e6:.2f} ms "
        f"{per}, about {chain['saving_ns_per_step'] / 1e6:.2f} ms of it removable)"
        + (f"; the chains hold {layer[0]}" if layer else "")
    )
