"""The Python API for notebooks (traceanalyzer.notebook, docs/python-api.md): its names and
columns pinned, its DataFrames against the JSON report of the same trace, a step's networkx
graph against the report's critical path, the cell's HTML in a browser, and the example
notebook executed end to end."""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import networkx as nx
import polars as pl
import pytest

import traceanalyzer as ta
from tests.conftest import REPO, SAMPLES, corpus
from traceanalyzer.notebook import COLUMNS, Analysis

HEALTHY = SAMPLES / "train_bf16_healthy.json.gz"

#: The public columns, written out: changing one is a change of the API's contract (and of
#: docs/python-api.md), made here on purpose.
PINNED: dict[str, list[str]] = {
    "devices": [
        "rank",
        "device",
        "name",
        "window_ns",
        "busy_ns",
        "idle_ns",
        "idle_share",
        "host_wait_ns",
        "sync_ns",
        "launch_overhead_ns",
        "other_ns",
        "kernel_count",
        "kernel_ns",
        "comm_ns",
        "overlapped_comm_ns",
        "exposed_comm_ns",
        "overlap_share",
        "tc_ns",
        "gemm_ns",
        "tc_share_of_gemm",
        "model_flops_per_step",
        "achieved_tflops",
        "peak_tflops",
        "mfu",
    ],
    "steps": [
        "rank",
        "device",
        "name",
        "start_ns",
        "end_ns",
        "busy_ns",
        "idle_share",
        "kernel_count",
        "warmup",
        "host_wait_ns",
        "sync_ns",
        "launch_overhead_ns",
        "other_ns",
    ],
    "ranks": [
        "rank",
        "path",
        "world_size",
        "steps",
        "step_ns",
        "own_ns",
        "gpu_work_ns",
        "host_wait_ns",
        "host_between_steps_ns",
        "sync_ns",
        "wait_ns",
        "exposed_wait_ns",
        "crowded_wait_ns",
        "exposed_transfer_ns",
        "host_blocked_ns",
        "slowest_steps",
        "comm_bytes",
        "busbw_gbps",
        "host_data_loading_ns",
        "host_optimizer_ns",
        "host_backward_ns",
        "host_forward_ns",
        "host_other_ns",
    ],
    "kernels": ["name", "count", "total_ns", "share"],
    "gaps": [
        "rank",
        "device",
        "start_ns",
        "end_ns",
        "gap_ns",
        "cause",
        "before",
        "after",
        "sync_name",
    ],
    "syncs": ["rank", "name", "op", "site", "count", "steps", "per_step", "idle_ns"],
    "collectives": [
        "rank",
        "collective",
        "collectives",
        "matched",
        "comm_ns",
        "wait_ns",
        "transfer_ns",
        "exposed_wait_ns",
        "crowded_wait_ns",
        "exposed_transfer_ns",
        "bytes",
        "busbw_gbps",
    ],
    "operators": [
        "rank",
        "device",
        "op_name",
        "kind",
        "precision",
        "shape",
        "calls",
        "kernel_ns",
        "flops",
        "bytes",
        "tflops",
        "gbps",
        "share_of_roof",
        "source",
    ],
    "ncu": [
        "rank",
        "device",
        "name",
        "grid",
        "block",
        "kernel_class",
        "trace_kernels",
        "ncu_kernels",
        "kernel_ns",
        "trace_mean_ns",
        "ncu_mean_ns",
        "dram_bytes",
        "dram_source",
        "dram_gbps",
        "registers_per_thread",
        "shared_mem_bytes",
        "achieved_occupancy_share",
        "warps_active",
        "sm_throughput_share",
        "tensor_pipe_share",
    ],
}

CORPUS = corpus()


@pytest.fixture(scope="module")
def healthy() -> Analysis:
    return ta.analyze(HEALTHY)


def test_the_public_names() -> None:
    assert set(ta.__all__) == {"Analysis", "__version__", "analyze", "compare"}
    assert ta.Analysis is Analysis
    public = {n for n in dir(Analysis) if not n.startswith("_")}
    assert public >= {
        "verdict",
        "diagnoses",
        "context",
        "devices",
        "steps",
        "ranks",
        "kernels",
        "gaps",
        "syncs",
        "collectives",
        "operators",
        "ncu",
        "events",
        "critical_path",
        "report",
        "to_json",
        "write",
    }


def test_columns_are_pinned() -> None:
    assert {k: list(v) for k, v in COLUMNS.items()} == PINNED


def test_columns_are_the_documented_ones(healthy: Analysis) -> None:
    """Every DataFrame has COLUMNS' columns in order, and docs/python-api.md names each."""
    doc = (REPO / "docs" / "python-api.md").read_text(encoding="utf-8")
    for name, cols in COLUMNS.items():
        assert getattr(healthy, name).columns == list(cols), name
        for col in cols:
            if not col.startswith("host_") or col in ("host_wait_ns", "host_blocked_ns"):
                assert f"`{col}`" in doc, (name, col)


def test_dataframes_match_the_json_report(healthy: Analysis) -> None:
    doc = healthy.to_json()
    assert healthy.verdict == doc["verdict"]
    assert [f.rule for f in healthy.diagnoses] == [d["rule"] for d in doc["diagnoses"]]
    (dev,) = healthy.devices.iter_rows(named=True)
    (jd,) = doc["devices"]
    assert dev["busy_ns"] == jd["busy_ns"] and dev["idle_share"] == jd["idle_share"]
    assert dev["host_wait_ns"] == jd["idle_by_cause"]["host_wait"]
    assert dev["mfu"] == jd["flops"]["mfu"]
    top = healthy.kernels.head(len(doc["kernels"]["top"]))
    assert top.select("name", "count", "total_ns").rows() == [
        (k["name"], k["count"], k["total_ns"]) for k in doc["kernels"]["top"]
    ]
    assert healthy.kernels["total_ns"].sum() == doc["kernels"]["total_ns"]
    steps = healthy.steps.filter(~pl.col("warmup"))
    assert steps.select("name", "busy_ns").rows() == [
        (s["name"], s["busy_ns"]) for s in doc["steps"] if not s["warmup"]
    ]
    (rank,) = healthy.ranks.iter_rows(named=True)
    assert rank["own_ns"] == doc["ranks"][0]["own_ns"]
    assert rank["host_optimizer_ns"] == doc["ranks"][0]["host_phases"]["optimizer"]
    assert healthy.events.height > 0


def test_critical_path_graph_is_the_reports_path(healthy: Analysis) -> None:
    """The graph's longest path from the step's start (networkx, over its edge weights)
    equals the report's critical path of that step."""
    g = healthy.critical_path(rank=0)
    _check_graph(healthy, g, 0)


def _check_graph(a: Analysis, g: nx.DiGraph, rank: int) -> None:
    step = g.graph["step"]
    want = a.metrics.critical_path.steps.filter(
        (pl.col("rank") == rank) & (pl.col("step") == step)
    )["path_ns"].item()
    sink, source = g.graph["sink"], g.graph["source"]
    (job,) = [n for n, d in g.nodes(data=True) if d["kind"] == "job"]
    dist = {job: 0}
    for n in nx.topological_sort(g):
        if n not in dist:
            continue
        for _, v, d in g.out_edges(n, data=True):
            dist[v] = max(dist.get(v, -(10**18)), dist[n] + d["weight_ns"])
    assert dist[sink] - dist[source] == want == g.graph["path_ns"]
    on_path = sum(d["weight_ns"] for _, _, d in g.edges(data=True) if d["on_path"])
    assert on_path >= want  # the path's edges (the part before the step's start clipped)
    path = g.graph["path"]
    assert all(g.has_edge(u, v) for u, v in itertools.pairwise(path))
    assert path[-1] == sink
    kinds = {d["kind"] for _, d in g.nodes(data=True)}
    assert {"gpu_start", "gpu_end", "host", "step_start", "step_end", "job"} <= kinds
    names = [d["name"] for _, d in g.nodes(data=True) if d["kind"] == "gpu_start"]
    assert all(names)


@pytest.mark.skipif(CORPUS is None, reason="TRACEANALYZER_CORPUS not set")
def test_critical_path_graph_of_a_two_rank_job(tmp_path: Path) -> None:
    """Rank 0 of the host-straggler job waits for rank 1: its step's graph crosses into rank
    1's work through the collectives' arrivals, and is the report's path all the same."""
    job = tmp_path / "job"
    job.mkdir()
    for r in (0, 1):
        name = f"ddp_host_straggler_rank{r}.json.gz"
        (job / name).symlink_to(CORPUS / "h200x2" / name)  # type: ignore[operator]
    a = ta.analyze(job, jobs=1)
    assert a.ranks.height == 2 and a.collectives.height == 2
    g = a.critical_path(rank=0)
    _check_graph(a, g, 0)
    assert any(d["kind"] == "arrival" for _, d in g.nodes(data=True))
    owners = {d["owner"] for _, _, d in g.edges(data=True) if d["on_path"]}
    assert owners == {0, 1}


def test_write_compare_and_errors(healthy: Analysis, tmp_path: Path) -> None:
    out = tmp_path / "r.md"
    healthy.write(out)
    assert out.read_text(encoding="utf-8").startswith("## GPU trace report")
    other = ta.analyze(SAMPLES / "tiny_kernels.json.gz")
    diff = ta.compare(healthy, other)
    assert diff["metrics"]["step_ns"]["before"] == healthy.verdict["step_ns"]
    assert "diagnoses_appeared" in diff and "diagnoses_disappeared" in diff
    with pytest.raises(ValueError, match="was not analysed"):
        healthy.critical_path(rank=0, step=10**6)


def test_cell_html_is_the_pages_parts(healthy: Analysis) -> None:
    html = healthy._repr_html_()
    assert html.startswith('<div class="traceanalyzer">')
    for part in ('id="verdict"', 'id="diagnoses"', 'id="timeline"', "<svg"):
        assert part in html
    assert "<body" not in html and "<script" not in html
    # the page's style is scoped to the cell: no bare body or heading rule
    style = html[html.index("<style>") : html.index("</style>")]
    assert "\nbody " not in style and ".traceanalyzer h2" in style


BROWSER = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(BROWSER is None, reason="chromium is not installed")
def test_cell_html_in_a_browser(healthy: Analysis, tmp_path: Path) -> None:
    """The cell's HTML in headless Chromium, inside a page standing in for a notebook: it
    renders the verdict and the findings, logs no error, and leaves the page's own heading
    style alone."""
    host = tmp_path / "cell.html"
    host.write_text(
        "<!DOCTYPE html><html><head><meta charset='utf-8'>"
        "<style>h2.notebook { font-size: 40px; }</style></head><body>"
        "<h2 class='notebook' id='outside'>notebook</h2>"
        f"{healthy._repr_html_()}</body></html>",
        encoding="utf-8",
    )
    profile = tempfile.mkdtemp(prefix="profile-", dir=tmp_path)
    run = subprocess.run(
        [
            BROWSER,  # type: ignore[list-item]
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--enable-logging=stderr",
            f"--user-data-dir={profile}",
            "--dump-dom",
            host.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert 'id="verdict"' in run.stdout and "TA001" in run.stdout
    assert not [line for line in run.stderr.splitlines() if ":CONSOLE" in line]


def test_example_notebook_runs() -> None:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.read(REPO / "docs" / "examples" / "post-mortem.ipynb", as_version=4)
    client = nbclient.NotebookClient(
        nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(REPO)}}
    )
    client.execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    html = [o for o in outputs if "text/html" in o.get("data", {})]
    assert any('id="verdict"' in o["data"]["text/html"] for o in html)


def test_compare_is_the_function_whatever_was_imported() -> None:
    """The CLI imports the comparison module; `ta.compare` stays the function."""
    import traceanalyzer.cli
    import traceanalyzer.comparison  # noqa: F401

    assert callable(ta.compare) and ta.compare.__module__ == "traceanalyzer.notebook"


def test_findings_show_as_a_table(healthy: Analysis) -> None:
    html = healthy.diagnoses._repr_html_()
    assert html.startswith("<table>") and "TA001" in html and "saves per step" in html
    assert healthy.diagnoses[0].rule == healthy.to_json()["diagnoses"][0]["rule"]


def _readme_lines() -> list[str]:
    """The README's notebook lines (its first python block after "In a notebook")."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    block = text.split("In a notebook", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    return block.splitlines()


@pytest.mark.parametrize("guarded", [False, True])
def test_the_readme_lines_run_as_a_plain_script(tmp_path: Path, guarded: bool) -> None:
    """The README's notebook lines, pasted into a script without a `__main__` guard (and
    with one), run on a folder of ranks with every core: the workers never run the script
    again, and the answer is the same."""
    lines = [
        line.replace('"run/"', repr(str(REPO / "sample_traces" / "sampled_2rank")))
        for line in _readme_lines()
        if not line.startswith("a  #")  # the notebook's display line
    ]
    assert any("ta.analyze(" in line for line in lines)
    body = [*lines, 'print("headline:", a.verdict["headline"])']
    if guarded:
        body = ['if __name__ == "__main__":', *("    " + line for line in body)]
    script = tmp_path / "plain.py"
    script.write_text("\n".join(body) + "\n", encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("headline:") == 1
    expected = ta.analyze(REPO / "sample_traces" / "sampled_2rank", jobs=1).verdict["headline"]
    assert f"headline: {expected}" in done.stdout
