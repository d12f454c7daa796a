"""issue26: workloads whose FLOPs, achieved TFLOP/s, MFU and fix savings are known by
construction, for the FLOPs / MFU / unfused-attention / advice-by-phase work (issue 26).

One script, one scenario per process:

    python3 issue26.py SCENARIO OUTDIR [FACTSDIR]
        writes OUTDIR/SCENARIO.json.gz (torch.profiler Chrome trace, gzipped) and
        FACTSDIR/facts_SCENARIO.json (FACTSDIR defaults to OUTDIR)
    python3 issue26.py --merge OUT.json IN.json [IN.json ...]
        merges per-scenario facts (or earlier merged files) into one facts file

Every scenario FIRST times its steady steps with the profiler off (3 warm-up steps,
`torch.cuda.synchronize()`, 10 timed steps, `torch.cuda.synchronize()`: mean ms/step by host
wall clock between the two syncs, plus per-step CUDA-event times), and where a fix is to be
priced (SDPA instead of hand-written attention, fused AdamW) times the fixed workload the same
way in the same process. THEN it profiles: `profile(activities=[CPU, CUDA],
schedule(wait=1, warmup=2, active=3), record_shapes=True)` (gpt_flops adds `with_flops=True`;
decode_greedy_b1 uses wait=1, warmup=1, active=2 because one step is one whole generation),
`prof.step()` once per step, `export_chrome_trace`, gzip.

Scenarios (H100 SXM dense peaks used for ratios: bf16 989, fp8 1979, tf32 494.5 TFLOP/s):
  gemm_loop_bf16   8 x torch.mm(bf16 8192x8192, bf16 8192x8192) per step
  gemm_loop_fp8    8 x torch._scaled_mm(e4m3 8192x8192, e4m3 8192x8192 column-major,
                   per-tensor fp32 scales 1.0, out_dtype=bf16) per step
  gemm_loop_tf32   8 x torch.mm(fp32 8192x8192, fp32 8192x8192), allow_tf32=True, per step
  gpt_flops        GPT decoder (width 1024, 8 layers, 16 heads, vocab 8192, seq 1024,
                   batch 8), bf16 autocast, SDPA causal, AdamW(fused=True); with_flops=True
  attn_unfused_T1024 / attn_unfused_T2048 / attn_sdpa_T1024 / attn_sdpa_T2048
                   the same GPT with 4 layers, 8192 tokens per step (batch 8 x 1024 or
                   4 x 2048), attention hand-written nanoGPT-style (q @ k^T * scale,
                   masked_fill(causal mask == 0, -inf), softmax, @ v) or
                   F.scaled_dot_product_attention(is_causal=True); both variants timed in
                   every one of these processes (same weights)
  optimizer_unfused / optimizer_fused
                   200 residual Linear(512, 512) layers (400 parameter tensors, 52.5 M
                   parameters), batch 256, bf16 autocast, MSE loss;
                   AdamW(foreach=False, fused=False) vs AdamW(fused=True); both timed in
                   each process
  decode_greedy_b1 greedy decoding at batch 1 of a bf16 GPT (width 1024, 4 layers, 16 heads,
                   vocab 8192) with a KV cache (torch.cat per token, as HF's DynamicCache),
                   32-token prompt, 64 new tokens (1 from the prefill + 63 decode steps), an
                   HF-style stop check per token (`bool((next == eos).all())`: one host sync
                   per token; eos never produced). One ProfilerStep = one generation;
                   `record_function("prefill")` and `record_function("decode_token")` inside
  conv_train       a net of convolutions only (strided 7x7 stem, 3x3, dilated depthwise,
                   1x1, strided grouped, strided transposed), batch 32 x 3 x 224 x 224,
                   bf16 autocast, SGD; its FLOPs per step counted by FlopCounterMode;
                   both memory layouts timed in the process, NCHW profiled
  conv_train_channels_last
                   the same in channels_last (weights and inputs), profiled

ISSUE26_DRY=1 runs tiny sizes on the CPU (to check the script without a GPU).
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import math
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile, record_function, schedule

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tracefacts

DRY = os.environ.get("ISSUE26_DRY") == "1"
DEV = "cpu" if DRY else "cuda"

#: H100 SXM dense Tensor Core peaks (NVIDIA datasheet; the sparse figures are twice these).
PEAK_TFLOPS = {"bf16": 989.0, "fp8": 1979.0, "tf32": 494.5}

WARM_STEPS, TIMED_STEPS = 3, 10
WAIT, WARMUP, ACTIVE = 1, 2, 3

VOCAB, WIDTH, HEADS = 8192, 1024, 16
if DRY:
    VOCAB, WIDTH, HEADS = 512, 64, 4


def sync() -> None:
    if not DRY:
        torch.cuda.synchronize()


def seed_all(seed: int = 0) -> None:
    torch.manual_seed(seed)
    if not DRY:
        torch.cuda.manual_seed_all(seed)


def env() -> dict[str, Any]:
    out: dict[str, Any] = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": sys.version.split()[0],
        "transformers_installed": importlib.util.find_spec("transformers") is not None,
    }
    try:
        import triton

        out["triton"] = triton.__version__
    except Exception:  # pragma: no cover - triton absent
        out["triton"] = None
    if not DRY:
        p = torch.cuda.get_device_properties(0)
        out.update(gpu=p.name, sms=p.multi_processor_count, cudnn=torch.backends.cudnn.version())
        try:
            out["driver"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=20,
            ).stdout.strip()
        except Exception:
            out["driver"] = None
    return out


# ---------------------------------------------------------------- timing and profiling


def time_steps(step: Callable[[], Any], warm: int = WARM_STEPS, n: int = TIMED_STEPS) -> dict:
    """Profiler off: `warm` steps, sync, `n` steps, sync. Mean by host wall clock between the
    syncs; per-step CUDA-event times as a check (no sync between steps)."""
    for _ in range(warm):
        step()
    sync()
    evs = []
    t0 = time.perf_counter()
    for _ in range(n):
        if not DRY:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            evs.append(e)
        step()
    if not DRY:
        e = torch.cuda.Event(enable_timing=True)
        e.record()
        evs.append(e)
    sync()
    t1 = time.perf_counter()
    per = [round(evs[i].elapsed_time(evs[i + 1]), 3) for i in range(len(evs) - 1)]
    res = {
        "warmup_steps": warm,
        "timed_steps": n,
        "step_ms_mean": round((t1 - t0) * 1e3 / n, 3),
        "step_ms_cuda_events": per,
    }
    if per:
        s = sorted(per)
        res["step_ms_median_cuda_events"] = s[len(s) // 2]
    print(f"  timed: {res['step_ms_mean']:.3f} ms/step (events {per})", flush=True)
    return res


def profile_steps(
    step: Callable[[], Any],
    out_path: str,
    wait: int = WAIT,
    warmup: int = WARMUP,
    active: int = ACTIVE,
    **kw,
) -> dict:
    """Profile wait+warmup+active steps (one prof.step() per step); export, gzip."""
    kw.setdefault("record_shapes", True)
    acts = [ProfilerActivity.CPU] + ([] if DRY else [ProfilerActivity.CUDA])
    evs, labels = [], []
    n = wait + warmup + active
    with profile(
        activities=acts, schedule=schedule(wait=wait, warmup=warmup, active=active, repeat=1), **kw
    ) as prof:
        for i in range(n):
            if not DRY:
                e = torch.cuda.Event(enable_timing=True)
                e.record()
                evs.append(e)
            labels.append("wait" if i < wait else "warmup" if i < wait + warmup else "active")
            step()
            prof.step()
    if not DRY:
        e = torch.cuda.Event(enable_timing=True)
        e.record()
        evs.append(e)
    sync()
    tmp = out_path[:-3] if out_path.endswith(".gz") else out_path + ".tmp.json"
    prof.export_chrome_trace(tmp)
    raw = os.path.getsize(tmp)
    with open(tmp, "rb") as src, gzip.open(out_path, "wb", compresslevel=9) as dst:
        shutil.copyfileobj(src, dst)
    os.remove(tmp)
    res = {
        "file": os.path.basename(out_path),
        "bytes_json": raw,
        "bytes_gz": os.path.getsize(out_path),
        "schedule": {"wait": wait, "warmup": warmup, "active": active},
        "profiler_kwargs": {k: v for k, v in kw.items() if isinstance(v, bool)},
        "step_labels": labels,
        "profiled_step_ms_cuda_events": [
            round(evs[i].elapsed_time(evs[i + 1]), 3) for i in range(len(evs) - 1)
        ],
    }
    print(f"  trace {out_path}: {res['bytes_gz']} bytes gz", flush=True)
    return res


def top_kernels(path: str, k: int = 8) -> list[dict[str, Any]]:
    """The k kernels with the most total time in the trace (name cut to 120 chars)."""
    with gzip.open(path, "rt") as f:
        ev = json.load(f)["traceEvents"]
    agg: dict[str, list[float]] = {}
    for e in ev:
        if e.get("ph") == "X" and e.get("cat") == "kernel":
            a = agg.setdefault(e["name"], [0, 0.0])
            a[0] += 1
            a[1] += e["dur"]
    rows = sorted(agg.items(), key=lambda kv: -kv[1][1])[:k]
    return [
        {"name": n[:120], "count": c, "ms": round(t / 1e3, 3), "avg_us": round(t / c, 2)}
        for n, (c, t) in rows
    ]


def trace_summary(path: str) -> dict[str, Any]:
    if DRY:
        return {}
    tf = tracefacts.trace_facts(path)
    return {
        "tracefacts": tf,
        "step_detail": tracefacts.step_detail(path),
        "top_kernels": top_kernels(path),
    }


# ---------------------------------------------------------------- GEMM loops

GEMM_M = GEMM_N = GEMM_K = 256 if DRY else 8192
GEMM_COUNT = 8


def gemm_loop(kind: str, out: str) -> dict:
    M, N, K = GEMM_M, GEMM_N, GEMM_K
    g = torch.Generator(device=DEV)
    g.manual_seed(0)
    cfg: dict[str, Any] = {"M": M, "N": N, "K": K, "matmuls_per_step": GEMM_COUNT}
    if kind == "bf16":
        a = torch.randn(M, K, device=DEV, dtype=torch.bfloat16, generator=g)
        b = torch.randn(K, N, device=DEV, dtype=torch.bfloat16, generator=g)

        def mm():
            return torch.mm(a, b)

        cfg["op"] = "torch.mm(a, b), a (M,K) bf16 row-major, b (K,N) bf16 row-major"
    elif kind == "tf32":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        a = torch.randn(M, K, device=DEV, dtype=torch.float32, generator=g)
        b = torch.randn(K, N, device=DEV, dtype=torch.float32, generator=g)

        def mm():
            return torch.mm(a, b)

        cfg["op"] = "torch.mm(a, b), a (M,K) fp32, b (K,N) fp32, matmul.allow_tf32=True"
        cfg["matmul_allow_tf32"] = bool(torch.backends.cuda.matmul.allow_tf32)
    elif kind == "fp8":
        a = torch.randn(M, K, device=DEV, generator=g).to(torch.float8_e4m3fn)
        # (N, K) row-major, transposed: a (K, N) column-major view, as _scaled_mm requires
        b = torch.randn(N, K, device=DEV, generator=g).to(torch.float8_e4m3fn).t()
        sa = torch.tensor(1.0, device=DEV, dtype=torch.float32)
        sb = torch.tensor(1.0, device=DEV, dtype=torch.float32)

        def mm():
            return torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)

        cfg["op"] = (
            "torch._scaled_mm(a, b, scale_a, scale_b, out_dtype=bf16), a (M,K) e4m3fn "
            "row-major, b (K,N) e4m3fn column-major (b = (N,K).t()), per-tensor fp32 scales "
            "1.0, use_fast_accum=False; inputs quantized once before the loop"
        )
        cfg["b_stride"] = list(b.stride())
    else:
        raise ValueError(kind)

    def step():
        for _ in range(GEMM_COUNT):
            mm()

    unprof = time_steps(step)
    flops = 2 * M * N * K * GEMM_COUNT
    tflops = flops / (unprof["step_ms_mean"] / 1e3) / 1e12
    tr = profile_steps(step, out)
    derived = {
        "flops_per_step": flops,
        "flops_formula": "2*M*N*K*matmuls_per_step",
        "achieved_tflops": round(tflops, 1),
        "peak_tflops_dense_this_dtype": PEAK_TFLOPS[kind],
        "fraction_of_dtype_peak": round(tflops / PEAK_TFLOPS[kind], 4),
        "fraction_of_bf16_peak_989": round(tflops / PEAK_TFLOPS["bf16"], 4),
    }
    if unprof.get("step_ms_median_cuda_events"):
        derived["achieved_tflops_from_median_event_step"] = round(
            flops / (unprof["step_ms_median_cuda_events"] / 1e3) / 1e12, 1
        )
    print(f"  {kind}: {tflops:.1f} TFLOP/s", flush=True)
    return {"config": cfg, "unprofiled": unprof, "derived": derived, "trace": tr}


# ---------------------------------------------------------------- GPT models


class Block(nn.Module):
    """Pre-norm block; attention either SDPA (causal) or hand-written nanoGPT-style."""

    def __init__(self, d: int, h: int, max_seq: int, attn: str = "sdpa") -> None:
        super().__init__()
        self.h = h
        self.attn = attn
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)
        # nanoGPT's causal mask buffer (float ones, lower triangle)
        self.register_buffer(
            "bias",
            torch.tril(torch.ones(max_seq, max_seq)).view(1, 1, max_seq, max_seq),
            persistent=False,
        )

    def attend(self, q, k, v):
        t = q.shape[-2]
        if self.attn == "manual":
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:, :, :t, :t] == 0, float("-inf"))
            att = F.softmax(att, dim=-1)
            return att @ v
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        qkv = self.qkv(self.ln1(x)).view(b, t, 3, self.h, c // self.h)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        y = self.attend(q, k, v).transpose(1, 2).reshape(b, t, c)
        x = x + self.proj(y)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))

    def forward_kv(self, x, past):
        """Inference with a KV cache (past = (k, v) or None); returns x, (k, v)."""
        b, t, c = x.shape
        qkv = self.qkv(self.ln1(x)).view(b, t, 3, self.h, c // self.h)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        if past is not None:
            k = torch.cat([past[0], k], dim=2)
            v = torch.cat([past[1], v], dim=2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=past is None)
        y = y.transpose(1, 2).reshape(b, t, c)
        x = x + self.proj(y)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)))), (k, v)


class GPT(nn.Module):
    def __init__(self, d=WIDTH, h=HEADS, layers=8, vocab=VOCAB, max_seq=1024, attn="sdpa"):
        super().__init__()
        self.vocab = vocab
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(max_seq, d)
        self.blocks = nn.ModuleList([Block(d, h, max_seq, attn) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def set_attn(self, attn: str) -> None:
        for blk in self.blocks:
            blk.attn = attn

    def forward(self, idx):
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln_f(x))

    def forward_kv(self, idx, past, start: int):
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(start, start + t, device=idx.device))
        new = []
        for i, blk in enumerate(self.blocks):
            x, kv = blk.forward_kv(x, None if past is None else past[i])
            new.append(kv)
        return self.head(self.ln_f(x)), new


def gpt_counts(model: GPT, layers: int, d: int, seq: int, tokens: int) -> dict[str, Any]:
    total = sum(p.numel() for p in model.parameters())
    tok = model.tok.weight.numel()
    pos = model.pos.weight.numel()
    lin_w = sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear))
    n_non = total - tok - pos
    attn_full = 12 * layers * seq * d * tokens  # fwd+bwd QK^T and AV, all T x T scores
    return {
        "params_total": total,
        "params_token_embedding": tok,
        "params_position_embedding": pos,
        "params_non_embedding": n_non,
        "params_non_embedding_note": "total minus token and position embeddings; the untied "
        "lm head (d x vocab) is counted in it",
        "params_lm_head": model.head.weight.numel(),
        "params_linear_weights": lin_w,
        "tokens_per_step": tokens,
        "flops_6N_total": 6 * total * tokens,
        "flops_6N_non_embedding": 6 * n_non * tokens,
        "flops_attention_matmuls_full_TxT": attn_full,
        "flops_attention_formula": "12*layers*seq*width*tokens (forward + backward of "
        "q@k^T and att@v over all T x T scores; a causal flash kernel does about half)",
        "flops_matmul_exact_full_attention": 6 * lin_w * tokens + attn_full,
        "flops_matmul_exact_formula": "6*(Linear weights incl. lm head)*tokens + attention "
        "term (what the GEMMs of the step compute when every score is computed)",
    }


def mfu_block(counts: dict[str, Any], step_ms: float, median_ms: float | None = None) -> dict:
    s = step_ms / 1e3
    peak = PEAK_TFLOPS["bf16"] * 1e12
    out = {"step_ms_used": step_ms, "peak_tflops_bf16_dense": PEAK_TFLOPS["bf16"]}
    for key in (
        "flops_6N_total",
        "flops_6N_non_embedding",
        "flops_matmul_exact_full_attention",
    ):
        out["tflops_" + key[6:]] = round(counts[key] / s / 1e12, 1)
        out["mfu_" + key[6:]] = round(counts[key] / s / peak, 4)
    out["mfu_primary"] = out["mfu_6N_total"]
    if median_ms:
        out["step_ms_median_cuda_events"] = median_ms
        for key in ("flops_6N_total", "flops_6N_non_embedding"):
            out["mfu_" + key[6:] + "_median_step"] = round(
                counts[key] / (median_ms / 1e3) / peak, 4
            )
    out["mfu_primary_formula"] = "6 * params_total * tokens_per_step / step_s / 989e12"
    return out


def gpt_batches(n: int, batch: int, seq: int):
    g = torch.Generator(device=DEV)
    g.manual_seed(1234)
    out = []
    for _ in range(n):
        d = torch.randint(0, VOCAB, (batch, seq + 1), device=DEV, generator=g)
        out.append((d[:, :-1].contiguous(), d[:, 1:].contiguous()))
    return out


def make_train_step(model: GPT, opt, batches):
    it = {"i": 0}

    def step():
        x, y = batches[it["i"] % len(batches)]
        it["i"] += 1
        with torch.autocast(DEV, dtype=torch.bfloat16):
            logits = model(x)
        loss = F.cross_entropy(logits.float().reshape(-1, model.vocab), y.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    return step


def gpt_flops(out: str) -> dict:
    layers, batch, seq = (8, 8, 1024) if not DRY else (2, 2, 64)
    seed_all(0)
    model = GPT(layers=layers, max_seq=seq).to(DEV)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=not DRY)
    step = make_train_step(model, opt, gpt_batches(8, batch, seq))
    cfg = {
        "width": WIDTH,
        "heads": HEADS,
        "layers": layers,
        "vocab": VOCAB,
        "batch": batch,
        "seq": seq,
        "attention": "F.scaled_dot_product_attention(is_causal=True)",
        "precision": "bf16 autocast, fp32 master weights",
        "optimizer": "AdamW(fused=True)",
        "loss": "cross_entropy(logits.float())",
        "lm_head": "untied Linear(d, vocab, bias=False)",
    }
    counts = gpt_counts(model, layers, WIDTH, seq, batch * seq)
    unprof = time_steps(step)
    tr = profile_steps(step, out, with_flops=True)
    derived = mfu_block(counts, unprof["step_ms_mean"], unprof.get("step_ms_median_cuda_events"))
    print(f"  gpt_flops: N={counts['params_total']} MFU(6N)={derived['mfu_primary']}", flush=True)
    return {"config": cfg, "counts": counts, "unprofiled": unprof, "derived": derived, "trace": tr}


def attn(variant: str, seq: int, out: str) -> dict:
    layers = 4 if not DRY else 2
    tokens = 8192 if not DRY else 256
    batch = tokens // seq if not DRY else 2
    if DRY:
        seq = 128
    seed_all(0)
    model = GPT(layers=layers, max_seq=seq, attn="manual").to(DEV)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=not DRY)
    step = make_train_step(model, opt, gpt_batches(8, batch, seq))
    cfg = {
        "width": WIDTH,
        "heads": HEADS,
        "layers": layers,
        "vocab": VOCAB,
        "batch": batch,
        "seq": seq,
        "tokens_per_step": batch * seq,
        "precision": "bf16 autocast",
        "optimizer": "AdamW(fused=True)",
        "this_trace_attention": variant,
        "manual_attention_code": "att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd)); "
        "att = att.masked_fill(mask[:, :, :T, :T] == 0, float('-inf')); "
        "att = F.softmax(att, dim=-1); y = att @ v  (softmax autocasts to fp32)",
        "sdpa_code": "F.scaled_dot_product_attention(q, k, v, is_causal=True)",
    }
    timings = {}
    for v in ("manual", "sdpa"):
        model.set_attn(v)
        if not DRY:
            torch.cuda.reset_peak_memory_stats()
        timings[v] = time_steps(step)
        if not DRY:
            timings[v]["max_mem_allocated_mib"] = round(torch.cuda.max_memory_allocated() / 2**20)
    model.set_attn(variant)
    tr = profile_steps(step, out)
    a, b = timings["manual"]["step_ms_mean"], timings["sdpa"]["step_ms_mean"]
    counts = gpt_counts(model, layers, WIDTH, seq, batch * seq)
    derived = {
        "step_ms_unfused": a,
        "step_ms_sdpa": b,
        "sdpa_saves_ms_per_step": round(a - b, 3),
        "sdpa_saves_fraction_of_unfused_step": round((a - b) / a, 4),
        "mfu_6N_total_this_variant": round(
            counts["flops_6N_total"] / (timings[variant]["step_ms_mean"] / 1e3) / 989e12, 4
        ),
    }
    print(f"  attn T={seq}: unfused {a:.2f} ms, sdpa {b:.2f} ms, saves {a - b:.2f}", flush=True)
    return {
        "config": cfg,
        "counts": counts,
        "unprofiled": timings[variant],
        "unprofiled_both": {"unfused": timings["manual"], "sdpa": timings["sdpa"]},
        "derived": derived,
        "trace": tr,
    }


# ---------------------------------------------------------------- optimizer


class LinearStack(nn.Module):
    def __init__(self, n: int, d: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(d, d) for _ in range(n)])

    def forward(self, x):
        for lin in self.layers:
            x = x + 0.1 * F.gelu(lin(x))
        return x


def optimizer(variant: str, out: str) -> dict:
    n, d, batch = (200, 512, 256) if not DRY else (20, 32, 8)
    seed_all(0)
    model = LinearStack(n, d).to(DEV)
    g = torch.Generator(device=DEV)
    g.manual_seed(5)
    xs = [torch.randn(batch, d, device=DEV, generator=g) for _ in range(4)]
    ys = [torch.randn(batch, d, device=DEV, generator=g) for _ in range(4)]
    opts = {
        "unfused": torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=False, fused=False),
        "fused": torch.optim.AdamW(model.parameters(), lr=1e-4, fused=not DRY),
    }

    def fwd_bwd(i: int) -> torch.Tensor:
        with torch.autocast(DEV, dtype=torch.bfloat16):
            loss = F.mse_loss(model(xs[i % 4]).float(), ys[i % 4])
        loss.backward()
        return loss

    def make(opt):
        it = {"i": 0}

        def step():
            loss = fwd_bwd(it["i"])
            it["i"] += 1
            opt.step()
            opt.zero_grad(set_to_none=True)
            return loss

        return step

    steps = {k: make(o) for k, o in opts.items()}
    # The host of the lent machine is noisy at this launch rate: time the two variants in
    # alternating rounds (3 x 10 steps each) and pool them.
    rounds: dict[str, list[dict]] = {k: [] for k in steps}
    for r in range(3):
        for k in ("unfused", "fused"):
            rounds[k].append(time_steps(steps[k], warm=3 if r == 0 else 1))
    timings = {}
    for k, rs in rounds.items():
        ev = [x for r in rs for x in r["step_ms_cuda_events"]]
        srt = sorted(ev)
        timings[k] = {
            "rounds": rs,
            "step_ms_mean": round(sum(r["step_ms_mean"] for r in rs) / len(rs), 3),
            "step_ms_mean_per_round": [r["step_ms_mean"] for r in rs],
            "step_ms_median_cuda_events": srt[len(srt) // 2] if srt else None,
            "timed_steps": sum(r["timed_steps"] for r in rs),
        }
    # optimizer.step() alone: forward/backward, sync, time opt.step() to its sync
    for k, o in opts.items():
        ms = []
        for i in range(12):
            fwd_bwd(i)
            sync()
            t0 = time.perf_counter()
            o.step()
            sync()
            ms.append(round((time.perf_counter() - t0) * 1e3, 3))
            o.zero_grad(set_to_none=True)
        timings[k]["optimizer_step_alone_ms"] = ms[2:]
        srt = sorted(ms[2:])
        timings[k]["optimizer_step_alone_ms_median"] = srt[len(srt) // 2]
        print(f"  {k} optimizer.step() alone: median {srt[len(srt) // 2]} ms", flush=True)
    tr = profile_steps(steps[variant], out)
    a, b = timings["unfused"]["step_ms_mean"], timings["fused"]["step_ms_mean"]
    cfg = {
        "model": f"{n} x [x = x + 0.1 * gelu(Linear({d}, {d})(x))]",
        "param_tensors": sum(1 for _ in model.parameters()),
        "params": sum(p.numel() for p in model.parameters()),
        "batch": batch,
        "precision": "bf16 autocast, fp32 weights",
        "loss": "mse_loss",
        "this_trace_optimizer": "AdamW(lr=1e-4, foreach=False, fused=False)"
        if variant == "unfused"
        else "AdamW(lr=1e-4, fused=True)",
        "note": "both optimizers are built over the same parameters and timed in this process "
        "(each keeps its own state); the trace holds only this_trace_optimizer",
    }
    derived = {
        "step_ms_unfused": a,
        "step_ms_fused": b,
        "fused_saves_ms_per_step": round(a - b, 3),
        "fused_saves_fraction_of_unfused_step": round((a - b) / a, 4),
        "step_ms_median_unfused": timings["unfused"]["step_ms_median_cuda_events"],
        "step_ms_median_fused": timings["fused"]["step_ms_median_cuda_events"],
        "optimizer_step_alone_ms_median_unfused": timings["unfused"][
            "optimizer_step_alone_ms_median"
        ],
        "optimizer_step_alone_ms_median_fused": timings["fused"]["optimizer_step_alone_ms_median"],
        "fused_saves_ms_per_step_optimizer_alone": round(
            timings["unfused"]["optimizer_step_alone_ms_median"]
            - timings["fused"]["optimizer_step_alone_ms_median"],
            3,
        ),
    }
    print(f"  optimizer: unfused {a:.2f} ms, fused {b:.2f} ms, saves {a - b:.2f}", flush=True)
    return {
        "config": cfg,
        "unprofiled": timings[variant],
        "unprofiled_both": timings,
        "derived": derived,
        "trace": tr,
    }


# ---------------------------------------------------------------- decoding

PROMPT, NEW = 32, 64
EOS = -1  # never produced: the stop check runs (and syncs) every token but never fires


@torch.no_grad()
def generate(model: GPT, prompt: torch.Tensor) -> torch.Tensor:
    with record_function("prefill"):
        logits, past = model.forward_kv(prompt, None, 0)
        nxt = logits[:, -1, :].argmax(dim=-1, keepdim=True)
        ids = torch.cat([prompt, nxt], dim=1)
        done = bool((nxt == EOS).all())
    for _ in range(NEW - 1):
        if done:
            break
        with record_function("decode_token"):
            logits, past = model.forward_kv(nxt, past, ids.shape[1] - 1)
            nxt = logits[:, -1, :].argmax(dim=-1, keepdim=True)
            ids = torch.cat([ids, nxt], dim=1)
            done = bool((nxt == EOS).all())  # HF-style stopping check: a host sync per token
    return ids


def decode(out: str) -> dict:
    layers = 4 if not DRY else 2
    seed_all(0)
    model = GPT(layers=layers, max_seq=PROMPT + NEW).to(DEV).to(torch.bfloat16).eval()
    g = torch.Generator(device=DEV)
    g.manual_seed(7)
    prompt = torch.randint(0, VOCAB, (1, PROMPT), device=DEV, generator=g)
    res: dict[str, Any] = {}

    def gen():
        res["ids"] = generate(model, prompt)

    unprof = time_steps(gen, warm=3, n=5)

    # prefill alone, to split a generation into prefill and per-token decode time
    @torch.no_grad()
    def prefill():
        logits, _ = model.forward_kv(prompt, None, 0)
        bool((logits[:, -1, :].argmax(dim=-1) == EOS).all())

    pre = time_steps(prefill, warm=3, n=10)
    tr = profile_steps(gen, out, wait=1, warmup=1, active=2)
    gen_ms = unprof["step_ms_mean"]
    ntok = res["ids"].shape[1] - PROMPT
    derived = {
        "new_tokens_per_generation": ntok,
        "generation_ms": gen_ms,
        "tokens_per_s": round(ntok / (gen_ms / 1e3), 1),
        "prefill_ms": pre["step_ms_mean"],
        "decode_ms_per_token": round((gen_ms - pre["step_ms_mean"]) / (ntok - 1), 4),
        "params": sum(p.numel() for p in model.parameters()),
        "last_tokens": res["ids"][0, -8:].tolist(),
    }
    cfg = {
        "width": WIDTH,
        "heads": HEADS,
        "layers": layers,
        "vocab": VOCAB,
        "batch": 1,
        "prompt_tokens": PROMPT,
        "new_tokens": NEW,
        "weights": "bf16 (model.to(bfloat16)), eval, torch.no_grad",
        "kv_cache": "torch.cat of past k, v per token (HF DynamicCache style)",
        "attention": "SDPA (is_causal=True in the prefill, full past for each new token)",
        "stop_check": "bool((next_token == eos).all()) after each token (HF's "
        "unfinished-sequences check): one device-to-host sync per token; eos never produced",
        "profiler_step": "one ProfilerStep = one generation (prefill + 63 decode tokens); "
        "record_function('prefill') and record_function('decode_token') inside",
        "optimizer": None,
    }
    print(f"  decode: {derived['tokens_per_s']} tok/s, {derived['decode_ms_per_token']} ms/token")
    return {
        "config": cfg,
        "unprofiled": unprof,
        "unprofiled_prefill_only": pre,
        "derived": derived,
        "trace": tr,
    }


# ---------------------------------------------------------------- main

# ---------------------------------------------------------------- convolutions


class ConvNet(nn.Module):
    """Convolutions of every kind the FLOPs formulas tell apart: a strided 7x7 stem with
    padding, a 3x3, a dilated depthwise 3x3 (groups = channels), a 1x1, a strided grouped 3x3
    (groups 4) and a strided transposed 4x4; no linear layers (the step's FLOPs are the
    convolutions')."""

    def __init__(self, c: int = 64) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, c, 7, stride=2, padding=3, bias=False)
        self.conv = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.depthwise = nn.Conv2d(c, c, 3, padding=2, dilation=2, groups=c, bias=False)
        self.pointwise = nn.Conv2d(c, 2 * c, 1, bias=False)
        self.grouped = nn.Conv2d(2 * c, 2 * c, 3, stride=2, padding=1, groups=4, bias=False)
        self.up = nn.ConvTranspose2d(2 * c, c, 4, stride=2, padding=1, bias=False)
        self.head = nn.Conv2d(c, 16, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.stem(x))
        x = F.relu(self.conv(x))
        x = F.relu(self.depthwise(x))
        x = F.relu(self.pointwise(x))
        x = F.relu(self.grouped(x))
        x = F.relu(self.up(x))
        return self.head(x)


def _conv_step(layout: torch.memory_format) -> tuple[Callable[[], None], Callable[[], None]]:
    """(forward + backward, whole training step) of a fresh `ConvNet` (seed 0) whose weights
    and inputs are in `layout`."""
    batch, size = (32, 224) if not DRY else (2, 32)
    seed_all(0)
    model = ConvNet().to(DEV).to(memory_format=layout)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    xs = [
        torch.randn(batch, 3, size, size, device=DEV).contiguous(memory_format=layout)
        for _ in range(4)
    ]
    target = torch.randn(batch, 16, size // 2, size // 2, device=DEV)
    calls = [0]

    def fwd_bwd() -> None:
        x = xs[calls[0] % len(xs)]
        calls[0] += 1
        with torch.autocast(DEV, dtype=torch.bfloat16, enabled=not DRY):
            y = model(x)
        loss = F.mse_loss(y.float(), target)
        loss.backward()

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        fwd_bwd()
        opt.step()

    return fwd_bwd, step


def conv_train(out: str, layout_name: str = "nchw") -> dict:
    """Training steps of `ConvNet` (batch 32 of 3 x 224 x 224, bf16 autocast, fp32 weights,
    MSE loss, SGD): the FLOPs of one forward and backward counted by
    `torch.utils.flop_counter.FlopCounterMode` (its formulas, independent of ours: the
    convolutions' forward and each gradient the backward computes), then the steps timed
    without the profiler in both memory layouts (NCHW, the default, and channels_last: the
    fix of cuDNN's layout transposes), then the one of `layout_name` profiled with shapes."""
    from torch.utils.flop_counter import FlopCounterMode

    batch, size = (32, 224) if not DRY else (2, 32)
    layouts = {"nchw": torch.contiguous_format, "channels_last": torch.channels_last}
    timed = {}
    for name, layout in layouts.items():
        _, other = _conv_step(layout)
        timed[name] = time_steps(other)
    fwd_bwd, step = _conv_step(layouts[layout_name])
    step()  # cuDNN's first choices before counting
    with FlopCounterMode(display=False) as counter:
        fwd_bwd()
    by_op = {str(k): int(v) for k, v in counter.get_flop_counts().get("Global", {}).items()}
    total = int(counter.get_total_flops())
    cfg = {
        "batch": batch,
        "input": [3, size, size],
        "layers": [
            "Conv2d(3, 64, 7, stride=2, padding=3)",
            "Conv2d(64, 64, 3, padding=1)",
            "Conv2d(64, 64, 3, padding=2, dilation=2, groups=64)",
            "Conv2d(64, 128, 1)",
            "Conv2d(128, 128, 3, stride=2, padding=1, groups=4)",
            "ConvTranspose2d(128, 64, 4, stride=2, padding=1)",
            "Conv2d(64, 16, 1)",
        ],
        "precision": "bf16 autocast, fp32 weights",
        "optimizer": "SGD",
        "memory_format": layout_name,
    }
    counts = {
        "flops_per_step_flop_counter": total,
        "flops_by_op_flop_counter": by_op,
        "flop_counter": "torch.utils.flop_counter.FlopCounterMode over one forward + backward",
    }
    unprof = time_steps(step)
    tr = profile_steps(step, out)
    ms = unprof["step_ms_mean"]
    saving = timed["nchw"]["step_ms_mean"] - timed["channels_last"]["step_ms_mean"]
    derived = {
        "achieved_tflops_unprofiled": round(total / (ms * 1e-3) / 1e12, 2) if ms else None,
        "mfu_bf16_unprofiled": round(total / (ms * 1e-3) / 1e12 / PEAK_TFLOPS["bf16"], 4)
        if ms
        else None,
        "channels_last_saving_ms": round(saving, 3),
    }
    print(f"  conv_train: {total / 1e9:.1f} GFLOP/step, {ms:.2f} ms, {derived}", flush=True)
    return {
        "config": cfg,
        "counts": counts,
        "unprofiled": unprof,
        "unprofiled_by_layout": timed,
        "derived": derived,
        "trace": tr,
    }


SCENARIOS: dict[str, Callable[[str], dict]] = {
    "gemm_loop_bf16": lambda o: gemm_loop("bf16", o),
    "gemm_loop_fp8": lambda o: gemm_loop("fp8", o),
    "gemm_loop_tf32": lambda o: gemm_loop("tf32", o),
    "gpt_flops": gpt_flops,
    "attn_unfused_T1024": lambda o: attn("manual", 1024, o),
    "attn_unfused_T2048": lambda o: attn("manual", 2048, o),
    "attn_sdpa_T1024": lambda o: attn("sdpa", 1024, o),
    "attn_sdpa_T2048": lambda o: attn("sdpa", 2048, o),
    "optimizer_unfused": lambda o: optimizer("unfused", o),
    "optimizer_fused": lambda o: optimizer("fused", o),
    "decode_greedy_b1": decode,
    "conv_train": conv_train,
    "conv_train_channels_last": lambda o: conv_train(o, "channels_last"),
}


def merge(out_path: str, inputs: list[str]) -> None:
    merged: dict[str, Any] = {
        "issue": 26,
        "env": None,
        "peak_tflops_h100_sxm_dense": PEAK_TFLOPS,
        "scenarios": {},
        "failed": {},
    }
    if os.path.exists(out_path):
        with open(out_path) as f:
            merged = json.load(f)
    for p in inputs:
        with open(p) as f:
            d = json.load(f)
        if "scenarios" in d:  # an earlier merged file
            merged["scenarios"].update(d["scenarios"])
            merged.setdefault("failed", {}).update(d.get("failed", {}))
            merged["env"] = merged.get("env") or d.get("env")
            continue
        name = d["scenario"]
        merged["env"] = merged.get("env") or d.get("env")
        if d.get("error"):
            merged.setdefault("failed", {})[name] = d["error"]
        else:
            merged["scenarios"][name] = {k: v for k, v in d.items() if k not in ("env",)}
            merged.get("failed", {}).pop(name, None)
    with open(out_path, "w") as f:
        json.dump(merged, f, indent=1, sort_keys=True)
    print(f"merged {len(inputs)} file(s) into {out_path}: {sorted(merged['scenarios'])}")


def main() -> int:
    if sys.argv[1] == "--merge":
        merge(sys.argv[2], sys.argv[3:])
        return 0
    name, outdir = sys.argv[1], sys.argv[2]
    factsdir = sys.argv[3] if len(sys.argv) > 3 else outdir
    os.makedirs(outdir, exist_ok=True)
    os.makedirs(factsdir, exist_ok=True)
    out = os.path.join(outdir, name + ".json.gz")
    facts: dict[str, Any] = {"scenario": name, "env": env()}
    rc = 0
    t0 = time.perf_counter()
    try:
        facts.update(SCENARIOS[name](out))
        if os.path.exists(out):
            facts["trace"].update(trace_summary(out))
    except Exception as e:  # keep a record of what failed; the driver goes on
        import traceback

        traceback.print_exc()
        facts["error"] = f"{type(e).__name__}: {e}"
        rc = 1
    facts["process_wall_s"] = round(time.perf_counter() - t0, 1)
    with open(os.path.join(factsdir, f"facts_{name}.json"), "w") as f:
        json.dump(facts, f, indent=1, sort_keys=True)
    short = {k: facts.get(k) for k in ("derived", "error")}
    print("FACT " + json.dumps({"scenario": name, **short}, sort_keys=True), flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
