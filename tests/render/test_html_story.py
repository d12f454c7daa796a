"""The HTML page tells the story (issue 17): communication and waiting apart from compute,
step boundaries, a per-step chart, a timeline link per finding, bandwidth, matmul shapes and
memory growth, and evidence as labelled values with units."""

from __future__ import annotations

import dataclasses
import itertools
import re

import pytest

from tests.conftest import REPO, SAMPLES
from tests.render.helpers import parse, render
from traceanalyzer import api
from traceanalyzer.render import figures
from traceanalyzer.render.html import (
    SPLIT_PARTS,
    device_split,
    evidence_label,
    evidence_rows,
    evidence_value,
)
from traceanalyzer.report import Report
from traceanalyzer.rules.base import Scope

TWO_RANKS = SAMPLES / "sampled_2rank"
LEAK = REPO / "tests" / "data" / "gpu" / "leak.json.gz"


@pytest.fixture(scope="module")
def healthy() -> tuple[Report, str]:
    rep = api.report(SAMPLES / "train_bf16_healthy.json.gz")
    return rep, render(rep)


@pytest.fixture(scope="module")
def two_ranks() -> tuple[Report, str]:
    rep = api.report(TWO_RANKS)
    return rep, render(rep)


def _ids(page: str) -> set[str]:
    return {a["id"] or "" for _t, a in parse(page).tags if "id" in a}


def _legend(page: str, legend_id: str) -> dict[str, str]:
    block = re.search(rf'<ul class="legend" id="{legend_id}">(.*?)</ul>', page, re.S)
    assert block is not None, legend_id
    return dict(re.findall(r'<li data-key="([^"]+)">.*?</span>([^<]+)</li>', block.group(1)))


def test_communication_and_waiting_have_their_own_colours(two_ranks: tuple[Report, str]) -> None:
    _rep, page = two_ranks
    legend = _legend(page, "device-split-legend")
    assert legend["compute"] == "compute"
    assert "communication" in legend["comm_exposed"]
    assert "communication" in legend["comm_overlapped"]
    assert "waiting for other ranks" in legend["comm_wait"]
    colours = {figures.COLOURS[k] for k in ("compute", "comm_exposed", "comm_wait")}
    assert len(colours) == 3  # three different colours
    assert 'id="device-split"' in page
    # the timeline's bins carry communication and waiting: three layers where busy was one
    timeline = _legend(page, "timeline-legend")
    assert "busy" not in timeline
    assert timeline["compute"] == "compute" and timeline["comm"] == "communication"
    assert "waiting for other ranks" in timeline["comm_wait"]


def test_device_split_shows_the_waiting_rank(two_ranks: tuple[Report, str]) -> None:
    rep, _page = two_ranks
    labels, parts = device_split(rep)
    assert list(parts) == list(SPLIT_PARTS) and len(labels) == len(rep.devices) == 2
    waits = {x["rank"]: x["wait_ns"] for x in rep.communication["ranks"]}
    for i, d in enumerate(rep.devices):
        total = sum(parts[k][i] for k in SPLIT_PARTS)
        assert total == pytest.approx(d["window_ns"] / 1e6, rel=1e-6)
        # one device per rank: the rank's whole wait is drawn, inside the exposed part
        assert parts["comm_wait"][i] == pytest.approx(waits[d["rank"]] / 1e6)
        assert parts["comm_wait"][i] + parts["comm_exposed"][i] == pytest.approx(
            d["exposed_comm_ns"] / 1e6
        )
        assert parts["compute"][i] == pytest.approx((d["busy_ns"] - d["comm_ns"]) / 1e6)


def test_timeline_splits_communication_when_the_bins_do() -> None:
    base = {"rank": 0, "device": 0, "bin": 0, "start_ns": 0, "end_ns": 100, "busy_ns": 80,
            "host_wait_ns": 20, "sync_ns": 0, "launch_overhead_ns": 0, "other_ns": 0}  # fmt: skip
    assert figures.timeline_layers([base])[0] == "busy"
    split = {**base, "comm_ns": 50, "comm_wait_ns": 30}
    layers = figures.timeline_layers([split])
    assert layers[:3] == ["compute", "comm", "comm_wait"]
    svg = figures.to_svg(figures.timeline_figure([split], [(0, 0, "r0")], 0))
    for k in ("compute", "comm", "comm_wait"):
        assert figures.COLOURS[k] in svg


def test_step_boundaries_are_marked(healthy: tuple[Report, str]) -> None:
    rep, page = healthy
    assert rep.steps
    ids = _ids(page)
    for d in rep.devices:
        assert f"step-boundaries-r{d['rank']}-d{d['device']}" in ids
        assert figures.strip_id(d["rank"], d["device"]) in ids
    assert "step" in _legend(page, "timeline-legend")


def test_per_step_charts(healthy: tuple[Report, str]) -> None:
    _rep, page = healthy
    for section in ("step-chart", "step-bounds"):
        block = re.search(rf'id="{section}".*?<figure>(.*?)</figure>', page, re.S)
        assert block is not None and "<svg" in block.group(1), section


def test_every_finding_links_to_the_timeline(two_ranks: tuple[Report, str]) -> None:
    rep, page = two_ranks
    ids = _ids(page)
    for n, f in enumerate(rep.findings, start=1):
        row = re.search(rf'<tr id="finding-{n}">(.*?)</tr>', page, re.S)
        assert row is not None
        link = re.search(r'<a class="timeline-link" href="#([^"]+)"', row.group(1))
        assert link is not None, n
        assert link.group(1) in ids
        if f.scope.rank is not None and f.scope.device is not None:
            assert link.group(1) == figures.strip_id(f.scope.rank, f.scope.device)


def test_a_finding_with_a_time_span_is_outlined(healthy: tuple[Report, str]) -> None:
    rep, _page = healthy
    lo = rep.window["start_ns"]
    assert lo is not None
    first = dataclasses.replace(
        rep.findings[0], scope=Scope(0, 0, (lo + 1_000_000, lo + 9_000_000))
    )
    page = render(dataclasses.replace(rep, findings=(first, *rep.findings[1:])))
    assert "timeline-finding-1" in _ids(page)
    assert 'href="#timeline-finding-1"' in page
    assert "finding" in _legend(page, "timeline-legend")


def test_evidence_is_labelled_with_units(two_ranks: tuple[Report, str]) -> None:
    rep, page = two_ranks
    for fold in re.findall(r'<dl class="evidence">(.*?)</dl>', page, re.S):
        labels = re.findall(r"<dt>(.*?)</dt>", fold)
        assert labels
        assert not [x for x in labels if "_" in x]  # no raw keys
        assert "{" not in fold and "[" not in fold  # no JSON blobs
        assert re.search(r"\d\.\d+e-\d", fold) is None  # no scientific notation
    keys = {k for f in rep.findings for k in f.evidence}
    assert "impact_share_of_step" in keys and "Impact, share of a step" in page


def test_evidence_values() -> None:
    assert evidence_value("impact_share_of_step", 4.266e-05) == "< 0.1 %"
    assert evidence_value("host_wait_share", 0.2664) == "26.6 %"
    assert evidence_value("longest_gap_ns", 1_201_394) == "1.20 ms"
    assert evidence_value("mean_kernel_ns", 2922) == "2.9 µs"
    assert evidence_value("growth_bytes", 671_088_640) == "671.1 MB"
    assert evidence_value("per_step_bytes", 134217728.0) == "134.2 MB"
    assert evidence_value("device_memory_bytes", 85_017_493_504) == "85.0 GB"
    assert evidence_value("step_peaks_bytes", [4_560_438_784, 4_694_656_512]) == "4.6 GB, 4.7 GB"
    assert evidence_value("fp32_without_tf32", True) == "yes"
    assert evidence_label("exposed_comm_ns") == "Exposed communication"
    assert evidence_label("exposed_comm_share") == "Exposed communication share"
    rows = evidence_rows(
        {"sites": [{"name": "cudaMemcpyAsync", "idle_ns": 20000, "per_step": 4.0}]}
    )
    assert rows[0]["head"] == ["Name", "Idle", "Per step"]
    assert rows[0]["rows"] == [["cudaMemcpyAsync", "20.0 µs", "4"]]


def test_bandwidth_and_matmul_shapes(healthy: tuple[Report, str]) -> None:
    rep, page = healthy
    assert rep.bandwidth and rep.matmul_shapes
    table = re.search(r'id="bandwidth-table">(.*?)</table>', page, re.S)
    assert table is not None and "GB/s" in table.group(1)
    assert table.group(1).count("<tr>") == 1 + len(rep.bandwidth)
    shapes = re.search(r'id="matmul-table">(.*?)</table>', page, re.S)
    m = rep.matmul_shapes[0]
    assert shapes is not None and f"{m['m']} × {m['n']} × {m['k']}" in shapes.group(1)
    # An estimate above the GPU's peak cannot be right: it is not shown as a number.
    wrong = {**rep.bandwidth[0], "gbps": 9999.0, "share_of_peak": 2.98}
    page = render(dataclasses.replace(rep, bandwidth=[wrong]))
    table = re.search(r'id="bandwidth-table">(.*?)</table>', page, re.S)
    assert table is not None and "9,999" not in table.group(1) and "298" not in table.group(1)
    assert "estimate unusable" in table.group(1)


def test_memory_growth_chart() -> None:
    rep = api.report(LEAK)
    assert rep.memory_growth
    page = render(rep)
    block = re.search(r'<section id="memory-growth">(.*?)</section>', page, re.S)
    assert block is not None and "<svg" in block.group(1)
    assert "671.1 MB" in block.group(1)  # 6 steps of 128 MiB


def test_memory_steps_follow_the_leak() -> None:
    """leak.json.gz appends 128 MiB per step (README: allocated after each step 1641 -> 2281
    MiB): `memory_steps` holds each analysed step, and the page draws every one of them."""
    rep = api.report(LEAK)
    ends = [m["end_bytes"] for m in rep.memory_steps]
    assert len(ends) == 6
    assert [b - a for a, b in itertools.pairwise(ends)] == [128 << 20] * 5
    assert round(ends[0] / 2**20) == 1641 and round(ends[-1] / 2**20) == 2281
    assert [m["step"] for m in rep.memory_steps] == sorted(m["step"] for m in rep.memory_steps)
    page = render(rep)
    block = re.search(r'<section id="memory-growth">(.*?)</section>', page, re.S)
    assert block is not None
    # one marker per step in the chart (matplotlib writes each as a <use> of the marker)
    assert block.group(1).count("<use ") >= 6
