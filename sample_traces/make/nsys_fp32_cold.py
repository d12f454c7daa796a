"""nsys_fp32_cold: fp32 training (TF32 off) for Nsight Systems, from process start.

Run under `nsys profile` (see run_nsys.sh). 8 training steps of the GPT model in plain fp32
(allow_tf32 False for matmul and cuDNN), each inside an NVTX range step_N; no warm-up
before step_0, so step_0 holds cuBLAS/cuDNN handle creation, allocator growth and the lazy
AdamW state. Expected: step_0 is a cold outlier; after it, TA005 no-tensor-cores on top.

usage: nsys profile ... python3 nsys_fp32_cold.py
"""

import common as C
import torch


def main() -> None:
    C.seed_all(0)
    C.set_tf32(False)
    C.env_facts("nsys_fp32_cold")
    model, opt = C.make_model_and_opt()
    batches = C.gpu_batches(8)
    clock = C.StepClock()
    for i in range(8):
        torch.cuda.nvtx.range_push(f"step_{i}")
        clock.start(f"step_{i}")
        x, y = batches[i]
        C.train_step(model, opt, x, y, amp=False)
        clock.end_step()
        torch.cuda.nvtx.range_pop()
    clock.report("nsys_fp32_cold")


if __name__ == "__main__":
    main()
