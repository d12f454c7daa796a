"""odd_shapes: bf16 training of an MLP language model whose weight dims are misaligned.

Embedding(50257, 1000), then 4 residual blocks [LayerNorm(1000), Linear(1000, 4001), GELU,
Linear(4001, 1000)], LayerNorm, Linear(1000, 50257) head; batch 8 x 500 tokens (4000 rows),
bf16 autocast, fused AdamW, 2 warm-up steps, then schedule(wait=1, warmup=2, active=4).
Width 1000 is a multiple of 8 but not of 16/64, hidden 4001 and vocabulary 50257 are odd.
Expected: TA006 odd-shapes (GEMMs with a dimension not a multiple of 8 are a major cost).

usage: python3 odd_shapes.py OUT.json.gz
"""

import common as C
import torch
import torch.nn as nn
import torch.nn.functional as F

W, HID, V, NBLK, B, T = 1000, 4001, 50257, 4, 8, 500
WAIT, WARMUP, ACTIVE = 1, 2, 4


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(W)
        self.fc1 = nn.Linear(W, HID)
        self.fc2 = nn.Linear(HID, W)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(F.gelu(self.fc1(self.ln(x))))


class OddLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tok = nn.Embedding(V, W)
        self.blocks = nn.Sequential(*[Block() for _ in range(NBLK)])
        self.ln_f = nn.LayerNorm(W)
        self.head = nn.Linear(W, V, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.head(self.ln_f(self.blocks(self.tok(idx))))


def main() -> None:
    out = C.out_arg("odd_shapes.json.gz")
    C.seed_all(0)
    C.env_facts("odd_shapes")
    model = OddLM().cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
    C.fact(scenario="odd_shapes", params=C.model_params(model))
    n = C.steps_total(WAIT, WARMUP, ACTIVE)
    batches = C.gpu_batches(2 + n, batch=B, seq=T, vocab=V)
    for x, y in batches[:2]:
        C.train_step(model, opt, x, y, vocab=V)
    torch.cuda.synchronize()
    clock = C.StepClock()
    with C.make_profiler(out, WAIT, WARMUP, ACTIVE) as prof:
        for i in range(n):
            clock.start(C.label(i, WAIT, WARMUP, ACTIVE))
            x, y = batches[2 + i]
            C.train_step(model, opt, x, y, vocab=V)
            clock.end_step()
            prof.step()
    clock.report("odd_shapes")


if __name__ == "__main__":
    main()
