"""host_sync_gpu_bound: GPU-bound bf16 training with one host-device sync in the middle of
forward.

The GPT model of common.py made wider and fed more tokens so that the GPU, not the host,
sets the pace: width 2048, 16 heads, 6 layers, batch 32 x 512 tokens, bf16 autocast,
AdamW(fused=True). `MidSyncGPT.trunk` runs the first 3 blocks, then
`if x.abs().max().item() > 1e6` (a NaN/overflow guard: `.item()` copies one value to the
host and waits for the GPU to drain), then the other 3 blocks. No other sync in the step.
torch.profiler with with_stack=True (so the call site in this file shows),
record_shapes=True, 2 steps before the profiler, then schedule(wait=1, warmup=2, active=4).

The script reads back from the trace, for each `cudaStreamSynchronize`, how long the host
waited and the GPU idle gap around it; then, profiler off, it times the step by CUDA events
with and without the guard (same model, alternating blocks of steps): the difference is what
removing the sync saves.
Expected: TA002 host-sync with its site in this file; GPU-bound, so TA001 not on top.

usage: python3 host_sync_gpu_bound.py OUT.json.gz
"""

import common as C
import torch
import torch.nn.functional as F
import tracefacts

WAIT, WARMUP, ACTIVE = 1, 2, 4
WIDTH, HEADS, LAYERS, BATCH = 2048, 16, 6, 32


class MidSyncGPT(C.GPT):
    check = True

    def trunk(self, x: torch.Tensor) -> torch.Tensor:
        half = len(self.blocks) // 2
        for blk in self.blocks[:half]:
            x = blk(x)
        if self.check and x.abs().max().item() > 1e6:  # host sync mid-forward
            x = x.clamp(-1e6, 1e6)
        for blk in self.blocks[half:]:
            x = blk(x)
        return self.head(self.ln_f(x))


def step(model, opt, x, y) -> torch.Tensor:
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(x)
    loss = F.cross_entropy(logits.float().reshape(-1, C.VOCAB), y.reshape(-1))
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss


def timed(model, opt, batches) -> list[float]:
    torch.cuda.synchronize()
    ev = []
    for x, y in batches:
        e = torch.cuda.Event(enable_timing=True)
        e.record()
        ev.append(e)
        step(model, opt, x, y)
    e = torch.cuda.Event(enable_timing=True)
    e.record()
    ev.append(e)
    torch.cuda.synchronize()
    return [round(ev[i].elapsed_time(ev[i + 1]), 3) for i in range(len(batches))]


def main() -> None:
    out = C.out_arg("host_sync_gpu_bound.json.gz")
    C.seed_all(0)
    C.env_facts("host_sync_gpu_bound")
    model = MidSyncGPT(d=WIDTH, h=HEADS, layers=LAYERS).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
    C.fact(
        scenario="host_sync_gpu_bound",
        params=C.model_params(model),
        width=WIDTH,
        layers=LAYERS,
        batch=BATCH,
        seq=C.SEQ,
    )
    n = C.steps_total(WAIT, WARMUP, ACTIVE)
    batches = C.gpu_batches(2 + n, batch=BATCH)
    for x, y in batches[:2]:
        step(model, opt, x, y)
    torch.cuda.synchronize()
    clock = C.StepClock()
    with C.make_profiler(out, WAIT, WARMUP, ACTIVE, with_stack=True) as prof:
        for i in range(n):
            clock.start(C.label(i, WAIT, WARMUP, ACTIVE))
            x, y = batches[2 + i]
            step(model, opt, x, y)
            clock.end_step()
            prof.step()
    clock.report("host_sync_gpu_bound")
    C.fact(scenario="host_sync_gpu_bound", trace=tracefacts.trace_facts(out))
    C.fact(scenario="host_sync_gpu_bound", sync_gaps=tracefacts.sync_gaps(out))

    # A/B, profiler off: the same steps with and without the guard, alternating blocks
    ab: dict[str, list[float]] = {"with_sync": [], "without_sync": []}
    for _ in range(2):
        for check in (True, False):
            model.check = check
            ms = timed(model, opt, batches[:5])
            ab["with_sync" if check else "without_sync"] += ms[1:]  # first of a block left out
    model.check = True
    C.fact(
        scenario="host_sync_gpu_bound",
        unprofiled_step_ms_with_sync=ab["with_sync"],
        unprofiled_step_ms_without_sync=ab["without_sync"],
        mean_with_sync=round(sum(ab["with_sync"]) / len(ab["with_sync"]), 3),
        mean_without_sync=round(sum(ab["without_sync"]) / len(ab["without_sync"]), 3),
    )


if __name__ == "__main__":
    main()
