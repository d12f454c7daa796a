"""Real traces: the tool's numbers against an independent plain-loop computation.

Runs on `sample_traces/` always, and on every Chrome trace of the shared corpus when
TRACEANALYZER_CORPUS points at it (CI sets it). Traces that must be refused are checked
for a clear refusal instead.
"""

from __future__ import annotations

import atexit
import re
import shutil
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from tests import reference
from tests.conftest import SAMPLES, corpus
from traceanalyzer.analyses import analyze
from traceanalyzer.analyses.timeline.iterations import repeated_calls
from traceanalyzer.errors import NoGpuEventsError
from traceanalyzer.readers import read

#: Corpus traces that hold no GPU timeline, and the words their refusal must contain.
REFUSED = {
    "cpu_only": "CPU-only trace",
    "cupti_profiler_a100": "cuda_profiler_range",
    "mtia_inference": "mtia_ccp_events",
}


#: Job folders made of a folder that holds several jobs' rank files (`h200x2/`: one folder,
#: six two-rank jobs), removed when the tests end.
_JOBS = Path(tempfile.mkdtemp(prefix="traceanalyzer-jobs-"))
atexit.register(shutil.rmtree, _JOBS, True)


def _jobs_of(folder: Path, files: list[Path]) -> list[Path]:
    """The folder as one job, or, where its files' names tell several jobs apart (the same
    name but for the rank number), one folder of links per job."""
    by_job: dict[str, list[Path]] = {}
    for f in files:
        by_job.setdefault(re.sub(r"rank\d+", "rank", f.name), []).append(f)
    if len(by_job) == 1:
        return [folder]
    jobs = []
    for name, members in sorted(by_job.items()):
        job = _JOBS / folder.name / name.split(".")[0].replace("_rank", "")
        job.mkdir(parents=True, exist_ok=True)
        for f in members:
            link = job / f.name
            if not link.exists():
                link.symlink_to(f)
        jobs.append(job)
    return jobs


def _runs() -> list[Path]:
    """One entry per run: a single file, or a folder holding several ranks of one job."""
    roots = [SAMPLES]
    found = corpus()
    if found is not None:
        roots.append(found)
    runs: list[Path] = []
    for root in roots:
        folders = sorted({p.parent for p in root.rglob("*.json.gz")})
        for folder in folders:
            files = sorted(folder.glob("*.json.gz"))
            ranked = len(files) > 1 and all(
                reference.rank_of({}, f) != 0 or "0" in f.name for f in files
            )
            runs.extend(_jobs_of(folder, files) if ranked else files)
    return runs


def _expected(
    run: Path, iterated: bool = False, left_out: frozenset[tuple[int, int]] = frozenset()
) -> dict[tuple[int, int], dict[str, Any]]:
    """The plain loops' numbers; `iterated`: over the iterations the tool found from what
    repeats (a trace without step markers), but those it left out as warm-up or outliers
    (`left_out`: rank, step), the windows then judged by the loops."""
    files = sorted(run.glob("*.json.gz")) if run.is_dir() else [run]
    out: dict[tuple[int, int], dict[str, Any]] = {}
    for f in files:
        doc = reference.load(f)
        rank = reference.rank_of(doc, f)
        found = repeated_calls(read(f))[0] if iterated else None
        spans = (
            {
                r["step"]: (r["start_ns"], r["end_ns"])
                for r in found.iter_rows(named=True)
                if (r["rank"], r["step"]) not in left_out
            }
            if found is not None
            else None
        )
        numbers = reference.device_numbers(doc, rank=rank, iterations=spans)
        causes = reference.idle_causes(doc, numbers, rank=rank)
        comm = reference.comm_overlap(doc, numbers, rank=rank)
        for key, value in numbers.items():
            value["causes"] = causes[key]
            value["comm"] = comm.get(key, (0, 0))
        out.update(numbers)
    return out


@pytest.mark.parametrize("run", _runs(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_numbers_match_a_plain_loop(run: Path) -> None:
    refused = next((words for key, words in REFUSED.items() if key in str(run)), None)
    if refused:
        with pytest.raises(NoGpuEventsError, match=refused):
            analyze(read(run))
        return
    metrics = analyze(read(run))
    left_out = frozenset(metrics.steps.excluded.select("rank", "step").iter_rows())
    expected = _expected(run, iterated=metrics.basis == "iterations", left_out=left_out)
    got = {(r["rank"], r["device"]): r for r in metrics.devices.rows()}
    assert set(got) == set(expected)
    for key, exp in expected.items():
        g = got[key]
        for field in ("window_ns", "busy_ns", "kernel_count", "kernel_ns"):
            assert g[field] == exp[field], (key, field)
        assert g["idle_share"] == pytest.approx(exp["idle_share"], abs=1e-12)
        assert {c: g[f"{c}_ns"] for c in exp["causes"]} == exp["causes"], key
        assert (g["comm_ns"], g["overlapped_comm_ns"]) == exp["comm"], key
        assert metrics.basis == exp["basis"]
        steps = metrics.steps.steady.filter(
            (metrics.steps.steady["rank"] == key[0]) & (metrics.steps.steady["device"] == key[1])
        )
        assert steps.select("step", "start_ns", "end_ns", "busy_ns").to_dicts() == exp["steps"]


def test_known_workloads_show_what_their_readme_says() -> None:
    bf16 = analyze(read(SAMPLES / "train_bf16_healthy.json.gz"))
    d = bf16.devices.summary.row(0, named=True)
    assert bf16.steps.steady.height == 4
    assert 0.60 < 1 - d["idle_share"] < 0.66  # "busy about 63 %"
    tiny = analyze(read(SAMPLES / "tiny_kernels.json.gz"))
    t = tiny.devices.summary.row(0, named=True)
    assert t["kernel_count"] == 6000
    assert t["idle_share"] > 0.93  # "idle about 95 %"
    assert tiny.kernels.histogram.filter(tiny.kernels.histogram["count"] > 0)["hi_ns"].max() <= 2000


#: DeepSeek's public DualPipe trace (deepseek-ai/profile-data `train.json`), wherever the
#: corpus keeps it: DeepEP all-to-all kernels (`dpsk::ep::internode::dispatch/combine/...`)
#: on their own stream, beside the MoE layers' compute.
_DEEPSEEK = re.compile(r"deepseek|dualpipe|profile.data", re.IGNORECASE)
_DEEPEP = re.compile(r"dpsk::ep::|deep_ep::")


def _deepseek_traces() -> list[Path]:
    root = corpus()
    if root is None:
        return []
    found = [p for p in root.rglob("*.json*") if _DEEPSEEK.search(str(p.relative_to(root)))]
    return sorted(p for p in found if p.suffix in {".json", ".gz"})


def test_deepseek_deepep_all_to_all_is_communication() -> None:
    """The DeepEP kernels' count and time, against a plain loop over the raw JSON events."""
    traces = _deepseek_traces()
    if not traces:
        pytest.skip("DeepSeek's DualPipe trace (deepseek-ai/profile-data) is not in the corpus")
    for path in traces:
        doc = reference.load(path)
        rank = reference.rank_of(doc, path)
        numbers = reference.device_numbers(doc, rank=rank)
        deepep: dict[int, list[tuple[int, int]]] = defaultdict(list)
        comm: dict[int, list[tuple[int, int]]] = defaultdict(list)
        for ev in doc["traceEvents"]:
            if not isinstance(ev, dict) or str(ev.get("cat", "")).lower() != "kernel":
                continue
            name = str(ev.get("name", ""))
            if ev.get("ph") != "X" or not reference.COMM.search(name):
                continue
            args = ev.get("args") or {}
            dev = int(args.get("device", ev.get("pid")))
            lo, hi = numbers[(rank, dev)]["start_ns"], numbers[(rank, dev)]["end_ns"]
            start = reference.ns(ev["ts"])
            end = start + reference.ns(ev["dur"])
            if min(end, hi) > max(start, lo):
                comm[dev].append((max(start, lo), min(end, hi)))
                if _DEEPEP.search(name):
                    deepep[dev].append((max(start, lo), min(end, hi)))
        assert deepep, path
        metrics = analyze(read(path))
        got = {r["device"]: r["comm_ns"] for r in metrics.devices.rows()}
        for dev, spans in comm.items():
            assert got[dev] == reference.union_length(spans), (path, dev)
            assert got[dev] >= reference.union_length(deepep[dev]) > 0 or dev not in deepep
        a2a = metrics.communication.collectives.filter(
            metrics.communication.collectives["collective"] == "all_to_all"
        )
        assert int(a2a["count"].sum()) >= sum(len(v) for v in deepep.values()), path
