"""pitfalls: common PyTorch performance pitfalls, each profiled with torch.profiler and timed,
together with its fix, WITHOUT the profiler in the same process.

usage: python3 pitfalls.py SCENARIO OUTDIR      (writes OUTDIR/SCENARIO.json.gz, prints FACTs)
       PITFALLS_DRY=1 python3 pitfalls.py SCENARIO OUTDIR   (tiny sizes on the CPU: checks the
       script without a GPU; the numbers mean nothing)

Every process first times its variants with the profiler off (rounds interleaved: pitfall,
fix, pitfall, fix, ...; each round = a few warm-up steps, torch.cuda.synchronize(), N steps,
torch.cuda.synchronize(), mean ms per step from the host clock), prints them as FACT lines
(`pitfall_step_ms`, `fixed_step_ms`, `saving_ms` and the rounds), THEN profiles its own
variant: a few un-profiled warm-up steps, then `profile(activities=[CPU, CUDA],
schedule(wait=1, warmup=2, active=4), record_shapes=True)`, `prof.step()` per iteration
(ProfilerStep#3..#6 recorded), export_chrome_trace, gzip -9. (recompile_every_step profiles
first and times after, so that its trace is made even if its slow compiles run long.)

The GPT (common.GPT: pre-norm blocks, fused QKV Linear, SDPA causal, GELU MLP 4x, learned
positions, untied head) for every GPT scenario: vocab 8192, width 1024, 16 heads, 4 layers,
batch 16 x 512 tokens, bf16 autocast, `cross_entropy(logits.float())`, `AdamW(fused=True)`,
`zero_grad(set_to_none=True)`; token batches made on the GPU up front (4, used in turn).

Scenarios (the one profiled is the name; "fix" = what is timed beside it):
  empty_cache_every_step   GPT training + torch.cuda.empty_cache() after every step. Fix: none.
  allocator_steady         the same training without empty_cache (twin of the above and of
                           checkpoint_every_block: same model, sizes, batches).
  recompile_every_step     a 2-layer GPT (width 512, 8 heads, batch 8) under
                           torch.compile(dynamic=False), a NEW sequence length every step
                           (512, 504, 496, ...: multiples of 8), so dynamo recompiles each step;
                           torch._dynamo.config.recompile_limit raised to 64. One un-profiled
                           step, then profiled wait=1, warmup=2, active=3 (every step a new
                           length). Fix: torch.compile(dynamic=True) fed the same kind of
                           varying lengths; the pitfall is timed on yet more new lengths.
  compile_dynamic_shapes   the dynamic=True model with varying lengths, profiled after warm-up.
  anomaly_detection_on     GPT training with torch.autograd.set_detect_anomaly(True) on for
                           the whole loop. Fix: off.
  item_logging_per_layer   GPT training (anomaly off) with a forward hook on every block that
                           logs `out.float().mean().item()` (4 syncs per step). Fix: no hook.
  conv_nchw_bf16           ResNet-50 (torchvision's if importable, else the same net written
                           here), batch 64 x 3 x 224 x 224, bf16 autocast, SGD momentum 0.9,
                           default NCHW. Fix: model and input in torch.channels_last.
  conv_channels_last_bf16  the channels_last run (twin), profiled.
  checkpoint_every_block   GPT training, each block under
                           torch.utils.checkpoint.checkpoint(blk, x, use_reentrant=False).
                           Fix: no checkpointing (twin trace: allocator_steady).
  zero_grad_fill           GPT training with opt.zero_grad(set_to_none=False) after every
                           step (gradients zero-filled, then accumulated into). Fix:
                           zero_grad(set_to_none=True), the default.
  host_tensor_every_step   GPT training; every step builds its inputs and targets on the host
                           with torch.tensor(python list of ints).view(B, T) (the lists made
                           up front) and copies each with .cuda() (pageable, blocking). Fix:
                           token batches made on the GPU up front.
  (timing only, no trace; the second recording command)
  conv_timing              the conv pair again: 5 interleaved rounds of 40 steps, then 30
                           steps of each with a sync around every step.
  dynamic_lengths_timing   what a NEW sequence length costs where nothing recompiles: the
                           dynamic=True model, the same GPT eager (default SDPA backend) and
                           eager with SDPA forced to flash, each on 12 lengths of its own,
                           each length visited twice (new, then seen).
  slow_every_other_step    GPT training; every odd step (ProfilerStep#3, #5, #7) also runs an
                           "eval/logging" block: a no_grad forward on a held-out batch, its loss
                           and the training loss read by .item(), and time.sleep(0.015).
                           Profiled active=6 (ProfilerStep#3..#8). Fix: no such block.

The second set (pitfalls2; `run_pitfalls.sh` with SCENARIOS=pitfalls2a / pitfalls2b):
  recompile_limit_hit      the recompile_every_step model (RC_CFG: 2 layers, width 512, batch 8;
                           a forward code object of its own, GPTLimited) under
                           torch.compile(dynamic=False) with torch._dynamo.config.recompile_limit
                           (and its alias cache_size_limit) = 4, a NEW length every step (multiples
                           of 8: 512, 504, ..., 456 first, then the rest of 512..24 in a fixed
                           shuffled order, each used once). 8 un-profiled steps, each synced and
                           timed: 4 compile (entries 0/0..0/3), the 5th hits the limit and dynamo
                           runs the frame eagerly from then on (RUN_ONLY: a cache lookup that
                           misses, nothing compiled, nested frames too). Then the dynamic=True
                           model (GPTDynamic) compiles on 3 new lengths, the never-compiled GPT
                           takes 1 step, and 2 interleaved rounds time pitfall (the fallen-back
                           model), fixed (dynamic=True) and eager (fact eager_step_ms), each
                           1 warm-up + 4 steps, every step a length new to the process (cuDNN's
                           SDPA plans are built per new shape in all three); then one round each
                           on the same lengths again (seen_lengths_step_ms). Profiled last:
                           1 un-profiled + wait=1, warmup=2, active=4, new lengths. torch's
                           "recompiles" log is on (stderr: the guard failures, the limit warning).
  graph_breaks_per_step    the GPT (GPT_CFG, bf16 autocast, AdamW fused) under torch.compile
                           (default mode) with every block a BreakBlock: common.Block's forward
                           with torch._dynamo.graph_break() between the attention residual and
                           the MLP (the class swapped after construction: same weights as the
                           fixed model). Fix: the same model compiled without breaks. Both
                           compiled and warmed up (3 steps each) before 3 interleaved rounds.
  graph_breaks_none        the twin: only the model without breaks, compiled, timed, profiled.
  cudnn_benchmark_new_shapes  ResNet-18 (torchvision's if importable, else the same net written
                           here: basic blocks 2-2-2-2), batch 32, bf16 autocast, channels_last
                           (model and input), SGD momentum 0.9, torch.backends.cudnn.benchmark
                           =True and a NEW square input resolution every step (160, 168, 176, ...,
                           224 skipped; a fresh randn batch per step). Fix: benchmark=False with
                           new resolutions of its own (164, 172, ...: cuDNN's plan cache is keyed
                           by shape, not by the flag). Also timed: benchmark=True on one fixed
                           resolution 224 (fact fixed_shape_benchmark_step_ms). 2 interleaved
                           rounds (1 warm-up + 3 new-shape steps; 3 + 20 at 224), then 3 steps
                           of each new-shape variant with a sync around each. Profiled:
                           benchmark on, new resolutions.
  cudnn_nobenchmark_new_shapes  the twin (a process of its own): benchmark=False on new
                           resolutions 160, 168, ... (timed and profiled) and on 224 (fact
                           fixed_shape_nobenchmark_step_ms).
  conv18_nchw_bf16         ResNet-18 as above, batch 128 x 3 x 224 x 224, bf16 autocast, NCHW,
                           SGD momentum, cudnn.benchmark default (False). Fix: channels_last
                           model and input.
  conv18_channels_last_bf16  the channels_last run (twin), profiled.
  conv18_nchw_fp32_notf32  the same ResNet-18 NCHW in FP32 (no autocast), batch 64, with
                           torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32
                           = False. Fix: channels_last, still FP32 without TF32.
  empty_cache_memory_profiled, allocator_steady_memory_profiled  empty_cache_every_step and
                           allocator_steady again (the same timing), profiled with
                           profile_memory=True as well ("[memory]" instant events in the trace).
  deterministic_index_add  a message-passing layer: node features x (200,000 x 256 fp32, a
                           parameter), W (256 x 256), 2,000,000 random edges (src, dst) made on
                           the GPU up front; out = zeros_like(x).index_add_(0, dst, x[src] @ W),
                           loss = out.float().square().mean(), backward, SGD(lr=0.1) over x and
                           W. Pitfall: torch.use_deterministic_algorithms(True) around the loop
                           (CUBLAS_WORKSPACE_CONFIG=:4096:8 set before torch is imported, in this
                           process only). Fix: off.
  deterministic_off_index_add  the twin: the same process and timing, profiled with
                           deterministic algorithms off (added in a third command).
Each of these prints, after its trace, the matching pitfall_signatures.py function's result
(compile_signature, conv_signature, memory_signature, index_signature) as a FACT.

The third set (pitfalls3; `run_pitfalls.sh` with SCENARIOS=pitfalls3):
  ddp_accum_without_no_sync  the GPT (GPT_CFG, bf16 autocast, AdamW fused over the DDP model's
                           parameters) under torch.nn.parallel.DistributedDataParallel on ONE
                           process: world_size 1, backend "nccl" (gloo in a dry run), env://
                           (MASTER_ADDR 127.0.0.1, a free MASTER_PORT, RANK 0, WORLD_SIZE 1 set
                           here where not set), device_ids [0], NCCL_NVLS_ENABLE=0, DDP's
                           defaults otherwise (25 MiB buckets, gradient_as_bucket_view False).
                           Gradient accumulation: 4 micro-batches of BATCH / 4 = 4 sequences of
                           SEQ tokens per optimizer step (the 4 GPU batches split in 4), loss / 4,
                           backward on each WITHOUT model.no_sync(): DDP all-reduces the gradients
                           after every micro-batch; then opt.step(), zero_grad(set_to_none=True).
                           One profiler step per optimizer step (4 micro-batches). Fix: `with
                           model.no_sync():` around the first 3 micro-batches' forward + backward
                           (the all-reduce on the last only). world_size 1: an all-reduce still
                           runs DDP's reducer and NCCL's call but moves nothing between GPUs, so
                           the saving measured is the 1-rank saving.
  ddp_accum_with_no_sync   the twin (a process of its own): the same timing, the no_sync loop
                           profiled. Both print ddp_signature (pitfall_signatures.py).
  checkpoint_compiled      the GPT with every block under torch.utils.checkpoint.checkpoint(blk,
                           x, use_reentrant=False) (GPTCkptCompiled), the whole model under
                           torch.compile (default mode): the recompute happens inside the
                           compiled backward. Fix: the same model compiled without checkpointing
                           (GPTNoCkpt). Both compiled and warmed up (3 steps each), 3 interleaved
                           rounds, peak memory of each; the checkpointed one profiled.
  compiled_no_checkpoint   the twin: only the model without checkpointing, compiled, timed,
                           profiled. Both print gemm_signature (GEMM-like aten ops and their FLOPs
                           from Input Dims, forward vs backward side) and compile_signature.
"""

from __future__ import annotations

import contextlib
import copy
import gzip
import json
import os
import re
import statistics
import sys
import time

if sys.argv[1:2] in (["deterministic_index_add"], ["deterministic_off_index_add"]):
    # cuBLAS needs a fixed workspace for deterministic GEMMs; read when CUDA starts
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

import common as C
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

DRY = os.environ.get("PITFALLS_DRY") == "1"
DEV = "cpu" if DRY else "cuda"

if DRY:
    GPT_CFG = dict(vocab=256, d=64, h=4, layers=2, max_seq=64)
    BATCH, SEQ = 2, 32
    RC_CFG = dict(vocab=256, d=64, h=4, layers=2, max_seq=64)
    RC_BATCH, RC_SEQ, RC_STRIDE = 2, 64, 2
    CONV_BATCH, CONV_HW, CONV_CLASSES = 2, 32, 10
    N_STEPS, N_ROUNDS = 3, 2
else:
    GPT_CFG = dict(vocab=8192, d=1024, h=16, layers=4, max_seq=512)
    BATCH, SEQ = 16, 512
    RC_CFG = dict(vocab=8192, d=512, h=8, layers=2, max_seq=512)
    RC_BATCH, RC_SEQ, RC_STRIDE = 8, 512, 8
    CONV_BATCH, CONV_HW, CONV_CLASSES = 64, 224, 1000
    N_STEPS, N_ROUNDS = 20, 3
WARM = 3  # warm-up steps per timing round
SLEEP_S = 0.015  # the slow logger of slow_every_other_step
RECOMPILE_LIMIT = 64
# PITFALLS_BACKEND=aot_eager makes a dry run's compiles quick (default: inductor)
_BACKEND = os.environ.get("PITFALLS_BACKEND")
COMPILE_KW = {"backend": _BACKEND} if _BACKEND else {}

fact = C.fact


def sync() -> None:
    if DEV == "cuda":
        torch.cuda.synchronize()


def env_facts(scenario: str) -> None:
    d = dict(scenario=scenario, torch=torch.__version__, cuda=torch.version.cuda, dry=DRY)
    with contextlib.suppress(Exception):
        d["cudnn"] = torch.backends.cudnn.version()
    if DEV == "cuda":
        p = torch.cuda.get_device_properties(0)
        d.update(gpu=p.name, sms=p.multi_processor_count)
    try:
        import triton

        d["triton"] = triton.__version__
    except Exception:
        pass
    fact(**d)


# ---------------------------------------------------------------- timing without the profiler


def time_steps(step, n: int, warm: int, ctx=None) -> float:
    """Mean ms per step of step(i) over n steps after warm steps (host clock between syncs);
    ctx (a context-manager factory, or None) is entered around the whole round."""
    with (ctx or contextlib.nullcontext)():
        for i in range(warm):
            step(i)
        sync()
        t0 = time.perf_counter()
        for i in range(warm, warm + n):
            step(i)
        sync()
        t1 = time.perf_counter()
    return (t1 - t0) * 1e3 / n


def timed_rounds(scenario: str, variants: dict, n: int = 0, warm: int = WARM, rounds: int = 0):
    """variants: name -> (step, ctx). Rounds interleaved; returns name -> [ms per round]."""
    n = n or N_STEPS
    rounds = rounds or N_ROUNDS
    res: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(rounds):
        for k, (step, ctx) in variants.items():
            res[k].append(round(time_steps(step, n, warm, ctx), 3))
    fact(scenario=scenario, timing_rounds_ms=res, timed_steps_per_round=n, warmup_per_round=warm)
    return res


def truth(scenario: str, res: dict, pitfall: str = "pitfall", fixed: str = "fixed", **kw) -> None:
    p = statistics.mean(res[pitfall])
    f = statistics.mean(res[fixed])
    fact(
        scenario=scenario,
        truth=True,
        pitfall=pitfall,
        fixed=fixed,
        pitfall_step_ms=round(p, 3),
        fixed_step_ms=round(f, 3),
        saving_ms=round(p - f, 3),
        saving_share_of_pitfall=round((p - f) / p, 4) if p else None,
        pitfall_rounds_ms=res[pitfall],
        fixed_rounds_ms=res[fixed],
        **kw,
    )


# ---------------------------------------------------------------- profiling


def profile_run(scenario, out_dir, step, unprofiled=2, wait=1, warmup=2, active=4, ctx=None,
                prof_kw=None):
    """Un-profiled warm-up steps, then the profiled schedule; step(i) gets the profiler step
    index i (ProfilerStep#i). Prints the profiled step times and trace facts. prof_kw: more
    keyword arguments of torch.profiler.profile (profile_memory=True)."""
    path = os.path.join(out_dir, scenario + ".json.gz")
    ctx = ctx or contextlib.nullcontext
    n = wait + warmup + active
    host: list[float] = []
    ev: list = []
    with ctx():
        for i in range(unprofiled):
            step(-unprofiled + i)
        sync()
        with C.make_profiler(path, wait, warmup, active, **(prof_kw or {})) as prof:
            for i in range(n):
                if DEV == "cuda":
                    e = torch.cuda.Event(enable_timing=True)
                    e.record()
                    ev.append(e)
                host.append(time.perf_counter())
                step(i)
                prof.step()
            if DEV == "cuda":
                e = torch.cuda.Event(enable_timing=True)
                e.record()
                ev.append(e)
            host.append(time.perf_counter())
    sync()
    d = dict(
        scenario=scenario,
        profiled=True,
        schedule=dict(wait=wait, warmup=warmup, active=active, unprofiled_warmup=unprofiled),
        profiler_kw=dict(record_shapes=True, **(prof_kw or {})),
        profiled_step_labels=[C.label(i, wait, warmup, active) for i in range(n)],
        profiled_step_ms_host_wall=[round((host[i + 1] - host[i]) * 1e3, 3) for i in range(n)],
    )
    if ev:
        d["profiled_step_ms_cuda_events"] = [
            round(ev[i].elapsed_time(ev[i + 1]), 3) for i in range(n)
        ]
        d["max_mem_allocated_mib"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
    fact(**d)
    try:
        import tracefacts

        fact(scenario=scenario, trace_facts=tracefacts.trace_facts(path))
    except Exception as e:
        fact(scenario=scenario, trace_facts_error=repr(e))
    return path


def kernel_matches(path: str, pattern: str) -> dict:
    """Kernels in the trace whose name matches pattern: count and time vs all kernel time."""
    with gzip.open(path, "rt") as f:
        evs = json.load(f)["traceEvents"]
    pat = re.compile(pattern, re.I)
    total = 0.0
    hit: dict[str, list[float]] = {}
    for e in evs:
        if e.get("ph") == "X" and e.get("cat") == "kernel":
            total += e["dur"]
            if pat.search(e["name"]):
                h = hit.setdefault(e["name"][:160], [0, 0.0])
                h[0] += 1
                h[1] += e["dur"]
    ms = sum(v[1] for v in hit.values()) / 1e3
    return dict(
        pattern=pattern,
        kernels_matched=sum(v[0] for v in hit.values()),
        matched_kernel_ms=round(ms, 3),
        all_kernel_ms=round(total / 1e3, 3),
        matched_share=round(ms * 1e3 / total, 4) if total else None,
        by_name={k: dict(count=v[0], ms=round(v[1] / 1e3, 3)) for k, v in
                 sorted(hit.items(), key=lambda kv: -kv[1][1])[:8]},
    )


# ---------------------------------------------------------------- models and steps


class CkptGPT(C.GPT):
    """common.GPT whose blocks run under torch.utils.checkpoint while use_ckpt is set."""

    use_ckpt = False

    def trunk(self, x: torch.Tensor) -> torch.Tensor:
        for blk in self.blocks:
            x = checkpoint(blk, x, use_reentrant=False) if self.use_ckpt else blk(x)
        return self.head(self.ln_f(x))


class GPTStatic(C.GPT):
    """A class (and forward code object) of its own, so that its compiled entries never share
    guards with GPTDynamic's."""

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.trunk(self.embed(idx))


class GPTDynamic(C.GPT):
    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.trunk(self.embed(idx))


def gpt(cls=C.GPT, cfg=None):
    C.seed_all(0)
    model = cls(**(cfg or GPT_CFG)).to(DEV)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
    return model, opt


def token_batches(n: int, batch: int, seq: int, vocab: int):
    g = torch.Generator(device=DEV)
    g.manual_seed(1234)
    out = []
    for _ in range(n):
        d = torch.randint(0, vocab, (batch, seq + 1), device=DEV, generator=g)
        out.append((d[:, :-1].contiguous(), d[:, 1:].contiguous()))
    return out


def gpt_step(model, opt, x, y, set_to_none: bool = True) -> torch.Tensor:
    with torch.autocast(DEV, dtype=torch.bfloat16):
        logits = model(x)
    loss = F.cross_entropy(logits.float().reshape(-1, model.vocab), y.reshape(-1))
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=set_to_none)
    return loss


def gpt_facts(scenario: str, model, batch: int, seq: int) -> dict:
    """N = weights of the nn.Linear layers in the blocks + the head (the matmul weights)."""
    cfg = dict(d=model.tok.embedding_dim, layers=len(model.blocks), vocab=model.vocab)
    d, L = cfg["d"], cfg["layers"]
    n_blocks = sum(m.weight.numel() for m in model.blocks.modules() if isinstance(m, nn.Linear))
    n_head = model.head.weight.numel()
    n = n_blocks + n_head
    tokens = batch * seq
    attn_causal = 6 * L * batch * seq * seq * d  # = 12*L*d*seq^2*batch / 2
    f = dict(
        scenario=scenario,
        model="common.GPT",
        **cfg,
        heads=model.blocks[0].h,
        batch=batch,
        seq=seq,
        tokens_per_step=tokens,
        params_total=C.model_params(model),
        matmul_weight_params_N=n,
        matmul_weight_params_blocks=n_blocks,
        matmul_weight_params_head=n_head,
        flops_6N_tokens=6 * n * tokens,
        flops_attention_causal=attn_causal,
        flops_per_step_model=6 * n * tokens + attn_causal,
        flops_formula="6*N*tokens + 6*L*batch*seq^2*d (causal attention: QK^T and AV, "
        "2*2*batch*seq^2*d per layer forward, halved for the causal mask, x3 for fwd+bwd)",
        # what the GPU runs when every block's forward is recomputed in the backward
        flops_per_step_with_block_recompute=6 * n * tokens + attn_causal
        + 2 * n_blocks * tokens + 2 * L * batch * seq * seq * d,
    )
    fact(**f)
    return f


# ---------------------------------------------------------------- scenarios


def sc_allocator(scenario: str, out: str) -> None:
    model, opt = gpt()
    bs = token_batches(4, BATCH, SEQ, model.vocab)
    gpt_facts(scenario, model, BATCH, SEQ)

    def plain(i):
        x, y = bs[i % len(bs)]
        gpt_step(model, opt, x, y)

    def churn(i):
        plain(i)
        if DEV == "cuda":
            torch.cuda.empty_cache()

    mem = scenario.endswith("_memory_profiled")  # the pitfalls2 twins: profile_memory=True

    res = timed_rounds(scenario, {"pitfall": (churn, None), "fixed": (plain, None)})
    truth(scenario, res, what_pitfall="torch.cuda.empty_cache() after every step",
          what_fixed="no empty_cache")
    if DEV == "cuda":  # the allocator's own counts, profiler off, over 10 steps of each
        for name, fn in (("pitfall", churn), ("fixed", plain)):
            for i in range(3):
                fn(i)
            sync()
            s0 = torch.cuda.memory_stats()
            for i in range(10):
                fn(i)
            sync()
            s1 = torch.cuda.memory_stats()
            keys = ("segment.all.allocated", "segment.all.freed", "num_device_alloc",
                    "num_device_free", "num_alloc_retries")
            fact(scenario=scenario, variant=name, allocator_stats_per_step={
                k: (s1.get(k, 0) - s0.get(k, 0)) / 10 for k in keys},
                 reserved_mib_after=round(torch.cuda.memory_reserved() / 2**20, 1))
    path = profile_run(scenario, out, churn if scenario.startswith("empty_cache") else plain,
                       prof_kw=dict(profile_memory=True) if mem else None)
    if mem:
        sig_fact(scenario, "memory_signature", path)


def sc_anomaly(scenario: str, out: str) -> None:
    model, opt = gpt()
    bs = token_batches(4, BATCH, SEQ, model.vocab)
    gpt_facts(scenario, model, BATCH, SEQ)
    logged: list[float] = []
    hook_on = [False]

    def hook(mod, inp, outp):
        if hook_on[0]:
            logged.append(outp.float().mean().item())
            if len(logged) > 1000:
                del logged[:]

    if scenario == "item_logging_per_layer":  # no hooks at all in the anomaly process
        for blk in model.blocks:
            blk.register_forward_hook(hook)

    def plain(i):
        hook_on[0] = False
        x, y = bs[i % len(bs)]
        gpt_step(model, opt, x, y)

    def logging_(i):
        hook_on[0] = True
        x, y = bs[i % len(bs)]
        gpt_step(model, opt, x, y)
        hook_on[0] = False

    def anomaly():
        return torch.autograd.set_detect_anomaly(True)

    if scenario == "anomaly_detection_on":
        variants = {"pitfall": (plain, anomaly), "fixed": (plain, None)}
        res = timed_rounds(scenario, variants, n=max(3, N_STEPS // 2))
        truth(scenario, res, what_pitfall="torch.autograd.set_detect_anomaly(True) around the loop",
              what_fixed="anomaly detection off")
        profile_run(scenario, out, plain, ctx=anomaly)
    else:
        variants = {"pitfall": (logging_, None), "fixed": (plain, None)}
        res = timed_rounds(scenario, variants)
        truth(scenario, res, what_pitfall="per-block forward hook: out.float().mean().item()",
              what_fixed="no hook (no per-layer .item())", syncs_per_step=len(model.blocks))
        profile_run(scenario, out, logging_)


def sc_checkpoint(scenario: str, out: str) -> None:
    model, opt = gpt(CkptGPT)
    bs = token_batches(4, BATCH, SEQ, model.vocab)
    gpt_facts(scenario, model, BATCH, SEQ)

    def ck(i):
        model.use_ckpt = True
        x, y = bs[i % len(bs)]
        gpt_step(model, opt, x, y)

    def plain(i):
        model.use_ckpt = False
        x, y = bs[i % len(bs)]
        gpt_step(model, opt, x, y)

    res = timed_rounds(scenario, {"pitfall": (ck, None), "fixed": (plain, None)})
    peaks = {}
    if DEV == "cuda":
        for name, fn in (("pitfall", ck), ("fixed", plain)):
            fn(0)
            sync()
            torch.cuda.reset_peak_memory_stats()
            fn(1)
            sync()
            peaks[name] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
    truth(scenario, res, what_pitfall="every block under checkpoint(blk, x, use_reentrant=False)",
          what_fixed="no checkpointing", peak_mem_mib=peaks)
    if DEV == "cuda":
        torch.cuda.reset_peak_memory_stats()
    profile_run(scenario, out, ck)


def sc_slow_every_other(scenario: str, out: str) -> None:
    model, opt = gpt()
    bs = token_batches(4, BATCH, SEQ, model.vocab)
    (xe, ye), = token_batches(1, BATCH, SEQ, model.vocab)  # held-out batch
    gpt_facts(scenario, model, BATCH, SEQ)
    vals: list[float] = []

    def fast(i):
        x, y = bs[i % len(bs)]
        return gpt_step(model, opt, x, y)

    def evaluate_and_log(loss):
        with torch.no_grad(), torch.autocast(DEV, dtype=torch.bfloat16):
            le = F.cross_entropy(model(xe).float().reshape(-1, model.vocab), ye.reshape(-1))
        vals.append(loss.item())
        vals.append(le.item())
        time.sleep(SLEEP_S)
        if len(vals) > 1000:
            del vals[:]

    def alternating(i):
        loss = fast(i)
        if i % 2 == 1:
            evaluate_and_log(loss)

    res = timed_rounds(scenario, {"pitfall": (alternating, None), "fixed": (fast, None)})
    # per-step times, a sync after each step: fast (even) and slow (odd) steps of the pattern
    per = {"fast_even": [], "slow_odd": []}
    for _ in range(2):
        for i in range(WARM + 1):
            alternating(i)
        sync()
        for i in range(2 * max(5, N_STEPS // 2)):
            t0 = time.perf_counter()
            alternating(i)
            sync()
            per["slow_odd" if i % 2 == 1 else "fast_even"].append((time.perf_counter() - t0) * 1e3)
    fast_ms = statistics.mean(per["fast_even"])
    slow_ms = statistics.mean(per["slow_odd"])
    truth(scenario, res, what_pitfall="every odd step: no_grad eval forward on a held-out batch, "
          "loss.item() and eval_loss.item(), time.sleep(0.015)",
          what_fixed="no eval/logging block (every step fast)",
          fast_step_ms_synced=round(fast_ms, 3), slow_step_ms_synced=round(slow_ms, 3),
          mean_step_ms_synced=round((fast_ms + slow_ms) / 2, 3),
          slow_minus_fast_ms=round(slow_ms - fast_ms, 3),
          fast_step_ms_synced_each=[round(v, 3) for v in per["fast_even"]],
          slow_step_ms_synced_each=[round(v, 3) for v in per["slow_odd"]],
          sleep_ms=SLEEP_S * 1e3, slow_steps="odd ProfilerStep numbers (#3, #5, #7)")
    profile_run(scenario, out, alternating, active=6)


def sc_zero_grad_fill(scenario: str, out: str) -> None:
    """allocator_steady's training, but opt.zero_grad(set_to_none=False) after every step:
    every gradient is zero-filled (fused AdamW: torch._foreach_zero_) and the next backward
    accumulates into it (AccumulateGrad adds instead of stealing the new gradient)."""
    model, opt = gpt()
    bs = token_batches(4, BATCH, SEQ, model.vocab)
    gpt_facts(scenario, model, BATCH, SEQ)
    params = [p for p in model.parameters() if p.requires_grad]
    fact(scenario=scenario, param_tensors=len(params),
         param_elements=sum(p.numel() for p in params),
         grad_bytes_fp32=sum(p.numel() * p.element_size() for p in params),
         param_dtypes=sorted({str(p.dtype) for p in params}),
         optimizer="AdamW(lr=3e-4, fused=True)")

    def fill(i):
        x, y = bs[i % len(bs)]
        gpt_step(model, opt, x, y, set_to_none=False)

    def none_(i):
        x, y = bs[i % len(bs)]
        gpt_step(model, opt, x, y, set_to_none=True)

    res = timed_rounds(scenario, {"pitfall": (fill, None), "fixed": (none_, None)})
    # zero_grad alone, gradients present (profiler off): host time of one call, and its GPU
    # time between CUDA events
    fill(0)
    sync()
    host, gpu = [], []
    for _ in range(20):
        assert all(p_.grad is not None for p_ in params)  # set_to_none=False keeps them
        sync()
        if DEV == "cuda":
            a = torch.cuda.Event(enable_timing=True)
            b = torch.cuda.Event(enable_timing=True)
            a.record()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=False)
        t1 = time.perf_counter()
        if DEV == "cuda":
            b.record()
        sync()
        host.append((t1 - t0) * 1e3)
        if DEV == "cuda":
            gpu.append(a.elapsed_time(b))
    extra = dict(zero_grad_fill_alone_host_ms=round(statistics.median(host), 4),
                 zero_grad_fill_alone_gpu_ms=round(statistics.median(gpu), 4) if gpu else None,
                 zero_grad_alone_calls=20, note_alone="medians, the GPU idle before each call")
    none_(0)
    sync()
    truth(scenario, res, what_pitfall="opt.zero_grad(set_to_none=False) after every "
          "optimizer step (gradients zero-filled, the next backward accumulates into them)",
          what_fixed="opt.zero_grad(set_to_none=True) (the default)",
          param_tensors=len(params), **extra)
    profile_run(scenario, out, fill)


def sc_host_tensor(scenario: str, out: str) -> None:
    """allocator_steady's training, but every step builds its batch on the host from Python
    lists of ints (torch.tensor(list).view(B, T)) and copies it with .cuda() (pageable
    memory, blocking). The lists (4 batches of inputs and targets) are made once up front,
    as a dataset of token lists would hold them. Fix: the GPU batches made up front."""
    import random

    model, opt = gpt()
    bs = token_batches(4, BATCH, SEQ, model.vocab)
    gpt_facts(scenario, model, BATCH, SEQ)
    rng = random.Random(1234)
    lists = []
    for _ in range(4):
        d = [rng.randrange(model.vocab) for _ in range(BATCH * (SEQ + 1))]
        rows = [d[r * (SEQ + 1):(r + 1) * (SEQ + 1)] for r in range(BATCH)]
        lists.append(([t for row in rows for t in row[:-1]], [t for row in rows for t in row[1:]]))

    def host_batch(i):
        xs, ys = lists[i % len(lists)]
        x = torch.tensor(xs).view(BATCH, SEQ)
        y = torch.tensor(ys).view(BATCH, SEQ)
        if DEV == "cuda":
            x, y = x.cuda(), y.cuda()
        return x, y

    def pit(i):
        x, y = host_batch(i)
        gpt_step(model, opt, x, y)

    def fixed(i):
        x, y = bs[i % len(bs)]
        gpt_step(model, opt, x, y)

    x0 = torch.tensor(lists[0][0]).view(BATCH, SEQ)
    fact(scenario=scenario, batch_source="torch.tensor(python list of ints).view(B, T) for "
         "inputs and for targets, then .cuda() each (pageable, non_blocking=False)",
         copies_per_step=2, bytes_per_copy=x0.numel() * x0.element_size(),
         host_dtype=str(x0.dtype), host_pinned=False)  # torch.tensor(list): pageable
    res = timed_rounds(scenario, {"pitfall": (pit, None), "fixed": (fixed, None)})
    # the batch alone, the GPU idle (profiler off): list -> tensor, then the two copies
    build, copy_ = [], []
    for i in range(20):
        xs, ys = lists[i % len(lists)]
        sync()
        t0 = time.perf_counter()
        x = torch.tensor(xs).view(BATCH, SEQ)
        y = torch.tensor(ys).view(BATCH, SEQ)
        t1 = time.perf_counter()
        if DEV == "cuda":
            x, y = x.cuda(), y.cuda()
        t2 = time.perf_counter()
        build.append((t1 - t0) * 1e3)
        copy_.append((t2 - t1) * 1e3)
    extra = dict(batch_from_lists_alone_host_ms=round(statistics.median(build), 4),
                 two_cuda_copies_alone_host_ms=round(statistics.median(copy_), 4),
                 alone_repeats=20, note_alone="medians, the GPU idle (no step queued)")
    truth(scenario, res, what_pitfall="each step: torch.tensor(list of ints).view(B, T) for "
          "inputs and targets on the host, .cuda() each (pageable, blocking)",
          what_fixed="token batches made on the GPU up front (4, used in turn)",
          copies_per_step=2, bytes_per_copy=x0.numel() * x0.element_size(), **extra)
    profile_run(scenario, out, pit)


# --- torch.compile


def dynamo_counts(keys=("stats", "frames")) -> dict:
    """torch._dynamo.utils.counters: the groups named (keys=None: every group; the keys of a
    group, e.g. graph-break reasons, cut to 240 characters)."""
    try:
        from torch._dynamo.utils import counters

        keys = list(counters) if keys is None else keys
        return {k: {str(kk)[:240]: vv for kk, vv in counters[k].items()}
                for k in keys if k in counters}
    except Exception as e:
        return {"error": repr(e)}


def set_recompile_limit(scenario: str, limit: int = RECOMPILE_LIMIT) -> None:
    import torch._dynamo as dynamo

    set_ = {}
    names = [n for n in ("recompile_limit", "cache_size_limit") if hasattr(dynamo.config, n)]
    for name in names:  # read both before setting either (cache_size_limit is an alias)
        set_[name + "_default"] = getattr(dynamo.config, name)
    for name in names:
        setattr(dynamo.config, name, limit)
        set_[name] = getattr(dynamo.config, name)
    if hasattr(dynamo.config, "accumulated_recompile_limit"):
        dynamo.config.accumulated_recompile_limit = max(
            dynamo.config.accumulated_recompile_limit, 4 * limit)
        set_["accumulated_recompile_limit"] = dynamo.config.accumulated_recompile_limit
    for name in ("fail_on_recompile_limit_hit", "automatic_dynamic_shapes"):
        if hasattr(dynamo.config, name):
            set_[name + " (left as is)"] = getattr(dynamo.config, name)
    fact(scenario=scenario, dynamo_config_set=set_,
         note="recompile_limit raised from its default (8) so that every profiled step still "
         "recompiles instead of falling back to eager" if limit > 8 else
         f"recompile_limit lowered to {limit}: the frame falls back to eager once it has "
         f"{limit} compiled entries and a new length comes")


class Lengths:
    """Sequence lengths RC_SEQ, RC_SEQ - stride, ...: each next() is a length not used before
    (wrapping only after the whole range)."""

    def __init__(self, start: int = 0) -> None:
        self.k = start
        self.n = (RC_SEQ - 2 * RC_STRIDE) // RC_STRIDE  # keep lengths >= 2 * stride

    def __call__(self) -> int:
        t = RC_SEQ - RC_STRIDE * (self.k % self.n)
        self.k += 1
        return t


def sc_compile(scenario: str, out: str) -> None:
    set_recompile_limit(scenario)
    fact(scenario=scenario, compile_threads=os.environ.get("TORCHINDUCTOR_COMPILE_THREADS"),
         rc_model=dict(RC_CFG, batch=RC_BATCH, max_len=RC_SEQ, len_stride=RC_STRIDE))
    g = torch.Generator(device=DEV)
    g.manual_seed(99)
    V = RC_CFG["vocab"]

    def batch_of(t):
        d = torch.randint(0, V, (RC_BATCH, t + 1), device=DEV, generator=g)
        return d[:, :-1].contiguous(), d[:, 1:].contiguous()

    # dynamic model: lengths cycle over the same range; static model: never a length twice
    dyn_len = Lengths(start=0)
    st_len = Lengths(start=0)
    used: dict[str, list[int]] = {"static": [], "dynamic": []}
    t_proc = time.perf_counter()
    if scenario == "recompile_every_step":
        # the static model is compiled first (its frame is dynamo's frame 0) and PROFILED
        # FIRST: the trace is what this process is for; the dynamic model is built after it,
        # so that none of its compilation is in the trace. Then both are timed.
        st_model, st_opt = gpt(GPTStatic, RC_CFG)
        st_c = torch.compile(st_model, dynamic=False, **COMPILE_KW)
        gpt_facts(scenario, st_model, RC_BATCH, RC_SEQ)  # seq: the longest length; they vary

        def st_step(i):
            t = st_len()
            used["static"].append(t)
            x, y = batch_of(t)
            gpt_step(st_c, st_opt, x, y)

        t0 = time.perf_counter()
        st_step(0)
        sync()
        fact(scenario=scenario, static_first_compile_and_step_s=round(time.perf_counter() - t0, 2))
        k0 = len(used["static"])
        profile_run(scenario, out, st_step, unprofiled=1, active=3)
        fact(scenario=scenario, lengths_profiled_run=used["static"][k0:],
             note_lengths="the first is the un-profiled warm-up step, then ProfilerStep#0..#5 "
             "(#3..#5 recorded); every one a length not seen before",
             dynamo_after_profile=dynamo_counts())

    dyn_model, dyn_opt = gpt(GPTDynamic, RC_CFG)
    dyn_c = torch.compile(dyn_model, dynamic=True, **COMPILE_KW)
    if scenario != "recompile_every_step":
        gpt_facts(scenario, dyn_model, RC_BATCH, RC_SEQ)  # seq: the longest length; they vary

    def dyn_step(i):
        t = dyn_len()
        used["dynamic"].append(t)
        x, y = batch_of(t)
        gpt_step(dyn_c, dyn_opt, x, y)

    t0 = time.perf_counter()
    for i in range(3):
        dyn_step(i)
    sync()
    fact(scenario=scenario, dynamic_compile_and_3_steps_s=round(time.perf_counter() - t0, 2),
         dynamo=dynamo_counts())

    if scenario == "recompile_every_step":
        c0 = dynamo_counts()
        n_used0 = {k: len(v) for k, v in used.items()}
        # 2 interleaved rounds of 4 new lengths each for the static model (1 and 3 when the
        # compiles so far were slow, so that the process ends inside its timeout)
        slow = time.perf_counter() - t_proc > 110
        rounds, n_pit = (1, 3) if slow else (2, 4)
        n_fix = max(3, N_STEPS // 2)
        res = {"pitfall": [], "fixed": []}
        for _ in range(rounds):
            res["pitfall"].append(round(time_steps(st_step, n_pit, 1), 3))
            res["fixed"].append(round(time_steps(dyn_step, n_fix, 2), 3))
        c1 = dynamo_counts()
        fact(scenario=scenario, timing_rounds_ms=res, pitfall_steps_per_round=n_pit,
             pitfall_warmup_per_round=1, fixed_steps_per_round=n_fix,
             fixed_warmup_per_round=2, dynamo_before_timing=c0, dynamo_after_timing=c1,
             lengths_static_timing=used["static"][n_used0["static"]:],
             lengths_dynamic_timing=used["dynamic"][n_used0["dynamic"]:])
        truth(scenario, res, what_pitfall="torch.compile(dynamic=False), a new sequence length "
              "every step (each step recompiles)",
              what_fixed="torch.compile(dynamic=True), the same kind of varying lengths",
              batch=RC_BATCH, mean_len_static_timed=statistics.mean(
                  used["static"][n_used0["static"]:]),
              mean_len_dynamic_timed=statistics.mean(used["dynamic"][n_used0["dynamic"]:]))
    else:
        res = {"fixed": []}
        for _ in range(N_ROUNDS):
            res["fixed"].append(round(time_steps(dyn_step, N_STEPS, WARM), 3))
        fact(scenario=scenario, timing_rounds_ms=res, truth=True,
             fixed_step_ms=round(statistics.mean(res["fixed"]), 3),
             what="torch.compile(dynamic=True), varying lengths (no recompiles)",
             dynamo_after_timing=dynamo_counts())
        c0 = dynamo_counts()
        k0 = len(used["dynamic"])
        profile_run(scenario, out, dyn_step, unprofiled=2, active=4)
        fact(scenario=scenario, lengths_profiled_run=used["dynamic"][k0:],
             dynamo_before_profile=c0, dynamo_after_profile=dynamo_counts())


# --- convolutions


def _own_resnet50(num_classes: int, width: int = 64, layers=(3, 4, 6, 3)) -> nn.Module:
    class Bottleneck(nn.Module):
        def __init__(self, cin, mid, stride):
            super().__init__()
            cout = mid * 4
            self.conv1 = nn.Conv2d(cin, mid, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(mid)
            self.conv2 = nn.Conv2d(mid, mid, 3, stride, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(mid)
            self.conv3 = nn.Conv2d(mid, cout, 1, bias=False)
            self.bn3 = nn.BatchNorm2d(cout)
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                          nn.BatchNorm2d(cout))

        def forward(self, x):
            idt = x if self.down is None else self.down(x)
            out = F.relu(self.bn1(self.conv1(x)))
            out = F.relu(self.bn2(self.conv2(out)))
            out = self.bn3(self.conv3(out))
            return F.relu(out + idt)

    mods = [nn.Conv2d(3, width, 7, 2, 3, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
            nn.MaxPool2d(3, 2, 1)]
    cin = width
    for i, n in enumerate(layers):
        mid = width * 2**i
        for j in range(n):
            mods.append(Bottleneck(cin, mid, 2 if (j == 0 and i > 0) else 1))
            cin = mid * 4
    mods += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, num_classes)]
    return nn.Sequential(*mods)


def resnet50(scenario: str) -> nn.Module:
    C.seed_all(0)
    try:
        if DRY:
            raise ImportError("dry run: small net")
        import torchvision

        m = torchvision.models.resnet50(num_classes=CONV_CLASSES)
        src = f"torchvision {torchvision.__version__} models.resnet50"
    except Exception as e:
        m = _own_resnet50(CONV_CLASSES, width=8 if DRY else 64,
                          layers=(1, 1, 1, 1) if DRY else (3, 4, 6, 3))
        src = f"pitfalls._own_resnet50 ({e!r})"
    fact(scenario=scenario, conv_model=src, params=C.model_params(m), batch=CONV_BATCH,
         image=[3, CONV_HW, CONV_HW], classes=CONV_CLASSES,
         cudnn_benchmark=bool(torch.backends.cudnn.benchmark),
         optimizer="SGD(lr=0.1, momentum=0.9), foreach default")
    return m.to(DEV)


def _conv_setup(scenario: str):
    """The NCHW and the channels_last ResNet-50 (same initial weights) and their steps."""
    base = resnet50(scenario)
    nchw = base
    cl = copy.deepcopy(base).to(memory_format=torch.channels_last)
    opts = {id(m): torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (nchw, cl)}
    g = torch.Generator(device=DEV)
    g.manual_seed(7)
    x = torch.randn(CONV_BATCH, 3, CONV_HW, CONV_HW, device=DEV, generator=g)
    y = torch.randint(0, CONV_CLASSES, (CONV_BATCH,), device=DEV, generator=g)
    x_cl = x.contiguous(memory_format=torch.channels_last)

    def step(model, inp):
        with torch.autocast(DEV, dtype=torch.bfloat16):
            loss = F.cross_entropy(model(inp).float(), y)
        loss.backward()
        opt = opts[id(model)]
        opt.step()
        opt.zero_grad(set_to_none=True)

    def s_nchw(i):
        step(nchw, x)

    def s_cl(i):
        step(cl, x_cl)

    return s_nchw, s_cl


def sc_conv(scenario: str, out: str) -> None:
    s_nchw, s_cl = _conv_setup(scenario)
    res = timed_rounds(scenario, {"pitfall": (s_nchw, None), "fixed": (s_cl, None)})
    truth(scenario, res, what_pitfall="ResNet-50 bf16 autocast, NCHW (default memory format)",
          what_fixed="model.to(memory_format=torch.channels_last), input channels_last")
    own = s_nchw if scenario == "conv_nchw_bf16" else s_cl
    path = profile_run(scenario, out, own)
    try:
        fact(scenario=scenario, layout_kernels=kernel_matches(
            path, r"nchwToNhwc|nhwcToNchw|convertTensor|transpose"))
    except Exception as e:
        fact(scenario=scenario, layout_kernels_error=repr(e))


def _synced_steps(step, n: int) -> list[float]:
    """ms of each of n steps, a sync before and after each (host clock)."""
    out = []
    for i in range(n):
        sync()
        t0 = time.perf_counter()
        step(i)
        sync()
        out.append(round((time.perf_counter() - t0) * 1e3, 3))
    return out


def _stats(v: list[float]) -> dict:
    return dict(mean=round(statistics.mean(v), 3), median=round(statistics.median(v), 3),
                min=round(min(v), 3), max=round(max(v), 3), n=len(v))


def sc_conv_timing(scenario: str, out: str) -> None:
    """Timing only (no trace): the conv pair again, 5 interleaved rounds of 40 steps, then 30
    steps of each with a sync around every step (the channels_last step is host-bound and its
    rounds varied by 30 % in the first recording)."""
    s_nchw, s_cl = _conv_setup(scenario)
    res = timed_rounds(scenario, {"pitfall": (s_nchw, None), "fixed": (s_cl, None)},
                       n=2 * N_STEPS, rounds=5)
    per = {"pitfall": _synced_steps(s_nchw, 30), "fixed": _synced_steps(s_cl, 30)}
    truth(scenario, res, what_pitfall="ResNet-50 bf16 autocast, NCHW (default memory format)",
          what_fixed="model.to(memory_format=torch.channels_last), input channels_last",
          synced_step_ms={k: _stats(v) for k, v in per.items()},
          synced_step_ms_each=per)


def sc_dynamic_lengths(scenario: str, out: str) -> None:
    """Timing only (no trace): what a NEW sequence length costs where nothing recompiles.
    The dynamic=True model of compile_dynamic_shapes and the same GPT eager (default SDPA
    backend, and with SDPA forced to the flash backend), each on a pool of 12 lengths of its
    own, each length visited twice (first: new to the process; second: seen), one step per
    visit with a sync around it; then 10 steps at the warm-up length 512 (seen)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    set_recompile_limit(scenario)
    g = torch.Generator(device=DEV)
    g.manual_seed(99)
    V = RC_CFG["vocab"]
    s = RC_STRIDE

    def batch_of(t):
        d = torch.randint(0, V, (RC_BATCH, t + 1), device=DEV, generator=g)
        return d[:, :-1].contiguous(), d[:, 1:].contiguous()

    npool = 4 if DRY else 12
    # disjoint pools (every length a multiple of the stride; the warm-up length RC_SEQ in none)
    pools = {
        "dynamic_compiled": [RC_SEQ - s - 3 * s * k for k in range(npool)],
        "eager_default_sdpa": [RC_SEQ - 2 * s - 3 * s * k for k in range(npool)],
        "eager_flash_sdpa": [RC_SEQ - 3 * s - 3 * s * k for k in range(npool)],
    }
    dyn_model, dyn_opt = gpt(GPTDynamic, RC_CFG)
    dyn_c = torch.compile(dyn_model, dynamic=True, **COMPILE_KW)
    eager, eager_opt = gpt(C.GPT, RC_CFG)
    runners = {
        "dynamic_compiled": (dyn_c, dyn_opt, contextlib.nullcontext),
        "eager_default_sdpa": (eager, eager_opt, contextlib.nullcontext),
        "eager_flash_sdpa": (eager, eager_opt, lambda: sdpa_kernel(SDPBackend.FLASH_ATTENTION)),
    }
    t0 = time.perf_counter()
    for m, o, ctx in runners.values():
        with ctx():
            for _ in range(3):
                x, y = batch_of(RC_SEQ)
                gpt_step(m, o, x, y)
    sync()
    fact(scenario=scenario, warmup_s=round(time.perf_counter() - t0, 2), dynamo=dynamo_counts(),
         pools=pools, rc_model=dict(RC_CFG, batch=RC_BATCH))
    res: dict[str, dict] = {}
    for visit in ("new", "seen"):
        for name, (m, o, ctx) in runners.items():
            ms = []
            with ctx():
                for t in pools[name]:
                    x, y = batch_of(t)
                    sync()
                    t1 = time.perf_counter()
                    gpt_step(m, o, x, y)
                    sync()
                    ms.append(round((time.perf_counter() - t1) * 1e3, 3))
            res.setdefault(name, {})[visit] = ms
    for name, (m, o, ctx) in runners.items():
        with ctx():
            x, y = batch_of(RC_SEQ)
            res[name]["same_len_512_mean"] = round(time_steps(
                lambda i, m=m, o=o, x=x, y=y: gpt_step(m, o, x, y), N_STEPS // 2, 2), 3)
    summary = {name: dict(new=_stats(v["new"]), seen=_stats(v["seen"]),
                          new_minus_seen_mean_ms=round(statistics.mean(v["new"])
                                                       - statistics.mean(v["seen"]), 3),
                          same_len_512_mean=v["same_len_512_mean"])
               for name, v in res.items()}
    fact(scenario=scenario, truth=True, per_visit_ms=res, summary=summary,
         dynamo_after=dynamo_counts())


# ================================================================ the second set (pitfalls2)


def sig_fact(scenario: str, fn_name: str, path: str) -> None:
    """pitfall_signatures.<fn_name>(path) as a FACT (plain loops over the trace, no torch)."""
    try:
        import pitfall_signatures as PS

        fact(scenario=scenario, **{fn_name: getattr(PS, fn_name)(path)})
    except Exception as e:
        fact(scenario=scenario, **{fn_name + "_error": repr(e)})


def _each_synced(step, n: int, after=None) -> tuple[list[float], list]:
    """ms of each of n steps (a sync before and after each) and after() read after each."""
    ms, extra = [], []
    for i in range(n):
        sync()
        t0 = time.perf_counter()
        step(i)
        sync()
        ms.append(round((time.perf_counter() - t0) * 1e3, 3))
        if after is not None:
            extra.append(after())
    return ms, extra


# --- recompile_limit_hit

RECOMPILE_LIMIT_HIT = 4
LIMIT_STEPS = 8  # un-profiled new-length steps: 4 compiles, then 4 past the limit


class GPTLimited(C.GPT):
    """A forward code object of its own: the frame whose cache fills up."""

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.trunk(self.embed(idx))


class LengthPool:
    """Each call: a sequence length not handed out before in this process (multiples of
    RC_STRIDE from RC_SEQ down to 3 * RC_STRIDE: 512, 504, ..., 24, 62 lengths; DRY: every
    length 64..3). The first `ordered` in decreasing order, the rest in a fixed shuffled order
    (so that the variants timed in turn get lengths of the same mix)."""

    def __init__(self, ordered: int) -> None:
        import random

        s = 1 if DRY else RC_STRIDE
        pool = list(range(RC_SEQ, 3 * s - 1, -s))
        rest = pool[ordered:]
        random.Random(5).shuffle(rest)
        self.order = pool[:ordered] + rest
        self.k = 0
        self.reused = 0

    def __call__(self) -> int:
        if self.k >= len(self.order):
            self.reused += 1
        t = self.order[self.k % len(self.order)]
        self.k += 1
        return t


def sc_recompile_limit(scenario: str, out: str) -> None:
    """The recompile_every_step model under torch.compile(dynamic=False) with
    recompile_limit = 4, a new length every step: 4 compiled entries, then the frame falls
    back to eager (dynamo's RUN_ONLY: cache lookup, no compile, nested frames too)."""
    import itertools

    set_recompile_limit(scenario, RECOMPILE_LIMIT_HIT)
    with contextlib.suppress(Exception):
        torch._logging.set_logs(recompiles=True)  # the reasons and the limit warning, to stderr
    fact(scenario=scenario, compile_threads=os.environ.get("TORCHINDUCTOR_COMPILE_THREADS"),
         rc_model=dict(RC_CFG, batch=RC_BATCH, max_len=RC_SEQ, len_stride=RC_STRIDE))
    g = torch.Generator(device=DEV)
    g.manual_seed(99)
    V = RC_CFG["vocab"]

    def batch_of(t):
        d = torch.randint(0, V, (RC_BATCH, t + 1), device=DEV, generator=g)
        return d[:, :-1].contiguous(), d[:, 1:].contiguous()

    pool = LengthPool(ordered=LIMIT_STEPS)
    st_model, st_opt = gpt(GPTLimited, RC_CFG)
    st_c = torch.compile(st_model, dynamic=False, **COMPILE_KW)
    dyn_model, dyn_opt = gpt(GPTDynamic, RC_CFG)
    dyn_c = torch.compile(dyn_model, dynamic=True, **COMPILE_KW)
    eager, eager_opt = gpt(C.GPT, RC_CFG)
    gpt_facts(scenario, st_model, RC_BATCH, RC_SEQ)  # seq: the longest length; they vary
    runners = {"pitfall": (st_c, st_opt), "fixed": (dyn_c, dyn_opt), "eager": (eager, eager_opt)}
    src = {k: pool for k in runners}  # where each variant's next length comes from
    used: dict[str, list[int]] = {k: [] for k in runners}

    def make_step(name):
        m, o = runners[name]

        def step(i):
            t = src[name]()
            used[name].append(t)
            x, y = batch_of(t)
            gpt_step(m, o, x, y)

        return step

    steps = {k: make_step(k) for k in runners}
    t_proc = time.perf_counter()
    # 1. the static model: 8 new lengths, each step synced: 4 compile, then the limit
    ms, graphs = _each_synced(steps["pitfall"], LIMIT_STEPS, lambda: dynamo_counts(
        ("stats",)).get("stats", {}).get("unique_graphs"))
    fact(scenario=scenario, limit_phase_step_ms=ms, limit_phase_lengths=list(used["pitfall"]),
         unique_graphs_after_each_step=graphs, dynamo_after_limit_phase=dynamo_counts(None))
    # 2. the dynamic model's compile and warm-up (3 new lengths), one eager step
    t0 = time.perf_counter()
    for i in range(3):
        steps["fixed"](i)
    sync()
    fact(scenario=scenario, dynamic_compile_and_3_steps_s=round(time.perf_counter() - t0, 2),
         dynamic_lengths=list(used["fixed"]))
    steps["eager"](0)
    sync()
    # 3. interleaved rounds, every step a length new to the process
    slow = time.perf_counter() - t_proc > 150
    rounds = 1 if slow else 2
    n = 2 if DRY else 4
    k0 = {k: len(v) for k, v in used.items()}
    c0 = dynamo_counts(None)
    res: dict[str, list[float]] = {k: [] for k in runners}
    for _ in range(rounds):
        for k in runners:
            res[k].append(round(time_steps(steps[k], n, 1), 3))
    timed = {k: used[k][k0[k]:] for k in runners}
    c1 = dynamo_counts(None)
    # 4. the same lengths again (seen by the process: cuDNN's SDPA plans cached), one round
    seen = {}
    for k in runners:
        it = itertools.cycle(timed[k][-(n + 1):])
        src[k] = lambda it=it: next(it)
        seen[k] = round(time_steps(steps[k], n, 1), 3)
        src[k] = pool
    fact(scenario=scenario, timing_rounds_ms=res, steps_per_round=n, warmup_per_round=1,
         lengths_timed=timed, seen_lengths_round_ms=seen, dynamo_before_timing=c0,
         dynamo_after_timing=c1, lengths_reused_from_pool=pool.reused)
    truth(scenario, res, what_pitfall="torch.compile(dynamic=False), recompile_limit=4 hit "
          "(4 entries compiled for the first 4 lengths; then dynamo runs the frame eagerly), "
          "a new sequence length every step",
          what_fixed="torch.compile(dynamic=True), the same kind of new lengths",
          eager_step_ms=round(statistics.mean(res["eager"]), 3), eager_rounds_ms=res["eager"],
          what_eager="the same GPT, never compiled, the same kind of new lengths",
          seen_lengths_step_ms=seen, batch=RC_BATCH,
          mean_len_timed={k: statistics.mean(v) for k, v in timed.items()},
          note="every timed step is a length new to the process; the cuDNN SDPA backend builds "
          "a plan per new shape in all three variants (seen_lengths_step_ms: the same lengths "
          "again)")
    # 5. profile the fallen-back model, still new lengths
    k1 = len(used["pitfall"])
    path = profile_run(scenario, out, steps["pitfall"], unprofiled=1, active=4)
    fact(scenario=scenario, lengths_profiled_run=used["pitfall"][k1:],
         note_lengths="the first is the un-profiled step, then ProfilerStep#0..#6 (#3..#6 "
         "recorded); every one a length not seen before",
         dynamo_after_profile=dynamo_counts(None),
         recompile_limit_now=getattr(torch._dynamo.config, "recompile_limit", None))
    sig_fact(scenario, "compile_signature", path)


# --- graph breaks


class BreakBlock(C.Block):
    """common.Block with torch._dynamo.graph_break() between the attention and the MLP (no sync,
    nothing else: a pure break)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        qkv = self.qkv(self.ln1(x)).view(b, t, 3, self.h, c // self.h)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).reshape(b, t, c)
        x = x + self.proj(y)
        torch._dynamo.graph_break()
        x = x + self.fc2(F.gelu(self.fc1(self.ln2(x))))
        return x


class GPTBreaks(C.GPT):
    """common.GPT whose blocks are BreakBlocks (the class swapped after construction, so the
    weights are those of GPTNoBreaks built from the same seed)."""

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        for blk in self.blocks:
            blk.__class__ = BreakBlock

    def trunk(self, x: torch.Tensor) -> torch.Tensor:
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln_f(x))

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.trunk(self.embed(idx))


class GPTNoBreaks(C.GPT):
    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.trunk(self.embed(idx))


def sc_graph_breaks(scenario: str, out: str) -> None:
    """graph_breaks_per_step: both models compiled (default mode), warmed up, timed in
    interleaved rounds; the broken one profiled. graph_breaks_none (twin): the model without
    breaks only: compiled, timed, profiled."""
    twin = scenario == "graph_breaks_none"
    bs = token_batches(4, BATCH, SEQ, GPT_CFG["vocab"])
    models = {}
    if not twin:
        models["pitfall"] = gpt(GPTBreaks)
    models["fixed"] = gpt(GPTNoBreaks)
    gpt_facts(scenario, models["fixed"][0], BATCH, SEQ)
    compiled = {k: (torch.compile(m, **COMPILE_KW), o) for k, (m, o) in models.items()}

    def make_step(k):
        m, o = compiled[k]

        def step(i):
            x, y = bs[i % len(bs)]
            gpt_step(m, o, x, y)

        return step

    steps = {k: make_step(k) for k in compiled}
    for k in steps:
        c0 = dynamo_counts(None)
        t0 = time.perf_counter()
        for i in range(3):
            steps[k](i)
        sync()
        fact(scenario=scenario, variant=k, compile_and_3_steps_s=round(time.perf_counter() - t0, 2),
             dynamo_before=c0, dynamo_after=dynamo_counts(None))
    res = timed_rounds(scenario, {k: (s, None) for k, s in steps.items()})
    counts = dynamo_counts(None)
    if twin:
        fact(scenario=scenario, truth=True, fixed_step_ms=round(statistics.mean(res["fixed"]), 3),
             fixed_rounds_ms=res["fixed"], what="torch.compile(model) (default mode), no graph "
             "break (the fixed variant of graph_breaks_per_step)", dynamo=counts)
    else:
        truth(scenario, res, what_pitfall="torch.compile(model) (default mode), every one of the "
              "4 blocks calls torch._dynamo.graph_break() between attention and MLP",
              what_fixed="the same model compiled without breaks",
              dynamo_stats=counts.get("stats"), dynamo_graph_break=counts.get("graph_break"),
              dynamo_frames=counts.get("frames"))
    c0 = dynamo_counts(None)
    path = profile_run(scenario, out, steps["fixed" if twin else "pitfall"])
    fact(scenario=scenario, dynamo_before_profile=c0, dynamo_after_profile=dynamo_counts(None))
    sig_fact(scenario, "compile_signature", path)


# --- ResNet-18 (cudnn.benchmark with new shapes; layouts)

if DRY:
    R18_BENCH_BATCH, R18_BATCH, R18_FP32_BATCH, R18_HW, R18_CLASSES = 2, 2, 2, 32, 10
    RES_START, RES_STRIDE = 32, 8
else:
    R18_BENCH_BATCH, R18_BATCH, R18_FP32_BATCH, R18_HW, R18_CLASSES = 32, 128, 64, 224, 1000
    RES_START, RES_STRIDE = 160, 8


def _own_resnet18(num_classes: int, width: int = 64, layers=(2, 2, 2, 2)) -> nn.Module:
    class Basic(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                          nn.BatchNorm2d(cout))

        def forward(self, x):
            idt = x if self.down is None else self.down(x)
            out = F.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            return F.relu(out + idt)

    mods = [nn.Conv2d(3, width, 7, 2, 3, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
            nn.MaxPool2d(3, 2, 1)]
    cin = width
    for i, n in enumerate(layers):
        cout = width * 2**i
        for j in range(n):
            mods.append(Basic(cin, cout, 2 if (j == 0 and i > 0) else 1))
            cin = cout
    mods += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, num_classes)]
    return nn.Sequential(*mods)


def resnet18(scenario: str, batch: int, image) -> nn.Module:
    C.seed_all(0)
    try:
        if DRY:
            raise ImportError("dry run: small net")
        import torchvision

        m = torchvision.models.resnet18(num_classes=R18_CLASSES)
        src = f"torchvision {torchvision.__version__} models.resnet18"
    except Exception as e:
        m = _own_resnet18(R18_CLASSES, width=8 if DRY else 64)
        src = f"pitfalls._own_resnet18 ({e!r})"
    fact(scenario=scenario, conv_model=src, params=C.model_params(m), batch=batch, image=image,
         classes=R18_CLASSES, optimizer="SGD(lr=0.1, momentum=0.9), foreach default",
         cudnn_benchmark_default=bool(torch.backends.cudnn.benchmark),
         cudnn_benchmark_limit=getattr(torch.backends.cudnn, "benchmark_limit", None),
         cudnn_allow_tf32=bool(torch.backends.cudnn.allow_tf32),
         matmul_allow_tf32=bool(torch.backends.cuda.matmul.allow_tf32))
    return m.to(DEV)


class ResPool:
    """Square input resolutions start, start + RES_STRIDE, ... (160, 168, 176, ...), each handed
    out once, skipping those in skip (the one-resolution variants' own, 224)."""

    def __init__(self, start: int = RES_START, skip=()) -> None:
        self.next = start
        self.skip = set(skip)
        self.given: list[int] = []

    def __call__(self) -> int:
        while self.next in self.skip:
            self.next += RES_STRIDE
        r = self.next
        self.next += RES_STRIDE
        self.given.append(r)
        return r


@contextlib.contextmanager
def cudnn_benchmark(on: bool):
    old = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = on
    try:
        yield
    finally:
        torch.backends.cudnn.benchmark = old


def sc_cudnn_benchmark(scenario: str, out: str) -> None:
    """ResNet-18 training, bf16 autocast, channels_last, batch 32, SGD momentum. A new input
    resolution every step (ResPool). cudnn_benchmark_new_shapes: benchmark=True (profiled) vs
    False, and benchmark=True on one fixed resolution (224). cudnn_nobenchmark_new_shapes
    (twin): benchmark=False on new resolutions (profiled) and on one fixed resolution.
    cuDNN's plan cache is keyed by shape (not by the benchmark flag), so every variant's
    shapes are its own: benchmark on 160, 168, 176, ... (224 skipped), benchmark off 164, 172,
    180, ... in the same process; the twin (a process of its own) gets 160, 168, ... again."""
    twin = scenario == "cudnn_nobenchmark_new_shapes"
    B = R18_BENCH_BATCH
    model = resnet18(scenario, B, "new square resolution every step").to(
        memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    g = torch.Generator(device=DEV)
    g.manual_seed(7)
    y = torch.randint(0, R18_CLASSES, (B,), device=DEV, generator=g)
    x_fixed = torch.randn(B, 3, R18_HW, R18_HW, device=DEV, generator=g).contiguous(
        memory_format=torch.channels_last)
    pools = {"pitfall": ResPool(RES_START, skip=(R18_HW,)),
             "fixed": ResPool(RES_START if twin else RES_START + RES_STRIDE // 2,
                              skip=(R18_HW,))}
    res_of: dict[str, list[int]] = {}

    def train(x):
        with torch.autocast(DEV, dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x).float(), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    def new_shape_step(name):
        def step(i):
            r = pools[name]()
            res_of.setdefault(name, []).append(r)
            x = torch.randn(B, 3, r, r, device=DEV, generator=g).contiguous(
                memory_format=torch.channels_last)
            train(x)

        return step

    def fixed_shape_step(i):
        train(x_fixed)

    bench_on = lambda: cudnn_benchmark(True)  # noqa: E731
    bench_off = lambda: cudnn_benchmark(False)  # noqa: E731
    n_new, w_new, r_new = (2, 1, 2) if DRY else (3, 1, 2)
    if twin:
        variants = {"fixed": (new_shape_step("fixed"), bench_off)}
        one = {"fixed_shape_nobenchmark": (fixed_shape_step, bench_off)}
    else:
        variants = {"pitfall": (new_shape_step("pitfall"), bench_on),
                    "fixed": (new_shape_step("fixed"), bench_off)}
        one = {"fixed_shape_benchmark": (fixed_shape_step, bench_on)}
    res: dict[str, list[float]] = {k: [] for k in list(variants) + list(one)}
    t_proc = time.perf_counter()
    for r in range(r_new):  # interleaved: new-shape variants, then the one-resolution one
        if r and time.perf_counter() - t_proc > 60:
            break  # benchmarking slower than planned: one round only
        for k, (step, ctx) in variants.items():
            res[k].append(round(time_steps(step, n_new, w_new, ctx), 3))
        for k, (step, ctx) in one.items():
            res[k].append(round(time_steps(step, N_STEPS, WARM, ctx), 3))
    fact(scenario=scenario, timing_rounds_ms=res, new_shape_steps_per_round=n_new,
         new_shape_warmup_per_round=w_new, fixed_shape_steps_per_round=N_STEPS,
         fixed_shape_warmup_per_round=WARM, resolutions=res_of, fixed_resolution=R18_HW)
    # per-step times of new shapes (synced each), benchmark on and off
    per = {}
    for k, (step, ctx) in variants.items():
        if time.perf_counter() - t_proc > 75:
            break
        with ctx():
            per[k] = _each_synced(step, 3)[0]
    extra = {k + "_step_ms": round(statistics.mean(v), 3) for k, v in res.items()
             if k not in ("pitfall", "fixed")}
    extra.update({k + "_rounds_ms": v for k, v in res.items() if k not in ("pitfall", "fixed")})
    mean_res = {k: statistics.mean(v) for k, v in res_of.items()}
    if twin:
        fact(scenario=scenario, truth=True, fixed_step_ms=round(statistics.mean(res["fixed"]), 3),
             fixed_rounds_ms=res["fixed"], what="cudnn.benchmark=False, a new input resolution "
             "every step (the fixed variant of cudnn_benchmark_new_shapes)",
             synced_new_shape_step_ms=per, mean_resolution_timed=mean_res, **extra)
    else:
        truth(scenario, res, what_pitfall="cudnn.benchmark=True, a new input resolution every "
              "step (every step's convolutions autotuned)",
              what_fixed="cudnn.benchmark=False, a new input resolution every step",
              synced_new_shape_step_ms=per, mean_resolution_timed=mean_res, **extra)
    own = "fixed" if twin else "pitfall"
    k1 = len(pools[own].given)
    path = profile_run(scenario, out, variants[own][0], ctx=bench_off if twin else bench_on)
    fact(scenario=scenario, resolutions_profiled_run=pools[own].given[k1:],
         note_resolutions="the first 2 un-profiled, then ProfilerStep#0..#6 (#3..#6 recorded)",
         cudnn_benchmark_in_profile=not twin)
    sig_fact(scenario, "conv_signature", path)


def _conv18_setup(scenario: str, batch: int, amp: bool):
    """The NCHW and the channels_last ResNet-18 (same initial weights) and their steps."""
    base = resnet18(scenario, batch, [3, R18_HW, R18_HW])
    nchw = base
    cl = copy.deepcopy(base).to(memory_format=torch.channels_last)
    opts = {id(m): torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in (nchw, cl)}
    g = torch.Generator(device=DEV)
    g.manual_seed(7)
    x = torch.randn(batch, 3, R18_HW, R18_HW, device=DEV, generator=g)
    y = torch.randint(0, R18_CLASSES, (batch,), device=DEV, generator=g)
    x_cl = x.contiguous(memory_format=torch.channels_last)
    ac = (lambda: torch.autocast(DEV, dtype=torch.bfloat16)) if amp else contextlib.nullcontext

    def step(model, inp):
        with ac():
            loss = F.cross_entropy(model(inp).float(), y)
        loss.backward()
        opt = opts[id(model)]
        opt.step()
        opt.zero_grad(set_to_none=True)

    return (lambda i: step(nchw, x)), (lambda i: step(cl, x_cl))


def sc_conv18(scenario: str, out: str) -> None:
    """conv18_nchw_bf16 / conv18_channels_last_bf16: ResNet-18, batch 128, 224x224, bf16
    autocast, NCHW vs channels_last (each profiles its own). conv18_nchw_fp32_notf32: FP32, no
    autocast, cudnn.allow_tf32 = matmul.allow_tf32 = False, batch 64 (NCHW profiled)."""
    fp32 = scenario == "conv18_nchw_fp32_notf32"
    if fp32:
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
        prec = {}
        for name, get in (("backends.fp32_precision", lambda: torch.backends.fp32_precision),
                          ("cudnn.conv.fp32_precision",
                           lambda: torch.backends.cudnn.conv.fp32_precision),
                          ("cuda.matmul.fp32_precision",
                           lambda: torch.backends.cuda.matmul.fp32_precision)):
            with contextlib.suppress(Exception):
                prec[name] = str(get())
        fact(scenario=scenario, cudnn_allow_tf32=bool(torch.backends.cudnn.allow_tf32),
             matmul_allow_tf32=bool(torch.backends.cuda.matmul.allow_tf32), fp32_precision=prec)
    batch = R18_FP32_BATCH if fp32 else R18_BATCH
    s_nchw, s_cl = _conv18_setup(scenario, batch, amp=not fp32)
    res = timed_rounds(scenario, {"pitfall": (s_nchw, None), "fixed": (s_cl, None)})
    what = ("ResNet-18 FP32, TF32 off (cudnn and matmul), NCHW" if fp32 else
            "ResNet-18 bf16 autocast, NCHW (default memory format)")
    truth(scenario, res, what_pitfall=what, batch=batch,
          what_fixed="model.to(memory_format=torch.channels_last), input channels_last"
          + (" (still FP32, no TF32)" if fp32 else ""))
    path = profile_run(scenario, out, s_cl if scenario == "conv18_channels_last_bf16" else s_nchw)
    sig_fact(scenario, "conv_signature", path)


# --- deterministic algorithms on a scatter-add (message passing)

if DRY:
    MP_N, MP_E, MP_D = 1000, 10_000, 16
else:
    MP_N, MP_E, MP_D = 200_000, 2_000_000, 256


@contextlib.contextmanager
def deterministic(on: bool):
    old = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(on)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(old)


def sc_deterministic(scenario: str, out: str) -> None:
    """A message-passing layer: node features x (N x D fp32, a parameter), E random edges
    (src, dst; on the GPU up front), out = zeros_like(x).index_add_(0, dst, x[src] @ W),
    loss = out.float().square().mean(), backward, SGD. Pitfall:
    torch.use_deterministic_algorithms(True) (CUBLAS_WORKSPACE_CONFIG=:4096:8 set before torch
    is imported); fixed: off. deterministic_off_index_add (twin): the same process, timed the
    same way, profiled with deterministic algorithms off."""
    C.seed_all(0)
    g = torch.Generator(device=DEV)
    g.manual_seed(3)
    x = nn.Parameter(torch.randn(MP_N, MP_D, device=DEV, generator=g))
    W = nn.Parameter(torch.randn(MP_D, MP_D, device=DEV, generator=g) / MP_D**0.5)
    src = torch.randint(0, MP_N, (MP_E,), device=DEV, generator=g)
    dst = torch.randint(0, MP_N, (MP_E,), device=DEV, generator=g)
    opt = torch.optim.SGD([x, W], lr=0.1)
    fact(scenario=scenario, nodes=MP_N, edges=MP_E, width=MP_D, dtype="float32",
         cublas_workspace_config=os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
         matmul_allow_tf32=bool(torch.backends.cuda.matmul.allow_tf32),
         fill_uninitialized_memory=getattr(getattr(torch.utils, "deterministic", None),
                                           "fill_uninitialized_memory", None),
         optimizer="SGD(lr=0.1) over x and W")

    def step(i):
        h = x[src] @ W
        o = torch.zeros_like(x).index_add_(0, dst, h)
        loss = o.float().square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    det = lambda: deterministic(True)  # noqa: E731
    res = timed_rounds(scenario, {"pitfall": (step, det), "fixed": (step, None)})
    truth(scenario, res, what_pitfall="torch.use_deterministic_algorithms(True) around the loop "
          "(index_add_ and the backward of x[src] take the sort-based deterministic path)",
          what_fixed="deterministic algorithms off (atomic adds)")
    twin = scenario == "deterministic_off_index_add"
    path = profile_run(scenario, out, step, ctx=None if twin else det)
    sig_fact(scenario, "index_signature", path)



# ================================================================ the third set (pitfalls3)

ACCUM = 4  # micro-batches per optimizer step (ddp_accum_*): BATCH / ACCUM sequences each


def _free_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as so:
        so.bind(("127.0.0.1", 0))
        return so.getsockname()[1]


def _ddp_init(scenario: str):
    """A one-process group (world_size 1): env:// with MASTER_ADDR / MASTER_PORT / RANK /
    WORLD_SIZE set here where they are not; NCCL (gloo in a dry run on the CPU)."""
    import torch.distributed as dist

    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(_free_port()))
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    os.environ.setdefault("LOCAL_RANK", "0")
    backend = "gloo" if DRY else "nccl"
    if DEV == "cuda":
        torch.cuda.set_device(0)
    dist.init_process_group(backend, init_method="env://")
    info = dict(backend=backend, world_size=dist.get_world_size(), rank=dist.get_rank(),
                master=f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}",
                nccl_nvls_enable=os.environ.get("NCCL_NVLS_ENABLE"))
    with contextlib.suppress(Exception):
        if not DRY:
            info["nccl_version"] = ".".join(map(str, torch.cuda.nccl.version()))
    fact(scenario=scenario, process_group=info)
    return dist


def _ddp_logging(ddp) -> dict:
    try:
        d = ddp._get_ddp_logging_data()
    except Exception as e:
        return {"error": repr(e)}
    keep = {}
    for k, v in d.items():
        if re.search(r"bucket|world_size|backend|gradient_as|static|find_unused|comm_hook|"
                     r"rebuilt|device|num_|join|params", k):
            keep[k] = v if isinstance(v, (int, float, bool)) else str(v)[:300]
    return keep


def sc_ddp_accum(scenario: str, out: str) -> None:
    """The GPT under DistributedDataParallel on one process (world_size 1, NCCL, cuda:0),
    4 micro-batches of BATCH / 4 sequences per optimizer step, loss / 4, backward on each.
    ddp_accum_without_no_sync: DDP all-reduces after every micro-batch's backward (profiled);
    ddp_accum_with_no_sync (twin, its own process): `with model.no_sync():` around the first 3
    micro-batches (forward + backward), the all-reduce on the last only (profiled). Both
    processes time both loops, interleaved."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    twin = scenario == "ddp_accum_with_no_sync"
    dist = _ddp_init(scenario)
    model, _ = gpt()
    ddp = DDP(model, device_ids=[0] if DEV == "cuda" else None)
    opt = torch.optim.AdamW(ddp.parameters(), lr=3e-4, fused=True)
    bs = token_batches(4, BATCH, SEQ, model.vocab)
    mb = BATCH // ACCUM
    micro = [[(x[j * mb:(j + 1) * mb], y[j * mb:(j + 1) * mb]) for j in range(ACCUM)]
             for x, y in bs]
    gpt_facts(scenario, model, BATCH, SEQ)
    V = model.vocab

    def make(no_sync: bool):
        def step(i):
            for j, (xm, ym) in enumerate(micro[i % len(micro)]):
                ctx = ddp.no_sync() if no_sync and j < ACCUM - 1 else contextlib.nullcontext()
                with ctx:
                    with torch.autocast(DEV, dtype=torch.bfloat16):
                        logits = ddp(xm)
                    loss = F.cross_entropy(logits.float().reshape(-1, V), ym.reshape(-1))
                    (loss / ACCUM).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        return step

    pit, fixed = make(False), make(True)
    fact(scenario=scenario, ddp=dict(
        world_size=dist.get_world_size(), micro_batches_per_step=ACCUM,
        micro_batch=[mb, SEQ], tokens_per_step=BATCH * SEQ, loss_scale=f"1/{ACCUM}",
        device_ids=[0] if DEV == "cuda" else None, bucket_cap_mb="25 (default)",
        gradient_as_bucket_view=False, find_unused_parameters=False,
        profiled="pitfall: no no_sync (4 all-reduce rounds per step)" if not twin else
        "fixed: no_sync around micro-batches 1-3 (1 all-reduce round per step)",
        note="world_size 1: each all-reduce still runs DDP's reducer (gradients copied into "
        "the flat buckets, divided by the world size, the bucket all-reduced, copied back) "
        "and NCCL's call, but moves nothing between GPUs; the saving measured is the 1-rank "
        "saving (the reducer's work), not the network time of a real multi-GPU run"))
    res = timed_rounds(scenario, {"pitfall": (pit, None), "fixed": (fixed, None)})
    fact(scenario=scenario, ddp_logging_data=_ddp_logging(ddp))
    truth(scenario, res, what_pitfall="DDP (world_size 1), 4 micro-batches per optimizer step, "
          "backward on each WITHOUT no_sync: the gradients all-reduced after every micro-batch",
          what_fixed="model.no_sync() around the first 3 micro-batches' forward + backward: "
          "one all-reduce round per optimizer step",
          world_size=dist.get_world_size(), micro_batches_per_step=ACCUM,
          allreduce_rounds_per_step={"pitfall": ACCUM, "fixed": 1},
          note="world_size 1: NCCL moves nothing between GPUs; the saving is the 1-rank saving "
          "(DDP's bucket copies / division and NCCL's call per round)")
    path = profile_run(scenario, out, fixed if twin else pit)
    sig_fact(scenario, "ddp_signature", path)
    dist.destroy_process_group()


class GPTCkptCompiled(CkptGPT):
    """CkptGPT with checkpointing always on and a forward code object of its own (compiled)."""

    use_ckpt = True

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.trunk(self.embed(idx))


class GPTNoCkpt(C.GPT):
    """common.GPT with a forward code object of its own (compiled, no checkpointing)."""

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.trunk(self.embed(idx))


def sc_checkpoint_compiled(scenario: str, out: str) -> None:
    """checkpoint_compiled: the GPT with every block under checkpoint(blk, x,
    use_reentrant=False), the whole model under torch.compile (default mode): the recompute
    happens inside the compiled backward. Fixed: the same model compiled without
    checkpointing. Both compiled and warmed up (3 steps each), 3 interleaved rounds, peak
    memory of each, then the checkpointed one profiled. compiled_no_checkpoint (twin): the
    model without checkpointing only: compiled, timed, profiled."""
    twin = scenario == "compiled_no_checkpoint"
    bs = token_batches(4, BATCH, SEQ, GPT_CFG["vocab"])
    models = {}
    if not twin:
        models["pitfall"] = gpt(GPTCkptCompiled)
    models["fixed"] = gpt(GPTNoCkpt)
    gpt_facts(scenario, models["fixed"][0], BATCH, SEQ)
    compiled = {k: (torch.compile(m, **COMPILE_KW), o) for k, (m, o) in models.items()}

    def make_step(k):
        m, o = compiled[k]

        def step(i):
            x, y = bs[i % len(bs)]
            gpt_step(m, o, x, y)

        return step

    steps = {k: make_step(k) for k in compiled}
    for k in steps:
        c0 = dynamo_counts(None)
        t0 = time.perf_counter()
        for i in range(3):
            steps[k](i)
        sync()
        fact(scenario=scenario, variant=k, compile_and_3_steps_s=round(time.perf_counter() - t0, 2),
             dynamo_before=c0, dynamo_after=dynamo_counts(None))
    res = timed_rounds(scenario, {k: (s_, None) for k, s_ in steps.items()})
    peaks = {}
    if DEV == "cuda":
        for k, fn in steps.items():
            fn(0)
            sync()
            torch.cuda.reset_peak_memory_stats()
            fn(1)
            sync()
            peaks[k] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
        torch.cuda.reset_peak_memory_stats()
    counts = dynamo_counts(None)
    if twin:
        fact(scenario=scenario, truth=True, fixed_step_ms=round(statistics.mean(res["fixed"]), 3),
             fixed_rounds_ms=res["fixed"], what="torch.compile(model) (default mode), no "
             "checkpointing (the fixed variant of checkpoint_compiled)", peak_mem_mib=peaks,
             dynamo_stats=counts.get("stats"))
    else:
        truth(scenario, res, what_pitfall="torch.compile(model) (default mode), every block under "
              "torch.utils.checkpoint.checkpoint(blk, x, use_reentrant=False): the blocks' "
              "forward recomputed inside the compiled backward",
              what_fixed="the same model compiled without checkpointing", peak_mem_mib=peaks,
              dynamo_stats=counts.get("stats"))
    path = profile_run(scenario, out, steps["fixed" if twin else "pitfall"])
    sig_fact(scenario, "gemm_signature", path)
    sig_fact(scenario, "compile_signature", path)


SCENARIOS = {
    "empty_cache_every_step": sc_allocator,
    "allocator_steady": sc_allocator,
    "recompile_every_step": sc_compile,
    "compile_dynamic_shapes": sc_compile,
    "anomaly_detection_on": sc_anomaly,
    "item_logging_per_layer": sc_anomaly,
    "conv_nchw_bf16": sc_conv,
    "conv_channels_last_bf16": sc_conv,
    "checkpoint_every_block": sc_checkpoint,
    "slow_every_other_step": sc_slow_every_other,
    "zero_grad_fill": sc_zero_grad_fill,
    "host_tensor_every_step": sc_host_tensor,
    # timing only, no trace (the second recording command)
    "conv_timing": sc_conv_timing,
    "dynamic_lengths_timing": sc_dynamic_lengths,
    # the second set (pitfalls2)
    "recompile_limit_hit": sc_recompile_limit,
    "graph_breaks_per_step": sc_graph_breaks,
    "graph_breaks_none": sc_graph_breaks,
    "cudnn_benchmark_new_shapes": sc_cudnn_benchmark,
    "cudnn_nobenchmark_new_shapes": sc_cudnn_benchmark,
    "conv18_nchw_bf16": sc_conv18,
    "conv18_channels_last_bf16": sc_conv18,
    "conv18_nchw_fp32_notf32": sc_conv18,
    "empty_cache_memory_profiled": sc_allocator,
    "allocator_steady_memory_profiled": sc_allocator,
    "deterministic_index_add": sc_deterministic,
    "deterministic_off_index_add": sc_deterministic,
    # the third set (pitfalls3)
    "ddp_accum_without_no_sync": sc_ddp_accum,
    "ddp_accum_with_no_sync": sc_ddp_accum,
    "checkpoint_compiled": sc_checkpoint_compiled,
    "compiled_no_checkpoint": sc_checkpoint_compiled,
}


def main() -> None:
    if len(sys.argv) != 3 or sys.argv[1] not in SCENARIOS:
        sys.exit("usage: pitfalls.py SCENARIO OUTDIR; SCENARIO one of " + " ".join(SCENARIOS))
    scenario, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    env_facts(scenario)
    t0 = time.perf_counter()
    SCENARIOS[scenario](scenario, out)
    fact(scenario=scenario, process_scenario_s=round(time.perf_counter() - t0, 1))


if __name__ == "__main__":
    main()
