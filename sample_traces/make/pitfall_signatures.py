"""Raw signatures of the pitfall traces (pitfalls.py), by plain loops over the Chrome trace's
events: no traceanalyzer code, no torch. tests/data/gpu/README.md quotes what this prints.

usage: python3 pitfall_signatures.py TRACE.json.gz [...]   (prints one JSON object per trace)
       python3 pitfall_signatures.py --zero-grad-copies TRACE.json.gz [...]   (the zero_grad
       and host-copy signatures below, per step)
       python3 pitfall_signatures.py --compile|--conv|--memory|--index TRACE.json.gz [...]
       (the second set of pitfalls: compiled regions / cache lookups / compile ranges; conv
       kernels, cuDNN autotuning, layout and batch-norm kernels; the allocator's [memory]
       events; the kernels under index ops; each per step, see the functions at the end)
       python3 pitfall_signatures.py --ddp|--gemm TRACE.json.gz [...]   (the third set: DDP's
       forwards, all-reduces and NCCL ranges/kernels by micro-batch; GEMM-like aten ops and
       their FLOPs from Input Dims, forward vs backward side)

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


# ---------------------------------------------------------------- the second set (pitfalls2)


def load_all(path: str) -> list[dict]:
    """Every event of the trace (X ranges, instant events such as [memory], flows, ...)."""
    with gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb") as f:
        return _loads(f.read())["traceEvents"]


class _Trace:
    """The events of one trace with its ProfilerStep windows, the GPU activities by
    correlation id and, for each runtime call, the step it was made in (kernels belong to the
    step of the runtime call that launched them)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.all = load_all(path)
        self.ev = [e for e in self.all if e.get("ph") == "X"]
        steps = sorted((e for e in self.ev if e.get("cat") == "user_annotation"
                        and e["name"].startswith("ProfilerStep#")), key=lambda e: e["ts"])
        self.windows = [(s["name"], s["ts"], s["ts"] + s["dur"]) for s in steps]
        self.main_tid = steps[0]["tid"] if steps else None
        self._starts = [w[1] for w in self.windows]
        self.gpu_by_corr: dict = defaultdict(list)
        self.rt_by_corr: dict = {}
        for e in self.ev:
            c = (e.get("args") or {}).get("correlation")
            if c is None:
                continue
            if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
                self.gpu_by_corr[c].append(e)
            elif e.get("cat") in RUNTIME_CATS:
                self.rt_by_corr[c] = e

    def step_of_ts(self, ts: float):
        import bisect

        i = bisect.bisect_right(self._starts, ts) - 1
        if i >= 0 and ts < self.windows[i][2]:
            return self.windows[i][0]
        return None

    def step_of(self, e: dict):
        """The step of a host event; of a GPU activity: the step of its launching call."""
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"):
            rt = self.rt_by_corr.get((e.get("args") or {}).get("correlation"))
            return self.step_of_ts(rt["ts"]) if rt else None
        return self.step_of_ts(e["ts"])

    def enclosing(self, keep) -> dict:
        """id(e) -> the host ranges (cpu_op, user_annotation) around e on its thread, outermost
        first, ProfilerStep ranges left out; for every e with keep(e)."""
        by_tid = defaultdict(list)
        for e in self.ev:
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
                    out[id(e)] = [p for p in stack if not p["name"].startswith("ProfilerStep#")]
                if e.get("cat") in HOST_CATS:
                    stack.append(e)
        return out


def _ms(us: float) -> float:
    return round(us / 1e3, 3)


def _minmax_mean(v: list) -> dict:
    if not v:
        return {"n": 0}
    return {"n": len(v), "mean": round(sum(v) / len(v), 2), "min": min(v), "max": max(v)}


#: compile work (dynamo tracing, AOT autograd, inductor lowering/codegen, autotuning): the
#: dynamo_timed families as torch.profiler records them
COMPILE_WORK = re.compile(
    r"\(dynamo_timed\)$|^entire_(frame|backward)_compile$|^dynamo$|^inductor_compile$"
    r"|^backend_compile$|^compile_attempt_\d+$|^_compile\.|^compile_fx|^bytecode_tracing$"
    r"|^aot_|^create_aot|^GraphLowering|^Scheduler\.|^async_compile|^CachingAutotuner"
    r"|^pass\.|^fx_codegen_and_compile$|^code_gen$|^PyCodeCache|^TritonBundler"
    r"|^min_cut_rematerialization_partition$|^additional_fake_tensor_prop$"
    r"|^_recursive_(pre|post|joint)_grad_passes$|^insert_deferred_runtime_asserts$")
REGION = "Torch-Compiled Region"
LOOKUP = "TorchDynamo Cache Lookup"
TOP_COMPILE = ("entire_frame_compile", "entire_backward_compile")
EAGER_OPS = ("aten::linear", "aten::layer_norm", "aten::embedding",
             "aten::scaled_dot_product_attention")


def compile_signature(path: str) -> dict:
    """Per step: the `Torch-Compiled Region: F/G` ranges (count, ids = frame/compile id),
    `TorchDynamo Cache Lookup` ranges (count, host ms), `CompiledFunction` /
    `CompiledFunctionBackward` and `## Call CompiledFxGraph` ranges, the compile-work ranges
    (COMPILE_WORK: count, distinct names, entire_frame_compile / entire_backward_compile ms),
    graph-break related ranges, kernels (all, triton_*), and the ops that only an eager forward
    records on the main thread (EAGER_OPS: aten::linear, aten::layer_norm, aten::embedding,
    aten::scaled_dot_product_attention; a compiled graph calls addmm/mm and the attention
    kernels' own ops directly) -- what tells a compiled step from an eager one."""
    t = _Trace(path)
    per = {n: {"host_ms": _ms(hi - lo), "regions": Counter(), "lookups": [0, 0.0],
               "compiled_function": Counter(), "fx_graph_calls": 0, "compile_work": Counter(),
               "top_compile_ms": Counter(), "kernels": 0, "triton_kernels": 0,
               "gemm_main": Counter(), "graph_break_ranges": Counter()}
           for n, lo, hi in t.windows}
    for e in t.ev:
        cat, name = e.get("cat"), e["name"]
        if cat == "kernel":
            s = t.step_of(e)
            if s:
                per[s]["kernels"] += 1
                if name.startswith("triton_"):
                    per[s]["triton_kernels"] += 1
            continue
        if cat not in HOST_CATS:
            continue
        s = t.step_of(e)
        if not s or name.startswith("ProfilerStep#"):
            continue
        d = per[s]
        if name.startswith(REGION):
            d["regions"][name] += 1
        elif name.startswith(LOOKUP):
            d["lookups"][0] += 1
            d["lookups"][1] += e["dur"]
        elif name.startswith("CompiledFunction") or name.endswith("CompiledFunctionBackward"):
            d["compiled_function"][name] += 1
        elif name.startswith("## Call CompiledFxGraph"):
            if cat == "user_annotation":
                d["fx_graph_calls"] += 1
        elif COMPILE_WORK.search(name):
            d["compile_work"][name] += 1
            if name in TOP_COMPILE:
                d["top_compile_ms"][name] += e["dur"]
        elif re.search(r"graph.?break", name, re.I):
            d["graph_break_ranges"][name] += 1
        if name in EAGER_OPS and e["tid"] == t.main_tid:
            d["gemm_main"][name] += 1
    res = {}
    for n, d in per.items():
        ids = sorted({k.split(": ", 1)[1] if ": " in k else k for k in d["regions"]},
                     key=lambda x: [int(p) if p.isdigit() else p for p in re.split(r"[/:]", x)])
        res[n] = {
            "host_ms": d["host_ms"],
            "compiled_regions": sum(d["regions"].values()),
            "compiled_region_ids": ids,
            "compiled_regions_by_name": dict(d["regions"]),
            "cache_lookups": d["lookups"][0],
            "cache_lookup_host_ms": _ms(d["lookups"][1]),
            "compiled_function_ranges": dict(d["compiled_function"]),
            "call_compiled_fx_graph": d["fx_graph_calls"],
            "compile_work_ranges": sum(d["compile_work"].values()),
            "compile_work_distinct_names": len(d["compile_work"]),
            "compile_work_top": dict(d["compile_work"].most_common(6)),
            "entire_compile_ms": {k: _ms(v) for k, v in d["top_compile_ms"].items()},
            "graph_break_ranges": dict(d["graph_break_ranges"]),
            "kernels": d["kernels"],
            "triton_kernels": d["triton_kernels"],
            "eager_module_ops_main_thread": dict(sorted(d["gemm_main"].items())),
        }
    return {"trace": path.rsplit("/", 1)[-1], "per_step": res}


CONV_OPS = ("aten::cudnn_convolution", "aten::convolution_backward",
            "aten::cudnn_convolution_backward", "aten::cudnn_convolution_transpose",
            "aten::miopen_convolution")
RT_COUNTED = ("cudaMalloc", "cudaFree", "cudaStreamSynchronize", "cudaEventSynchronize",
              "cudaDeviceSynchronize", "cudaMallocHost", "cudaHostAlloc", "cudaFreeHost")
LAYOUT2 = re.compile(r"nchwToNhwc|nhwcToNchw|convertTensor|transpose|permute", re.I)
BATCHNORM = re.compile(r"batch_?norm|(?:^|[^a-z])bn_|bn_fw|bn_bw", re.I)
#: convolution kernels whose (mangled) template names contain "permute"/"transpose": not layout
CONV_KERNEL = re.compile(r"implicit_?gemm|xmma|cutlass", re.I)


def conv_signature(path: str) -> dict:
    """Per step: the conv ops (aten::cudnn_convolution, aten::convolution_backward, ...): how
    many, the kernels each instance launched (by correlation from the runtime calls inside it
    on its thread: mean and max per instance, total, GPU ms), the distinct kernel names under
    them; runtime calls cudaMalloc / cudaFree / cudaStreamSynchronize / cudaEventSynchronize /
    cudaDeviceSynchronize (count, ms, the op they sit under); host ranges named *cudnn* (other
    than the conv ops); the 8 most frequent runtime calls; layout kernels (LAYOUT2; and
    without the conv kernels whose mangled names hold "permute", CONV_KERNEL) and batch-norm
    kernels (BATCHNORM): count, GPU ms, by name; all kernels: count and GPU ms."""
    t = _Trace(path)
    is_rt = lambda e: e.get("cat") in RUNTIME_CATS  # noqa: E731
    chains = t.enclosing(is_rt)
    per = {n: {"host_ms": _ms(hi - lo), "conv_inst": defaultdict(lambda: [0, 0.0, None]),
               "conv_kernel_names": Counter(), "rt": defaultdict(lambda: [0, 0.0]),
               "rt_parent": Counter(), "cudnn_ranges": Counter(), "rt_all": Counter(),
               "layout": defaultdict(lambda: [0, 0.0]), "bn": defaultdict(lambda: [0, 0.0]),
               "layout_nc": defaultdict(lambda: [0, 0.0]),
               "kern": [0, 0.0]}
           for n, lo, hi in t.windows}
    all_conv_names: Counter = Counter()
    for e in t.ev:
        cat, name = e.get("cat"), e["name"]
        s = t.step_of(e)
        if s is None:
            continue
        d = per[s]
        if cat == "kernel":
            d["kern"][0] += 1
            d["kern"][1] += e["dur"]
            for pat, key in ((LAYOUT2, "layout"), (BATCHNORM, "bn"), (LAYOUT2, "layout_nc")):
                if pat.search(name) and not (key == "layout_nc" and CONV_KERNEL.search(name)):
                    r = d[key][name[:140]]
                    r[0] += 1
                    r[1] += e["dur"]
        elif cat in HOST_CATS:
            if "cudnn" in name.lower() and name not in CONV_OPS:
                d["cudnn_ranges"][name[:120]] += 1
            if name in CONV_OPS:
                d["conv_inst"][id(e)][2] = name
        elif cat in RUNTIME_CATS:
            d["rt_all"][name] += 1
            chain = chains.get(id(e), [])
            if name in RT_COUNTED:
                r = d["rt"][name]
                r[0] += 1
                r[1] += e["dur"]
                par = next((p["name"] for p in reversed(chain) if p["name"] in CONV_OPS),
                           chain[-1]["name"] if chain else None)
                d["rt_parent"][f"{name} < {par}"] += 1
            conv = next((p for p in reversed(chain) if p["name"] in CONV_OPS), None)
            if conv is not None:
                inst = d["conv_inst"][id(conv)]
                inst[2] = conv["name"]
                for k in t.gpu_by_corr.get((e.get("args") or {}).get("correlation"), []):
                    if k.get("cat") == "kernel":
                        inst[0] += 1
                        inst[1] += k["dur"]
                        d["conv_kernel_names"][k["name"][:140]] += 1
                        all_conv_names[k["name"][:140]] += 1

    def table(v: dict) -> dict:
        return {"count": sum(x[0] for x in v.values()),
                "gpu_ms": _ms(sum(x[1] for x in v.values())),
                "by_name": {k: {"count": x[0], "gpu_ms": _ms(x[1])}
                            for k, x in sorted(v.items(), key=lambda kv: -kv[1][1])[:8]}}

    res = {}
    for n, d in per.items():
        by_op: dict = defaultdict(list)
        ms_op: dict = defaultdict(float)
        for cnt, dur, opname in d["conv_inst"].values():
            by_op[opname].append(cnt)
            ms_op[opname] += dur
        res[n] = {
            "host_ms": d["host_ms"],
            "kernels": d["kern"][0],
            "kernel_gpu_ms": _ms(d["kern"][1]),
            "conv_ops": {op: dict(_minmax_mean(v), kernels=sum(v), gpu_ms=_ms(ms_op[op]))
                         for op, v in sorted(by_op.items())},
            "conv_kernel_distinct_names": len(d["conv_kernel_names"]),
            "conv_kernel_top": dict(d["conv_kernel_names"].most_common(6)),
            "runtime": {k: {"count": v[0], "ms": _ms(v[1])} for k, v in sorted(d["rt"].items())},
            "runtime_under": dict(d["rt_parent"].most_common(8)),
            "runtime_top": dict(d["rt_all"].most_common(8)),
            "cudnn_named_host_ranges": dict(d["cudnn_ranges"].most_common(10)),
            "layout_kernels": table(d["layout"]),
            "layout_kernels_not_conv": table(d["layout_nc"]),
            "batch_norm_kernels": table(d["bn"]),
        }
    return {"trace": path.rsplit("/", 1)[-1], "per_step": res,
            "conv_kernel_distinct_names_all_steps": len(all_conv_names)}


def memory_signature(path: str) -> dict:
    """Per step (by timestamp): the `[memory]` instant events that profile_memory=True writes
    (ph "i"; args Addr, Bytes, Total Allocated, Total Reserved, Device Type, Device Id):
    count (all; device ones = Device Type 1), allocations (Bytes > 0) and frees, and for the
    device ones min/max of Total Allocated and Total Reserved (MiB)."""
    t = _Trace(path)
    per = {n: {"n": 0, "dev": 0, "alloc": 0, "free": 0, "bytes_alloc": 0,
               "ta": [], "tr": [], "dtypes": Counter()} for n, _, _ in t.windows}
    outside = 0
    for e in t.all:
        if e.get("name") != "[memory]":
            continue
        s = t.step_of_ts(e["ts"])
        if s is None:
            outside += 1
            continue
        a = e.get("args") or {}
        d = per[s]
        d["n"] += 1
        d["dtypes"][str(a.get("Device Type"))] += 1
        b = a.get("Bytes", 0) or 0
        if b > 0:
            d["alloc"] += 1
            d["bytes_alloc"] += b
        elif b < 0:
            d["free"] += 1
        if a.get("Device Type") == 1:
            d["dev"] += 1
            if "Total Allocated" in a:
                d["ta"].append(a["Total Allocated"])
            if "Total Reserved" in a:
                d["tr"].append(a["Total Reserved"])
    mib = lambda v: round(v / 2**20, 1)  # noqa: E731
    res = {}
    for n, d in per.items():
        res[n] = {"memory_events": d["n"], "device_memory_events": d["dev"],
                  "by_device_type": dict(d["dtypes"]), "allocs": d["alloc"], "frees": d["free"],
                  "bytes_allocated_mib": mib(d["bytes_alloc"]),
                  "total_allocated_mib": {"min": mib(min(d["ta"])), "max": mib(max(d["ta"]))}
                  if d["ta"] else None,
                  "total_reserved_mib": {"min": mib(min(d["tr"])), "max": mib(max(d["tr"]))}
                  if d["tr"] else None}
    sample = next((e for e in t.all if e.get("name") == "[memory]"), None)
    return {"trace": path.rsplit("/", 1)[-1], "per_step": res,
            "memory_events_outside_steps": outside, "sample_event": sample}


INDEX_OPS = re.compile(r"^aten::(index_add_?|index|index_put_?|_index_put_impl_|sort|"
                       r"index_select|gather|scatter_add_?|_unsafe_index_put|"
                       r"index_reduce_?|scatter_)$")


def index_signature(path: str, pattern: re.Pattern = INDEX_OPS) -> dict:
    """Per step: the kernels launched under ops matching pattern, keyed by the chain of
    matching ops around the launch (outermost first, e.g. `aten::index_add_ > aten::index_put_
    > aten::_index_put_impl_ > aten::sort`), with the thread (main / other) and the nearest
    autograd node: kernel names, count, GPU ms; plus the matching ops' counts."""
    t = _Trace(path)
    is_rt = lambda e: e.get("cat") in RUNTIME_CATS  # noqa: E731
    chains = t.enclosing(is_rt)
    per = {n: {"host_ms": _ms(hi - lo), "ops": Counter(),
               "k": defaultdict(lambda: defaultdict(lambda: [0, 0.0])),
               "kern": [0, 0.0]} for n, lo, hi in t.windows}
    for e in t.ev:
        cat, name = e.get("cat"), e["name"]
        s = t.step_of(e)
        if s is None:
            continue
        d = per[s]
        if cat == "kernel":
            d["kern"][0] += 1
            d["kern"][1] += e["dur"]
        elif cat == "cpu_op" and pattern.search(name):
            d["ops"][f"{name} @{'main' if e['tid'] == t.main_tid else 'other'}"] += 1
        elif cat in RUNTIME_CATS:
            chain = chains.get(id(e), [])
            m = [p["name"] for p in chain if pattern.search(p["name"])]
            if not m:
                continue
            node = next((p["name"] for p in reversed(chain)
                         if p["name"].endswith("Backward0") and "evaluate_function" not in
                         p["name"]), None)
            key = (" > ".join(m) + f" @{'main' if e['tid'] == t.main_tid else 'other'}"
                   + (f" [{node}]" if node else ""))
            for k in t.gpu_by_corr.get((e.get("args") or {}).get("correlation"), []):
                if k.get("cat") == "kernel":
                    r = d["k"][key][k["name"][:140]]
                    r[0] += 1
                    r[1] += k["dur"]
    res = {}
    for n, d in per.items():
        res[n] = {"host_ms": d["host_ms"], "kernels": d["kern"][0],
                  "kernel_gpu_ms": _ms(d["kern"][1]), "ops": dict(sorted(d["ops"].items())),
                  "kernels_under": {
                      key: {"count": sum(x[0] for x in v.values()),
                            "gpu_ms": _ms(sum(x[1] for x in v.values())),
                            "by_name": {k: {"count": x[0], "gpu_ms": _ms(x[1])}
                                        for k, x in sorted(v.items(),
                                                           key=lambda kv: -kv[1][1])[:6]}}
                      for key, v in sorted(d["k"].items())}}
    return {"trace": path.rsplit("/", 1)[-1], "per_step": res}


# ---------------------------------------------------------------- the third set (pitfalls3)

DDP_FWD = "DistributedDataParallel.forward"
COLL = re.compile(r"^(nccl|gloo):")  # the process group's collective ranges
ALLREDUCE_OP = "c10d::allreduce_"


def _side_main(t: _Trace, e: dict) -> str:
    return "main" if e["tid"] == t.main_tid else "other"


def ddp_signature(path: str) -> dict:
    """Per step: what tells DDP's micro-batches and all-reduce rounds apart. The
    `DistributedDataParallel.forward` ranges (user_annotation: count, host ms; one per
    micro-batch); every host range whose name holds "DistributedDataParallel" (count by name
    and category); `c10d::allreduce_` ops (count, host ms, thread); `nccl:*` (gloo: `gloo:*`) ranges
    (user_annotation: host count/ms; gpu_user_annotation: count/GPU ms); kernels whose name
    holds "nccl" (count, GPU ms, by name); the reducer's ranges (names holding "reducer": count,
    host ms) and the kernels / memcpys launched under them or under c10d::allreduce_ (by
    correlation from the runtime calls inside them); device-to-device memcpys; all kernels.
    Then the all-reduces by micro-batch: each `c10d::allreduce_` is given to the last DDP
    forward that started before it, so `allreduce_per_micro_batch` = [n after forward 1, n after
    forward 2, ...] and `allreduce_rounds` = how many micro-batches were followed by at least
    one all-reduce (4 without no_sync, 1 with it on the last micro-batch only)."""
    t = _Trace(path)
    is_rt = lambda e: e.get("cat") in RUNTIME_CATS  # noqa: E731
    chains = t.enclosing(is_rt)
    per = {n: {"host_ms": _ms(hi - lo), "fwd": [], "ddp_named": Counter(),
               "ar": [], "ar_tid": Counter(), "nccl_host": defaultdict(lambda: [0, 0.0]),
               "nccl_gpu": defaultdict(lambda: [0, 0.0]),
               "nccl_k": defaultdict(lambda: [0, 0.0]), "reducer": defaultdict(lambda: [0, 0.0]),
               "under": defaultdict(lambda: [0, 0.0]), "d2d": [0, 0, 0.0], "kern": [0, 0.0],
               "opt_steps": 0}
           for n, lo, hi in t.windows}
    for e in t.ev:
        cat, name = e.get("cat"), e["name"]
        s = t.step_of(e)
        if s is None or name.startswith("ProfilerStep#"):
            continue
        d = per[s]
        if cat == "kernel":
            d["kern"][0] += 1
            d["kern"][1] += e["dur"]
            if "nccl" in name.lower():
                r = d["nccl_k"][name[:140]]
                r[0] += 1
                r[1] += e["dur"]
            continue
        if cat == "gpu_memcpy":
            if "dtod" in name.lower():
                d["d2d"][0] += 1
                d["d2d"][1] += int((e.get("args") or {}).get("bytes", 0))
                d["d2d"][2] += e["dur"]
            continue
        if cat == "gpu_user_annotation":
            if COLL.search(name):
                r = d["nccl_gpu"][name]
                r[0] += 1
                r[1] += e["dur"]
            if "DistributedDataParallel" in name:
                d["ddp_named"][f"{name} [gpu_user_annotation]"] += 1
            continue
        if cat in RUNTIME_CATS:
            chain = chains.get(id(e), [])
            keys = [p["name"] for p in chain if p["name"] == ALLREDUCE_OP
                    or "reducer" in p["name"]]
            if keys:
                key = keys[-1]
                for k in t.gpu_by_corr.get((e.get("args") or {}).get("correlation"), []):
                    r = d["under"][f"{key} > [{k.get('cat')}] {k['name'][:120]}"]
                    r[0] += 1
                    r[1] += k["dur"]
            continue
        if cat not in HOST_CATS:
            continue
        if "DistributedDataParallel" in name:
            d["ddp_named"][f"{name} [{cat}]"] += 1
        if name == DDP_FWD and cat == "user_annotation":
            d["fwd"].append(e)
        elif name == ALLREDUCE_OP:
            d["ar"].append(e)
            d["ar_tid"][_side_main(t, e)] += 1
        elif COLL.search(name):
            r = d["nccl_host"][f"{name} [{cat}]"]
            r[0] += 1
            r[1] += e["dur"]
        elif "reducer" in name:
            r = d["reducer"][name]
            r[0] += 1
            r[1] += e["dur"]
        elif name.startswith("Optimizer.step#"):
            d["opt_steps"] += 1

    def table(v: dict, n: int = 8) -> dict:
        return {k: {"count": x[0], "ms": _ms(x[1])}
                for k, x in sorted(v.items(), key=lambda kv: -kv[1][1])[:n]}

    res = {}
    for n, d in per.items():
        fwd_ts = sorted(f["ts"] for f in d["fwd"])
        by_mb = [0] * len(fwd_ts)
        before_first = 0
        for a in d["ar"]:
            i = sum(1 for ts in fwd_ts if ts <= a["ts"]) - 1
            if i < 0:
                before_first += 1
            else:
                by_mb[i] += 1
        nk = d["nccl_k"]
        res[n] = {
            "host_ms": d["host_ms"],
            "ddp_forwards": len(d["fwd"]),
            "ddp_forward_host_ms": _ms(sum(f["dur"] for f in d["fwd"])),
            "ddp_named_ranges": dict(sorted(d["ddp_named"].items())),
            "allreduce_ops": len(d["ar"]),
            "allreduce_op_host_ms": _ms(sum(a["dur"] for a in d["ar"])),
            "allreduce_op_threads": dict(d["ar_tid"]),
            "allreduce_per_micro_batch": by_mb,
            "allreduce_before_first_forward": before_first,
            "allreduce_rounds": sum(1 for c in by_mb if c),
            "nccl_host_ranges": table(d["nccl_host"]),
            "nccl_gpu_ranges": table(d["nccl_gpu"]),
            "nccl_kernels": sum(x[0] for x in nk.values()),
            "nccl_kernel_gpu_ms": _ms(sum(x[1] for x in nk.values())),
            "nccl_kernels_by_name": table(nk),
            "reducer_ranges": table(d["reducer"], 10),
            "gpu_work_under_reducer_or_allreduce": table(d["under"], 10),
            "memcpy_dtod": {"count": d["d2d"][0], "mib": round(d["d2d"][1] / 2**20, 1),
                            "gpu_ms": _ms(d["d2d"][2])},
            "kernels": d["kern"][0],
            "kernel_gpu_ms": _ms(d["kern"][1]),
            "optimizer_steps": d["opt_steps"],
        }
    return {"trace": path.rsplit("/", 1)[-1], "per_step": res}


#: the GEMM-like aten ops whose FLOPs gemm_signature counts from their Input Dims; the inner
#: attention ops are counted (without FLOPs) only where no _scaled_dot_product_* op holds them
GEMM_FLOP_OPS = re.compile(r"^aten::(mm|addmm|bmm|baddbmm|_scaled_dot_product_\w+)$")
SDPA_INNER = re.compile(r"^aten::_(flash|efficient|cudnn)_attention_(forward|backward)$")
BWD_MARK = re.compile(r"^autograd::engine::evaluate_function|CompiledFunctionBackward")
EAGER_FWD_OPS = ("aten::linear", "aten::layer_norm", "aten::embedding",
                 "aten::scaled_dot_product_attention")
GEMM_KERNEL = re.compile(r"gemm|nvjet|cutlass|xmma|cublas|triton_tem|flash|fmha|attn|"
                         r"attention|sdpa", re.I)


def gemm_op_flops(name: str, dims, causal: bool = True):
    """FLOPs of one GEMM-like aten op from its recorded Input Dims (None when the dims are not
    there or do not fit). mm [M,K] x [K,N], addmm (bias, [M,K], [K,N]), bmm / baddbmm
    [B,M,K] x [B,K,N]: 2*M*N*K (x B). SDPA forward (q, k, v first; q [B,H,T,D], k [B,H,S,D]):
    QK^T and PV, 4*B*H*T*S*D, halved when causal; SDPA backward (grad_out, q, k, v, ...): its
    gradient GEMMs, twice the forward's (a flash / cuDNN backward also recomputes QK^T: 2.5x
    the forward really runs; that recompute is not counted here)."""
    if not dims:
        return None
    try:
        op = name[len("aten::"):]
        if op == "mm":
            (m, k), (_, n) = dims[0], dims[1]
            return 2 * m * n * k
        if op == "addmm":
            (m, k), (_, n) = dims[1], dims[2]
            return 2 * m * n * k
        if op == "bmm":
            (b, m, k), (_, _, n) = dims[0], dims[1]
            return 2 * b * m * n * k
        if op == "baddbmm":
            (b, m, k), (_, _, n) = dims[1], dims[2]
            return 2 * b * m * n * k
        if op.startswith("_scaled_dot_product_"):
            bwd = op.endswith("_backward")
            q, kk = (dims[1], dims[2]) if bwd else (dims[0], dims[1])
            b, h, tq, dh = q
            s = kk[2]
            f = 4 * b * h * tq * s * dh
            if causal:
                f //= 2
            return 2 * f if bwd else f
    except (TypeError, ValueError, IndexError):
        return None
    return None


def gemm_signature(path: str, causal: bool = True) -> dict:
    """Per step: the GEMM-like aten ops (GEMM_FLOP_OPS: aten::mm, aten::addmm, aten::bmm,
    aten::baddbmm, aten::_scaled_dot_product_*; the outermost of nested matches only) on the
    forward side (the main thread: the thread of the ProfilerStep ranges) vs the backward side
    (another thread -- autograd's engine runs the backward of CUDA tensors on a thread of its
    own -- or inside an `autograd::engine::evaluate_function` / `CompiledFunctionBackward`
    range): count and FLOPs by name (gemm_op_flops over the recorded Input Dims), how many had
    no usable dims, and the ranges right above them (e.g. `## Call CompiledFxGraph ... ##`,
    `aten::linear`); the ratios backward / forward FLOPs of the matmul ops (mm/addmm/bmm) and
    of all of them (with SDPA); forward-type SDPA ops on the backward side (a recompute); the
    eager module ops (aten::linear, aten::layer_norm, ...) on each side; the kernels each side
    launched (by correlation): count, GPU ms, and those with GEMM/attention-like names
    (GEMM_KERNEL) by name with the op right above their launch."""
    t = _Trace(path)
    keep = lambda e: (e.get("cat") in RUNTIME_CATS  # noqa: E731
                      or (e.get("cat") == "cpu_op" and (GEMM_FLOP_OPS.search(e["name"])
                                                        or SDPA_INNER.search(e["name"])
                                                        or e["name"] in EAGER_FWD_OPS)))
    chains = t.enclosing(keep)

    def side(e, chain) -> str:
        if e["tid"] != t.main_tid or any(BWD_MARK.search(p["name"]) for p in chain):
            return "backward"
        return "forward"

    def new_side():
        return {"ops": Counter(), "flops": Counter(), "no_dims": Counter(), "parents": Counter(),
                "inner_sdpa": Counter(), "eager": Counter(), "fwd_sdpa": 0,
                "kern": [0, 0.0], "gk": defaultdict(lambda: [0, 0.0])}

    per = {n: {"host_ms": _ms(hi - lo), "forward": new_side(), "backward": new_side(),
               "under_compiled_backward": Counter()} for n, lo, hi in t.windows}
    for e in t.ev:
        cat, name = e.get("cat"), e["name"]
        if cat in ("kernel", "gpu_memcpy", "gpu_memset"):
            continue
        s = t.step_of(e)
        if s is None:
            continue
        if cat in RUNTIME_CATS:
            chain = chains.get(id(e), [])
            sd = per[s][side(e, chain)]
            for k in t.gpu_by_corr.get((e.get("args") or {}).get("correlation"), []):
                if k.get("cat") != "kernel":
                    continue
                sd["kern"][0] += 1
                sd["kern"][1] += k["dur"]
                if GEMM_KERNEL.search(k["name"]):
                    op = next((p["name"] for p in reversed(chain) if p.get("cat") == "cpu_op"),
                              chain[-1]["name"] if chain else None)
                    r = sd["gk"][f"{k['name'][:110]} < {op}"]
                    r[0] += 1
                    r[1] += k["dur"]
            continue
        if cat != "cpu_op":
            continue
        if name in EAGER_FWD_OPS:
            per[s][side(e, chains.get(id(e), []))]["eager"][name] += 1
            continue
        if id(e) not in chains:
            continue
        chain = chains[id(e)]
        if any(GEMM_FLOP_OPS.search(p["name"]) or SDPA_INNER.search(p["name"]) for p in chain):
            continue  # nested in another counted op
        sd = per[s][side(e, chain)]
        if any("CompiledFunctionBackward" in p["name"] for p in chain):
            per[s]["under_compiled_backward"][name] += 1
        parent = chain[-1]["name"] if chain else None
        if parent and parent.startswith("## Call CompiledFxGraph"):
            parent = "## Call CompiledFxGraph ... ##"
        sd["parents"][f"{name} < {parent}"] += 1
        if SDPA_INNER.search(name):
            sd["inner_sdpa"][name] += 1
            continue
        sd["ops"][name] += 1
        if name.startswith("aten::_scaled_dot_product_") and not name.endswith("_backward"):
            sd["fwd_sdpa"] += 1
        f = gemm_op_flops(name, (e.get("args") or {}).get("Input Dims"), causal)
        if f is None:
            sd["no_dims"][name] += 1
        else:
            sd["flops"][name] += f

    def mat(c: Counter) -> int:
        return sum(v for k, v in c.items() if not k.startswith("aten::_scaled_dot_product_"))

    res = {}
    for n, d in per.items():
        out = {"host_ms": d["host_ms"]}
        for sname in ("forward", "backward"):
            sd = d[sname]
            out[sname] = {
                "gemm_ops": dict(sorted(sd["ops"].items())),
                "gemm_ops_total": sum(sd["ops"].values()),
                "flops_by_op": dict(sorted(sd["flops"].items())),
                "matmul_flops": mat(sd["flops"]),
                "all_flops": sum(sd["flops"].values()),
                "ops_without_usable_dims": dict(sd["no_dims"]),
                "op_parents": dict(sd["parents"].most_common(10)),
                "inner_attention_ops_outermost": dict(sd["inner_sdpa"]),
                "forward_sdpa_ops": sd["fwd_sdpa"],
                "eager_module_ops": dict(sorted(sd["eager"].items())),
                "kernels": sd["kern"][0],
                "kernel_gpu_ms": _ms(sd["kern"][1]),
                "gemm_like_kernels": sum(x[0] for x in sd["gk"].values()),
                "gemm_like_kernel_gpu_ms": _ms(sum(x[1] for x in sd["gk"].values())),
                "gemm_like_kernels_by_name": {
                    k: {"count": x[0], "gpu_ms": _ms(x[1])}
                    for k, x in sorted(sd["gk"].items(), key=lambda kv: -kv[1][1])[:10]},
            }
        fw, bw = out["forward"], out["backward"]
        out["ratio_backward_to_forward_matmul_flops"] = (
            round(bw["matmul_flops"] / fw["matmul_flops"], 4) if fw["matmul_flops"] else None)
        out["ratio_backward_to_forward_all_flops"] = (
            round(bw["all_flops"] / fw["all_flops"], 4) if fw["all_flops"] else None)
        out["gemm_ops_under_compiled_backward"] = dict(sorted(d["under_compiled_backward"].items()))
        res[n] = out
    return {"trace": path.rsplit("/", 1)[-1], "per_step": res, "sdpa_causal_assumed": causal,
            "flops_rule": "mm/addmm 2*M*N*K, bmm 2*B*M*N*K; SDPA forward 4*B*H*T*S*D (/2 causal)"
            ", SDPA backward 2x that (its gradient GEMMs)"}

if __name__ == "__main__":
    _MODES = {"--compile": compile_signature, "--conv": conv_signature,
              "--memory": memory_signature, "--index": index_signature,
              "--ddp": ddp_signature, "--gemm": gemm_signature}
    if sys.argv[1:2] and sys.argv[1] in _MODES:
        for p in sys.argv[2:]:
            print(json.dumps(_MODES[sys.argv[1]](p), sort_keys=True))
        sys.exit(0)
    if sys.argv[1:2] == ["--zero-grad-copies"]:
        for p in sys.argv[2:]:
            print(json.dumps(zero_grad_and_copies(p), sort_keys=True))
        sys.exit(0)
    for p in sys.argv[1:]:
        print(json.dumps(signatures(p), sort_keys=True))
