"""Shared pieces of the workload scripts in this folder.

Each `<scenario>.py` next to this file builds a known workload, profiles it and writes one
trace; `run_all.sh` runs the torch.profiler scenarios in turn and `run_nsys.sh` the Nsight
Systems ones. The scripts print lines that start with `FACT ` (JSON): measured step times
(CUDA events between consecutive step starts, so no extra host sync enters the trace),
host wall time per step and allocated memory per step. tests/data/gpu/README.md quotes them.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import shutil
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile, schedule

# The GPT-like decoder used by most scenarios.
# Same sizes as ../shared/traces/h100/train_bf16_healthy.json.gz's model.
VOCAB = 8192
WIDTH = 1024
HEADS = 16
LAYERS = 6
BATCH = 16
SEQ = 512


def seed_all(seed: int = 0) -> None:
    random.seed(seed)
    torch.manual_seed(seed)
    torch.cuda.manual_seed_all(seed)


def fact(**kw) -> None:
    print("FACT " + json.dumps(kw, sort_keys=True), flush=True)


def env_facts(scenario: str) -> None:
    p = torch.cuda.get_device_properties(0)
    fact(
        scenario=scenario,
        gpu=p.name,
        sms=p.multi_processor_count,
        torch=torch.__version__,
        cuda=torch.version.cuda,
        cudnn=torch.backends.cudnn.version(),
    )


class Block(nn.Module):
    """Pre-norm transformer block: causal SDPA attention + GELU MLP."""

    def __init__(self, d: int, h: int) -> None:
        super().__init__()
        self.h = h
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, 4 * d)
        self.fc2 = nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        qkv = self.qkv(self.ln1(x)).view(b, t, 3, self.h, c // self.h)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).reshape(b, t, c)
        x = x + self.proj(y)
        x = x + self.fc2(F.gelu(self.fc1(self.ln2(x))))
        return x


class GPT(nn.Module):
    def __init__(
        self,
        vocab: int = VOCAB,
        d: int = WIDTH,
        h: int = HEADS,
        layers: int = LAYERS,
        max_seq: int = SEQ,
    ) -> None:
        super().__init__()
        self.vocab = vocab
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(max_seq, d)
        self.blocks = nn.ModuleList([Block(d, h) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def embed(self, idx: torch.Tensor) -> torch.Tensor:
        t = idx.shape[1]
        pos = torch.arange(t, device=idx.device)
        return self.tok(idx) + self.pos(pos)

    def trunk(self, x: torch.Tensor) -> torch.Tensor:
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln_f(x))

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.trunk(self.embed(idx))


def make_model_and_opt(**kw) -> tuple[nn.Module, torch.optim.Optimizer]:
    model = GPT(**kw).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
    return model, opt


def gpu_batches(n: int, batch: int = BATCH, seq: int = SEQ, vocab: int = VOCAB):
    """Token batches made on the GPU up front, so the steps hold no input pipeline."""
    g = torch.Generator(device="cuda")
    g.manual_seed(1234)
    out = []
    for _ in range(n):
        d = torch.randint(0, vocab, (batch, seq + 1), device="cuda", generator=g)
        out.append((d[:, :-1].contiguous(), d[:, 1:].contiguous()))
    return out


def train_step(model, opt, x, y, amp: bool = True, vocab: int = VOCAB) -> torch.Tensor:
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
        logits = model(x)
    loss = F.cross_entropy(logits.float().reshape(-1, vocab), y.reshape(-1))
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss


class StepClock:
    """Step times from CUDA events recorded at each step start (no host sync per step)."""

    def __init__(self) -> None:
        self.events: list[torch.cuda.Event] = []
        self.cpu: list[float] = []
        self.mem: list[int] = []
        self.labels: list[str] = []

    def start(self, label: str = "") -> None:
        e = torch.cuda.Event(enable_timing=True)
        e.record()
        self.events.append(e)
        self.cpu.append(time.perf_counter())
        self.labels.append(label)

    def end_step(self) -> None:
        self.mem.append(torch.cuda.memory_allocated())

    def report(self, scenario: str) -> None:
        self.start("end")
        torch.cuda.synchronize()
        gpu_ms = [
            round(self.events[i].elapsed_time(self.events[i + 1]), 3)
            for i in range(len(self.events) - 1)
        ]
        cpu_ms = [round((self.cpu[i + 1] - self.cpu[i]) * 1e3, 3) for i in range(len(self.cpu) - 1)]
        fact(
            scenario=scenario,
            step_labels=self.labels[:-1],
            step_ms_cuda_events=gpu_ms,
            step_ms_host_wall=cpu_ms,
            mem_allocated_mib_after_step=[round(m / 2**20, 1) for m in self.mem],
            max_mem_allocated_mib=round(torch.cuda.max_memory_allocated() / 2**20, 1),
        )


def make_profiler(out_path: str, wait: int = 1, warmup: int = 2, active: int = 4, **kw) -> profile:
    """torch.profiler with a one-cycle schedule whose trace is written gzipped to out_path."""

    def ready(p: profile) -> None:
        tmp = out_path[:-3] if out_path.endswith(".gz") else out_path + ".tmp.json"
        p.export_chrome_trace(tmp)
        with open(tmp, "rb") as src, gzip.open(out_path, "wb", compresslevel=9) as dst:
            shutil.copyfileobj(src, dst)
        os.remove(tmp)
        fact(trace=os.path.basename(out_path), bytes_gz=os.path.getsize(out_path))

    kw.setdefault("record_shapes", True)
    return profile(
        activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
        schedule=schedule(wait=wait, warmup=warmup, active=active, repeat=1),
        on_trace_ready=ready,
        **kw,
    )


def out_arg(default_name: str) -> str:
    if len(sys.argv) > 1 and not sys.argv[1].startswith("--"):
        return sys.argv[1]
    return default_name


def label(i: int, wait: int, warmup: int, active: int) -> str:
    if i < wait:
        return "wait"
    if i < wait + warmup:
        return "warmup"
    if i < wait + warmup + active:
        return "active"
    return "after"


def steps_total(wait: int, warmup: int, active: int) -> int:
    return wait + warmup + active


def model_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def set_tf32(enabled: bool) -> None:
    """Matmul and cuDNN TF32 switches, through the long-standing flags only."""
    torch.backends.cuda.matmul.allow_tf32 = enabled
    torch.backends.cudnn.allow_tf32 = enabled


def run_fp32(scenario: str, out: str, tf32: bool) -> None:
    """The GPT model trained in plain fp32 (no autocast), profiled wait=1, warmup=2, active=4."""
    wait, warmup, active = 1, 2, 4
    seed_all(0)
    set_tf32(tf32)
    env_facts(scenario)
    fact(
        scenario=scenario,
        matmul_allow_tf32=bool(torch.backends.cuda.matmul.allow_tf32),
        cudnn_allow_tf32=bool(torch.backends.cudnn.allow_tf32),
    )
    model, opt = make_model_and_opt()
    n = steps_total(wait, warmup, active)
    batches = gpu_batches(2 + n)
    for x, y in batches[:2]:
        train_step(model, opt, x, y, amp=False)
    torch.cuda.synchronize()
    clock = StepClock()
    with make_profiler(out, wait, warmup, active) as prof:
        for i in range(n):
            clock.start(label(i, wait, warmup, active))
            x, y = batches[2 + i]
            train_step(model, opt, x, y, amp=False)
            clock.end_step()
            prof.step()
    clock.report(scenario)
