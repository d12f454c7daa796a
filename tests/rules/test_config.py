"""Settings: TOML files, --set overrides, validation, and the CI gate through the CLI."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from traceanalyzer import api
from traceanalyzer.cli import EXIT_FINDINGS, EXIT_INPUT_ERROR, EXIT_OK, cli
from traceanalyzer.config import Settings, load_settings
from traceanalyzer.errors import ConfigError
from traceanalyzer.rules import BY_CODE, thresholds_for
from traceanalyzer.rules.examples import write_example


def test_pyproject_table_is_read(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "x"\n\n[tool.traceanalyzer]\nselect = ["TA0"]\nignore = ["TA002"]\n'
        'fail-on = "warning"\n\n[tool.traceanalyzer.rules.TA003]\nmin-launch-idle-share = 0.3\n'
    )
    s = load_settings(cwd=tmp_path)
    assert s.select == ("TA0",) and s.ignore == ("TA002",) and s.fail_on == "warning"
    assert s.thresholds == {"TA003": {"min_launch_idle_share": 0.3}}
    assert s.enabled("TA003") and not s.enabled("TA002")
    assert thresholds_for(BY_CODE["TA003"], s).min_launch_idle_share == 0.3
    assert s.source == str(tmp_path / "pyproject.toml")


def test_traceanalyzer_toml_wins_over_pyproject(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.traceanalyzer]\nfail-on = "critical"\n')
    (tmp_path / "traceanalyzer.toml").write_text(
        'fail-on = "info"\n[rules.TA009]\nmin-copy-bytes = 1000\n'
    )
    s = load_settings(cwd=tmp_path)
    assert s.fail_on == "info"
    assert thresholds_for(BY_CODE["TA009"], s).min_copy_bytes == 1000


def test_pyproject_without_a_table_gives_defaults(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n')
    assert load_settings(cwd=tmp_path) == Settings()


def test_set_overrides_parse_values(tmp_path: Path) -> None:
    s = load_settings(
        overrides=("TA003.min_launch_idle_share=0.25", "TA003.min-kernels=7"), cwd=tmp_path
    )
    t = thresholds_for(BY_CODE["TA003"], s)
    assert (t.min_launch_idle_share, t.min_kernels) == (0.25, 7)
    # an override beats the file
    (tmp_path / "traceanalyzer.toml").write_text("[rules.TA003]\nmin-kernels = 3\n")
    s = load_settings(overrides=("TA003.min_kernels=9",), cwd=tmp_path)
    assert thresholds_for(BY_CODE["TA003"], s).min_kernels == 9


@pytest.mark.parametrize("bad", ["TA003", "TA003.min_kernels", ".x=1", "TA003.=1"])
def test_malformed_set_is_an_error(tmp_path: Path, bad: str) -> None:
    with pytest.raises(ConfigError, match=r"CODE\.name=value"):
        load_settings(overrides=(bad,), cwd=tmp_path)


def test_unknown_threshold_key_lists_the_valid_ones() -> None:
    s = Settings(thresholds={"TA003": {"min_launch_share": 0.2}})
    with pytest.raises(ConfigError) as err:
        thresholds_for(BY_CODE["TA003"], s)
    assert "min_launch_share" in str(err.value)
    assert "min_launch_idle_share" in err.value.one_line()


def test_wrongly_typed_threshold_is_an_error() -> None:
    s = Settings(thresholds={"TA009": {"min_copy_bytes": "lots"}})
    with pytest.raises(ConfigError, match="must be a int"):
        thresholds_for(BY_CODE["TA009"], s)


def test_unknown_rule_code_is_an_error(tmp_path: Path) -> None:
    path = write_example(BY_CODE["TA003"].example_bad, tmp_path, "t")
    with pytest.raises(ConfigError) as err:
        api.report(path, settings=Settings(thresholds={"TA999": {"x": 1}}))
    assert "TA999" in str(err.value)
    assert "TA003" in err.value.one_line()


def test_unknown_top_level_key_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "traceanalyzer.toml").write_text('fail_on = "info"\n')
    with pytest.raises(ConfigError, match="unknown settings"):
        load_settings(cwd=tmp_path)


def _cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout + result.stderr


def test_fail_on_gate_exits_1(tmp_path: Path) -> None:
    trace = str(write_example(BY_CODE["TA003"].example_bad, tmp_path, "bad"))
    code, _out = _cli("report", trace, "--format", "json", "--fail-on", "warning")
    assert code == EXIT_FINDINGS
    code, _out = _cli("report", trace, "--format", "json")
    assert code == EXIT_OK
    # the gate compares severities: a critical finding trips "critical" too
    code, _out = _cli("report", trace, "--format", "json", "--fail-on", "critical")
    assert code == EXIT_FINDINGS


def test_fail_on_gate_passes_a_quiet_trace(tmp_path: Path) -> None:
    trace = str(write_example(BY_CODE["TA012"].example_good, tmp_path, "good"))
    code, out = _cli(
        "report",
        trace,
        "--format",
        "json",
        "--fail-on",
        "info",
        "--set",
        "TA001.min_host_wait_share=1",
    )
    assert code == EXIT_OK, out


def test_cli_unknown_threshold_is_an_input_error(tmp_path: Path) -> None:
    trace = str(write_example(BY_CODE["TA003"].example_bad, tmp_path, "bad"))
    code, out = _cli("report", trace, "--set", "TA003.no_such=1")
    assert code == EXIT_INPUT_ERROR
    assert "no_such" in out and "min_launch_idle_share" in out


def test_cli_config_file_is_honoured(tmp_path: Path) -> None:
    trace = str(write_example(BY_CODE["TA003"].example_bad, tmp_path, "bad"))
    config = tmp_path / "ci.toml"
    config.write_text('fail-on = "info"\nselect = ["TA003"]\n[rules.TA003]\nmin-kernels = 1000\n')
    code, out = _cli("report", trace, "--format", "json", "--config", str(config))
    assert code == EXIT_OK, out
    code, out = _cli("report", trace, "--config", str(config), "--set", "TA003.min_kernels=100")
    assert code == EXIT_FINDINGS, out
