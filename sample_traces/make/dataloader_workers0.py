"""dataloader_workers0: bf16 training fed by a real DataLoader that loads in the main process.

The GPT model of common.py (bf16 autocast, AdamW(fused=True)) trained on batches from
`torch.utils.data.DataLoader(TokenDataset, batch_size=16, num_workers=0, pin_memory=True)`.
`TokenDataset` is map-style; its `__getitem__(i)` does real CPU work with numpy: it draws a
"raw signal" of N float64 values from a generator seeded by i, sorts it, and "tokenises" 513
more draws by `searchsorted` into it (token id = position mod 8192), returning (tokens[:-1],
tokens[1:]) as int64 tensors. N is calibrated on the machine before the run so that one
sample takes ~3 ms (16 samples: ~48 ms of loading per batch, all in the main process: with
num_workers=0 the iterator calls `__getitem__` 16 times, collates and pins inside `next()`).
Each step moves its batch with `.cuda(non_blocking=True)` (pinned: no sync), then
common.train_step. 2 steps before the profiler (same loader), then
schedule(wait=1, warmup=2, active=4), with_stack=True (the DataLoader's frames show).

Afterwards, profiler off: the step time with the same loader (num_workers=0) against the same
dataset loaded by 4 worker processes (num_workers=4, pin_memory=True), by CUDA events.
Expected: TA001 gpu-starvation on top, the waits BETWEEN steps (before each step's first GPU
operation, the batch's H2D copy); context dataloader_workers=0; advice: worker processes.

usage: python3 dataloader_workers0.py OUT.json.gz
"""

import time

import common as C
import numpy as np
import torch
import tracefacts
from torch.utils.data import DataLoader, Dataset

WAIT, WARMUP, ACTIVE = 1, 2, 4
SAMPLE_S = 0.003  # CPU work per sample (calibrated)
WORKERS_FIX = 4


class TokenDataset(Dataset):
    """Map-style dataset whose samples cost real CPU work (numpy sort + searchsorted)."""

    def __init__(self, n: int, work: int, seq: int = C.SEQ, vocab: int = C.VOCAB) -> None:
        self.n, self.work, self.seq, self.vocab = n, work, seq, vocab

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        rng = np.random.default_rng(i)
        raw = rng.standard_normal(self.work)
        raw.sort()
        idx = np.searchsorted(raw, rng.standard_normal(self.seq + 1))
        tokens = torch.from_numpy((idx % self.vocab).astype(np.int64))
        return tokens[:-1], tokens[1:]


def calibrate() -> tuple[int, float]:
    """The signal length N whose `__getitem__` takes ~SAMPLE_S here, and its measured time."""
    work = 1 << 16
    for _ in range(4):
        ds = TokenDataset(64, work)
        t0 = time.perf_counter()
        for i in range(32):
            ds[i]
        per = (time.perf_counter() - t0) / 32
        work = max(1024, int(work * SAMPLE_S / per))
    ds = TokenDataset(64, work)
    t0 = time.perf_counter()
    for i in range(64):
        ds[i]
    return work, (time.perf_counter() - t0) / 64


def to_gpu(batch) -> tuple[torch.Tensor, torch.Tensor]:
    x, y = batch
    return x.cuda(non_blocking=True), y.cuda(non_blocking=True)


def timed(model, opt, loader, n: int) -> tuple[list[float], list[float]]:
    """n steps from a fresh iterator (its first step left out: worker start-up), CUDA events."""
    torch.cuda.synchronize()
    it = iter(loader)
    ev, wall = [], []
    for _ in range(n + 1):
        e = torch.cuda.Event(enable_timing=True)
        e.record()
        ev.append(e)
        wall.append(time.perf_counter())
        x, y = to_gpu(next(it))
        C.train_step(model, opt, x, y)
    e = torch.cuda.Event(enable_timing=True)
    e.record()
    ev.append(e)
    wall.append(time.perf_counter())
    torch.cuda.synchronize()
    gpu = [round(ev[i].elapsed_time(ev[i + 1]), 3) for i in range(1, n + 1)]
    host = [round((wall[i + 1] - wall[i]) * 1e3, 3) for i in range(1, n + 1)]
    return gpu, host


def main() -> None:
    out = C.out_arg("dataloader_workers0.json.gz")
    C.seed_all(0)
    C.env_facts("dataloader_workers0")
    work, per = calibrate()
    n = C.steps_total(WAIT, WARMUP, ACTIVE)
    ds = TokenDataset(C.BATCH * (2 + n + 40), work)
    loader = DataLoader(ds, batch_size=C.BATCH, shuffle=False, num_workers=0, pin_memory=True)
    C.fact(
        scenario="dataloader_workers0",
        signal_len=work,
        sample_ms_measured=round(per * 1e3, 3),
        batch=C.BATCH,
        batch_loading_ms_expected=round(per * 1e3 * C.BATCH, 1),
        num_workers=0,
        pin_memory=True,
    )
    model, opt = C.make_model_and_opt()
    it = iter(loader)
    for _ in range(2):
        x, y = to_gpu(next(it))
        C.train_step(model, opt, x, y)
    torch.cuda.synchronize()
    clock = C.StepClock()
    with C.make_profiler(out, WAIT, WARMUP, ACTIVE, with_stack=True) as prof:
        for i in range(n):
            clock.start(C.label(i, WAIT, WARMUP, ACTIVE))
            x, y = to_gpu(next(it))
            C.train_step(model, opt, x, y)
            clock.end_step()
            prof.step()
    clock.report("dataloader_workers0")
    C.fact(scenario="dataloader_workers0", trace=tracefacts.trace_facts(out))
    C.fact(scenario="dataloader_workers0", steps=tracefacts.step_detail(out))
    C.fact(
        scenario="dataloader_workers0",
        loader_next_ms=tracefacts.annotation_ms(out, "enumerate(DataLoader)"),
    )

    # the fix, profiler off: the same dataset loaded by worker processes
    gpu0, host0 = timed(model, opt, loader, 8)
    C.fact(
        scenario="dataloader_workers0",
        unprofiled_workers0_step_ms_cuda_events=gpu0,
        unprofiled_workers0_step_ms_host_wall=host0,
    )
    fixed = DataLoader(
        ds,
        batch_size=C.BATCH,
        shuffle=False,
        num_workers=WORKERS_FIX,
        pin_memory=True,
        timeout=60,
    )
    gpu4, host4 = timed(model, opt, fixed, 8)
    C.fact(
        scenario="dataloader_workers0",
        unprofiled_workers4_step_ms_cuda_events=gpu4,
        unprofiled_workers4_step_ms_host_wall=host4,
    )


if __name__ == "__main__":
    main()
