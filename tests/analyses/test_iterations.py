"""Iterations from what repeats (`analyses/timeline/iterations.py`): a trace without step
markers whose calls repeat is analysed per iteration, its slow first call left out of the
steady prices and said so; a single pass is never split into its layers."""

from __future__ import annotations

import gzip
import itertools
import json
import re
from pathlib import Path

import polars as pl
import pytest

from traceanalyzer import api
from traceanalyzer.analyses.timeline.iterations import repeated_calls
from traceanalyzer.report import Report
from traceanalyzer.rules.examples import (
    Event,
    cpu_op,
    device_properties,
    launched,
    synchronize,
    write_example,
)

GPU = Path(__file__).resolve().parents[1] / "data" / "gpu"


def _calls(
    first_gap_us: float, n: int = 3, region: str = "Torch-Compiled Region: 0/0"
) -> list[Event]:
    """`n` calls of a compiled region, each 40 kernels of 80 µs launched 125 µs apart (about
    1.8 ms of GPU idle a call) and a sync; the first call holds the host `first_gap_us`
    longer before its first launch (a cold library call: 43 ms against 5 ms)."""
    events: list[Event] = [device_properties()]
    t, corr = 100.0, 1
    for c in range(n):
        start = t
        t += first_gap_us if c == 0 else 0
        for k in range(40):
            events += launched(t + k * 125, t + k * 125 + 10, 80, corr, "triton_poi_fused_0")
            corr += 1
        t += 40 * 125
        events.append(cpu_op(start, t - start, region))
        events.append(synchronize(t, 50))
        t += 60
    return events


def test_a_slow_first_call_is_left_out_and_prices_are_per_iteration(tmp_path: Path) -> None:
    """The issue's compiled ResNet without step markers: three calls, the first 43 ms, the
    others 5 ms. The calls are the iterations, the first is warm-up, and no price is above
    the steady idle of a call (it was "launch-bound, saves 37.6 ms")."""
    path = write_example(_calls(38_000), tmp_path, "compiled_calls")
    rep = api.report(path)
    doc = rep.to_json_dict()
    assert doc["window"]["basis"] == "iterations"
    assert doc["window"]["iterations_from"] == "Torch-Compiled Region: 0/0"
    assert [s["name"] for s in doc["window"]["excluded_steps"]] == ["iteration 1"]
    steady = [s for s in doc["steps"] if not s["warmup"]]
    assert len(steady) == 2
    assert rep.verdict is not None and 4.9e6 <= rep.verdict["step_ns"] <= 5.3e6
    idle = sum(d["idle_ns"] for d in doc["devices"]) / len(steady)
    assert 1.5e6 <= idle <= 2.0e6  # the steady idle of a call
    for f in doc["diagnoses"]:
        assert f["impact_per"] == "iteration"
        assert f["impact_ns"] is None or f["impact_ns"] <= idle, f["rule"]
    assert any("repeats of Torch-Compiled Region" in f["message"] for f in doc["diagnoses"])
    for fmt in ("terminal", "md"):
        out = tmp_path / f"r.{fmt}"
        api.write(rep, fmt, str(out))
        text = out.read_text(encoding="utf-8")
        start = text.index("Diagnoses")
        end = min(
            i for i in (text.find("Critical path", start), text.find("###", start + 12)) if i > 0
        )
        said = text[:start].split("window")[0] + text[start:end]
        assert "per step" not in said and "/step" not in said, fmt
        assert "/iteration" in text or "per iteration" in text, fmt
    assert "iteration" in rep.verdict["headline"] and "per step" not in rep.verdict["headline"]


#: Words about steps that stay in a report without them: the advice to mark steps, the
#: option that keeps warm-up periods, the absence of markers and the glossary's pointer.
_ABOUT_MARKERS = re.compile(
    r"prof\.step|step_N|wrap steps|--all-steps|step markers|step time, own", re.I
)


def test_every_heading_says_iteration_where_there_are_no_steps(tmp_path: Path) -> None:
    """Tables and headings of every format name the periods iterations (the tiles, the
    critical path, the sync sites' rate, the ranks), never steps: against a word scan of each
    report's lines, outside the advice and the notes about markers."""
    path = write_example(_calls(38_000), tmp_path, "compiled_calls")
    rep = api.report(path)
    for fmt in ("terminal", "md", "html"):
        out = tmp_path / f"r.{fmt}"
        api.write(rep, fmt, str(out))
        text = out.read_text(encoding="utf-8")
        if fmt == "html":  # the page's own words: no scripts, data, rule pages or glossary
            text = text[: text.index('id="rules"')]
            text = re.sub(r"<script.*?</script>|<style.*?</style>", "", text, flags=re.S)
            text = re.sub(r"<[^>]+>", "\n", text)
        said = [line for line in text.splitlines() if re.search(r"\bsteps?\b", line, re.IGNORECASE)]
        stray = [line for line in said if not _ABOUT_MARKERS.search(line)]
        assert stray == [], (fmt, stray)
    terminal = (tmp_path / "r.terminal").read_text(encoding="utf-8")
    assert "Iterations (each device's GPU tile of each iteration" in terminal
    assert "per iteration" in terminal.split("Host syncs")[1].splitlines()[1]
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert "<h2>Iterations</h2>" in page and "<th>iteration</th>" in page


def test_iterations_tile_from_each_call_to_the_next(tmp_path: Path) -> None:
    """Against a plain loop: iteration k runs from call k's start to call k+1's; the last
    ends with its call."""
    events = _calls(0, n=4)
    tl = api.load(write_example(events, tmp_path, "calls"))
    found, call = repeated_calls(tl)
    assert call == "Torch-Compiled Region: 0/0"
    starts = sorted(
        round(e["ts"] * 1000) for e in events if e.get("name") == "Torch-Compiled Region: 0/0"
    )
    ends = [*starts[1:], starts[-1] + 40 * 125 * 1000]
    got = found.sort("step")
    base = int(tl.events.filter(pl.col("name") == "Torch-Compiled Region: 0/0")["start_ns"].min())
    offset = base - starts[0]
    assert got["step"].to_list() == [1, 2, 3, 4]
    assert got["name"].to_list() == [f"iteration {k}" for k in (1, 2, 3, 4)]
    assert [s - offset for s in got["start_ns"].to_list()] == starts
    assert [e - offset for e in got["end_ns"].to_list()] == ends


def test_one_pass_is_not_split_into_its_layers(tmp_path: Path) -> None:
    """Twelve layers of one forward pass, each a user range named alike, inside one range of
    the whole pass: not a loop (the enclosing range holds them all)."""
    events: list[Event] = [device_properties()]
    t, corr = 100.0, 1
    start = t
    for _ in range(12):
        layer = t
        for k in range(5):
            events += launched(t + k * 30, t + k * 30 + 5, 25, corr, "gemm_kernel")
            corr += 1
        t += 160
        events.append({**cpu_op(layer, t - layer, "## layer ##"), "cat": "user_annotation"})
    events.append({**cpu_op(start, t - start + 10, "## forward ##"), "cat": "user_annotation"})
    tl = api.load(write_example(events, tmp_path, "one_pass"))
    found, call = repeated_calls(tl)
    assert found.height == 0 and call is None
    assert api.report(tl.meta.path).window["basis"] == "trace"


@pytest.mark.parametrize("name", ["compiled.json.gz", "graph_breaks_per_step.json.gz"])
def test_a_recorded_loop_without_its_markers(name: str, tmp_path: Path) -> None:
    """A recorded compiled training loop (H200) with its ProfilerStep markers taken out:
    its compiled calls repeat, and the iterations they give agree with the marked steps on
    the step time and the top price (within 5 %)."""
    with gzip.open(GPU / name) as f:
        doc = json.loads(f.read())
    marked = api.report(GPU / name)
    doc["traceEvents"] = [
        e for e in doc["traceEvents"] if not str(e.get("name", "")).startswith("ProfilerStep#")
    ]
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(doc))
    found = api.report(bare)
    assert found.window["basis"] == "iterations"
    _agrees_with_the_marked_steps(found, marked)


#: A step of 40 kernels without a host range around it: `layerN_gemm` four times over, an
#: activation every third, then the optimizer's kernel (names that recur inside the step, as
#: a model's layers do, and one that comes once a step).
CYCLE = [f"layer{k % 4}_gemm" if k % 3 else f"act_{k}" for k in range(39)] + ["sgd_step"]


def _cycles(first_gap_us: float, n: int = 4, names: list[str] = CYCLE) -> list[Event]:
    """`n` steps of `names`, each kernel 80 µs launched 125 µs apart, a sync after each
    step; no host range at all (a program under Nsight without NVTX). The first step holds
    the host `first_gap_us` after its third launch (a cold library call)."""
    events: list[Event] = [device_properties()]
    t, corr = 100.0, 1
    for c in range(n):
        for k, name in enumerate(names):
            if c == 0 and k == 3:
                t += first_gap_us
            events += launched(t, t + 10, 80, corr, name)
            corr += 1
            t += 125
        events.append(synchronize(t, 50))
        t += 60
    return events


def test_a_cycle_of_kernels_is_the_loop_where_no_host_range_marks_it(tmp_path: Path) -> None:
    """No step marker and no call range: the kernels' cycle gives the iterations, the cold
    first is left out, and no price is above a steady iteration's idle."""
    rep = api.report(write_example(_cycles(38_000), tmp_path, "cycles"))
    doc = rep.to_json_dict()
    assert doc["window"]["basis"] == "iterations"
    assert doc["window"]["iterations_from"] == "a cycle of 40 kernels from act_0"
    assert [s["name"] for s in doc["window"]["excluded_steps"]] == ["iteration 1"]
    assert rep.verdict is not None and 4.9e6 <= rep.verdict["step_ns"] <= 5.2e6
    steady = [s for s in doc["steps"] if not s["warmup"]]
    idle = sum(d["idle_ns"] for d in doc["devices"]) / len(steady)
    for f in doc["diagnoses"]:
        assert f["impact_per"] == "iteration"
        assert f["impact_ns"] is None or f["impact_ns"] <= idle, f["rule"]


def test_cycles_start_at_each_run_of_the_name_against_a_loop(tmp_path: Path) -> None:
    """Against a plain loop over the events: iteration k starts at the launch of the k-th
    run of the cycle's name (the first at the first launch), ends at the next's; the last
    ends a median iteration after its start, as no kernel follows it."""
    events = _cycles(0)
    tl = api.load(write_example(events, tmp_path, "cycles"))
    found, what = repeated_calls(tl)
    assert what == "a cycle of 40 kernels from act_0"
    kernel_corr = {e["args"]["correlation"]: e["name"] for e in events if e.get("cat") == "kernel"}
    launches = sorted(
        (round(e["ts"] * 1000), kernel_corr[e["args"]["correlation"]])
        for e in events
        if e.get("cat") == "cuda_runtime" and e["args"].get("correlation") in kernel_corr
    )
    starts = [t for t, name in launches if name == "act_0"]
    starts[0] = launches[0][0]
    median = sorted(b - a for a, b in itertools.pairwise(starts[1:]))[1]
    ends = [*starts[1:], starts[-1] + median]
    base = int(tl.events.filter(pl.col("kind") == "runtime")["start_ns"].min())
    offset = base - min(round(e["ts"] * 1000) for e in events if e.get("cat") == "cuda_runtime")
    got = found.sort("step")
    assert got["name"].to_list() == [f"iteration {k}" for k in (1, 2, 3, 4)]
    assert [s - offset for s in got["start_ns"].to_list()] == starts
    assert [e - offset for e in got["end_ns"].to_list()] == ends


def test_what_is_not_a_cycle(tmp_path: Path) -> None:
    """No iterations from one kernel relaunched (a call, not a step's work), nor from a loop
    whose copies are most of the GPU's time (its loop is not the program); a name run twice
    a step does not cut it in two: the step, cut at its once-a-step name, is the cycle."""
    one = _cycles(0, n=6, names=["saxpy"])
    copies = _cycles(0, n=4)
    t = max(e["ts"] + e.get("dur", 0) for e in copies if "ts" in e) + 10
    for k in range(3):
        copies += launched(t, t + 5, 20_000, 10_000 + k, "Memcpy HtoD (Pageable -> Device)")
        copies[-1]["cat"] = "gpu_memcpy"
        t += 20_100
    twice = _cycles(0, n=4, names=[*CYCLE[:5], "sgd_step", *CYCLE[5:]])
    for name, events in (("one", one), ("copies", copies), ("twice", twice)):
        tl = api.load(write_example(events, tmp_path, name))
        found, what = repeated_calls(tl)
        if name == "twice":  # the cycle is the step, cut at its once-a-step name
            assert what == "a cycle of 41 kernels from act_0", name
            continue
        assert found.height == 0 and what is None, name


#: Host ranges that mark steps or calls, taken out of a recorded loop.
_MARKS = re.compile(r"^(?:ProfilerStep#|Torch-Compiled Region: |nn\.Module: |CompiledFunction$)")


@pytest.mark.parametrize(
    "name", ["healthy_gpu_bound.json.gz", "fp32_no_tc.json.gz", "host_sync.json.gz"]
)
def test_a_recorded_loop_without_any_host_range(name: str, tmp_path: Path) -> None:
    """A recorded eager training loop (H100) with its step markers and every user range
    taken out: its kernels' cycle gives iterations that agree with the marked steps on the
    step time, the verdict and the top price (within 5 %)."""
    with gzip.open(GPU / name) as f:
        doc = json.loads(f.read())
    marked = api.report(GPU / name)
    doc["traceEvents"] = [
        e
        for e in doc["traceEvents"]
        if not _MARKS.search(str(e.get("name", "")))
        and e.get("cat") not in ("user_annotation", "gpu_user_annotation")
    ]
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(doc))
    found = api.report(bare)
    assert found.window["basis"] == "iterations"
    assert str(found.window["iterations_from"]).startswith("a cycle of ")
    _agrees_with_the_marked_steps(found, marked)


def _agrees_with_the_marked_steps(found: Report, marked: Report) -> None:
    """The iterations agree with the marked steps on the verdict's bound, the step time and
    the top finding's rule and price (within 5 %)."""
    assert marked.verdict is not None and found.verdict is not None
    assert found.verdict["bound_by"] == marked.verdict["bound_by"]
    step, truth = found.verdict["step_ns"], marked.verdict["step_ns"]
    assert abs(step - truth) <= 0.05 * truth
    top, want = found.findings[0], marked.findings[0]
    assert top.rule == want.rule and top.impact_ns is not None and want.impact_ns is not None
    assert abs(top.impact_ns - want.impact_ns) <= 0.05 * want.impact_ns
