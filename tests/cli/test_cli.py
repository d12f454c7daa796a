"""The command line: exit codes, one-line errors, outputs."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from tests.builders import kernel, launch, step, write_trace
from tests.conftest import SAMPLES
from traceanalyzer import __version__
from traceanalyzer.cli import cli

EVENTS = [
    step(1, 100, 100),
    launch(110, 2, corr=1),
    kernel(150, 30, "<script>alert(1)</script>", corr=1),
    step(2, 200, 100),
    launch(210, 2, corr=2),
    kernel(260, 40, "gemm", corr=2),
]


def _run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_report_json_follows_the_contract(tmp_path: Path) -> None:
    code, out, _err = _run(
        "report", str(write_trace(tmp_path / "t.json", EVENTS)), "--format", "json"
    )
    assert code == 0
    doc = json.loads(out)
    assert doc["format_version"] == 1
    assert doc["window"] == {
        "start_ns": 100_000,
        "end_ns": 300_000,
        "basis": "steps",
        "iterations_from": None,
        "excluded_steps": [],
    }
    dev = doc["devices"][0]
    assert {
        k: dev[k]
        for k in ("rank", "device", "window_ns", "busy_ns", "idle_ns", "kernel_count", "kernel_ns")
    } == {
        "rank": 0,
        "device": 0,
        "window_ns": 200_000,
        "busy_ns": 70_000,
        "idle_ns": 130_000,
        "kernel_count": 2,
        "kernel_ns": 70_000,
    }
    assert dev["idle_share"] == pytest.approx(130 / 200)
    assert [s["name"] for s in doc["steps"]] == ["ProfilerStep#1", "ProfilerStep#2"]
    assert doc["kernels"]["count"] == 2
    assert sum(b["count"] for b in doc["kernels"]["duration_histogram"]) == 2
    assert doc["kernels"]["top"][0] == {
        "name": "gemm",
        "count": 1,
        "total_ns": 40_000,
        "share": pytest.approx(40 / 70),
    }
    assert doc["source"]["format"] == "chrome"


def test_terminal_report_names_the_numbers(tmp_path: Path) -> None:
    code, out, _ = _run("report", str(write_trace(tmp_path / "t.json", EVENTS)))
    assert code == 0
    # the window opens at step 1's marker (100 µs) and closes with the last kernel (300 µs)
    assert "200.0 µs" in out and "65.0 %" in out and "ProfilerStep#2" in out
    assert "<script>alert(1)</script>" in out  # shown as inert text, never interpreted


def test_output_file_is_written_atomically(tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "t.json", EVENTS)
    (tmp_path / "out").mkdir()
    code, _, _ = _run("report", str(trace), "-o", str(tmp_path / "out" / "r.json"))
    assert code == 0
    assert json.loads((tmp_path / "out" / "r.json").read_text())["format_version"] == 1
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["r.json"]


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (b"", "empty"),
        (b"not json at all", "none of the formats"),
        (b'{"a": 1}', "no traceEvents"),
        (
            b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "x", "pid": 1, '
            b'"tid": 1, "ts": 5, "dur": 1}]}',
            "CPU-only trace",
        ),
    ],
)
def test_bad_input_is_one_line_and_status_2(tmp_path: Path, content: bytes, words: str) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    out_file = tmp_path / "r.json"
    code, out, err = _run("report", str(path), "-o", str(out_file))
    assert code == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    assert str(path) in lines[0] and words in lines[0] and "hint:" in lines[0]
    assert "Traceback" not in err
    assert not out_file.exists()


def test_missing_path_and_folder_without_traces(tmp_path: Path) -> None:
    code, _, err = _run("report", str(tmp_path / "missing.json"))
    assert code == 2 and "no such file" in err
    code, _, err = _run("report", str(tmp_path))
    assert code == 2 and "no readable Chrome trace files" in err


def test_truncated_trace_is_reported(tmp_path: Path) -> None:
    data = (write_trace(tmp_path / "t.json", EVENTS)).read_bytes()
    cut = tmp_path / "cut.json"
    cut.write_bytes(data[: data.rindex(b'"gemm"')])
    code, out, _ = _run("report", str(cut), "--format", "json")
    assert code == 0
    doc = json.loads(out)
    assert doc["data_quality"]["truncated"] is True
    assert doc["data_quality"]["truncated_files"] == [str(cut)]


def test_console_script_runs_on_a_sample() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "traceanalyzer", "report", str(SAMPLES / "tiny_kernels.json.gz")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "6000" in proc.stdout


def test_console_script_exit_codes_and_flushed_output(tmp_path: Path) -> None:
    """main() ends the process without interpreter teardown: the codes and the whole
    output must still come through."""

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "traceanalyzer", *args]
        return subprocess.run(cmd, capture_output=True, text=True, check=False)

    missing = run("report", str(tmp_path / "nope.json"))
    assert missing.returncode == 2 and missing.stdout == ""
    assert missing.stderr.count("\n") == 1 and "nope.json" in missing.stderr
    ok = run("report", str(SAMPLES / "tiny_kernels.json.gz"), "--format", "json")
    assert ok.returncode == 0 and json.loads(ok.stdout)["format_version"] == 1
    failing = run("report", str(SAMPLES / "tiny_kernels.json.gz"), "--fail-on", "warning")
    assert failing.returncode == 1
    assert run("--version").stdout.strip().endswith(__version__)


def test_bad_step_pattern_is_an_input_error(tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "t.json", EVENTS)
    code, _, err = _run("report", str(trace), "--step-pattern", "step_(")
    assert code == 2 and "--step-pattern" in err and "Traceback" not in err


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_terminal_uses_tables_on_a_tty_and_plain_text_otherwise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from traceanalyzer import api
    from traceanalyzer.render import RENDERERS

    rep = api.report(write_trace(tmp_path / "t.json", EVENTS))
    monkeypatch.delenv("NO_COLOR", raising=False)
    tty = _Tty()
    RENDERERS["terminal"].render(rep, tty)
    assert "┏" in tty.getvalue() and "severity" in tty.getvalue()
    # every section of the piped text is on the terminal too, the critical path included
    assert "Critical path (what bounds the " in tty.getvalue()
    assert "verdict" in tty.getvalue()
    monkeypatch.setenv("NO_COLOR", "1")
    plain = _Tty()
    RENDERERS["terminal"].render(rep, plain)
    assert "┏" not in plain.getvalue() and "\x1b[" not in plain.getvalue()
    piped = io.StringIO()
    RENDERERS["terminal"].render(rep, piped)
    assert piped.getvalue() == plain.getvalue()


def test_report_file_is_readable_by_others(tmp_path: Path) -> None:
    trace = write_trace(tmp_path / "t.json", EVENTS)
    code, _, _ = _run("report", str(trace), "-o", str(tmp_path / "r.md"))
    assert code == 0
    assert (tmp_path / "r.md").stat().st_mode & 0o044


def test_batch_and_compare_commands(tmp_path: Path) -> None:
    write_trace(tmp_path / "in" / "a.json", EVENTS)
    (tmp_path / "in" / "broken.json").write_text("{")
    code, out, err = _run(
        "batch",
        str(tmp_path / "in"),
        "--out-dir",
        str(tmp_path / "out"),
        "--jobs",
        "1",
        "--summary-format",
        "csv",
    )
    assert code == 1  # a run failed
    assert "2 runs, 1 failed" in out and "broken.json" in err
    assert (tmp_path / "out" / "summary.csv").is_file()
    # the table: a line per run (verdict, step, saving, top finding), a failed run with why
    table = out.splitlines()
    assert table[0].split() == ["run", "verdict", "step", "saves", "top", "finding"]
    (a,) = [line for line in table[1:-1] if line.split()[0].endswith("/a.json")]
    (broken,) = [line for line in table[1:-1] if line.split()[0].endswith("broken.json")]
    summary = pl.read_csv(tmp_path / "out" / "summary.csv")
    row = summary.filter(pl.col("run") == a.split()[0]).row(0, named=True)
    assert a.split()[1] == row["bound_by"] and str(row["top_diagnosis"])[:5] in a
    assert "/step" in a and broken.split()[1] == "failed"
    error = summary.filter(pl.col("run") == broken.split()[0])["error"][0]
    assert "not valid JSON" in error and broken.split()[2].rstrip("…") in error
    code, out, _ = _run(
        "compare",
        str(tmp_path / "in" / "a.json"),
        str(SAMPLES / "tiny_kernels.json.gz"),
        "--format",
        "json",
    )
    assert code == 0
    diff = json.loads(out)
    assert diff["metrics"]["kernel_ns"]["before"] == 70_000
    assert (
        "TA003 Launch-overhead bound: tiny kernels, GPU waits for each launch"
        in diff["diagnoses_appeared"]
    )


def test_output_never_destroys_what_it_points_at(tmp_path: Path) -> None:
    """-o that is the trace is refused; a symlink is written through; /dev/null stays a
    device; a missing folder is not created; the suffix picks the format in any case."""
    trace = write_trace(tmp_path / "t.json", EVENTS)
    before = trace.read_bytes()
    code, _, err = _run("report", str(trace), "-o", str(trace))
    assert code == 2 and "one of the inputs" in err and trace.read_bytes() == before
    real = tmp_path / "real.json"
    real.write_text("{}")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    assert _run("report", str(trace), "-o", str(link))[0] == 0
    assert link.is_symlink() and json.loads(real.read_text())["format_version"] == 1
    assert _run("report", str(trace), "-o", "/dev/null")[0] == 0
    assert Path("/dev/null").is_char_device()
    code, _, err = _run("report", str(trace), "-o", str(tmp_path / "missing" / "r.json"))
    assert code == 2 and "does not exist" in err and not (tmp_path / "missing").exists()
    assert _run("report", str(trace), "-o", str(tmp_path / "R.JSON"))[0] == 0
    assert json.loads((tmp_path / "R.JSON").read_text())["format_version"] == 1
