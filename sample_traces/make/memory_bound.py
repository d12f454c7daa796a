"""memory_bound: eager bf16 training dominated by unfused pointwise/normalisation kernels.

A residual stack of 8 blocks on large activations (64 x 1024 tokens x width 1024, bf16:
128 MiB per activation tensor). Each block runs a long chain of unfused elementwise and
reduction ops on the full tensor and only two small matmuls (a width-1024 -> 128 -> 1024
bottleneck):

    h = layer_norm(x); g = h * sigmoid(h); g = dropout(g, 0.1)
    s = softmax(g * 0.5, dim=-1); h = g * s + h
    h = h + up(gelu(down(h)))                 # Linear(1024, 128), Linear(128, 1024)
    x = x + h * gamma

Parameters and activations are bf16 throughout (the model is cast with `.to(bfloat16)`, no
autocast, so no cast kernels); loss `(out * out).mean()`; AdamW(fused=True); eager (no
torch.compile in the profiled run). Every kernel reads/writes 128-384 MiB (~0.1 ms at HBM
speed), far longer than its launch, so the GPU is the bottleneck. 2 steps before the
profiler, then schedule(wait=1, warmup=2, active=4).

After the profiled run (profiler off): the same model under torch.compile (Inductor fuses
the pointwise chains), step time by CUDA events, to show what fusion saves.
Expected: TA004 memory-bound on top; GPU-bound (not TA001/TA003).

usage: python3 memory_bound.py OUT.json.gz [--no-compile]
"""

import sys
import time

import common as C
import torch
import torch.nn as nn
import torch.nn.functional as F
import tracefacts

WAIT, WARMUP, ACTIVE = 1, 2, 4
BATCH, SEQ, WIDTH, BOTTLENECK, LAYERS = 64, 1024, 1024, 128, 8


class PointwiseBlock(nn.Module):
    def __init__(self, d: int, r: int) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(d)
        self.down = nn.Linear(d, r)
        self.up = nn.Linear(r, d)
        self.gamma = nn.Parameter(torch.full((d,), 0.1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.ln(x)
        g = h * torch.sigmoid(h)
        g = F.dropout(g, 0.1, self.training)
        s = torch.softmax(g * 0.5, dim=-1)
        h = g * s + h
        h = h + self.up(F.gelu(self.down(h)))
        return x + h * self.gamma


class PointwiseNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([PointwiseBlock(WIDTH, BOTTLENECK) for _ in range(LAYERS)])
        self.ln_f = nn.LayerNorm(WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for b in self.blocks:
            x = b(x)
        return self.ln_f(x)


def step(model, opt, x) -> torch.Tensor:
    out = model(x)
    loss = (out * out).mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss


def timed(model, opt, xs) -> list[float]:
    torch.cuda.synchronize()
    ev = []
    for x in xs:
        e = torch.cuda.Event(enable_timing=True)
        e.record()
        ev.append(e)
        step(model, opt, x)
    e = torch.cuda.Event(enable_timing=True)
    e.record()
    ev.append(e)
    torch.cuda.synchronize()
    return [round(ev[i].elapsed_time(ev[i + 1]), 3) for i in range(len(xs))]


def main() -> None:
    out = C.out_arg("memory_bound.json.gz")
    C.seed_all(0)
    C.env_facts("memory_bound")
    model = PointwiseNet().cuda().to(torch.bfloat16).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    g = torch.Generator(device="cuda")
    g.manual_seed(5)
    xs = [
        torch.randn(BATCH, SEQ, WIDTH, device="cuda", dtype=torch.bfloat16, generator=g)
        for _ in range(2)
    ]
    C.fact(
        scenario="memory_bound",
        params=C.model_params(model),
        activation_shape=[BATCH, SEQ, WIDTH],
        activation_mib=BATCH * SEQ * WIDTH * 2 / 2**20,
    )
    for i in range(2):
        step(model, opt, xs[i % 2])
    torch.cuda.synchronize()
    clock = C.StepClock()
    n = C.steps_total(WAIT, WARMUP, ACTIVE)
    with C.make_profiler(out, WAIT, WARMUP, ACTIVE) as prof:
        for i in range(n):
            clock.start(C.label(i, WAIT, WARMUP, ACTIVE))
            step(model, opt, xs[i % 2])
            clock.end_step()
            prof.step()
    clock.report("memory_bound")
    C.fact(scenario="memory_bound", trace=tracefacts.trace_facts(out))

    eager = timed(model, opt, [xs[i % 2] for i in range(6)])
    C.fact(scenario="memory_bound", unprofiled_eager_step_ms_cuda_events=eager)
    if "--no-compile" in sys.argv:
        return
    t0 = time.perf_counter()
    compiled = torch.compile(model)
    warm = timed(compiled, opt, [xs[i % 2] for i in range(3)])
    fused = timed(compiled, opt, [xs[i % 2] for i in range(6)])
    C.fact(
        scenario="memory_bound",
        compiled_warmup_s=round(time.perf_counter() - t0, 1),
        compiled_warmup_step_ms=warm,
        unprofiled_compiled_step_ms_cuda_events=fused,
    )


if __name__ == "__main__":
    main()
