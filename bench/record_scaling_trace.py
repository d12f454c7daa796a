"""Record the real trace that `bench_scaling.py` scales up: a GPT-style training step on the
GPU, profiled as the traces users bring are (shapes, Python stacks and memory recorded).

Usage (on the GPU machine, where torch is installed)::

    python3 bench/record_scaling_trace.py OUT.json [--steps 6]

The workload: a 6-layer decoder (d_model 1024, 16 heads, sequence 512, batch 8), bf16
autocast, AdamW, a fresh random batch copied from pinned memory each step. Profiled with
``torch.profiler`` (CPU and CUDA activities, ``record_shapes``, ``with_stack``,
``profile_memory``; schedule wait 1, warmup 2, active ``--steps``), written with
``export_chrome_trace`` in Kineto's own layout. About 2-3 MB of JSON per step, half of its
events Python frames, as in the traces of issue 27.
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    import torch
    from torch import nn
    from torch.profiler import ProfilerActivity, profile, schedule

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--steps", type=int, default=6)
    args = parser.parse_args(argv)

    torch.manual_seed(0)
    dev = torch.device("cuda")
    d, heads, seq, batch, vocab, layers = 1024, 16, 512, 8, 8192, 6

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
            self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

        def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            h = self.ln1(x)
            x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
            return x + self.mlp(self.ln2(x))

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(vocab, d)
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.head = nn.Linear(d, vocab)

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            x = self.emb(tokens)
            mask = torch.triu(torch.ones(seq, seq, device=tokens.device, dtype=torch.bool), 1)
            for block in self.blocks:
                x = block(x, mask)
            return self.head(x)

    model = Model().to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    host = torch.randint(0, vocab, (batch, seq + 1)).pin_memory()

    def step() -> None:
        tokens = host.to(dev, non_blocking=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(tokens[:, :-1])
            flat = logits.flatten(0, 1).float()
            loss = nn.functional.cross_entropy(flat, tokens[:, 1:].flatten())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    activities = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
    sched = schedule(wait=1, warmup=2, active=args.steps)
    with profile(
        activities=activities,
        schedule=sched,
        record_shapes=True,
        with_stack=True,
        profile_memory=True,
    ) as prof:
        for _ in range(3 + args.steps):
            step()
            prof.step()
    torch.cuda.synchronize()
    prof.export_chrome_trace(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
