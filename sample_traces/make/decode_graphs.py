"""decode_graphs: decode_b1's batch-1 greedy decoding, compiled with CUDA graphs.

The decoder of decode_b1.py (GPT, width 512, 8 heads, 4 layers, vocab 8192, weights cast to
bf16, eval mode, torch.no_grad) wrapped in `torch.compile(model, mode="reduce-overhead")`
(Inductor's CUDA graph trees). To keep every shape static, so that one CUDA graph is
captured and replayed for every token, the sequence lives in a fixed (1, 56) buffer
(32-token prompt + 24 new tokens) padded with token 0: each new token is the argmax of the
logits at the last filled position (causal attention: the padding after it changes nothing),
written into the buffer on the GPU (`buf[:, t] = nxt`, no `.item()`, no sync). Each step
generates one sequence: 24 forward calls = 24 graph replays (`cudaGraphLaunch`), plus per
token the eager slice/argmax and the write. `torch.compiler.cudagraph_mark_step_begin()`
before every call. Two generations (48 calls: compilation, the trees' warm-up run, the
capture, replays) before the profiler, then schedule(wait=1, warmup=1, active=3).
Afterwards, profiler off: one generation's time (CUDA events and host wall), eager growing
sequence (decode_b1), eager padded and compiled, and whether they produce the same tokens.
Expected: CUDA graphs AND torch.compile in use (context); advice must not say "use CUDA
graphs" / "torch.compile (" / "reduce-overhead"; no TA005 (bf16), TA009, TA011, TA002.

usage: python3 decode_graphs.py OUT.json.gz
"""

import gzip
import json
import time

import common as C
import torch
import tracefacts

PROMPT, NEW = 32, 24
LENGTH = PROMPT + NEW
WAIT, WARMUP, ACTIVE = 1, 1, 3


def counters() -> dict[str, int]:
    """Inductor's counters that say whether CUDA graphs were skipped."""
    from torch._dynamo.utils import counters as cnt

    return {k: int(v) for k, v in cnt["inductor"].items() if "cudagraph" in k}


@torch.no_grad()
def generate_static(fwd, prompt: torch.Tensor, graphs: bool) -> torch.Tensor:
    """Greedy decoding in a fixed-length buffer: every forward sees shape (1, LENGTH)."""
    buf = torch.zeros(1, LENGTH, dtype=torch.long, device="cuda")
    buf[:, :PROMPT] = prompt
    for t in range(PROMPT, LENGTH):
        if graphs:
            torch.compiler.cudagraph_mark_step_begin()
        logits = fwd(buf)
        buf[:, t] = logits[:, t - 1, :].argmax(dim=-1)
    return buf


@torch.no_grad()
def generate_growing(model, prompt: torch.Tensor) -> torch.Tensor:
    """decode_b1.py's loop: the sequence grows by torch.cat, shapes change every token."""
    idx = prompt
    for _ in range(NEW):
        nxt = model(idx)[:, -1, :].argmax(dim=-1, keepdim=True)
        idx = torch.cat([idx, nxt], dim=1)
    return idx


def timed(fn, reps: int = 5) -> tuple[list[float], list[float]]:
    torch.cuda.synchronize()
    gpu, host = [], []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0 = time.perf_counter()
        a.record()
        fn()
        b.record()
        host.append(round((time.perf_counter() - t0) * 1e3, 3))
        torch.cuda.synchronize()
        gpu.append(round(a.elapsed_time(b), 3))
    return gpu, host


def launch_calls(path: str) -> dict[str, int]:
    """Launch-type runtime calls in the ProfilerStep window, by name (a plain loop)."""
    with gzip.open(path, "rt") as f:
        ev = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    steps = [e for e in ev if e.get("cat") == "user_annotation" and "ProfilerStep#" in e["name"]]
    lo = min(e["ts"] for e in steps)
    hi = max(e["ts"] + e["dur"] for e in steps)
    out: dict[str, int] = {}
    for e in ev:
        if e.get("cat") == "cuda_runtime" and "Launch" in e["name"] and lo <= e["ts"] < hi:
            out[e["name"]] = out.get(e["name"], 0) + 1
    return out


def main() -> None:
    out = C.out_arg("decode_graphs.json.gz")
    C.seed_all(0)
    C.env_facts("decode_graphs")
    model = C.GPT(d=512, h=8, layers=4, max_seq=LENGTH).cuda().to(torch.bfloat16).eval()
    C.fact(scenario="decode_graphs", params=C.model_params(model), length=LENGTH, new=NEW)
    g = torch.Generator(device="cuda")
    g.manual_seed(7)
    prompt = torch.randint(0, C.VOCAB, (1, PROMPT), device="cuda", generator=g)
    cmodel = torch.compile(model, mode="reduce-overhead")
    t0 = time.perf_counter()
    warm_s = []
    for _ in range(2):
        t1 = time.perf_counter()
        generate_static(cmodel, prompt, graphs=True)
        torch.cuda.synchronize()
        warm_s.append(round(time.perf_counter() - t1, 3))
    C.fact(
        scenario="decode_graphs",
        compile_and_warmup_s=round(time.perf_counter() - t0, 1),
        warmup_generations_s=warm_s,
        inductor_cudagraph_counters=counters(),
    )
    clock = C.StepClock()
    n = C.steps_total(WAIT, WARMUP, ACTIVE)
    seqs = []
    with C.make_profiler(out, WAIT, WARMUP, ACTIVE) as prof:
        for i in range(n):
            clock.start(C.label(i, WAIT, WARMUP, ACTIVE))
            seqs.append(generate_static(cmodel, prompt, graphs=True))
            clock.end_step()
            prof.step()
    clock.report("decode_graphs")
    C.fact(scenario="decode_graphs", inductor_cudagraph_counters=counters())
    C.fact(scenario="decode_graphs", launch_calls_in_steps=launch_calls(out))
    C.fact(scenario="decode_graphs", trace=tracefacts.trace_facts(out))
    C.fact(scenario="decode_graphs", steps=tracefacts.step_detail(out))

    # profiler off: one generation (24 tokens) by each loop
    graphed = seqs[-1]
    padded = generate_static(model, prompt, graphs=False)
    growing = generate_growing(model, prompt)
    C.fact(
        scenario="decode_graphs",
        same_tokens_graphed_vs_eager_padded=bool(torch.equal(graphed, padded)),
        same_tokens_graphed_vs_eager_growing=bool(torch.equal(graphed, growing)),
        last_tokens=graphed[0, -8:].tolist(),
    )
    for name, fn in (
        ("compiled_graphs", lambda: generate_static(cmodel, prompt, graphs=True)),
        ("eager_padded", lambda: generate_static(model, prompt, graphs=False)),
        ("eager_growing_decode_b1", lambda: generate_growing(model, prompt)),
    ):
        gpu, host = timed(fn)
        C.fact(
            scenario="decode_graphs",
            unprofiled=name,
            generation_ms_cuda_events=gpu,
            generation_ms_host_wall=host,
        )


if __name__ == "__main__":
    main()
