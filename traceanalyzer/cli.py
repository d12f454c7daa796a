"""Command-line interface: argument parsing and error display only."""

from __future__ import annotations

import sys
import traceback

import click

from traceanalyzer import __version__, api
from traceanalyzer.errors import TraceAnalyzerError
from traceanalyzer.model.schema import schema_markdown
from traceanalyzer.render import RENDERERS

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
@click.option("--debug", is_flag=True, help="Show tracebacks for input errors.")
def report(
    trace: str,
    fmt: str | None,
    output: str | None,
    top: int,
    step_pattern: str | None,
    launch_gap_us: float,
    debug: bool,
) -> None:
    """Report where GPU time went in TRACE: a torch.profiler trace (.json, .json.gz), a folder
    of per-rank traces, or an Nsight Systems SQLite export."""
    _run(
        lambda: api.write(
            api.report(
                trace,
                top_n=top,
                step_pattern=step_pattern,
                launch_gap_max_ns=round(launch_gap_us * 1000),
            ),
            fmt,
            output,
        ),
        debug,
    )


@cli.command()
def schema() -> None:
    """Print the timeline's event schema."""
    click.echo(schema_markdown(), nl=False)


def _run(job: object, debug: bool) -> None:
    try:
        job()  # type: ignore[operator]
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
