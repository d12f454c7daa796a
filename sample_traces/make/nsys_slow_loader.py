"""nsys_slow_loader: slow_loader.py's starved training, for Nsight Systems.

Run under `nsys profile` (see run_nsys.sh), from process start. The bf16 GPT of common.py
(16 x 512, AdamW(fused=True)); each step, INSIDE its NVTX range step_N and at its start,
takes the next batch from slow_loader.loader: a 25 ms `time.sleep` (the slow input
pipeline), `torch.randint` on the CPU, `.pin_memory()`, `.cuda(non_blocking=True)` (pinned
H2D copies, no sync), then common.train_step. As in slow_loader.json.gz, where the sleep
sits inside each ProfilerStep. 8 steps; no warm-up before step_0 (cold: handles, allocator,
the lazy AdamW state, the pinned allocator's first cudaHostAlloc).
Expected: step_0 a cold step to leave out; TA001 gpu-starvation on top, critical; never
TA009 (the copies are pinned) nor TA005 (bf16 GEMMs on Tensor Cores).

usage: nsys profile ... python3 nsys_slow_loader.py
"""

import common as C
import torch
from slow_loader import SLEEP_S, loader

STEPS = 8


def main() -> None:
    C.seed_all(0)
    C.env_facts("nsys_slow_loader")
    C.fact(scenario="nsys_slow_loader", sleep_ms=SLEEP_S * 1e3, batch=C.BATCH, seq=C.SEQ)
    model, opt = C.make_model_and_opt()
    clock = C.StepClock()
    it = loader(STEPS)
    for i in range(STEPS):
        torch.cuda.nvtx.range_push(f"step_{i}")
        clock.start(f"step_{i}")
        x, y = next(it)  # the sleep, CPU batch, pin and H2D copy: inside the step
        C.train_step(model, opt, x, y)
        clock.end_step()
        torch.cuda.nvtx.range_pop()
    clock.report("nsys_slow_loader")


if __name__ == "__main__":
    main()
