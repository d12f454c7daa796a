"""Raw signatures of the pitfall traces (pitfalls.py), by plain loops over the Chrome trace's
events: no traceanalyzer code, no torch. tests/data/gpu/README.md quotes what this prints.

usage: python3 pitfall_signatures.py TRACE.json.gz [...]   (prints one JSON object per trace)
       python3 pitfall_signatures.py --zero-grad-copies TRACE.json.gz [...]   (the zero_grad
       and host-copy signatures below, per step)

Per ProfilerStep (events whose start lies in the step's host window):
- allocator: cudaMalloc / cudaFree runtime calls (count, total ms);
- compile: cpu_op / user_annotation ranges whose name matches
  compile|dynamo|inductor|Torch-Compiled Region|CompiledFunction (count by name);
- syncs: cudaStreamSynchronize (runtime), aten::_local_scalar_dense, aten::item, aten::isnan,
  aten::any (count), and, over the whole trace, which ops they sit under (immediate parent and
  outermost op on the same thread, and whether that thread is the main one);
- GEMMs: aten::linear / aten::addmm / aten::mm / aten::matmul per thread (main = the thread of
  the ProfilerStep ranges; autograd's backward runs on another) and the forward SDPA op;
- layout kernels: kernels matching nchwToNhwc|nhwcToNchw|convertTensor|transpose, their time
  against all kernel time;
- zero_grad: the `Optimizer.zero_grad#...` ranges (names, host ms), the ops inside them, the
  kernels their runtime calls launched (by correlation id: names, count, GPU ms), and the ops
  and kernels under `torch::autograd::AccumulateGrad` (an add into a kept gradient shows here);
- copies: cudaMemcpyAsync / cudaMemcpy / cudaStreamSynchronize runtime calls (count, ms, the op
  chain above them), the memcpy activities they made (kind from the name, bytes, GPU ms) and
  the aten::to / _to_copy / copy_ / lift_fresh ops that hold a memcpy call.
"""

from __future__ import annotations

import gzip
import json
import re
import sys
from collections import Counter, defaultdict

try:
    import orjson

    def _loads(b: bytes):
        return orjson.loads(b)
except ImportError:  # pragma: no cover
    def _loads(b: bytes):
        return json.loads(b)

COMPILE = re.compile(r"compile|dynamo|inductor|Torch-Compiled Region|CompiledFunction", re.I)
LAYOUT = re.compile(r"nchwToNhwc|nhwcToNchw|convertTensor|transpose", re.I)
SYNC_OPS = ("aten::_local_scalar_dense", "aten::item", "aten::isnan", "aten::any")
GEMM_OPS = ("aten::linear", "aten::addmm", "aten::mm", "aten::matmul")
SDPA_FWD = re.compile(r"^aten::(scaled_dot_product_attention|_scaled_dot_product_\w+_attention)$")
HOST_CATS = ("cpu_op", "user_annotation")


def load(path: str) -> list[dict]:
    with gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb") as f:
        return [e for e in _loads(f.read())["traceEvents"] if e.get("ph") == "X"]


def signatures(path: str) -> dict:
    ev = load(path)
    steps = sorted((e for e in ev if e.get("cat") == "user_annotation"
                    and e["name"].startswith("ProfilerStep#")), key=lambda e: e["ts"])
    main_tid = steps[0]["tid"] if steps else None
    windows = [(s["name"], s["ts"], s["ts"] + s["dur"]) for s in steps]

    def step_of(e):
        for name, lo, hi in windows:
            if lo <= e["ts"] < hi:
                return name
        return None

    per_step: dict[str, dict] = {n: {"host_ms": round((hi - lo) / 1e3, 3)} for n, lo, hi in windows}
    alloc = defaultdict(lambda: defaultdict(lambda: [0, 0.0]))
    comp = defaultdict(Counter)
    syncs = defaultdict(Counter)
    gemm = defaultdict(Counter)
    for e in ev:
        cat, name = e.get("cat"), e["name"]
        if cat == "cuda_runtime" and name in ("cudaMalloc", "cudaFree", "cudaStreamSynchronize",
                                              "cudaDeviceSynchronize"):
            s = step_of(e)
            if s:
                a = alloc[s][name]
                a[0] += 1
                a[1] += e["dur"]
        elif cat in HOST_CATS:
            s = step_of(e)
            if not s or name.startswith("ProfilerStep#"):
                continue
            if COMPILE.search(name):
                comp[s][name] += 1
            if name in SYNC_OPS:
                syncs[s][name] += 1
            if name in GEMM_OPS or SDPA_FWD.match(name):
                gemm[s][f"{name} @{'main' if e['tid'] == main_tid else 'other'}"] += 1
    for s in per_step:
        per_step[s]["runtime"] = {k: {"count": v[0], "ms": round(v[1] / 1e3, 3)}
                                  for k, v in sorted(alloc[s].items())}
        per_step[s]["compile_ranges"] = dict(sorted(comp[s].items()))
        per_step[s]["sync_ops"] = dict(sorted(syncs[s].items()))
        per_step[s]["gemm_ops_by_thread"] = dict(sorted(gemm[s].items()))

    # parents of the sync ops and the runtime syncs (same thread, by containment)
    by_tid = defaultdict(list)
    for e in ev:
        if e.get("cat") in HOST_CATS or (e.get("cat") == "cuda_runtime"
                                         and e["name"] == "cudaStreamSynchronize"):
            by_tid[e["tid"]].append(e)
    parents = Counter()
    for tid, es in by_tid.items():
        es.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack: list[dict] = []
        for e in es:
            while stack and stack[-1]["ts"] + stack[-1]["dur"] <= e["ts"]:
                stack.pop()
            if (e["name"] in SYNC_OPS or e["name"] == "cudaStreamSynchronize") and step_of(e):
                chain = [p["name"] for p in stack if not p["name"].startswith("ProfilerStep#")]
                parent = chain[-1] if chain else None
                outer = chain[0] if chain else None
                # the nearest enclosing op that is not an aten:: op (an autograd node, a range)
                named = next((n for n in reversed(chain) if not n.startswith("aten::")), None)
                thread = "main" if tid == main_tid else "other"
                parents[(e["name"], thread, parent, outer,
                         re.sub(r"\d+", "N", named) if named else None)] += 1
            stack.append(e)
    parent_rows = [dict(op=k[0], thread=k[1], parent=k[2], outermost=k[3],
                        nearest_non_aten=k[4], count=v)
                   for k, v in parents.most_common(25)]

    kern = [e for e in ev if e.get("cat") == "kernel"]
    kt = sum(e["dur"] for e in kern)
    lay = defaultdict(lambda: [0, 0.0])
    for e in kern:
        if LAYOUT.search(e["name"]):
            lay[e["name"][:120]][0] += 1
            lay[e["name"][:120]][1] += e["dur"]
    lt = sum(v[1] for v in lay.values())
    tids = Counter(e["tid"] for e in ev if e.get("cat") == "cpu_op")
    return {
        "trace": path.rsplit("/", 1)[-1],
        "steps": [w[0] for w in windows],
        "main_tid": main_tid,
        "cpu_op_threads": {str(t): c for t, c in tids.most_common()},
        "per_step": per_step,
        "sync_parents": parent_rows,
        "kernels": len(kern),
        "kernel_ms": round(kt / 1e3, 3),
        "layout_kernels": {
            "count": sum(v[0] for v in lay.values()),
            "ms": round(lt / 1e3, 3),
            "share_of_kernel_time": round(lt / kt, 4) if kt else None,
            "by_name": {k: {"count": v[0], "ms": round(v[1] / 1e3, 3)}
                        for k, v in sorted(lay.items(), key=lambda kv: -kv[1][1])[:8]},
        },
    }


def _stacks(ev: list[dict], keep) -> dict:
    """For every event e with keep(e): the names of the host ranges (cpu_op, user_annotation)
    enclosing it on its thread, outermost first (ProfilerStep ranges left out)."""
    by_tid = defaultdict(list)
    for e in ev:
        if e.get("cat") in HOST_CATS or keep(e):
            by_tid[e["tid"]].append(e)
    out = {}
    for es in by_tid.values():
        es.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack: list[dict] = []
        for e in es:
            while stack and stack[-1]["ts"] + stack[-1]["dur"] <= e["ts"]:
                stack.pop()
            if keep(e):
                out[id(e)] = [p["name"] for p in stack if not p["name"].startswith("ProfilerStep#")]
            if e.get("cat") in HOST_CATS:
                stack.append(e)
    return out


COPY_OPS = ("aten::to", "aten::_to_copy", "aten::copy_", "aten::lift_fresh")
MEMCPY_CALLS = ("cudaMemcpyAsync", "cudaMemcpy", "cudaMemcpy2DAsync")
RUNTIME_CATS = ("cuda_runtime", "cuda_driver")


def zero_grad_and_copies(path: str) -> dict:
    ev = load(path)
    steps = sorted((e for e in ev if e.get("cat") == "user_annotation"
                    and e["name"].startswith("ProfilerStep#")), key=lambda e: e["ts"])
    windows = [(st["name"], st["ts"], st["ts"] + st["dur"]) for st in steps]

    def step_of(e):
        for name, lo, hi in windows:
            if lo <= e["ts"] < hi:
                return name
        return None

    gpu_by_corr = defaultdict(list)
    for e in ev:
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            c = (e.get("args") or {}).get("correlation")
            if c is not None:
                gpu_by_corr[c].append(e)
    is_rt = lambda e: e.get("cat") in RUNTIME_CATS  # noqa: E731
    stacks = _stacks(ev, is_rt)
    host_stacks = _stacks(ev, lambda e: e.get("cat") == "cpu_op")
    ZG = "Optimizer.zero_grad"
    AG = "torch::autograd::AccumulateGrad"
    per = {n: {"zero_grad_ranges": Counter(), "zero_grad_range_host_ms": [],
               "ops_in_zero_grad": Counter(),
               "kernels_from_zero_grad": defaultdict(lambda: [0, 0.0]),
               "ops_in_accumulate_grad": Counter(),
               "kernels_from_accumulate_grad": defaultdict(lambda: [0, 0.0]),
               "memcpy_calls": defaultdict(lambda: [0, 0.0]), "memcpy_call_chains": Counter(),
               "memcpy_activities": defaultdict(lambda: [0, 0, 0.0]),
               "stream_syncs": [0, 0.0], "stream_sync_chains": Counter(),
               "copy_ops": Counter(), "copy_ops_holding_memcpy": Counter()}
           for n, _, _ in windows}
    for e in ev:
        s = step_of(e)
        if s is None:
            continue
        d = per[s]
        cat, name = e.get("cat"), e["name"]
        if cat == "user_annotation" and name.startswith(ZG):
            d["zero_grad_ranges"][name] += 1
            d["zero_grad_range_host_ms"].append(round(e["dur"] / 1e3, 4))
        elif cat == "cpu_op":
            chain = host_stacks.get(id(e), [])
            if any(n.startswith(ZG) for n in chain):
                d["ops_in_zero_grad"][name] += 1
            if AG in chain:
                d["ops_in_accumulate_grad"][name] += 1
            if name in COPY_OPS:
                d["copy_ops"][name] += 1
        elif cat in RUNTIME_CATS:
            chain = stacks.get(id(e), [])
            gpu = gpu_by_corr.get((e.get("args") or {}).get("correlation"), [])
            for key, hit in (("kernels_from_zero_grad", any(n.startswith(ZG) for n in chain)),
                             ("kernels_from_accumulate_grad", AG in chain)):
                if hit:
                    for k in gpu:
                        if k.get("cat") == "kernel":
                            r = d[key][k["name"][:140]]
                            r[0] += 1
                            r[1] += k["dur"]
            if name in MEMCPY_CALLS:
                r = d["memcpy_calls"][name]
                r[0] += 1
                r[1] += e["dur"]
                d["memcpy_call_chains"][" > ".join(chain[-4:])] += 1
                for op in set(chain):
                    if op in COPY_OPS:
                        d["copy_ops_holding_memcpy"][op] += 1
                for k in gpu:
                    if k.get("cat") == "gpu_memcpy":
                        r = d["memcpy_activities"][k["name"]]
                        r[0] += 1
                        r[1] += int((k.get("args") or {}).get("bytes", 0))
                        r[2] += k["dur"]
            elif name == "cudaStreamSynchronize":
                d["stream_syncs"][0] += 1
                d["stream_syncs"][1] += e["dur"]
                d["stream_sync_chains"][" > ".join(chain[-4:])] += 1

    def kern(v):
        return {"count": sum(x[0] for x in v.values()),
                "gpu_ms": round(sum(x[1] for x in v.values()) / 1e3, 4),
                "by_name": {k: {"count": x[0], "gpu_ms": round(x[1] / 1e3, 4)}
                            for k, x in sorted(v.items(), key=lambda kv: -kv[1][1])[:8]}}

    res = {}
    for n, d in per.items():
        res[n] = {
            "zero_grad_ranges": dict(d["zero_grad_ranges"]),
            "zero_grad_range_host_ms": d["zero_grad_range_host_ms"],
            "ops_in_zero_grad": dict(d["ops_in_zero_grad"].most_common()),
            "kernels_from_zero_grad": kern(d["kernels_from_zero_grad"]),
            "ops_in_accumulate_grad": dict(d["ops_in_accumulate_grad"].most_common()),
            "kernels_from_accumulate_grad": kern(d["kernels_from_accumulate_grad"]),
            "memcpy_calls": {k: {"count": v[0], "ms": round(v[1] / 1e3, 4)}
                             for k, v in d["memcpy_calls"].items()},
            "memcpy_call_chains": dict(d["memcpy_call_chains"].most_common(6)),
            "memcpy_activities": {k: {"count": v[0], "bytes": v[1], "gpu_ms": round(v[2] / 1e3, 4)}
                                  for k, v in d["memcpy_activities"].items()},
            "stream_syncs": {"count": d["stream_syncs"][0],
                             "ms": round(d["stream_syncs"][1] / 1e3, 4)},
            "stream_sync_chains": dict(d["stream_sync_chains"].most_common(6)),
            "copy_ops": dict(d["copy_ops"]),
            "copy_ops_holding_memcpy": dict(d["copy_ops_holding_memcpy"]),
        }
    return {"trace": path.rsplit("/", 1)[-1], "per_step": res}


if __name__ == "__main__":
    if sys.argv[1:2] == ["--zero-grad-copies"]:
        for p in sys.argv[2:]:
            print(json.dumps(zero_grad_and_copies(p), sort_keys=True))
        sys.exit(0)
    for p in sys.argv[1:]:
        print(json.dumps(signatures(p), sort_keys=True))
