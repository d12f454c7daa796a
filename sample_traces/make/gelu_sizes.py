"""gelu_sizes: a hand-written tanh GELU inside an MLP block, at three widths, so that the price of
fusing it (one F.gelu(approximate='tanh') kernel instead of a chain of elementwise kernels) can
be checked against a measured saving at each size.

Model: MLP_BLOCKS = 2 pre-norm MLP blocks, each x = x + fc2(act(fc1(LayerNorm(x)))), fc1 w -> 4w,
fc2 4w -> w (nn.Linear with bias); widths w = 1024, 2048, 4096; the same TOKENS = 8192 rows
(batch 8 x 1024 tokens) at every width; bf16 autocast, loss = out.float().square().mean(),
backward, AdamW(fused=True), zero_grad(set_to_none=True); one random bf16-autocast input made on
the GPU up front. The activation:
  handwritten  0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x**3)))   (each op one kernel,
               forward and backward: ~8 forward and ~15 backward elementwise kernels per block)
  fused        F.gelu(x, approximate="tanh")                              (1 + 1 kernels)
Each width: both variants timed WITHOUT the profiler (3 warm-up steps, synchronize, 10 steps,
synchronize, mean ms per step; 2 rounds interleaved), then the hand-written one profiled: 2
un-profiled steps, profile(activities=[CPU, CUDA], schedule(wait=1, warmup=2, active=3),
record_shapes=True), ProfilerStep#3..#5 -> OUTDIR/gelu_handwritten_w<w>.json.gz.

Expected: at every width an unfused-elementwise (fusion) finding on the GELU chain, whose
saving is priced about handwritten_step_ms - fused_step_ms (facts per width); the GEMMs run on
Tensor Cores (no TA005); the relative saving shrinks as the width grows (GEMM FLOPs grow as w^2,
the GELU traffic as w).

usage: python3 gelu_sizes.py OUTDIR [WIDTH ...]
"""

from __future__ import annotations

import math
import os
import sys
import time

import common as C
import torch
import torch.nn as nn
import torch.nn.functional as F
import tracefacts

TOKENS = 8192
MLP_BLOCKS = 2
WIDTHS = (1024, 2048, 4096)
WARMUP, TIMED, ROUNDS = 3, 10, 2
K = math.sqrt(2.0 / math.pi)


def gelu_handwritten(x: torch.Tensor) -> torch.Tensor:
    return 0.5 * x * (1.0 + torch.tanh(K * (x + 0.044715 * torch.pow(x, 3.0))))


def gelu_fused(x: torch.Tensor) -> torch.Tensor:
    return F.gelu(x, approximate="tanh")


class MLPBlock(nn.Module):
    def __init__(self, d: int, act) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)
        self.act = act

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(self.act(self.fc1(self.ln(x))))


class MLP(nn.Module):
    def __init__(self, d: int, act) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([MLPBlock(d, act) for _ in range(MLP_BLOCKS)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for b in self.blocks:
            x = b(x)
        return x


def make(d: int, act):
    C.seed_all(0)
    model = MLP(d, act).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    g = torch.Generator(device="cuda")
    g.manual_seed(1234)
    x = torch.randn(TOKENS, d, device="cuda", generator=g)

    def step() -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = model(x)
        loss = out.float().square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def time_steps(step) -> float:
    for _ in range(WARMUP):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(TIMED):
        step()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3 / TIMED


def main() -> None:
    outdir = sys.argv[1]
    widths = [int(w) for w in sys.argv[2:]] or list(WIDTHS)
    os.makedirs(outdir, exist_ok=True)
    C.env_facts("gelu_sizes")
    for d in widths:
        scenario = f"gelu_handwritten_w{d}"
        hand, fused = make(d, gelu_handwritten), make(d, gelu_fused)
        r = {"handwritten": [], "fused": []}
        for _ in range(ROUNDS):
            r["handwritten"].append(round(time_steps(hand), 3))
            r["fused"].append(round(time_steps(fused), 3))
        h = sum(r["handwritten"]) / ROUNDS
        f = sum(r["fused"]) / ROUNDS
        C.fact(
            scenario=scenario,
            width=d,
            tokens=TOKENS,
            blocks=MLP_BLOCKS,
            handwritten_step_ms=round(h, 3),
            fused_step_ms=round(f, 3),
            saving_ms=round(h - f, 3),
            saving_share=round((h - f) / h, 4),
            handwritten_rounds_ms=r["handwritten"],
            fused_rounds_ms=r["fused"],
            gelu_elements_per_block=TOKENS * 4 * d,
            warmup=WARMUP,
            timed=TIMED,
            max_mem_allocated_mib=round(torch.cuda.max_memory_allocated() / 2**20, 1),
        )
        C.fact(
            scenario=scenario,
            truth={
                "expect": "an unfused-elementwise (fusion) finding on the hand-written tanh GELU "
                "chain, priced about handwritten_step_ms - fused_step_ms",
                "fix": "F.gelu(x, approximate='tanh') (one kernel forward, one backward)",
                "never": ["no tensor cores"],
            },
        )
        del fused
        out = os.path.join(outdir, f"{scenario}.json.gz")
        for _ in range(2):
            hand()
        torch.cuda.synchronize()
        with C.make_profiler(out, wait=1, warmup=2, active=3) as prof:
            for _ in range(6):
                hand()
                prof.step()
        torch.cuda.synchronize()
        C.fact(scenario=scenario, trace_facts=tracefacts.trace_facts(out))
        del hand
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
