"""cpu_preprocess_inside: bf16 training with ~15 ms of CPU-side tensor work inside each step.

The GPT model of common.py (bf16 autocast, AdamW(fused=True)), token batches made on the GPU
up front. Each step runs the forward and the loss, then, BETWEEN forward and backward, host
work on a CPU tensor: `torch.sort` of row blocks of a fixed 2048 x 2048 float32 CPU tensor
and a column sum of each result (kept on the CPU, never read: no sync, no copy), repeated a
number of times calibrated on the machine before the run to take ~15 ms; then backward and
the optimizer step. The host work sits in a `record_function("cpu_side_work")` range so that
its duration can be read back from the trace. While it runs, the GPU finishes the forward
and has nothing queued: it waits for the host inside the step. 2 steps before the profiler,
then schedule(wait=1, warmup=2, active=4).
Afterwards, profiler off, the step time by CUDA events with and without the host work.
Expected: TA001 gpu-starvation on top, its waits INSIDE the steps (CPU-side work), advice
against host overhead; never input-pipeline advice ("DataLoader"), never TA002 or TA009.

usage: python3 cpu_preprocess_inside.py OUT.json.gz
"""

import time

import common as C
import torch
import torch.nn.functional as F
import tracefacts

WAIT, WARMUP, ACTIVE = 1, 2, 4
HOST_S = 0.015
ROWS = 256  # one unit of host work: sort a 256 x 2048 block


def host_work(a: torch.Tensor, reps: int) -> torch.Tensor:
    acc = torch.zeros(a.shape[1])
    for r in range(reps):
        lo = (r * ROWS) % a.shape[0]
        acc += torch.sort(a[lo : lo + ROWS], dim=1).values.sum(0)
    return acc


def calibrate(a: torch.Tensor) -> tuple[int, float]:
    """Repetitions of the unit that take ~HOST_S here, and their measured time."""
    host_work(a, 8)
    t0 = time.perf_counter()
    host_work(a, 32)
    unit = (time.perf_counter() - t0) / 32
    reps = max(1, round(HOST_S / unit))
    t0 = time.perf_counter()
    for _ in range(5):
        host_work(a, reps)
    return reps, (time.perf_counter() - t0) / 5


def step(model, opt, x, y, a: torch.Tensor, reps: int) -> torch.Tensor:
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(x)
    loss = F.cross_entropy(logits.float().reshape(-1, C.VOCAB), y.reshape(-1))
    if reps:
        with torch.profiler.record_function("cpu_side_work"):
            host_work(a, reps)  # CPU tensor work between forward and backward
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss


def timed(model, opt, batches, a, reps) -> list[float]:
    torch.cuda.synchronize()
    ev = []
    for x, y in batches:
        e = torch.cuda.Event(enable_timing=True)
        e.record()
        ev.append(e)
        step(model, opt, x, y, a, reps)
    e = torch.cuda.Event(enable_timing=True)
    e.record()
    ev.append(e)
    torch.cuda.synchronize()
    return [round(ev[i].elapsed_time(ev[i + 1]), 3) for i in range(len(batches))]


def main() -> None:
    out = C.out_arg("cpu_preprocess_inside.json.gz")
    C.seed_all(0)
    C.env_facts("cpu_preprocess_inside")
    g = torch.Generator()
    g.manual_seed(7)
    a = torch.randn(2048, 2048, generator=g)  # CPU tensor
    reps, measured = calibrate(a)
    C.fact(
        scenario="cpu_preprocess_inside",
        cpu_tensor_shape=list(a.shape),
        torch_threads=torch.get_num_threads(),
        reps=reps,
        rows_per_rep=ROWS,
        host_work_ms_measured=round(measured * 1e3, 3),
    )
    model, opt = C.make_model_and_opt()
    n = C.steps_total(WAIT, WARMUP, ACTIVE)
    batches = C.gpu_batches(2 + n)
    for x, y in batches[:2]:
        step(model, opt, x, y, a, reps)
    torch.cuda.synchronize()
    clock = C.StepClock()
    with C.make_profiler(out, WAIT, WARMUP, ACTIVE) as prof:
        for i in range(n):
            clock.start(C.label(i, WAIT, WARMUP, ACTIVE))
            x, y = batches[2 + i]
            step(model, opt, x, y, a, reps)
            clock.end_step()
            prof.step()
    clock.report("cpu_preprocess_inside")
    C.fact(scenario="cpu_preprocess_inside", trace=tracefacts.trace_facts(out))
    C.fact(scenario="cpu_preprocess_inside", steps=tracefacts.step_detail(out))
    C.fact(
        scenario="cpu_preprocess_inside",
        cpu_side_work_ms=tracefacts.annotation_ms(out, "cpu_side_work"),
    )

    # profiler off: with and without the host work, alternating blocks
    ab: dict[str, list[float]] = {"with_host_work": [], "without": []}
    for _ in range(2):
        for name, r in (("with_host_work", reps), ("without", 0)):
            ab[name] += timed(model, opt, batches[:5], a, r)[1:]
    C.fact(
        scenario="cpu_preprocess_inside",
        unprofiled_step_ms_with_host_work=ab["with_host_work"],
        unprofiled_step_ms_without=ab["without"],
    )


if __name__ == "__main__":
    main()
