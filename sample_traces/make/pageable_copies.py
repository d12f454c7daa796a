"""pageable_copies: bf16 training whose every step copies 64 MiB of features from pageable
host memory.

The GPT model of common.py with one more input: per-token float32 features of width
2 * WIDTH (16 x 512 x 2048 float32 = 67,108,864 bytes = 64 MiB per step), made on the CPU
with plain `torch.rand` (pageable, never pinned) before the loop, two such tensors used in
turn. Each step moves its tensor with `.cuda()` (non_blocking=False: torch's copy issues
`cudaMemcpyAsync` from pageable memory, then `cudaStreamSynchronize`, the sync the copy
implies) and the model consumes it: `x = embed(idx) + feat(feats)` with
`feat = Linear(2 * WIDTH, WIDTH)`, so the copy is not dead code. Token batches are made on
the GPU up front; AdamW(fused=True); 2 steps before the profiler, then
schedule(wait=1, warmup=2, active=4).

After the profiled run (profiler off) it measures what pinning would change: the same
64 MiB copied from pageable memory (`.cuda()`) and from pinned memory
(`.cuda(non_blocking=True)`), each alone, timed by CUDA events; and the step time with the
pageable `.cuda()` against the step with a pinned `non_blocking=True` copy.
Expected: TA009 pageable-memcpy (one 64 MiB `Memcpy HtoD (Pageable -> Device)` per step).

usage: python3 pageable_copies.py OUT.json.gz
"""

import time

import common as C
import torch
import torch.nn as nn
import torch.nn.functional as F
import tracefacts

WAIT, WARMUP, ACTIVE = 1, 2, 4
FEAT = 2 * C.WIDTH  # 16 x 512 x 2048 float32 = 64 MiB


class FeatGPT(C.GPT):
    """The GPT, plus per-token host features projected into the embeddings."""

    def __init__(self) -> None:
        super().__init__()
        self.feat = nn.Linear(FEAT, C.WIDTH)

    def forward(self, idx: torch.Tensor, feats: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return self.trunk(self.embed(idx) + self.feat(feats))


def step(model, opt, x, y, feats_cpu, pinned: bool = False) -> torch.Tensor:
    # pageable host memory -> device every step (pinned: the comparison after the trace)
    feats = feats_cpu.cuda(non_blocking=True) if pinned else feats_cpu.cuda()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(x, feats)
    loss = F.cross_entropy(logits.float().reshape(-1, C.VOCAB), y.reshape(-1))
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss


def copy_ms(src: torch.Tensor, non_blocking: bool, reps: int = 5) -> list[float]:
    out = []
    for _ in range(reps):
        torch.cuda.synchronize()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        dst = src.cuda(non_blocking=non_blocking)
        b.record()
        torch.cuda.synchronize()
        out.append(round(a.elapsed_time(b), 3))
        del dst
    return out


def timed_steps(model, opt, batches, feats, pinned: bool) -> tuple[list[float], list[float]]:
    """Step periods by CUDA events at each step start, and host wall per step."""
    torch.cuda.synchronize()
    ev, wall = [], []
    for i, (x, y) in enumerate(batches):
        e = torch.cuda.Event(enable_timing=True)
        e.record()
        ev.append(e)
        wall.append(time.perf_counter())
        step(model, opt, x, y, feats[i % len(feats)], pinned=pinned)
    e = torch.cuda.Event(enable_timing=True)
    e.record()
    ev.append(e)
    wall.append(time.perf_counter())
    torch.cuda.synchronize()
    gpu = [round(ev[i].elapsed_time(ev[i + 1]), 3) for i in range(len(batches))]
    host = [round((wall[i + 1] - wall[i]) * 1e3, 3) for i in range(len(batches))]
    return gpu, host


def main() -> None:
    out = C.out_arg("pageable_copies.json.gz")
    C.seed_all(0)
    C.env_facts("pageable_copies")
    model = FeatGPT().cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
    g = torch.Generator()
    g.manual_seed(99)
    feats = [torch.rand(C.BATCH, C.SEQ, FEAT, generator=g) for _ in range(2)]  # pageable
    C.fact(
        scenario="pageable_copies",
        feats_shape=list(feats[0].shape),
        feats_dtype=str(feats[0].dtype),
        feats_bytes_per_step=feats[0].numel() * feats[0].element_size(),
        feats_pinned=[f.is_pinned() for f in feats],
    )
    n = C.steps_total(WAIT, WARMUP, ACTIVE)
    batches = C.gpu_batches(2 + n + 12)
    for i, (x, y) in enumerate(batches[:2]):
        step(model, opt, x, y, feats[i % 2])
    torch.cuda.synchronize()
    clock = C.StepClock()
    with C.make_profiler(out, WAIT, WARMUP, ACTIVE) as prof:
        for i in range(n):
            clock.start(C.label(i, WAIT, WARMUP, ACTIVE))
            x, y = batches[2 + i]
            step(model, opt, x, y, feats[i % 2])
            clock.end_step()
            prof.step()
    clock.report("pageable_copies")
    C.fact(scenario="pageable_copies", trace=tracefacts.trace_facts(out))

    # what pinning changes, profiler off
    pinned = [f.pin_memory() for f in feats]
    pageable_ms = copy_ms(feats[0], non_blocking=False)
    pinned_ms = copy_ms(pinned[0], non_blocking=True)
    nbytes = feats[0].numel() * feats[0].element_size()
    C.fact(
        scenario="pageable_copies",
        copy_64mib_pageable_ms=pageable_ms,
        copy_64mib_pinned_ms=pinned_ms,
        pageable_gbps=round(nbytes / (min(pageable_ms) * 1e6), 2),
        pinned_gbps=round(nbytes / (min(pinned_ms) * 1e6), 2),
    )
    rest = batches[2 + n :]
    gpu_a, host_a = timed_steps(model, opt, rest[:6], feats, pinned=False)
    gpu_b, host_b = timed_steps(model, opt, rest[6:], pinned, pinned=True)
    C.fact(
        scenario="pageable_copies",
        unprofiled_pageable_step_ms_cuda_events=gpu_a,
        unprofiled_pageable_step_ms_host_wall=host_a,
        unprofiled_pinned_nonblocking_step_ms_cuda_events=gpu_b,
        unprofiled_pinned_nonblocking_step_ms_host_wall=host_b,
    )


if __name__ == "__main__":
    main()
