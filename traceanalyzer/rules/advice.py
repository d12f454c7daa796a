"""Advice that fits the run: what to try next given what the run already does (the run
context, analyses/context.py), in the vendor's words. Shared by the rules that give host-side
or fusion advice."""

from __future__ import annotations

import re

from traceanalyzer.analyses.gpu.shapes import fewer_rows_ns
from traceanalyzer.rules.base import Context


def host_overhead(ctx: Context) -> str:
    """Next steps against host overhead inside steps (Python, dispatch, launches)."""
    if ctx.uses("cuda_graphs") and ctx.uses("torch_compile"):
        # what else a step holds: a training step's optimizer and loss; no optimizer was
        # recorded in inference
        rest = " (optimizer, loss)" if ctx.run.get("fused_optimizer") is not None else ""
        return (
            "The model is compiled and replays CUDA graphs already: capture more of the step "
            f"in the graph{rest}, remove graph breaks (TORCH_LOGS=graph_breaks), and "
            "give each kernel more work (larger batches)."
        )
    if ctx.uses("cuda_graphs"):
        return (
            "The run replays CUDA graphs already: capture more of the step in one graph, fuse "
            "the graphed work (torch.compile) and give each kernel more work (larger batches)."
        )
    if ctx.uses("torch_compile"):
        return (
            'The model is compiled already: use mode="reduce-overhead" (CUDA graphs) to cut '
            "launch overhead, find and remove graph breaks (TORCH_LOGS=graph_breaks), and keep "
            "host tensor work out of the loop."
        )
    graphs = "HIP graphs" if ctx.amd else "CUDA graphs"
    if decoding(ctx):
        return (
            "The run decodes a few tokens at a time (no optimizer; most GEMM time in products "
            "of under 8 rows): the GPU waits for Python between tiny kernels. Use a static KV "
            f'cache with torch.compile(mode="reduce-overhead") ({graphs} replay the step), '
            "and batch requests (continuous batching) so each step does more work."
        )
    if ctx.run.get("torch_compile") == "partial":
        return (
            "Only a small part of the model is compiled: compile the whole model "
            f'(torch.compile(model), mode="reduce-overhead" adds {graphs}), cut host round '
            "trips and host tensor work in the loop."
        )
    fsdp = (
        " With FSDP, wrap fewer, larger units (each unit's hooks, copies and collectives cost "
        "host time every step) and use a fused optimizer on its sharded (DTensor) parameters."
        if ctx.uses("fsdp")
        else ""
    )
    return (
        f'Cut Python and CPU-side work between launches: torch.compile (mode="reduce-overhead" '
        f"adds {graphs}), fewer host round trips, no host tensor work in the loop." + fsdp
    )


#: Decoding: most GEMM time in products of fewer rows than this (tokens being decoded).
DECODE_ROWS = 8


def decoding(ctx: Context) -> bool:
    """Whether the run decodes: no optimizer recorded, and most of the GEMM time with
    recorded shapes in products of fewer than DECODE_ROWS rows."""
    if ctx.run.get("fused_optimizer") is not None:
        return False
    few, total = fewer_rows_ns(ctx.metrics.shapes.matmuls, DECODE_ROWS)
    return bool(total) and few > total / 2


def host_phase(ctx: Context, phase: str, ns: int) -> str | None:
    """Next steps where one phase of the host's step holds most of its time (host_phases):
    None where the phase has no advice of its own (forward, backward and other: the
    operators' host overhead, host_overhead's)."""
    ms = f"{ns / 1e6:.1f} ms"
    if phase == "optimizer":
        if ctx.uses("fsdp"):
            return (
                f"optimizer.step and zero_grad take {ms} of host time per step: on FSDP's "
                "sharded (DTensor) parameters the optimizer's per-parameter work is CPU-bound. "
                "Use a fused optimizer (AdamW(fused=True) takes DTensors) or compile the step "
                "(torch.compile of optimizer.step), and wrap fewer, larger FSDP units so that "
                "there are fewer parameters and collectives to handle per step."
            )
        if ctx.run.get("fused_optimizer") is True:
            return (
                f"optimizer.step takes {ms} of host time per step although it is fused: "
                "compile it (torch.compile of optimizer.step) or capture it in a CUDA graph."
            )
        return (
            f"optimizer.step takes {ms} of host time per step: use a fused or foreach "
            "optimizer (AdamW(fused=True)), or compile the step (torch.compile of "
            "optimizer.step)."
        )
    if phase == "data_loading":
        return input_pipeline(ctx)
    return None


def tiny_optimizer_kernels(ctx: Context, share: float) -> str:
    """Next steps where most tiny kernels come from optimizer.step (a per-parameter loop)."""
    if ctx.run.get("fused_optimizer") is True:
        return (
            f"{share:.0%} of the tiny kernels come from optimizer.step although it is fused: "
            "compile it (torch.compile of optimizer.step) or capture it in a CUDA graph."
        )
    return (
        f"{share:.0%} of the tiny kernels come from optimizer.step, a kernel or more per "
        "parameter tensor: use the optimizer's fused implementation (fused=True, as in "
        "torch.optim.AdamW(fused=True): a few kernels for every parameter at once) or "
        "foreach=True, or compile the step."
    )


def input_pipeline(ctx: Context) -> str:
    """Next steps against waits between steps (the input pipeline)."""
    workers = ctx.run.get("dataloader_workers")
    if workers == 0:
        return (
            "The GPU waits between steps and the DataLoader runs in the main process "
            "(num_workers=0): give it worker processes, pin_memory=True and prefetching."
        )
    if workers is True:
        return (
            "The GPU waits between steps although the DataLoader has worker processes: raise "
            "num_workers and prefetch_factor, pin_memory=True, or move preprocessing to the GPU."
        )
    return (
        "The GPU waits between steps: give the DataLoader more workers, pin_memory=True and "
        "prefetching, or move preprocessing to the GPU."
    )


def fusion(ctx: Context) -> str:
    """Next steps against memory-bound (unfused) kernel time."""
    parts = []
    if ctx.uses("torch_compile"):
        parts.append(
            "the model is compiled already: look for graph breaks that split fusions "
            '(TORCH_LOGS=graph_breaks) and try mode="max-autotune"'
        )
    else:
        parts.append("fuse pointwise chains with torch.compile")
    if ctx.run.get("fused_optimizer") is not True:
        parts.append("use a fused optimizer (fused=True)")
    parts.append("fused norms and scaled_dot_product_attention")
    if not ctx.run.get("amp_dtype"):
        parts.append("keep activations in 16-bit")
    text = "; ".join(parts)
    return text[0].upper() + text[1:] + "."


#: GPUs with Tensor Cores but neither bf16 nor TF32 (compute capability 7.x).
VOLTA_TURING = re.compile(r"V100|T4\b|Titan V|RTX 20\d0|Quadro RTX|TITAN RTX|GTX 16", re.I)


def arch(ctx: Context, rank: int, device: int) -> str | None:
    """`volta_turing` for a compute capability 7.x GPU (by capability, else name)."""
    for d in ctx.meta.devices:
        if (d.rank, d.device) != (rank, device):
            continue
        if d.compute_capability:
            return "volta_turing" if d.compute_capability.startswith("7") else None
        if d.name and VOLTA_TURING.search(d.name):
            return "volta_turing"
    return None
