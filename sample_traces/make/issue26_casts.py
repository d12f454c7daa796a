"""issue26_casts: where the cast kernels of bf16 training come from, and what each named fix
saves, by construction (issue 26, item 6: casts priced by what a named fix removes).

    python3 issue26_casts.py OUTDIR
        writes OUTDIR/<scenario>.json.gz (torch.profiler Chrome traces, gzipped) and
        OUTDIR/facts_issue26_casts.json (timings without the profiler, what each trace must show)

One process, one model: a GPT decoder (issue26.GPT: width 2048, 8 layers, 16 heads, vocab 8192,
seq 512, SDPA causal), 4 x 512 tokens per micro-batch, AdamW(fused=True), lr 1e-4. Variants
(same initial weights, same batches):

  autocast_fp32      fp32 parameters, forward under torch.autocast(bfloat16) (autocast casts
                     every fp32 weight to bf16 at each use: `aten::to`/`aten::_to_copy`, and
                     autograd casts its bf16 gradient back to fp32 in backward), loss
                     `cross_entropy(logits.float())`, AdamW on the fp32 parameters
  bf16_master        the named fix: bf16 parameters (model.to(bfloat16), no autocast) with an
                     fp32 master copy in the optimizer: after backward the bf16 gradients are
                     copied into the masters' fp32 .grad (torch._foreach_copy_), AdamW steps the
                     masters, and the masters are copied back into the bf16 parameters
                     (torch._foreach_copy_): one down-cast and one up-cast of every parameter per
                     optimizer step; loss `cross_entropy(logits.float())`
  bf16_master_nofloat  bf16_master with the loss on the bf16 logits (`cross_entropy(logits)`,
                     no `.float()`): the logits-upcast fix
  *_accum4           the same with 4 micro-batches per optimizer step (gradient accumulation):
                     autocast re-casts every weight in each micro-batch's forward and backward;
                     the master copy stays once per optimizer step

Timing first, profiler off: the variants of one micro-batch count in alternating rounds
(3 rounds x 10 steps after 3 warm-up steps in round 1, 1 after; issue26.time_steps), mean
ms/step by host clock between syncs. Then each is profiled (issue26.profile_steps:
schedule(wait=1, warmup=2, active=3), record_shapes=True, no stacks).

ISSUE26_CASTS_BATCH=16 ISSUE26_CASTS_GROUP=accum4 runs the accumulation pair alone at 16 x 512
tokens per micro-batch (traces and facts named *_b16): at 4 x 512 the pair is host-bound under
the profiler. The recording (device tool; its tree is the project's main checkout, so the
script travelled gzipped and base64-encoded in the command): one process with the defaults,
then one with the two variables; tests/data/gpu/facts_issue26_casts.json merges the two.

ISSUE26_DRY=1 runs tiny sizes on the CPU (to check the script without a GPU).
"""

from __future__ import annotations

import copy
import json
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import issue26 as base

DRY = base.DRY
DEV = base.DEV
WIDTH, LAYERS, HEADS, BATCH, SEQ = (64, 2, 4, 2, 64) if DRY else (2048, 8, 16, 4, 512)
#: ISSUE26_CASTS_BATCH=16 ISSUE26_CASTS_GROUP=accum4: the gradient-accumulation pair alone at
#: 16 x 512 tokens per micro-batch (traces and facts named *_b16): GPU-bound under the profiler
BATCH = int(os.environ.get("ISSUE26_CASTS_BATCH", BATCH))
GROUP = os.environ.get("ISSUE26_CASTS_GROUP")
SUFFIX = "" if BATCH == 4 or DRY else f"_b{BATCH}"

EXPECT = {
    "autocast_fp32": (
        "bf16 autocast with fp32 parameters, one micro-batch per optimizer step: the weight "
        "casts (fp32 -> bf16 in forward, their gradients bf16 -> fp32 in backward) are there, "
        "but the named fix (bf16 parameters + fp32 master copy) adds one down- and one up-cast "
        "of every parameter per optimizer step, about what it removes: the weight-cast price "
        "must be near the measured saving autocast_fp32 - bf16_master (near zero or small); "
        "no warning where it is small"
    ),
    "bf16_master": (
        "the fix applied: no autocast weight casts, so no weight-cast finding; the master "
        "copy's casts run in optimizer.step's neighbourhood and are not priced as removable; "
        "the logits .float() upcast is priced near bf16_master - bf16_master_nofloat"
    ),
    "bf16_master_nofloat": "no weight casts, no logits upcast: no cast finding with a named fix",
    "autocast_fp32_accum4": (
        "4 micro-batches per step: the weight casts repeat 4 times per step, the fix's master "
        "copy happens once: the weight-cast price must be near autocast_fp32_accum4 - "
        "bf16_master_accum4 (about 3/4 of the weight casts' time)"
    ),
    "bf16_master_accum4": "the fix applied with 4 micro-batches: no weight-cast finding",
}


def build() -> tuple[base.GPT, base.GPT, list]:
    base.seed_all(0)
    fp32 = base.GPT(d=WIDTH, h=HEADS, layers=LAYERS, max_seq=SEQ).to(DEV)
    bf16 = copy.deepcopy(fp32).to(torch.bfloat16)
    master = [p.detach().clone().float() for p in fp32.parameters()]
    for m in master:
        m.grad = torch.zeros_like(m)
    return fp32, bf16, master


def steps(fp32, bf16, master, batches):
    opt32 = torch.optim.AdamW(fp32.parameters(), lr=1e-4, fused=not DRY)
    optm = torch.optim.AdamW(master, lr=1e-4, fused=not DRY)
    bf_params = list(bf16.parameters())
    it = {"i": 0}

    def nxt():
        x, y = batches[it["i"] % len(batches)]
        it["i"] += 1
        return x, y

    def autocast_fp32(k: int):
        def step():
            for _ in range(k):
                x, y = nxt()
                with torch.autocast(DEV, dtype=torch.bfloat16):
                    logits = fp32(x)
                loss = F.cross_entropy(logits.float().reshape(-1, fp32.vocab), y.reshape(-1))
                (loss / k).backward()
            opt32.step()
            opt32.zero_grad(set_to_none=True)

        return step

    def bf16_master(k: int, upcast: bool):
        def step():
            for _ in range(k):
                x, y = nxt()
                logits = bf16(x).reshape(-1, bf16.vocab)
                loss = F.cross_entropy(logits.float() if upcast else logits, y.reshape(-1))
                (loss / k).backward()
            with torch.no_grad():
                torch._foreach_copy_([m.grad for m in master], [p.grad for p in bf_params])
                optm.step()
                torch._foreach_copy_(bf_params, master)
            bf16.zero_grad(set_to_none=True)

        return step

    return {
        "autocast_fp32": autocast_fp32(1),
        "bf16_master": bf16_master(1, True),
        "bf16_master_nofloat": bf16_master(1, False),
        "autocast_fp32_accum4": autocast_fp32(4),
        "bf16_master_accum4": bf16_master(4, True),
    }


def main() -> int:
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    fp32, bf16, master = build()
    batches = base.gpt_batches(8, BATCH, SEQ)
    run = steps(fp32, bf16, master, batches)
    facts: dict = {
        "issue": "26 item 6 (casts)",
        "env": base.env(),
        "config": {
            "model": f"issue26.GPT width {WIDTH}, {LAYERS} layers, {HEADS} heads, vocab "
            f"{base.VOCAB}, seq {SEQ}, SDPA causal, untied lm head",
            "params": sum(p.numel() for p in fp32.parameters()),
            "tokens_per_micro_batch": BATCH * SEQ,
            "optimizer": "AdamW(fused=True, lr=1e-4)",
        },
        "expect": EXPECT,
        "scenarios": {},
    }
    groups = [
        ["autocast_fp32", "bf16_master", "bf16_master_nofloat"],
        ["autocast_fp32_accum4", "bf16_master_accum4"],
    ]
    if GROUP == "accum4":
        groups = groups[1:]
    facts["config"]["batch"] = BATCH
    for group in groups:
        rounds: dict[str, list[dict]] = {k: [] for k in group}
        for r in range(3):
            for k in group:
                rounds[k].append(base.time_steps(run[k], warm=3 if r == 0 else 1))
        for k, rs in rounds.items():
            ev = sorted(x for r in rs for x in r["step_ms_cuda_events"])
            facts["scenarios"][k] = {
                "unprofiled": {
                    "step_ms_mean": round(sum(r["step_ms_mean"] for r in rs) / len(rs), 3),
                    "step_ms_mean_per_round": [r["step_ms_mean"] for r in rs],
                    "step_ms_median_cuda_events": ev[len(ev) // 2] if ev else None,
                    "timed_steps": sum(r["timed_steps"] for r in rs),
                },
            }
    for k in [k for g in groups for k in g]:
        path = os.path.join(out, f"casts_{k}{SUFFIX}.json.gz")
        facts["scenarios"][k]["trace"] = base.profile_steps(run[k], path)
    s = facts["scenarios"]

    def ms(k: str) -> float:
        return s[k]["unprofiled"]["step_ms_mean"]

    facts["derived"] = {
        "weight_cast_fix_saving_ms_accum4": round(
            ms("autocast_fp32_accum4") - ms("bf16_master_accum4"), 3
        ),
    }
    if GROUP != "accum4":
        facts["derived"]["weight_cast_fix_saving_ms"] = round(
            ms("autocast_fp32") - ms("bf16_master"), 3
        )
        facts["derived"]["logits_float_fix_saving_ms"] = round(
            ms("bf16_master") - ms("bf16_master_nofloat"), 3
        )
    print(json.dumps(facts["derived"]), flush=True)
    with open(os.path.join(out, f"facts_issue26_casts{SUFFIX}.json"), "w") as f:
        json.dump(facts, f, indent=1, sort_keys=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
