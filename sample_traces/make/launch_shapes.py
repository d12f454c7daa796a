"""launch_shapes: torch.profiler traces whose kernels' launch shapes (grid, block, registers per
thread, shared memory, est. achieved occupancy: the kernel events' args) carry the diagnosis.
Each process first times its variants WITHOUT the profiler (gpu_metrics_loops.time_steps:
3 warm-up steps, torch.cuda.synchronize(), 10 steps, synchronize, mean ms per step from the
host clock; 2 rounds interleaved), prints them as FACT lines, THEN profiles its own variant: 2
un-profiled steps, then `profile(activities=[CPU, CUDA], schedule(wait=1, warmup=2, active=3),
record_shapes=True)`, prof.step() per step (ProfilerStep#3..#5 recorded), export_chrome_trace,
gzip -9, and prints facts read back from the trace (tracefacts.trace_facts, and every kernel
name's count, time, grid, block, registers, shared memory, occupancy).

usage: python3 launch_shapes.py SCENARIO OUTDIR   (writes OUTDIR/launch_<scenario>.json.gz)

  one_block     gpu_metrics_loops' one_block_kernel: the Triton axpb_kernel (grid-stride loop,
                BLOCK 1024, 4 warps) launched with grid (1,) over 2^24 fp32 elements, 2 launches
                per step. Truth: the GPU is busy the whole step but one block runs (1 of 132
                SMs); a launch-shape finding, priced by the fix: grid = cdiv(n, 1024) = 16384
                (timed here, fact fixed_step_ms). File launch_one_block.json.gz.
  gemm_healthy  gpu_metrics_loops' gemm_healthy: 32 bf16 GEMMs 8192^3 per step. Truth:
                compute-bound on Tensor Cores, every GEMM's grid fills the SMs: no launch-shape
                finding, nothing serious. File launch_gemm_healthy.json.gz.
  small_batch   a batch-1 inference loop as a library runs it: SMALL_LAYERS = 16 layers, each
                h = F.layer_norm(x, (4096,)); x = x + F.linear(h, W_i) (W_i 4096 x 4096 bf16,
                its own per layer, 512 MiB in all, so no weight stays in the 60 MB L2),
                x of shape (1, 4096) bf16, under torch.no_grad(). Seen on the H200 (torch
                2.11): the layer norm runs one block per row (grid [1,1,1]: 1 of 132 SMs) and
                the residual add grid [4,1,1]; cuBLAS runs each GEMV split-K
                (nvjet ..._splitK_TNT, grid [2,64,1] = 128 blocks, 1 per SM by its registers
                and shared memory, ~10.5 us: the weight streamed at ~3.2 TB/s) plus a
                splitKreduce (128 blocks). Truth: underfilled library kernels at batch 1 (the
                layer norm, the add); the GEMV is NOT underfilled (split-K fills 128 SMs);
                the step is host/launch-bound (64 short kernels, ~0.31 ms of kernels in a
                ~1 ms step). The fix is to batch: the same loop with x of (64, 4096) (fact
                batched_step_ms; 64 rows cost about what 1 row costs, so per row the saving
                is ~64x). File launch_small_batch.json.gz.
"""

from __future__ import annotations

import gzip
import json
import os
import sys

import common as C
import gpu_metrics_loops as G
import torch
import torch.nn.functional as F
import tracefacts

SMALL_WIDTH = 4096
SMALL_LAYERS = 16
SMALL_BATCHED = 64


def small_batch_step(rows: int):
    g = torch.Generator(device="cuda")
    g.manual_seed(0)
    d = SMALL_WIDTH
    ws = [
        torch.randn(d, d, device="cuda", dtype=torch.bfloat16, generator=g) / d**0.5
        for _ in range(SMALL_LAYERS)
    ]
    ln_w = torch.ones(d, device="cuda", dtype=torch.bfloat16)
    ln_b = torch.zeros(d, device="cuda", dtype=torch.bfloat16)
    x0 = torch.randn(rows, d, device="cuda", dtype=torch.bfloat16, generator=g)

    def step() -> None:
        with torch.no_grad():
            x = x0
            for w in ws:
                h = F.layer_norm(x, (d,), ln_w, ln_b)
                x = x + F.linear(h, w)

    return step


def kernel_shapes(path: str) -> list[dict]:
    """Per kernel name: count, total µs, and the launch args of its first event."""
    with gzip.open(path, "rt") as f:
        ev = json.load(f)["traceEvents"]
    rows: dict[str, dict] = {}
    for e in ev:
        if e.get("ph") != "X" or e.get("cat") != "kernel":
            continue
        a = e.get("args", {})
        r = rows.setdefault(
            e["name"],
            {
                "name": e["name"][:160],
                "count": 0,
                "us": 0.0,
                "grid": a.get("grid"),
                "block": a.get("block"),
                "registers_per_thread": a.get("registers per thread"),
                "shared_memory": a.get("shared memory"),
                "blocks_per_sm": a.get("blocks per SM"),
                "warps_per_sm": a.get("warps per SM"),
                "est_achieved_occupancy_pct": a.get("est. achieved occupancy %"),
            },
        )
        r["count"] += 1
        r["us"] += e["dur"]
    out = sorted(rows.values(), key=lambda r: -r["us"])
    for r in out:
        r["us"] = round(r["us"], 1)
        g = r["grid"] or [0]
        r["blocks"] = int(g[0] * (g[1] if len(g) > 1 else 1) * (g[2] if len(g) > 2 else 1))
    return out


def profile_steps(step, out: str, scenario: str) -> None:
    wait, warmup, active = 1, 2, 3
    for _ in range(2):
        step()
    torch.cuda.synchronize()
    with C.make_profiler(out, wait, warmup, active) as prof:
        for _ in range(wait + warmup + active):
            step()
            prof.step()
    torch.cuda.synchronize()
    C.fact(scenario=scenario, trace_facts=tracefacts.trace_facts(out))
    C.fact(scenario=scenario, kernel_shapes=kernel_shapes(out))


def main() -> None:
    scenario, outdir = sys.argv[1], sys.argv[2]
    os.makedirs(outdir, exist_ok=True)
    out = os.path.join(outdir, f"launch_{scenario}.json.gz")
    C.seed_all(0)
    C.env_facts(scenario)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    if scenario == "one_block":
        pit, fix = G.make("one_block_kernel"), G.make("one_block_kernel_fixed")
        r = G.timed_rounds({"pitfall": pit, "fixed": fix})
        p, f = (sum(r[k]) / len(r[k]) for k in ("pitfall", "fixed"))
        C.fact(
            scenario=scenario,
            pitfall_step_ms=round(p, 3),
            fixed_step_ms=round(f, 3),
            saving_ms=round(p - f, 3),
            saving_share=round((p - f) / p, 4),
            pitfall_rounds_ms=r["pitfall"],
            fixed_rounds_ms=r["fixed"],
            **G.sizes("one_block_kernel"),
        )
        C.fact(
            scenario=scenario,
            truth={
                "expect": "launch-shape finding: axpb_kernel grid (1,) = 1 block on "
                f"{sms} SMs while the GPU timeline is ~100 % busy; saving ~ pitfall - fixed",
                "fix": "grid = cdiv(n, BLOCK)",
                "never": ["GPU starvation", "launch overhead"],
            },
        )
        step = pit
    elif scenario == "gemm_healthy":
        step = G.make("gemm_healthy")
        r = G.timed_rounds({"step": step})["step"]
        C.fact(
            scenario=scenario,
            step_ms=round(sum(r) / len(r), 3),
            rounds_ms=r,
            **G.sizes("gemm_healthy"),
        )
        C.fact(
            scenario=scenario,
            truth={
                "expect": "compute-bound on Tensor Cores, grids fill the SMs: no launch-shape "
                "finding, nothing serious",
                "never": ["launch-shape / underfilled grid", "memory-bound", "GPU starvation"],
            },
        )
    elif scenario == "small_batch":
        pit, fix = small_batch_step(1), small_batch_step(SMALL_BATCHED)
        r = G.timed_rounds({"pitfall": pit, "fixed": fix})
        p, f = (sum(r[k]) / len(r[k]) for k in ("pitfall", "fixed"))
        C.fact(
            scenario=scenario,
            pitfall_step_ms=round(p, 3),
            batched_step_ms=round(f, 3),
            batched_rows=SMALL_BATCHED,
            pitfall_ms_per_row=round(p, 4),
            batched_ms_per_row=round(f / SMALL_BATCHED, 4),
            saving_ms_for_64_rows=round(SMALL_BATCHED * p - f, 3),
            pitfall_rounds_ms=r["pitfall"],
            batched_rounds_ms=r["fixed"],
            width=SMALL_WIDTH,
            layers=SMALL_LAYERS,
            dtype="bfloat16",
        )
        C.fact(
            scenario=scenario,
            truth={
                "expect": "underfilled library kernels at batch 1: the layer norm (grid 1) and "
                f"the residual add (grid 4) launch far fewer blocks than the {sms} SMs; "
                "cuBLAS's GEMV runs split-K with 128 blocks (not underfilled); the step is "
                "host/launch-bound; the fix is batching (64 rows per step cost about one "
                "row's step)",
                "fix": "batch 64 rows at once",
            },
        )
        step = pit
    else:
        raise SystemExit(__doc__)
    profile_steps(step, out, scenario)


if __name__ == "__main__":
    main()
