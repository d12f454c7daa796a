"""decode_b1: batch-1 greedy autoregressive decoding of a small decoder (bf16 weights).

GPT decoder, width 512, 8 heads, 4 layers, vocab 8192, weights cast to bf16, eval mode under
torch.no_grad. Each step generates one sequence: a fixed 32-token prompt, then 24 new tokens
by greedy argmax, recomputing the full forward on the growing sequence (no KV cache, no
.item(): the next token stays on the GPU and is appended with torch.cat). One warm-up
generation before profiling, then schedule(wait=1, warmup=1, active=3).
Expected: host/launch-bound (tiny kernels, GPU idle between launches: TA003 or TA001);
no Tensor-Core or memory-bound alarm on top.

usage: python3 decode_b1.py OUT.json.gz
"""

import common as C
import torch

PROMPT, NEW = 32, 24
WAIT, WARMUP, ACTIVE = 1, 1, 3


@torch.no_grad()
def generate(model, prompt: torch.Tensor) -> torch.Tensor:
    idx = prompt
    for _ in range(NEW):
        logits = model(idx)[:, -1, :]
        nxt = logits.argmax(dim=-1, keepdim=True)
        idx = torch.cat([idx, nxt], dim=1)
    return idx


def main() -> None:
    out = C.out_arg("decode_b1.json.gz")
    C.seed_all(0)
    C.env_facts("decode_b1")
    model = C.GPT(d=512, h=8, layers=4, max_seq=PROMPT + NEW).cuda().to(torch.bfloat16).eval()
    C.fact(scenario="decode_b1", params=C.model_params(model))
    g = torch.Generator(device="cuda")
    g.manual_seed(7)
    prompt = torch.randint(0, C.VOCAB, (1, PROMPT), device="cuda", generator=g)
    generate(model, prompt)  # warm-up
    torch.cuda.synchronize()
    clock = C.StepClock()
    n = C.steps_total(WAIT, WARMUP, ACTIVE)
    seqs = []
    with C.make_profiler(out, WAIT, WARMUP, ACTIVE) as prof:
        for i in range(n):
            clock.start(C.label(i, WAIT, WARMUP, ACTIVE))
            seqs.append(generate(model, prompt))
            clock.end_step()
            prof.step()
    clock.report("decode_b1")
    C.fact(scenario="decode_b1", tokens_per_step=NEW, last_tokens=seqs[-1][0, -8:].tolist())


if __name__ == "__main__":
    main()
