"""grad_scaler_fp16: GPU-bound fp16 autocast training with torch.amp.GradScaler.

The GPT model of common.py made wider and fed more tokens so that the GPU sets the pace (as
host_sync_gpu_bound.py): width 2048, 16 heads, 6 layers, batch 32 x 512, under
`torch.autocast("cuda", dtype=torch.float16)`, with `torch.amp.GradScaler("cuda")` (default
init_scale 2**16): `scaler.scale(loss).backward(); scaler.step(opt); scaler.update()`.
The optimizer is `AdamW(foreach=True)` (not fused): `GradScaler.step` then unscales the
gradients (`_amp_foreach_non_finite_check_and_unscale_`) and, in `_maybe_opt_step`, reads
`found_inf` on the host (`v.item()`): one `cudaStreamSynchronize` per step, under
`aten::item`, before `optimizer.step()`. (A fused AdamW takes the scale and found_inf on the
device and GradScaler skips that read: no sync.) No other sync in the step. Token batches on
the GPU up front. 6 steps before the profiler (the scale settles: fp16 overflow skips the
first steps), then schedule(wait=1, warmup=2, active=4), with_stack=True.

The script reads back from the trace the syncs per step and, for each, the host's wait and
the GPU idle gap around it; then, profiler off, it times the step by CUDA events with this
optimizer (sync) and with AdamW(fused=True) on the same parameters (no sync; the fused
kernels also differ, so the difference is not the sync alone), alternating blocks of steps.
Expected: TA002 host-sync (site in this file's `step`); never TA005 (fp16 GEMMs on Tensor
Cores); GPU-bound, so not TA001/TA003.

usage: python3 grad_scaler_fp16.py OUT.json.gz
"""

import common as C
import torch
import torch.nn.functional as F
import tracefacts

WAIT, WARMUP, ACTIVE = 1, 2, 4
WIDTH, HEADS, LAYERS, BATCH = 2048, 16, 6, 32
BEFORE = 6


def step(model, opt, scaler, x, y) -> torch.Tensor:
    with torch.autocast("cuda", dtype=torch.float16):
        logits = model(x)
    loss = F.cross_entropy(logits.float().reshape(-1, C.VOCAB), y.reshape(-1))
    scaler.scale(loss).backward()
    scaler.step(opt)  # foreach AdamW: found_inf.item() in GradScaler._maybe_opt_step
    scaler.update()
    opt.zero_grad(set_to_none=True)
    return loss


def timed(model, opt, scaler, batches) -> list[float]:
    torch.cuda.synchronize()
    ev = []
    for x, y in batches:
        e = torch.cuda.Event(enable_timing=True)
        e.record()
        ev.append(e)
        step(model, opt, scaler, x, y)
    e = torch.cuda.Event(enable_timing=True)
    e.record()
    ev.append(e)
    torch.cuda.synchronize()
    return [round(ev[i].elapsed_time(ev[i + 1]), 3) for i in range(len(batches))]


def adam_steps(opt) -> int:
    """Optimizer steps taken (AdamW's per-parameter step count; GradScaler skips overflows)."""
    st = opt.state[opt.param_groups[0]["params"][0]]
    return int(st["step"]) if "step" in st else 0


def main() -> None:
    out = C.out_arg("grad_scaler_fp16.json.gz")
    C.seed_all(0)
    C.env_facts("grad_scaler_fp16")
    model = C.GPT(d=WIDTH, h=HEADS, layers=LAYERS).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, foreach=True, fused=False)
    scaler = torch.amp.GradScaler("cuda")
    C.fact(
        scenario="grad_scaler_fp16",
        params=C.model_params(model),
        width=WIDTH,
        layers=LAYERS,
        batch=BATCH,
        seq=C.SEQ,
        autocast_dtype="float16",
        optimizer="AdamW(foreach=True, fused=False)",
        init_scale=scaler.get_scale(),
    )
    n = C.steps_total(WAIT, WARMUP, ACTIVE)
    batches = C.gpu_batches(BEFORE + n, batch=BATCH)
    for x, y in batches[:BEFORE]:
        step(model, opt, scaler, x, y)
    torch.cuda.synchronize()
    taken0, scale0 = adam_steps(opt), scaler.get_scale()
    clock = C.StepClock()
    with C.make_profiler(out, WAIT, WARMUP, ACTIVE, with_stack=True) as prof:
        for i in range(n):
            clock.start(C.label(i, WAIT, WARMUP, ACTIVE))
            x, y = batches[BEFORE + i]
            step(model, opt, scaler, x, y)
            clock.end_step()
            prof.step()
    clock.report("grad_scaler_fp16")
    C.fact(
        scenario="grad_scaler_fp16",
        optimizer_steps_taken_before_profiler=f"{taken0} of {BEFORE}",
        scale_before_profiler=scale0,
        optimizer_steps_taken_in_profiled_run=f"{adam_steps(opt) - taken0} of {n}",
        scale_after=scaler.get_scale(),
    )
    C.fact(scenario="grad_scaler_fp16", trace=tracefacts.trace_facts(out))
    C.fact(scenario="grad_scaler_fp16", steps=tracefacts.step_detail(out))
    C.fact(scenario="grad_scaler_fp16", sync_gaps=tracefacts.sync_gaps(out))

    # profiler off: this optimizer (a sync per step) against AdamW(fused=True) (no sync)
    fused = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
    ab: dict[str, list[float]] = {"foreach_sync": [], "fused_no_sync": []}
    for _ in range(2):
        for name, o in (("foreach_sync", opt), ("fused_no_sync", fused)):
            ms = timed(model, o, scaler, batches[:5])
            ab[name] += ms[1:]  # first of a block left out
    C.fact(
        scenario="grad_scaler_fp16",
        unprofiled_step_ms_foreach_sync=ab["foreach_sync"],
        unprofiled_step_ms_fused_no_sync=ab["fused_no_sync"],
        mean_foreach_sync=round(sum(ab["foreach_sync"]) / len(ab["foreach_sync"]), 3),
        mean_fused_no_sync=round(sum(ab["fused_no_sync"]) / len(ab["fused_no_sync"]), 3),
    )


if __name__ == "__main__":
    main()
