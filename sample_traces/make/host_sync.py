"""host_sync: bf16 training with two host-device syncs in every step.

The GPT model's forward checks `x.abs().max().item() > 1e6` on the embeddings (a sync
inside forward), and the loop reads `loss.item()` between backward and the optimizer step.
torch.profiler with with_stack=True (Python stacks recorded, so the call sites in this file
show), record_shapes=True, 2 warm-up steps, then schedule(wait=1, warmup=2, active=3).
Expected: TA002 host-sync, with call sites in host_sync.py.

usage: python3 host_sync.py OUT.json.gz
"""

import common as C
import torch
import torch.nn.functional as F

WAIT, WARMUP, ACTIVE = 1, 2, 3


class CheckedGPT(C.GPT):
    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.embed(idx)
        if x.abs().max().item() > 1e6:  # host sync inside forward
            x = x.clamp(-1e6, 1e6)
        return self.trunk(x)


def step(model, opt, x, y) -> float:
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(x)
    loss = F.cross_entropy(logits.float().reshape(-1, C.VOCAB), y.reshape(-1))
    loss.backward()
    loss_value = loss.item()  # host sync mid-step, before the optimizer
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss_value


def main() -> None:
    out = C.out_arg("host_sync.json.gz")
    C.seed_all(0)
    C.env_facts("host_sync")
    model = CheckedGPT().cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
    n = C.steps_total(WAIT, WARMUP, ACTIVE)
    batches = C.gpu_batches(2 + n)
    for x, y in batches[:2]:
        step(model, opt, x, y)
    torch.cuda.synchronize()
    clock = C.StepClock()
    losses = []
    with C.make_profiler(out, WAIT, WARMUP, ACTIVE, with_stack=True) as prof:
        for i in range(n):
            clock.start(C.label(i, WAIT, WARMUP, ACTIVE))
            x, y = batches[2 + i]
            losses.append(round(step(model, opt, x, y), 4))
            clock.end_step()
            prof.step()
    clock.report("host_sync")
    C.fact(scenario="host_sync", losses=losses)


if __name__ == "__main__":
    main()
