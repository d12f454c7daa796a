"""A damaged trace never gets a confident wrong verdict (issue 28): real traces damaged the
ways files get damaged (cut off in transfer, rewritten by a converter, merged twice, one
rank's file cut, an export cut or missing a table), each checked for one property: exit 2
with one `error:` line naming the damage, or a report whose first line names it (and, where
GPU events were lost, no performance finding at all)."""

from __future__ import annotations

import gzip
import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.conftest import REPO, SAMPLES
from traceanalyzer.cli import cli

GPU = REPO / "tests" / "data" / "gpu"
#: Traces cut at each of these shares of their compressed bytes.
CUTS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.97)
CUT_SOURCES = (
    SAMPLES / "train_bf16_healthy.json.gz",
    SAMPLES / "tiny_kernels.json.gz",
    GPU / "slow_loader.json.gz",
    GPU / "gelu_manual.json.gz",
)
#: (what, how a kernel event is rewritten) a converter's damage to one numeric field
FIELD_DAMAGE: dict[str, Any] = {
    "negative dur": lambda e: {**e, "dur": -abs(e["dur"]) - 1},
    "null ts": lambda e: {**e, "ts": None},
    "huge dur": lambda e: {**e, "dur": 1e30},
}
FIELD_SOURCES = (SAMPLES / "train_bf16_healthy.json.gz", GPU / "gelu_manual.json.gz")
#: Numbers a converter writes as JSON text: unambiguous, so read (and counted in a note).
TEXT_DAMAGE: dict[str, Any] = {
    "ts as text": lambda e: {**e, "ts": str(e["ts"])},
    "dur as text": lambda e: {**e, "dur": str(e["dur"])},
}


def _run(path: Path) -> tuple[int, dict[str, Any] | None, str]:
    """Exit status, the JSON report (None on a refusal), stderr."""
    result = CliRunner().invoke(cli, ["report", str(path), "--format", "json"])
    doc = json.loads(result.stdout) if result.exit_code == 0 else None
    return result.exit_code, doc, result.stderr


def _refused_naming(code: int, err: str, *words: str) -> bool:
    lines = err.strip().splitlines()
    return (
        code == 2
        and len(lines) == 1
        and lines[0].startswith("error: ")
        and any(w in lines[0] for w in words)
    )


@pytest.mark.parametrize("share", CUTS)
@pytest.mark.parametrize("source", CUT_SOURCES, ids=lambda p: p.name)
def test_cut_off_is_named(source: Path, share: float, tmp_path: Path) -> None:
    raw = source.read_bytes()
    path = tmp_path / source.name
    path.write_bytes(raw[: int(len(raw) * share)])
    code, doc, err = _run(path)
    if doc is None:
        assert _refused_naming(code, err, "cut off"), err
        return
    assert doc["verdict"]["headline"].startswith("the trace is incomplete"), doc["verdict"]
    assert doc["data_quality"]["truncated"] is True


def _rewrite(source: Path, out: Path, change: Any) -> Path:
    doc = json.loads(gzip.decompress(source.read_bytes()))
    doc["traceEvents"] = [change(e) if e.get("cat") == "kernel" else e for e in doc["traceEvents"]]
    out.write_text(json.dumps(doc))
    return out


@pytest.mark.parametrize("damage", sorted(FIELD_DAMAGE))
@pytest.mark.parametrize("source", FIELD_SOURCES, ids=lambda p: p.name)
def test_unreadable_gpu_events_get_no_performance_verdict(
    source: Path, damage: str, tmp_path: Path
) -> None:
    path = _rewrite(source, tmp_path / "damaged.json", FIELD_DAMAGE[damage])
    code, doc, err = _run(path)
    if doc is None:  # every GPU event lost: nothing to analyse, said so
        assert _refused_naming(code, err, "could not be read", "no GPU events left"), err
        return
    assert doc["verdict"]["headline"].startswith("the trace is damaged"), doc["verdict"]
    assert {f["rule"] for f in doc["diagnoses"]} == {"TA012"}
    assert any(f["severity"] == "critical" for f in doc["diagnoses"])


@pytest.mark.parametrize("damage", sorted(TEXT_DAMAGE))
@pytest.mark.parametrize("source", FIELD_SOURCES, ids=lambda p: p.name)
def test_numbers_written_as_text_are_read(source: Path, damage: str, tmp_path: Path) -> None:
    path = _rewrite(source, tmp_path / "text.json", TEXT_DAMAGE[damage])
    _, doc, err = _run(path)
    _, clean, _ = _run(source)
    assert doc is not None and clean is not None, err
    assert doc["diagnoses"] == clean["diagnoses"]
    assert doc["verdict"] == clean["verdict"]
    assert any("written as JSON text" in n for n in doc["data_quality"]["notes"])


@pytest.mark.parametrize("source", FIELD_SOURCES, ids=lambda p: p.name)
def test_events_merged_twice_change_nothing(source: Path, tmp_path: Path) -> None:
    doc = json.loads(gzip.decompress(source.read_bytes()))
    doc["traceEvents"] = doc["traceEvents"] * 2
    twice = tmp_path / "twice.json"
    twice.write_text(json.dumps(doc))
    _, once, _ = _run(source)
    _, again, _ = _run(twice)
    assert once is not None and again is not None

    def findings(d: dict[str, Any]) -> list[tuple[Any, ...]]:
        return [
            (f["rule"], f["severity"], f["impact_ns"])
            for f in d["diagnoses"]
            if f["rule"] != "TA012"
        ]

    assert findings(again) == findings(once)
    assert again["data_quality"]["dropped_events"].get("exact duplicate")


def test_one_ranks_file_cut_in_a_folder(tmp_path: Path) -> None:
    folder = tmp_path / "job"
    shutil.copytree(SAMPLES / "sampled_2rank", folder)
    victim = sorted(folder.glob("*.json.gz"))[1]
    raw = victim.read_bytes()
    victim.write_bytes(raw[: len(raw) // 2])
    code, doc, err = _run(folder)
    if doc is None:
        assert _refused_naming(code, err, "cut off", victim.name), err
        return
    headline = doc["verdict"]["headline"]
    assert headline.startswith(("the trace is incomplete", "the trace is damaged")), headline


@pytest.fixture
def export(tmp_path: Path) -> Path:
    path = tmp_path / "run.sqlite"
    with gzip.open(GPU / "nsys_host_sync.sqlite.gz") as src, path.open("wb") as dst:
        shutil.copyfileobj(src, dst)
    return path


def test_sqlite_export_cut_off(export: Path) -> None:
    raw = export.read_bytes()
    export.write_bytes(raw[: len(raw) // 2])
    code, doc, err = _run(export)
    assert doc is None and code == 2
    assert err.strip().startswith("error: ") and len(err.strip().splitlines()) == 1


def test_sqlite_export_without_its_kernel_table(export: Path) -> None:
    con = sqlite3.connect(export)
    con.execute("DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL")
    con.commit()
    con.close()
    code, _doc, err = _run(export)
    assert _refused_naming(code, err, "no CUDA kernel"), err


def test_a_few_unreadable_kernels_are_damage_too(tmp_path: Path) -> None:
    """2 % of the kernels with negative durations (above the 1 % threshold): the trace is
    damaged; 0.2 % (under it): the report goes on, and data_quality counts them."""
    source = SAMPLES / "train_bf16_healthy.json.gz"
    for every, is_damaged in ((50, True), (500, False)):
        seen = iter(range(10**9))

        def change(e: dict[str, Any], every: int = every, seen: Any = seen) -> dict[str, Any]:
            return {**e, "dur": -1} if next(seen) % every == 0 else e

        path = _rewrite(source, tmp_path / f"every{every}.json", change)
        _code, doc, err = _run(path)
        assert doc is not None, err
        headline = doc["verdict"]["headline"]
        assert headline.startswith("the trace is damaged") is is_damaged, headline
        assert doc["data_quality"]["dropped_gpu_events"] > 0


#: Cases in this suite, for the closing note: cuts, field damage, duplicates, folder, SQLite.
CASES = (
    len(CUTS) * len(CUT_SOURCES)
    + (len(FIELD_DAMAGE) + len(TEXT_DAMAGE)) * len(FIELD_SOURCES)
    + 2
    + 1
    + 2
    + 2
)


@pytest.mark.parametrize("field", ["Device Id", "device"])
def test_a_device_ordinal_beyond_int32_reads_as_unknown(field: str, tmp_path: Path) -> None:
    """A memory event's `Device Id` or a kernel's `device` beyond 32 bits (found by the
    fuzzer: 1440019397070955) is an unknown device, never an internal error: the kernel is
    dropped as a GPU event with no device, the memory event as one without a device."""
    big = 1_440_019_397_070_955
    kernel = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10, "dur": 5}
    kernel["args"] = {"device": big if field == "device" else 0, "stream": 7}
    memory = {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 1}
    memory |= {"tid": 1, "ts": 12, "args": {"Device Type": 1, "Device Id": big, "Bytes": 8}}
    path = tmp_path / "big_device.json"
    path.write_text(json.dumps({"traceEvents": [kernel, memory]}))
    code, _doc, err = _run(path)
    assert code in (0, 1, 2) and "internal error" not in err and "Traceback" not in err
    if code == 2:
        assert _refused_naming(code, err, "no GPU events")


def test_steps_lost_to_the_cut_are_named_as_lost(tmp_path: Path) -> None:
    """slow_loader cut at 70 %: its last two steps were not recorded whole; they are named
    as lost to the cut (reason, note and the terminal's window line), not as warm-up or
    outlier steps, and the steps analysed stay the ones before the cut."""
    from traceanalyzer.report import CUT_REASON

    raw = gzip.decompress((GPU / "slow_loader.json.gz").read_bytes())
    path = tmp_path / "cut.json"
    path.write_bytes(raw[: int(len(raw) * 0.7)])
    code, doc, _ = _run(path)
    assert code == 0 and doc is not None
    excluded = doc["window"]["excluded_steps"]
    assert [e["name"] for e in excluded] == ["ProfilerStep#5", "ProfilerStep#6"]
    assert all(e["reason"] == CUT_REASON for e in excluded)
    assert (
        "2 step(s) lost to the cut (ProfilerStep#5, ProfilerStep#6: the file ends before them)"
        in doc["data_quality"]["notes"]
    )
    assert not any("warm-up/outlier" in n for n in doc["data_quality"]["notes"])
    text = CliRunner().invoke(cli, ["report", str(path)]).stdout
    assert "lost to the cut" in text and "warm-up/outlier" not in text
