"""Nsight Systems reports (.nsys-rep): exported with nsys into a temporary folder, then read.

A stand-in `nsys` (a Python script) plays the real one: its "report" is the SQL text of a
hand-written export, which it builds into the SQLite file `--output` names, and it logs each
call so that the tests can count exports. The real nsys is exercised on the GPU machine.
"""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from tests.readers.test_nsys_sqlite import DATA, nsys_db_from_sql
from traceanalyzer.batch import Options, run_batch
from traceanalyzer.cli import cli
from traceanalyzer.config import load_settings
from traceanalyzer.errors import TraceFormatError, UnsupportedTraceError
from traceanalyzer.readers import nsys_rep, read

FAKE_NSYS = """#!{python}
import sqlite3, sys
args = sys.argv[1:]
with open({log!r}, "a") as log:
    log.write(" ".join(args) + "\\n")
if {fail!r}:
    print("Importer error: the report file is corrupted", file=sys.stderr)
    sys.exit(1)
assert args[:6] == ["export", "--type", "sqlite", "--force-overwrite", "true", "--output"]
out, report = args[6], args[7]
con = sqlite3.connect(out)
con.executescript(open(report).read())
con.commit()
con.close()
"""


def _fake_nsys(tmp_path: Path, fail: bool = False) -> tuple[Path, Path]:
    log = tmp_path / "nsys-calls.log"
    script = tmp_path / "bin" / "nsys"
    script.parent.mkdir(exist_ok=True)
    script.write_text(FAKE_NSYS.format(python=sys.executable, log=str(log), fail=fail))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script, log


def _report_file(tmp_path: Path, name: str = "run.nsys-rep") -> Path:
    folder = tmp_path / "in"
    folder.mkdir(exist_ok=True)
    rep = folder / name
    rep.write_text((DATA / "two_ranks.sql").read_text())
    return rep


def test_report_is_exported_and_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nsys, log = _fake_nsys(tmp_path)
    monkeypatch.setenv("NSYS", str(nsys))
    rep = _report_file(tmp_path)
    before = sorted(p.name for p in rep.parent.iterdir())
    tl = read(rep)
    direct = read(nsys_db_from_sql("two_ranks", tmp_path))
    assert tl.events.equals(direct.events)
    assert tl.meta.path == str(rep) and {r.path for r in tl.meta.ranks} == {str(rep)}
    assert sorted(p.name for p in rep.parent.iterdir()) == before  # nothing beside the input
    assert len(log.read_text().splitlines()) == 1


def test_no_nsys_gives_the_command_to_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NSYS", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setattr(nsys_rep, "INSTALL_GLOBS", ())
    rep = _report_file(tmp_path)
    with pytest.raises(UnsupportedTraceError, match="needs `nsys`") as err:
        read(rep)
    assert "nsys export --type sqlite --output run.sqlite" in err.value.hint
    result = CliRunner().invoke(cli, ["report", str(rep)])
    assert result.exit_code == 2 and result.stderr.startswith("error: ")
    assert len(result.stderr.strip().splitlines()) == 1


def test_failed_export_is_one_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nsys, _log = _fake_nsys(tmp_path, fail=True)
    rep = _report_file(tmp_path)
    with pytest.raises(TraceFormatError, match="the report file is corrupted"):
        monkeypatch.setenv("NSYS", str(nsys))
        read(rep)
    monkeypatch.delenv("NSYS")
    result = CliRunner().invoke(cli, ["report", str(rep), "--nsys", str(nsys)])
    assert result.exit_code == 2
    assert "nsys could not export the report" in result.stderr


def test_cli_nsys_option(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NSYS", raising=False)
    nsys, log = _fake_nsys(tmp_path)
    rep = _report_file(tmp_path)
    result = CliRunner().invoke(cli, ["report", str(rep), "--nsys", str(nsys), "--format", "json"])
    assert result.exit_code in (0, 1), result.stderr
    assert str(rep) in result.stdout
    assert log.is_file()
    os.environ.pop("NSYS", None)  # the option sets it for this process (and batch workers)


def test_batch_exports_a_report_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    nsys, log = _fake_nsys(tmp_path)
    monkeypatch.setenv("NSYS", str(nsys))
    rep = _report_file(tmp_path)
    out = tmp_path / "out"
    first = run_batch([str(rep)], out, jobs=1)
    assert first["error"].to_list() == [None] and first["format"].to_list() == ["nsys-sqlite"]
    other = Options(load_settings(overrides=("TA001.min_host_wait_share=0.9",), cwd=tmp_path))
    again = run_batch([str(rep)], out, jobs=1, options=other)  # a new analysis, same export
    assert again["cached"].to_list() == [False]
    assert len(log.read_text().splitlines()) == 1
    assert [p.suffix for p in (out / ".cache" / "exports").iterdir()] == [".sqlite"]


def test_rank_named_reports_are_runs_of_their_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    nsys, _log = _fake_nsys(tmp_path)
    monkeypatch.setenv("NSYS", str(nsys))
    for name in ("rank0.nsys-rep", "rank1.nsys-rep"):
        _report_file(tmp_path, name)
    summary = run_batch([str(tmp_path / "in")], tmp_path / "out", jobs=1)
    assert sorted(summary["run"].to_list()) == ["in/rank0.nsys-rep", "in/rank1.nsys-rep"]
    assert summary.filter(pl.col("error").is_not_null()).height == 0


def test_errors_name_the_input_not_the_temporary_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gzip

    nsys, _log = _fake_nsys(tmp_path)
    monkeypatch.setenv("NSYS", str(nsys))
    rep = tmp_path / "in" / "empty.nsys-rep"
    rep.parent.mkdir()
    rep.write_text((DATA / "no_kernels.sql").read_text())
    with pytest.raises(TraceFormatError) as err:
        read(rep)
    assert err.value.path == str(rep)
    db = nsys_db_from_sql("no_kernels", tmp_path)
    gz = tmp_path / "no_kernels.sqlite.gz"
    gz.write_bytes(gzip.compress(db.read_bytes()))
    with pytest.raises(TraceFormatError) as err:
        read(gz)
    assert err.value.path == str(gz)
