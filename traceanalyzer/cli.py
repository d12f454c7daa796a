"""Command-line interface: argument parsing and error display only."""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable
from pathlib import Path

import click

from traceanalyzer import __version__, api
from traceanalyzer.config import load_settings
from traceanalyzer.errors import TraceAnalyzerError
from traceanalyzer.model.schema import schema_markdown
from traceanalyzer.render import RENDERERS
from traceanalyzer.rules import ALL_RULES, BY_CODE
from traceanalyzer.rules.docs import rule_markdown

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_INPUT_ERROR = 2
EXIT_INTERNAL = 3


@click.group()
@click.version_option(__version__, prog_name="traceanalyzer")
def cli() -> None:
    """Where did the GPU time go, and why."""


@cli.command()
@click.argument("trace", type=click.Path(path_type=str))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(sorted(RENDERERS)),
    default=None,
    help="Output format (default: from the -o suffix, else terminal).",
)
@click.option("-o", "--output", default=None, help="Write to this file instead of stdout.")
@click.option("--top", default=10, show_default=True, help="How many top kernels to list.")
@click.option(
    "--step-pattern",
    default=None,
    metavar="REGEX",
    help="Host ranges that mark steps (default: ProfilerStep#N; for Nsight, NVTX step_N, "
    "iteration N, train_step...).",
)
@click.option(
    "--launch-gap",
    "launch_gap_us",
    default=50.0,
    show_default=True,
    type=click.FloatRange(min=0),
    help="Idle gaps up to this many µs, ended by a launch issued during the gap, count as "
    "launch overhead (longer ones as host wait).",
)
@click.option(
    "--config",
    "config",
    type=click.Path(path_type=Path),
    default=None,
    help="Settings file (default: ./traceanalyzer.toml or ./pyproject.toml).",
)
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="CODE.NAME=VALUE",
    help="Override one rule threshold, e.g. --set TA001.min_host_wait_share=0.2.",
)
@click.option(
    "--fail-on",
    type=click.Choice(["info", "warning", "critical"]),
    default=None,
    help="Exit with status 1 when a finding is at or above this severity.",
)
@click.option("--debug", is_flag=True, help="Show tracebacks for input errors.")
def report(
    trace: str,
    fmt: str | None,
    output: str | None,
    top: int,
    step_pattern: str | None,
    launch_gap_us: float,
    config: Path | None,
    overrides: tuple[str, ...],
    fail_on: str | None,
    debug: bool,
) -> None:
    """Report where GPU time went in TRACE: a torch.profiler trace (.json, .json.gz), a folder
    of per-rank traces, or an Nsight Systems SQLite export."""

    def job() -> None:
        settings = load_settings(config, overrides, fail_on)
        rep = api.report(
            trace,
            top_n=top,
            step_pattern=step_pattern,
            launch_gap_max_ns=round(launch_gap_us * 1000),
            settings=settings,
        )
        api.write(rep, fmt, output)
        if api.gate(rep, settings):
            sys.exit(EXIT_FINDINGS)

    _run(job, debug)


@cli.command(name="rules")
def list_rules() -> None:
    """List the diagnosis rules."""
    for rule in ALL_RULES:
        click.echo(f"{rule.code}  {rule.slug:<24} {rule.category:<20} {rule.title}")


@cli.command(name="rule")
@click.argument("code")
def show_rule(code: str) -> None:
    """Explain one rule (its docs page)."""
    rule = BY_CODE.get(code.upper())
    if rule is None:
        click.echo(f"error: no rule {code} (hint: `traceanalyzer rules` lists them)", err=True)
        sys.exit(EXIT_INPUT_ERROR)
    click.echo(rule_markdown(rule), nl=False)


@cli.command()
def schema() -> None:
    """Print the timeline's event schema."""
    click.echo(schema_markdown(), nl=False)


def _run(job: Callable[[], None], debug: bool) -> None:
    try:
        job()
    except TraceAnalyzerError as exc:
        if debug:
            raise
        click.echo(f"error: {exc.one_line()}", err=True)
        sys.exit(EXIT_INPUT_ERROR)
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(EXIT_OK)
    except MemoryError:
        click.echo(
            "error: out of memory reading the trace (hint: try a machine with more memory)",
            err=True,
        )
        sys.exit(EXIT_INPUT_ERROR)
    except Exception:
        click.echo(
            "internal error: traceanalyzer failed unexpectedly; please report it with this trace:",
            err=True,
        )
        traceback.print_exc()
        sys.exit(EXIT_INTERNAL)


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="traceanalyzer")
