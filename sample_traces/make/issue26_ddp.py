"""issue26_ddp: what DDP's `gradient_as_bucket_view=True` saves, by construction (issue 26,
item 6: TA010 prices DDP's bucket copies by the fix that removes them).

    NCCL_NVLS_ENABLE=0 python3 -m torch.distributed.run --nproc_per_node 2 issue26_ddp.py OUTDIR
        writes OUTDIR/ddp_<scenario>_rank<r>.json.gz (torch.profiler Chrome traces, gzipped,
        one per rank) and, from rank 0, OUTDIR/facts_issue26_ddp.json (timings without the
        profiler, what each trace must show, written before any tool reads the traces)

Two ranks (one GPU each, NCCL), one model: a GPT decoder (issue26.GPT: width 2048, 8 layers,
16 heads, vocab 8192, seq 512, SDPA causal, untied lm head), fp32 parameters, forward under
torch.autocast(bfloat16), loss `cross_entropy(logits.float())`, AdamW(fused=True), lr 1e-4,
`zero_grad(set_to_none=True)` (the default), 4 x 512 tokens per rank per step, DDP with the
default bucket size (25 MiB) and defaults otherwise. Scenarios, each its own copy of the same
initial weights wrapped in its own DDP (same process group, same batches):

  bucket_view_off   gradient_as_bucket_view=False (DDP's default): the reducer copies each
                    gradient into its bucket before the all-reduce and, once the bucket is
                    reduced, copies the bucket back into the gradients
                    (`torch.distributed.ddp.reducer::copy_bucket_to_grad`, device-to-device
                    copies) at the end of backward
  bucket_view_on    gradient_as_bucket_view=True, the named fix: the gradients are views of
                    the buckets, so nothing is copied back. With set_to_none=True the
                    gradients autograd produces are fresh tensors each step, so their copy
                    into the bucket stays (torch's DDP docstring says as much)
  bucket_view_on_keep  gradient_as_bucket_view=True with zero_grad(set_to_none=False): the
                    gradients stay bucket views across steps (no copy in either direction,
                    but a zeroing and an in-place accumulation instead); timed only, no trace

Timing first, profiler off: the scenarios in 3 interleaved rounds of 30 steps (5 warm-up
steps in round 1, 2 after; issue26.time_steps: mean ms/step by host clock between
synchronizes, CUDA events per step) on every rank; rank 0's means and the max over the ranks'
means are kept. Then bucket_view_off and bucket_view_on are profiled on every rank
(issue26.profile_steps: schedule(wait=1, warmup=2, active=3), record_shapes=True).

ISSUE26_DRY=1 runs tiny sizes on the CPU with gloo (to check the script without a GPU).
"""

from __future__ import annotations

import copy
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import issue26 as base

DRY = base.DRY
DEV = base.DEV
WIDTH, LAYERS, HEADS, BATCH, SEQ = (64, 2, 4, 2, 64) if DRY else (2048, 8, 16, 4, 512)
ROUNDS, STEPS = (2, 3) if DRY else (3, 30)

SCENARIOS = {
    # name: (gradient_as_bucket_view, zero_grad set_to_none, profiled)
    "bucket_view_off": (False, True, True),
    "bucket_view_on": (True, True, True),
    "bucket_view_on_keep": (True, False, False),
}

EXPECT = {
    "bucket_view_off": (
        "DDP with gradient_as_bucket_view=False under bf16 autocast with fp32 parameters: "
        "at the end of backward the reducer copies every reduced bucket back into the "
        "gradients (torch.distributed.ddp.reducer::copy_bucket_to_grad ranges launching "
        "device-to-device copies, about 4 bytes x parameters read and written per step); "
        "TA010 names gradient_as_bucket_view=True and prices it (fixes_ns.ddp_bucket_view) "
        "near the measured saving bucket_view_off - bucket_view_on (derived."
        "bucket_view_saving_ms); the gradients' copies into the buckets stay with the fix "
        "(set_to_none=True) and are not part of that price"
    ),
    "bucket_view_on": (
        "the fix applied: no copy_bucket_to_grad copies, so no ddp_bucket_view price "
        "(fixes_ns.ddp_bucket_view 0 or None, ddp_bucket_memcpy_ns 0); autocast's weight "
        "casts remain as in bucket_view_off"
    ),
}


def setup() -> tuple[int, int]:
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    if not DRY:
        torch.cuda.set_device(local)
    dist.init_process_group("gloo" if DRY else "nccl", rank=rank, world_size=world)
    return rank, world


def build() -> dict[str, tuple[DDP, torch.optim.Optimizer, bool]]:
    base.seed_all(0)
    model = base.GPT(d=WIDTH, h=HEADS, layers=LAYERS, max_seq=SEQ).to(DEV)
    out = {}
    for name, (view, to_none, _prof) in SCENARIOS.items():
        m = copy.deepcopy(model)
        ddp = DDP(
            m,
            device_ids=None if DRY else [torch.cuda.current_device()],
            gradient_as_bucket_view=view,
        )
        opt = torch.optim.AdamW(ddp.parameters(), lr=1e-4, fused=not DRY)
        out[name] = (ddp, opt, to_none)
    del model
    return out


def make_step(ddp: DDP, opt, to_none: bool, batches):
    it = {"i": 0}
    vocab = ddp.module.vocab

    def step():
        x, y = batches[it["i"] % len(batches)]
        it["i"] += 1
        with torch.autocast(DEV, dtype=torch.bfloat16):
            logits = ddp(x)
        loss = F.cross_entropy(logits.float().reshape(-1, vocab), y.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=to_none)

    return step


def max_over_ranks(v: float) -> float:
    t = torch.tensor([v], dtype=torch.float64, device=DEV)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return round(float(t.item()), 3)


def main() -> int:
    out = sys.argv[1]
    rank, world = setup()
    os.makedirs(out, exist_ok=True)
    models = build()
    # each rank its own batches (as a DistributedSampler gives), the same for every scenario
    base.seed_all(0)
    g_batches = base.gpt_batches(8 * world, BATCH, SEQ)
    batches = g_batches[rank::world]
    steps = {k: make_step(*models[k], batches) for k in SCENARIOS}
    n_params = sum(p.numel() for p in models["bucket_view_off"][0].parameters())
    facts: dict = {
        "issue": "26 item 6 (casts: DDP gradient_as_bucket_view)",
        "env": base.env() if rank == 0 else {},
        "config": {
            "world_size": world,
            "backend": dist.get_backend(),
            "nccl": None if DRY else ".".join(map(str, torch.cuda.nccl.version())),
            "NCCL_NVLS_ENABLE": os.environ.get("NCCL_NVLS_ENABLE"),
            "model": f"issue26.GPT width {WIDTH}, {LAYERS} layers, {HEADS} heads, vocab "
            f"{base.VOCAB}, seq {SEQ}, SDPA causal, untied lm head, fp32 parameters",
            "params": n_params,
            "grad_bytes_fp32": 4 * n_params,
            "precision": "torch.autocast(bfloat16) forward, cross_entropy(logits.float())",
            "tokens_per_rank_per_step": BATCH * SEQ,
            "optimizer": "AdamW(fused=True, lr=1e-4)",
            "ddp": "DistributedDataParallel(device_ids=[local_rank], bucket_cap_mb default "
            "(25), broadcast_buffers default (True)), gradient_as_bucket_view per scenario",
            "scenarios": {
                k: {"gradient_as_bucket_view": v, "zero_grad_set_to_none": n, "profiled": p}
                for k, (v, n, p) in SCENARIOS.items()
            },
            "timing": f"{ROUNDS} interleaved rounds x {STEPS} steps, profiler off",
        },
        "expect": EXPECT,
        "scenarios": {},
    }
    rounds: dict[str, list[dict]] = {k: [] for k in SCENARIOS}
    for r in range(ROUNDS):
        for k in SCENARIOS:
            dist.barrier()
            rounds[k].append(base.time_steps(steps[k], warm=5 if r == 0 else 2, n=STEPS))
    for k, rs in rounds.items():
        mean = round(sum(x["step_ms_mean"] for x in rs) / len(rs), 3)
        ev = sorted(x for r in rs for x in r["step_ms_cuda_events"])
        facts["scenarios"][k] = {
            "unprofiled": {
                "step_ms_mean": mean,
                "step_ms_mean_max_over_ranks": max_over_ranks(mean),
                "step_ms_mean_per_round": [x["step_ms_mean"] for x in rs],
                "step_ms_median_cuda_events": ev[len(ev) // 2] if ev else None,
                "timed_steps": sum(x["timed_steps"] for x in rs),
            },
        }
    for k, (_v, _n, prof) in SCENARIOS.items():
        if not prof:
            continue
        dist.barrier()
        path = os.path.join(out, f"ddp_{k}_rank{rank}.json.gz")
        tr = base.profile_steps(steps[k], path)
        if not DRY:
            tr["top_kernels"] = base.top_kernels(path)
        facts["scenarios"][k]["trace"] = tr
        time.sleep(0.5)
    s = facts["scenarios"]

    def ms(k: str, key: str = "step_ms_mean") -> float:
        return s[k]["unprofiled"][key]

    facts["derived"] = {
        "bucket_view_saving_ms": round(ms("bucket_view_off") - ms("bucket_view_on"), 3),
        "bucket_view_saving_ms_max_over_ranks": round(
            ms("bucket_view_off", "step_ms_mean_max_over_ranks")
            - ms("bucket_view_on", "step_ms_mean_max_over_ranks"),
            3,
        ),
        "bucket_view_keep_saving_ms": round(ms("bucket_view_off") - ms("bucket_view_on_keep"), 3),
    }
    print(f"rank {rank}: {json.dumps(facts['derived'])}", flush=True)
    name = "facts_issue26_ddp.json" if rank == 0 else f"facts_issue26_ddp_rank{rank}.json"
    with open(os.path.join(out, name), "w") as f:
        json.dump(facts, f, indent=1, sort_keys=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
