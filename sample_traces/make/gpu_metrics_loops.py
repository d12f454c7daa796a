"""gpu_metrics_loops: three loops of known hardware behaviour, for Nsight Systems with GPU metrics
(`nsys profile -t cuda,nvtx --sample=none --cpuctxsw=none --gpu-metrics-devices=all`, from
process start; run_counters.sh records them into tests/data/counters/*.sqlite.gz).

Each run: STEPS = 10 steps, each inside an NVTX range `step_N` (torch.cuda.nvtx.range_push /
range_pop), no warm-up before step_0 (step_0 holds the one-time work: cuBLAS handle, Triton's
kernel load, allocator growth); the inputs are made on the GPU before step_0; nothing in the
steps syncs the host except where a scenario says so (none does).

  gemm_healthy       bf16 GEMMs, 8192 x 8192 @ 8192 x 8192 (torch.mm(a, b, out=c)), GEMMS_PER_STEP
                     = 32 per step back to back (~1.1 TFLOP each). Expected: Tensor Active high,
                     SMs Active high, compute-bound (DRAM throughput modest), the timeline busy;
                     no launch-shape finding (every GEMM fills the 132 SMs). The GPC clock under
                     load is recorded in the facts (from the GPU_METRICS samples).
  memory_bound_adds  fp32 elementwise adds torch.add(x, y, out=z) over ADD_NUMEL = 2^28 elements
                     (1 GiB each of x, y, z; 3 GiB moved per add), ADDS_PER_STEP = 48 per step.
                     Expected: DRAM Read + Write throughput high (at the HBM roof), Tensor Active
                     ~0, memory-bound; the timeline busy.
  one_block_kernel   a Triton kernel (axpb_kernel: y = 2 x + 1, a grid-stride loop over n
                     elements, BLOCK = 1024, 4 warps) launched with grid (1,) over ONE_N = 2^24
                     fp32 elements, ONE_LAUNCHES = 2 per step back to back. Expected: the timeline
                     ~100 % busy, but one SM of 132 works (SMs Active ~1/132 of the GPU, DRAM
                     throughput ~0): a launch-shape finding (grid far below the SM count). The
                     fix: the same kernel with grid = cdiv(n, BLOCK) (16384 programs, one
                     iteration each); both are timed with --time.

usage: python3 gpu_metrics_loops.py SCENARIO    (the capture workload: 10 steps under NVTX)
       python3 gpu_metrics_loops.py --time      (no profiler: each scenario's mean step time,
                                                 and the one-block fix; prints FACT lines)
--time (and launch_shapes.py) times a variant as: WARMUP = 3 steps, torch.cuda.synchronize(),
TIMED = 10 steps, torch.cuda.synchronize(), mean ms per step from the host clock; ROUNDS = 2
rounds interleaved (pitfall, fix, pitfall, fix). Run --time before the captures: it also fills
Triton's on-disk cache, so the capture's step_0 loads the kernel instead of compiling it.
"""

from __future__ import annotations

import sys
import time

import common as C
import torch
import triton
import triton.language as tl

STEPS = 10
GEMM_N = 8192
GEMMS_PER_STEP = 32
ADD_NUMEL = 1 << 28
ADDS_PER_STEP = 48
ONE_N = 1 << 24
ONE_BLOCK = 1024
ONE_LAUNCHES = 2
WARMUP, TIMED, ROUNDS = 3, 10, 2
SCENARIOS = ("gemm_healthy", "memory_bound_adds", "one_block_kernel")


@triton.jit
def axpb_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    """y = 2 x + 1 over n elements, a grid-stride loop: program p does blocks p, p + P, ..."""
    pid = tl.program_id(0)
    nprog = tl.num_programs(0)
    for start in range(pid * BLOCK, n, nprog * BLOCK):
        offs = start + tl.arange(0, BLOCK)
        m = offs < n
        x = tl.load(x_ptr + offs, mask=m)
        tl.store(y_ptr + offs, x * 2.0 + 1.0, mask=m)


def axpb(x: torch.Tensor, y: torch.Tensor, programs: int) -> None:
    axpb_kernel[(programs,)](x, y, x.numel(), BLOCK=ONE_BLOCK, num_warps=4)


def make(scenario: str):
    """The scenario's inputs (made on the GPU) and its step function."""
    g = torch.Generator(device="cuda")
    g.manual_seed(0)
    if scenario == "gemm_healthy":
        a = torch.randn(GEMM_N, GEMM_N, device="cuda", dtype=torch.bfloat16, generator=g)
        b = torch.randn(GEMM_N, GEMM_N, device="cuda", dtype=torch.bfloat16, generator=g)
        c = torch.empty_like(a)

        def step() -> None:
            for _ in range(GEMMS_PER_STEP):
                torch.mm(a, b, out=c)

        return step
    if scenario == "memory_bound_adds":
        x = torch.randn(ADD_NUMEL, device="cuda", generator=g)
        y = torch.randn(ADD_NUMEL, device="cuda", generator=g)
        z = torch.empty_like(x)

        def step() -> None:
            for _ in range(ADDS_PER_STEP):
                torch.add(x, y, out=z)

        return step
    if scenario in ("one_block_kernel", "one_block_kernel_fixed"):
        x = torch.randn(ONE_N, device="cuda", generator=g)
        y = torch.empty_like(x)
        programs = 1 if scenario == "one_block_kernel" else triton.cdiv(ONE_N, ONE_BLOCK)

        def step() -> None:
            for _ in range(ONE_LAUNCHES):
                axpb(x, y, programs)

        return step
    raise SystemExit(f"unknown scenario {scenario!r}")


def time_steps(step, warmup: int = WARMUP, n: int = TIMED) -> float:
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        step()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3 / n


def timed_rounds(steps: dict[str, object], rounds: int = ROUNDS) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {k: [] for k in steps}
    for _ in range(rounds):
        for k, fn in steps.items():
            out[k].append(round(time_steps(fn), 3))
    return out


def clock_mhz() -> int | None:
    try:
        return int(torch.cuda.clock_rate())
    except Exception:  # pynvml missing or unreadable
        return None


def truth(scenario: str) -> dict:
    return {
        "gemm_healthy": {
            "bound": "compute",
            "expect": "Tensor Active and SMs Active high, DRAM throughput modest, timeline busy; "
            "no launch-shape finding (each GEMM's grid fills the 132 SMs)",
            "never": ["memory-bound", "launch-shape / underfilled grid", "GPU starvation"],
        },
        "memory_bound_adds": {
            "bound": "memory",
            "expect": "DRAM Read + Write throughput high (HBM roof), Tensor Active ~0, "
            "memory-bound elementwise kernels, timeline busy",
            "never": ["no tensor cores as the headline", "launch-shape / underfilled grid"],
        },
        "one_block_kernel": {
            "bound": "launch shape (grid (1,) on 132 SMs)",
            "expect": "timeline ~100 % busy but SMs Active ~1/132 (one SM), DRAM throughput "
            "~0; a launch-shape finding priced by the grid=cdiv(n, BLOCK) saving",
            "fix": "grid = cdiv(n, BLOCK) = 16384 programs (same kernel)",
            "never": ["GPU starvation (the GPU is never idle)", "memory-bound"],
        },
    }[scenario]


def run_capture(scenario: str) -> None:
    C.seed_all(0)
    C.env_facts(scenario)
    step = make(scenario)
    C.fact(scenario=scenario, steps=STEPS, truth=truth(scenario), **sizes(scenario))
    torch.cuda.synchronize()
    host_ms = []
    for i in range(STEPS):
        torch.cuda.nvtx.range_push(f"step_{i}")
        t0 = time.perf_counter()
        step()
        host_ms.append(round((time.perf_counter() - t0) * 1e3, 3))
        torch.cuda.nvtx.range_pop()
    torch.cuda.synchronize()
    C.fact(scenario=scenario, step_host_ms_under_nsys=host_ms, gpu_clock_mhz_after=clock_mhz())


def sizes(scenario: str) -> dict:
    if scenario == "gemm_healthy":
        return {
            "gemm": [GEMM_N] * 3,
            "dtype": "bfloat16",
            "gemms_per_step": GEMMS_PER_STEP,
            "flop_per_gemm": 2 * GEMM_N**3,
        }
    if scenario == "memory_bound_adds":
        return {
            "numel": ADD_NUMEL,
            "dtype": "float32",
            "adds_per_step": ADDS_PER_STEP,
            "bytes_per_add": 3 * 4 * ADD_NUMEL,
        }
    return {
        "numel": ONE_N,
        "dtype": "float32",
        "block": ONE_BLOCK,
        "num_warps": 4,
        "launches_per_step": ONE_LAUNCHES,
        "grid": [1],
        "fixed_grid": [triton.cdiv(ONE_N, ONE_BLOCK)],
        "bytes_per_launch": 2 * 4 * ONE_N,
    }


def run_time() -> None:
    C.seed_all(0)
    C.env_facts("gpu_metrics_loops_time")
    C.fact(scenario="gpu_metrics_loops_time", gpu_clock_mhz_idle=clock_mhz())
    for scenario in ("gemm_healthy", "memory_bound_adds"):
        r = timed_rounds({"step": make(scenario)})["step"]
        ms = min(r)
        extra = {}
        if scenario == "gemm_healthy":
            extra["tflops"] = round(GEMMS_PER_STEP * 2 * GEMM_N**3 / (ms * 1e-3) / 1e12, 1)
        else:
            extra["gbps"] = round(ADDS_PER_STEP * 3 * 4 * ADD_NUMEL / (ms * 1e-3) / 1e9, 1)
        C.fact(
            scenario=scenario,
            step_ms=round(sum(r) / len(r), 3),
            rounds_ms=r,
            gpu_clock_mhz_after=clock_mhz(),
            warmup=WARMUP,
            timed=TIMED,
            **extra,
        )
        torch.cuda.empty_cache()
    r = timed_rounds({"pitfall": make("one_block_kernel"), "fixed": make("one_block_kernel_fixed")})
    p = sum(r["pitfall"]) / len(r["pitfall"])
    f = sum(r["fixed"]) / len(r["fixed"])
    C.fact(
        scenario="one_block_kernel",
        pitfall_step_ms=round(p, 3),
        fixed_step_ms=round(f, 3),
        saving_ms=round(p - f, 3),
        saving_share=round((p - f) / p, 4),
        pitfall_rounds_ms=r["pitfall"],
        fixed_rounds_ms=r["fixed"],
        per_launch_ms={
            "grid_1": round(p / ONE_LAUNCHES, 3),
            "grid_cdiv": round(f / ONE_LAUNCHES, 4),
        },
        warmup=WARMUP,
        timed=TIMED,
    )


if __name__ == "__main__":
    arg = sys.argv[1] if len(sys.argv) > 1 else "--time"
    if arg == "--time":
        run_time()
    elif arg in SCENARIOS:
        run_capture(arg)
    else:
        raise SystemExit(__doc__)
