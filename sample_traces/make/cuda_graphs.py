"""cuda_graphs: a whole training step of a small MLP captured in one CUDA graph and replayed.

An 8-block residual MLP (width 256, hidden 1024, LayerNorm, GELU), input 4 x 64 x 256, MSE
loss, AdamW(fused=True, capturable=True), forward under bf16 autocast (cache_enabled=False,
as graph capture needs), so the GEMMs run on Tensor Cores. The forward, backward and optimizer
step are
captured into one torch.cuda.CUDAGraph after eager warm-up on a side stream (the pattern of
the PyTorch CUDA-graphs docs), with static inputs (no per-step copy), and replayed once per
step. Expected: every kernel comes from a graph replay (`cudaGraphLaunch`); advice must not
say "use CUDA graphs".

usage:
  python3 cuda_graphs.py OUT.json.gz   torch.profiler: 3 eager warm-ups, capture, then
                                       schedule(wait=1, warmup=2, active=4) over replays
  python3 cuda_graphs.py --nsys        for nsys: NVTX ranges step_0, step_1 (eager, side
                                       stream), capture, then step_2 .. step_7 (replays)
"""

import sys

import common as C
import torch
import torch.nn as nn
import torch.nn.functional as F

D, HID, NBLK, B, T = 256, 1024, 8, 4, 64
WAIT, WARMUP, ACTIVE = 1, 2, 4


class MLPBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(D)
        self.fc1 = nn.Linear(D, HID)
        self.fc2 = nn.Linear(HID, D)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(F.gelu(self.fc1(self.ln(x))))


def build():
    C.seed_all(0)
    model = nn.Sequential(*[MLPBlock() for _ in range(NBLK)]).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True, capturable=True)
    static_x = torch.randn(B, T, D, device="cuda")
    static_y = torch.randn(B, T, D, device="cuda")
    return model, opt, static_x, static_y


def fwd_loss(model, x, y) -> torch.Tensor:
    with torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=False):
        return F.mse_loss(model(x), y)


def eager_step(model, opt, x, y) -> torch.Tensor:
    opt.zero_grad(set_to_none=True)
    loss = fwd_loss(model, x, y)
    loss.backward()
    opt.step()
    return loss


def capture(model, opt, x, y, n_warm: int, nvtx: bool):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for i in range(n_warm):
            if nvtx:
                torch.cuda.nvtx.range_push(f"step_{i}")
            eager_step(model, opt, x, y)
            if nvtx:
                torch.cuda.nvtx.range_pop()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    opt.zero_grad(set_to_none=True)
    with torch.cuda.graph(g):
        static_loss = fwd_loss(model, x, y)
        static_loss.backward()
        opt.step()
    torch.cuda.synchronize()
    return g, static_loss


def main_profiler(out: str) -> None:
    C.env_facts("cuda_graphs")
    model, opt, x, y = build()
    g, loss = capture(model, opt, x, y, 3, nvtx=False)
    C.fact(scenario="cuda_graphs", params=C.model_params(model))
    clock = C.StepClock()
    n = C.steps_total(WAIT, WARMUP, ACTIVE)
    with C.make_profiler(out, WAIT, WARMUP, ACTIVE) as prof:
        for i in range(n):
            clock.start(C.label(i, WAIT, WARMUP, ACTIVE))
            g.replay()
            clock.end_step()
            prof.step()
    clock.report("cuda_graphs")
    C.fact(scenario="cuda_graphs", final_loss=float(loss.detach()))


def main_nsys() -> None:
    C.env_facts("nsys_graphs")
    model, opt, x, y = build()
    g, loss = capture(model, opt, x, y, 2, nvtx=True)
    clock = C.StepClock()
    for i in range(2, 8):
        torch.cuda.nvtx.range_push(f"step_{i}")
        clock.start(f"replay step_{i}")
        g.replay()
        clock.end_step()
        torch.cuda.nvtx.range_pop()
    clock.report("nsys_graphs")
    C.fact(scenario="nsys_graphs", final_loss=float(loss.detach()))


if __name__ == "__main__":
    if "--nsys" in sys.argv:
        main_nsys()
    else:
        main_profiler(C.out_arg("cuda_graphs.json.gz"))
