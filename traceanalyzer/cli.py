"""Command-line interface: argument parsing and error display only."""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
import orjson
import polars as pl

from traceanalyzer import api, termination, timings
from traceanalyzer.batch import Options, write_summary
from traceanalyzer.comparison import compare as compare_reports
from traceanalyzer.comparison import load_report
from traceanalyzer.config import SEVERITIES, load_settings
from traceanalyzer.errors import TraceAnalyzerError
from traceanalyzer.model.schema import schema_markdown
from traceanalyzer.readers.archives import DEFAULT_MAX_UNPACKED
from traceanalyzer.render import RENDERERS
from traceanalyzer.render.base import write_text_atomic
from traceanalyzer.render.compare import render_html as render_compare_html
from traceanalyzer.render.compare import render_text
from traceanalyzer.render.terminal import batch_lines, plain_width
from traceanalyzer.rules import ALL_RULES, BY_CODE
from traceanalyzer.rules.rule_pages import rule_page
from traceanalyzer.version import __version__

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_INPUT_ERROR = 2
EXIT_INTERNAL = 3


# Options shared by the commands that analyse traces, declared once.
STEP_PATTERN = click.option(
    "--step-pattern",
    default=None,
    metavar="REGEX",
    help="Host ranges that mark steps (default: ProfilerStep#N; for Nsight, NVTX step_N, "
    "iteration N, train_step...).",
)
ALL_STEPS = click.option(
    "--all-steps",
    is_flag=True,
    help="Keep warm-up and outlier steps in the analysed window (default: left out).",
)
CONFIG = click.option(
    "--config",
    "config",
    type=click.Path(path_type=Path),
    default=None,
    help="Settings file (default: ./traceanalyzer.toml or ./pyproject.toml).",
)
OVERRIDES = click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="CODE.NAME=VALUE",
    help="Override one rule threshold, e.g. --set TA001.min_host_wait_share=0.2.",
)
NSYS = click.option(
    "--nsys",
    "nsys",
    type=click.Path(path_type=str, dir_okay=False),
    default=None,
    metavar="PATH",
    help="The nsys binary that exports .nsys-rep reports (default: NSYS, then PATH).",
)
DEBUG = click.option("--debug", is_flag=True, help="Show tracebacks for input errors.")

F = TypeVar("F", bound=Callable[..., Any])


def analysis_options(command: F) -> F:
    """--step-pattern, --all-steps, --config, --set, --nsys and --debug, in that order."""
    for option in reversed((STEP_PATTERN, ALL_STEPS, CONFIG, OVERRIDES, NSYS, DEBUG)):
        command = option(command)
    return command


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
@click.option(
    "--top",
    default=10,
    show_default=True,
    type=click.IntRange(min=0),
    help="How many top kernels to list.",
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
    "--fail-on",
    type=click.Choice(list(SEVERITIES)),
    default=None,
    help="Exit with status 1 when a finding is at or above this severity.",
)
@click.option(
    "--jobs",
    type=click.IntRange(min=1),
    default=None,
    help="For a folder of per-rank traces: worker processes that read and analyse the ranks "
    "(default: all cores; 1: one rank after the other in this process).",
)
@click.option(
    "--dask-scheduler",
    default=None,
    metavar="ADDR",
    help="For a folder of per-rank traces: analyse the ranks on this dask.distributed "
    "scheduler's workers (pip install 'traceanalyzer[dask]'); the files must be readable there "
    "at the same path.",
)
@click.option(
    "--ncu",
    "ncu",
    multiple=True,
    type=click.Path(path_type=str, dir_okay=False),
    metavar="FILE",
    help="An Nsight Compute export of the same program (ncu --csv --page raw, or .ncu-rep "
    "with --ncu-path), joined to the trace's kernels: measured DRAM bytes, Tensor Core pipe, "
    "registers, occupancy. Repeatable.",
)
@click.option(
    "--ncu-path",
    "ncu_path",
    type=click.Path(path_type=str, file_okay=False),
    default=None,
    metavar="DIR",
    help="The Nsight Compute install (or its extras/python) whose ncu_report module reads "
    ".ncu-rep files.",
)
@analysis_options
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
    jobs: int | None,
    dask_scheduler: str | None,
    ncu: tuple[str, ...],
    ncu_path: str | None,
    all_steps: bool,
    nsys: str | None,
    debug: bool,
) -> None:
    """Report where GPU time went in TRACE: a torch.profiler trace (.json, .json.gz), a folder
    of per-rank traces, an Nsight Systems SQLite export, or an Nsight Systems report
    (.nsys-rep, exported with nsys). A folder's ranks are each read and analysed alone, in
    parallel, and only their results are merged: memory stays bounded by the largest rank.
    With --ncu, Nsight Compute's kernels are matched to the trace's by name and launch order;
    the trace's durations are kept, ncu's measured figures join them."""

    def job() -> None:
        _use_nsys(nsys)
        settings = load_settings(config, overrides, fail_on)
        rep = api.report(
            trace,
            top_n=top,
            step_pattern=step_pattern,
            launch_gap_max_ns=round(launch_gap_us * 1000),
            settings=settings,
            all_steps=all_steps,
            jobs=jobs,
            dask_scheduler=dask_scheduler,
            ncu=ncu,
            ncu_path=ncu_path,
        )
        api.write(rep, fmt, output)
        if api.gate(rep, settings):
            sys.exit(EXIT_FINDINGS)

    _run(job, debug)


@cli.command()
@click.argument("trace", type=click.Path(path_type=str))
@click.option(
    "-o",
    "--output",
    required=True,
    help="The annotated trace (gzip JSON), e.g. annotated.json.gz; a folder for a folder of "
    "rank traces.",
)
@analysis_options
def annotate(
    trace: str,
    output: str,
    step_pattern: str | None,
    all_steps: bool,
    config: Path | None,
    overrides: tuple[str, ...],
    nsys: str | None,
    debug: bool,
) -> None:
    """Write TRACE back with what the analysis found, for Perfetto or chrome://tracing:
    counter tracks (busy, idle by cause, exposed communication) and, per finding, a track
    with a slice over each span it is about."""

    def job() -> None:
        from traceanalyzer.annotate import annotate as run

        _use_nsys(nsys)
        settings = load_settings(config, overrides, None)
        written = run(
            trace, output, settings=settings, step_pattern=step_pattern, all_steps=all_steps
        )
        for done in written:
            click.echo(f"{done.path}: {done.counters} counter samples, {done.markers} markers")

    _run(job, debug)


@cli.command()
@click.argument("paths", nargs=-1, required=True)
@click.option(
    "--out-dir",
    required=True,
    type=click.Path(path_type=Path),
    help="Folder for summary.parquet/csv, per-run reports and the cache.",
)
@click.option(
    "--summary-format",
    type=click.Choice(["parquet", "csv"]),
    default="parquet",
    show_default=True,
    help="Format of the summary table.",
)
@click.option(
    "--jobs",
    type=click.IntRange(min=1),
    default=None,
    help="Worker processes (default: all cores).",
)
@click.option("--html", is_flag=True, help="Also write an HTML report per run.")
@click.option("--no-cache", is_flag=True, help="Analyse every run again, even unchanged ones.")
@click.option(
    "--dask-scheduler",
    default=None,
    metavar="ADDR",
    help="Send the runs to this dask.distributed scheduler (pip install 'traceanalyzer[dask]').",
)
@click.option(
    "--max-unpacked",
    "max_unpacked_gib",
    type=click.FloatRange(min=0, min_open=True),
    default=DEFAULT_MAX_UNPACKED / 2**30,
    show_default=True,
    help="The most GiB one archive may unpack to (also at most 250x its size).",
)
@analysis_options
def batch(
    paths: tuple[str, ...],
    out_dir: Path,
    summary_format: str,
    jobs: int | None,
    html: bool,
    no_cache: bool,
    dask_scheduler: str | None,
    max_unpacked_gib: float,
    step_pattern: str | None,
    all_steps: bool,
    config: Path | None,
    overrides: tuple[str, ...],
    nsys: str | None,
    debug: bool,
) -> None:
    """Analyse many runs (PATHS: trace files, folders, globs, .tar/.tar.gz/.zip archives)
    into one summary table; exit 1 when any run failed. Settings apply as for `report`, and
    a cached run is analysed again when they change."""

    def job() -> None:
        _use_nsys(nsys)
        options = Options(load_settings(config, overrides), step_pattern, all_steps)
        summary = run_batch_with_progress(
            list(paths),
            out_dir,
            jobs=jobs,
            html=html,
            cache=not no_cache,
            dask_scheduler=dask_scheduler,
            options=options,
            max_unpacked=int(max_unpacked_gib * 2**30),
        )
        table = write_summary(summary, out_dir, summary_format)
        failed = summary.filter(summary["error"].is_not_null())
        click.echo("\n".join(batch_lines(summary, plain_width())))
        click.echo(f"{summary.height} runs, {failed.height} failed; summary: {table}")
        for run, error in failed.select("run", "error").iter_rows():
            click.echo(f"  failed: {run}: {error}", err=True)
        if failed.height:
            sys.exit(EXIT_FINDINGS)

    _run(job, debug)


@cli.command()
@click.argument("before")
@click.argument("after")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["terminal", "json", "html"]),
    default=None,
    help="Output format (default: from the -o suffix, else terminal).",
)
@click.option("-o", "--output", default=None, help="Write to this file instead of stdout.")
@DEBUG
def compare(before: str, after: str, fmt: str | None, output: str | None, debug: bool) -> None:
    """Show what changed from BEFORE to AFTER: traces, report JSON files, or batch summary
    rows as SUMMARY.parquet#RUN."""

    def job() -> None:
        diff = compare_reports(load_report(before), load_report(after))
        kind = fmt or next(
            (
                k
                for k, sfx in (("json", ".json"), ("html", ".html"))
                if (output or "").lower().endswith(sfx)
            ),
            "terminal",
        )
        if kind == "json":
            text = orjson.dumps(diff, option=orjson.OPT_INDENT_2).decode() + "\n"
        elif kind == "html":
            text = render_compare_html(diff)
        else:
            to_tty = output in (None, "-") and sys.stdout.isatty()
            text = render_text(diff, colour=to_tty and not os.environ.get("NO_COLOR"))
        if output in (None, "-"):
            click.echo(text, nl=False)
        else:
            write_text_atomic(Path(output), text, [before, after])

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
    click.echo(rule_page(rule.code), nl=False)


@cli.command()
def schema() -> None:
    """Print the timeline's event schema."""
    click.echo(schema_markdown(), nl=False)


def _use_nsys(nsys: str | None) -> None:
    """`--nsys PATH`: the nsys that exports reports, here and in batch's workers."""
    if nsys:
        os.environ["NSYS"] = nsys


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
    except termination.Terminated:
        click.echo("terminated", err=True)
        sys.exit(128 + signal.SIGTERM)
    except BrokenPipeError:
        sys.exit(EXIT_OK)
    except OSError as exc:  # the file system refused: a name too long, a full disk, ...
        if debug or exc.filename is None:
            raise
        hint = {
            errno.ENAMETOOLONG: "use a shorter file name (most file systems allow 255 bytes)",
            errno.ENOSPC: "free some disk space",
            errno.EACCES: "check the file's permissions",
        }.get(exc.errno or 0, "check the path")
        click.echo(f"error: {exc.filename}: {exc.strerror or exc} (hint: {hint})", err=True)
        sys.exit(EXIT_INPUT_ERROR)
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


def run_batch_with_progress(args: list[str], out_dir: Path, **options: Any) -> pl.DataFrame:
    """run_batch with a progress bar (runs done, failures, ETA) on stderr when it is a TTY."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    from traceanalyzer.batch import run_batch

    failures = 0
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TextColumn("failed {task.fields[failed]}"),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        disable=not sys.stderr.isatty(),
    ) as progress:
        task = progress.add_task("analysing", total=None, failed=0)

        def step(row: dict[str, Any], total: int) -> None:
            nonlocal failures
            failures += row.get("error") is not None
            progress.update(task, total=total, advance=1, failed=failures)

        return run_batch(args, out_dir, on_result=step, **options)


def main() -> None:
    """Console-script entry point.

    When the command is done the process ends at once (`os._exit`) instead of tearing the
    interpreter down: freeing a large trace's frames one by one took about 0.3 s after the
    report of a 1 GB trace was already written. Every output is written and closed by then
    (reports are renamed into place by `write_text_atomic`); the streams are flushed here.
    """
    termination.install()
    try:
        cli(prog_name="traceanalyzer")
        code = 0
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            code = exc.code or 0
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    with contextlib.suppress(BrokenPipeError, ValueError):
        timings.print_lines()
    for stream in (sys.stdout, sys.stderr):
        # `| head` may have closed the pipe, or the stream may be closed already
        with contextlib.suppress(BrokenPipeError, ValueError):
            stream.flush()
    os._exit(code)
