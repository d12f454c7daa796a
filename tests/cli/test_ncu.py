"""`traceanalyzer report TRACE --ncu FILE [--ncu FILE ...] [--ncu-path DIR]`, and the notebook
API's `ta.analyze(path, ncu=...)`: Nsight Compute joined to a trace, and the one `error:`
line for each export that cannot be joined."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import traceanalyzer as ta
from tests.analyses.test_ncu_join import ADD, GEMM, MUL, matmul_trace
from tests.readers.test_ncu import (
    SAMPLE,
    fake_install,
    fake_report,
    kernel_row,
    ncu_csv,
    rep_action,
)
from traceanalyzer.cli import cli


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["report", *args])
    return result.exit_code, result.stdout, result.stderr


def _error(*args: str) -> str:
    code, _, err = _run(*args)
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


def test_report_with_ncu(tmp_path: Path) -> None:
    trace = matmul_trace(tmp_path / "t.json")
    code, out, err = _run(str(trace), "--ncu", str(SAMPLE), "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["format_version"] == 1
    assert doc["ncu"]["matched_kernels"] == 3 and doc["ncu"]["matched_trace_kernels"] == 9
    assert {b["op_name"]: b["source"] for b in doc["memory_bandwidth"]} == {
        "aten::mul": "ncu",
        "aten::add": "ncu",
        "aten::relu": "shapes",
    }
    code, text, _ = _run(str(trace), "--ncu", str(SAMPLE))
    assert code == 0
    assert "Nsight Compute (3 of 4 profiled kernels matched; 9 trace kernels, 93.5 %" in text
    assert "aten::mul (3 calls, rank 0) [ncu]" in text
    assert "Tensor Core pipe active 90.5 %" in text
    html = tmp_path / "r.html"
    assert _run(str(trace), "--ncu", str(SAMPLE), "-o", str(html))[0] == 0
    assert 'id="ncu"' in html.read_text() and 'href="#ncu"' in html.read_text()


def test_ncu_is_repeatable(tmp_path: Path) -> None:
    trace = matmul_trace(tmp_path / "t.json")
    more = ncu_csv(
        tmp_path / "gemm.csv",
        [
            kernel_row(
                GEMM, grid="(2, 66, 1)", block="(384, 1, 1)", **{"gpu__time_duration.sum": "9"}
            )
        ],
    )
    code, out, err = _run(str(trace), "--ncu", str(SAMPLE), "--ncu", str(more), "--format", "json")
    assert code == 0, err
    files = json.loads(out)["ncu"]["files"]
    assert [f["path"] for f in files] == [str(SAMPLE), str(more)]
    assert [f["matched_ncu_kernels"] for f in files] == [3, 1]


def test_an_ncu_rep_through_ncu_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(__import__("sys").modules, "ncu_report", raising=False)
    trace = matmul_trace(tmp_path / "t.json")
    report = fake_report(
        tmp_path / "k.ncu-rep",
        [
            [
                rep_action(
                    MUL,
                    (16384, 1, 1),
                    (128, 1, 1),
                    **{
                        "dram__bytes_read.sum": (33.5, "Mbyte"),
                        "dram__bytes_write.sum": (12.4, "Mbyte"),
                    },
                ),
                rep_action(ADD, (16384, 1, 1), (128, 1, 1)),
            ]
        ],
    )
    install = fake_install(tmp_path)
    code, out, err = _run(
        str(trace), "--ncu", str(report), "--ncu-path", str(install), "--format", "json"
    )
    assert code == 0, err
    doc = json.loads(out)
    assert doc["ncu"]["matched_kernels"] == 2
    mul = next(b for b in doc["memory_bandwidth"] if b["op_name"] == "aten::mul")
    assert mul["source"] == "ncu" and mul["bytes"] == 3 * 45_900_000
    add = next(b for b in doc["memory_bandwidth"] if b["op_name"] == "aten::add")
    assert add["source"] == "shapes"  # profiled, but its export holds no DRAM bytes


def test_errors_are_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(__import__("sys").modules, "ncu_report", raising=False)
    trace = str(matmul_trace(tmp_path / "t.json"))
    line = _error(trace, "--ncu", str(tmp_path / "absent.csv"))
    assert "absent.csv: no such Nsight Compute export" in line
    other = ncu_csv(tmp_path / "other.csv", [kernel_row("ampere_sgemm_128x64_nn")])
    line = _error(trace, "--ncu", str(other))
    assert line.startswith(f"error: {other}: only 0 of the 1 kernels Nsight Compute profiled")
    assert "at least 50% must" in line and "hint: profile the same program" in line
    rep = fake_report(tmp_path / "k.ncu-rep", [[]])
    line = _error(trace, "--ncu", str(rep))
    assert "ncu_report" in line and "ncu --import k.ncu-rep --csv --page raw > k.csv" in line
    details = tmp_path / "details.csv"
    details.write_text('"ID","Kernel Name","Metric Name","Metric Value"\n"0","k","Duration","1"\n')
    assert "details page" in _error(trace, "--ncu", str(details))


def test_an_export_given_as_the_trace(tmp_path: Path) -> None:
    csv_copy = tmp_path / "k.csv"
    csv_copy.write_bytes(__import__("gzip").decompress(SAMPLE.read_bytes()))
    line = _error(str(csv_copy))
    assert "an Nsight Compute export, not a trace" in line and "--ncu k.csv" in line
    rep = fake_report(tmp_path / "k.ncu-rep", [[]])
    assert "--ncu k.ncu-rep" in _error(str(rep))


def test_a_folder_of_ranks_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "job"
    folder.mkdir()
    for r in (0, 1):
        doc = json.loads(matmul_trace(tmp_path / f"r{r}.json").read_text())
        doc["distributedInfo"] = {"rank": r, "world_size": 2}
        (folder / f"rank{r}.json").write_text(json.dumps(doc))
    line = _error(str(folder), "--ncu", str(SAMPLE))
    assert "not a folder of ranks" in line and "hint: give the trace of the rank" in line


def test_the_notebook_api(tmp_path: Path) -> None:
    a = ta.analyze(matmul_trace(tmp_path / "t.json"), ncu=SAMPLE)
    assert a.ncu.height == 3 and set(a.ncu["name"]) == {GEMM, MUL, ADD}
    assert a.ncu.filter(a.ncu["name"] == GEMM)["registers_per_thread"].to_list() == [168]
    ops = {(r["op_name"], r["kind"]): r["source"] for r in a.operators.iter_rows(named=True)}
    assert ops[("aten::mm", "flops")] == "ncu" and ops[("aten::relu", "memory")] == "shapes"
    assert a.to_json()["ncu"]["matched_kernels"] == 3
    assert ta.analyze(matmul_trace(tmp_path / "u.json")).ncu.height == 0
