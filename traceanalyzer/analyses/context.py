"""Run context: what the run already uses (torch.compile, CUDA graphs, DDP, AMP, ...), read
off the names the trace holds, so that advice never recommends what the run already does,
and what program ran (`framework`: PyTorch, TensorRT, XLA or a CUDA program of its own), so
that advice is written for it: no torch.compile for a program without PyTorch.

`torch_compile` is `"partial"` where compiled regions run but Inductor's kernels are under
COMPILED_SHARE of the kernels. Each entry is `True`/`False`/a value, or `None` where the trace
cannot tell: a Chrome trace
without CPU operators (or an Nsight export, which records no framework operators) cannot say
that the model is *not* compiled, only that it is when its kernels say so.

The names are matched once per distinct name (a few thousand), never per event.
"""

from __future__ import annotations

import re
from typing import Any

import polars as pl

from traceanalyzer.analyses.facts import RunFacts
from traceanalyzer.analyses.metrics import Metrics
from traceanalyzer.model import Kind, Timeline, TraceMeta

_HOST = [Kind.CPU_OP.value, Kind.ANNOTATION.value, Kind.RUNTIME.value, Kind.DRIVER.value]

#: torch.compile's host ranges and operators (Dynamo, AOTAutograd, Inductor).
COMPILE_HOST = re.compile(
    r"Torch-Compiled Region|CompiledFunction|CompiledFxGraph|TorchDynamo|torch/_dynamo"
    r"|torch/_inductor|compile_fx|_compile\.compile_inner"
)
#: Inductor's generated kernels: triton_poi_fused_*, triton_red_fused_*, triton_per_fused_*.
COMPILE_KERNEL = re.compile(r"^triton_(?:poi|red|per|tem|for)_")
GRAPH_LAUNCH = re.compile(r"^(?:cuda|hip|cu)GraphLaunch(?:_v\d+)?$")
DDP = re.compile(r"DistributedDataParallel|nn/parallel/distributed\.py")
FSDP = re.compile(r"FullyShardedDataParallel|^FSDP::|FSDP\.|fsdp", re.IGNORECASE)
GRAD_SCALER = re.compile(r"_amp_foreach_non_finite_check_and_unscale|_amp_update_scale")
FUSED_OPT = re.compile(r"_fused_(?:adamw?|sgd|adagrad)_?|FusedAdam|fused_adam", re.IGNORECASE)
OPTIMIZER = re.compile(r"^Optimizer\.step#|_foreach_(?:add|mul|addcdiv|lerp|sqrt)")
LOADER_MULTI = re.compile(r"_MultiProcessingDataLoaderIter")
LOADER_SINGLE = re.compile(r"_SingleProcessDataLoaderIter")
AMD_DEVICE = re.compile(r"AMD|Instinct|Radeon|\bMI\d{2,3}", re.IGNORECASE)
NVIDIA_DEVICE = re.compile(r"NVIDIA|Tesla|GeForce|Quadro|\b[HABLV]\d{2,3}\b|RTX|GB\d{3}")
AMD_API = re.compile(r"^hip[A-Z]")
NVIDIA_API = re.compile(r"^cu(?:da)?[A-Z]")
#: What program ran (`framework`), by its names: PyTorch's operators, steps and kernels;
#: TensorRT's engine calls and kernels; XLA's (JAX, TensorFlow) fusions and executables.
PYTORCH_HOST = re.compile(r"^aten::|^ProfilerStep#|^autograd::|^torch\.|^c10d::|^nccl:")
PYTORCH_KERNEL = re.compile(r"at::native::|^triton_(?:poi|red|per|tem|for)_|c10::")
TENSORRT = re.compile(
    r"TensorRT|ExecutionContext::enqueue|enqueueV\d|^trt_|_trt_|\btrt\b|tensorrt",
    re.IGNORECASE,
)
XLA = re.compile(r"^jit_|XLA|PjRt|^xla::|\bpjit\b|^(?:loop|input|wrapped)_\w*fusion")
#: GEMM input dtypes (as torch records them) of mixed precision.
LOW_PRECISION = {"c10::BFloat16": "bfloat16", "c10::Half": "float16"}
FP8 = ("c10::Float8_e4m3fn", "c10::Float8_e5m2")

__all__ = ["CONTEXT_KEYS", "RunFacts", "decide", "facts"]

CONTEXT_KEYS = (
    "torch_compile",
    "cuda_graphs",
    "ddp",
    "fsdp",
    "amp_dtype",
    "grad_scaler",
    "fused_optimizer",
    "dataloader_workers",
    "vendor",
    "framework",
    "profiler_overhead",
)


def _names(timeline: Timeline, kinds: list[str]) -> frozenset[str]:
    return frozenset(
        timeline.events.lazy()
        .filter(pl.col("kind").is_in(kinds))
        .select(pl.col("name").unique().cast(pl.String))
        .drop_nulls()
        .collect()["name"]
        .to_list()
    )


def _any(pattern: re.Pattern[str], names: frozenset[str]) -> bool:
    return any(pattern.search(n) for n in names)


def replays_graphs(found: RunFacts) -> bool:
    """Whether the run replays CUDA (or HIP) graphs: a graph launch among its host calls
    (the run context's `cuda_graphs`)."""
    return _any(GRAPH_LAUNCH, found.host)


def facts(timeline: Timeline) -> RunFacts:
    """The run facts of `timeline` (names matched later, once per distinct name)."""
    has = (
        timeline.events.lazy()
        .select(
            ops=(pl.col("kind") == Kind.CPU_OP.value).any(),
            runtime=pl.col("kind").is_in([Kind.RUNTIME.value, Kind.DRIVER.value]).any(),
            python=(pl.col("kind") == Kind.PYTHON.value).any(),
            memory=(pl.col("kind") == Kind.MEMORY.value).any(),
            shapes=pl.col("input_dims").is_not_null().any(),
        )
        .collect()
        .row(0, named=True)
    )
    counts = (
        timeline.events.lazy()
        .filter(pl.col("kind") == Kind.KERNEL.value)
        .group_by("name")
        .len()
        .with_columns(pl.col("name").cast(pl.String))
        .collect()
    )
    mine = counts.filter(pl.col("name").str.contains(COMPILE_KERNEL.pattern))
    return RunFacts(
        host=_names(timeline, _HOST),
        frames=_names(timeline, [Kind.PYTHON.value]),  # with_stack: module paths tell DDP/FSDP
        kernels=_names(timeline, [Kind.KERNEL.value]),
        has=tuple((k, bool(v)) for k, v in has.items()),
        launches=int(counts["len"].sum() or 0),
        inductor_launches=int(mine["len"].sum() or 0),
    )


def decide(found: RunFacts, meta: TraceMeta, metrics: Metrics) -> dict[str, Any]:
    """The run's context (CONTEXT_KEYS); see the module docs for what each means."""
    host, frames, kernels, has = found.host, found.frames, found.kernels, dict(found.has)
    ops = bool(has["ops"])

    def seen(pattern: re.Pattern[str]) -> bool | None:
        """True when a host name matches; False when operators were recorded and none does."""
        return True if _any(pattern, host) else (False if ops else None)

    compiled: bool | str = _any(COMPILE_HOST, host) or _any(COMPILE_KERNEL, kernels)
    if compiled and _compiled_share(found) < COMPILED_SHARE:
        compiled = "partial"  # a compiled region or two; most of the model runs eagerly
    graphs = replays_graphs(found)
    fused = _any(FUSED_OPT, host) or _any(FUSED_OPT, kernels)
    optimizer = _any(OPTIMIZER, host)
    loader: int | bool | None = None
    if _any(LOADER_MULTI, host):
        loader = True  # worker processes; their number is not recorded
    elif _any(LOADER_SINGLE, host):
        loader = 0
    return {
        "torch_compile": compiled if compiled else (False if ops else None),
        "cuda_graphs": True if graphs else (False if has["runtime"] else None),
        "ddp": True if _any(DDP, frames) else seen(DDP),
        "fsdp": True if _any(FSDP, frames) else seen(FSDP),
        "amp_dtype": _amp_dtype(metrics),
        "grad_scaler": seen(GRAD_SCALER),
        "fused_optimizer": True if fused else (False if optimizer else None),
        "dataloader_workers": loader,
        "vendor": _vendor(meta, host, kernels),
        "framework": _framework(meta, host, kernels),
        "profiler_overhead": {
            "stacks": bool(has["python"]),
            "memory": bool(has["memory"]),
            "shapes": bool(has["shapes"]),
        },
    }


#: torch_compile is `true` when Inductor's kernels are at least this share of the kernels
#: launched, else `"partial"`.
COMPILED_SHARE = 0.05


def _compiled_share(found: RunFacts) -> float:
    """The share of kernel launches that are Inductor-generated (1.0 without kernels)."""
    return found.inductor_launches / found.launches if found.launches else 1.0


def _amp_dtype(metrics: Metrics) -> str | bool | None:
    """The 16- or 8-bit dtype most GEMM time runs in ("bfloat16", "float16", "float8"); False
    where most GEMM time is FP32; None without recorded shapes."""
    shapes = metrics.shapes.matmuls
    if shapes.height == 0:
        return None
    by = (
        shapes.group_by("dtype")
        .agg(pl.col("kernel_ns").sum())
        .sort(["kernel_ns", "dtype"], descending=[True, False])
    )
    top = by["dtype"][0]
    if top in LOW_PRECISION:
        return LOW_PRECISION[top]
    if top in FP8:
        return "float8"
    if top == "float":
        return False
    return None


def _framework(meta: TraceMeta, host: frozenset[str], kernels: frozenset[str]) -> str | None:
    """ "pytorch", "tensorrt", "xla" (JAX, TensorFlow) or "cuda" (a CUDA or C++ program of
    its own, under Nsight: none of the others' names), from the host names and kernels; a
    torch.profiler trace is PyTorch's. None where the trace cannot tell."""
    if _any(TENSORRT, host) or _any(TENSORRT, kernels):
        return "tensorrt"
    if meta.format == "chrome" and (meta.producer or "").startswith("torch"):
        return "pytorch"
    if _any(PYTORCH_HOST, host) or _any(PYTORCH_KERNEL, kernels):
        return "pytorch"
    if _any(XLA, host) or _any(XLA, kernels):
        return "xla"
    if meta.format.startswith("nsys"):
        return "cuda"
    return None


def _vendor(meta: TraceMeta, host: frozenset[str], kernels: frozenset[str]) -> str | None:
    """ "amd" or "nvidia", from the device names, else the runtime API's names."""
    names = [d.name or "" for d in meta.devices]
    if any(AMD_DEVICE.search(n) for n in names):
        return "amd"
    if any(NVIDIA_DEVICE.search(n) for n in names):
        return "nvidia"
    if _any(AMD_API, host) or any(k.startswith("Cijk_") for k in kernels):
        return "amd"
    if _any(NVIDIA_API, host):
        return "nvidia"
    return None
