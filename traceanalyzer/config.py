"""Settings: rule selection, per-rule thresholds and the CI gate, from TOML and the CLI.

Read from `traceanalyzer.toml` (top level) or `pyproject.toml` (`[tool.traceanalyzer]`) in
the working directory, or a file given with `--config`; `--set TA001.name=value` overrides
one threshold. Unknown rule codes and unknown keys are errors: a silently ignored typo in a
CI gate is worse than a crash.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from traceanalyzer.errors import ConfigError

#: The severities, mildest first (rules.base.Severity's values; kept here as text so that
#: settings load without importing the rules).
SEVERITIES = ("info", "warning", "critical")
_TOP_KEYS = {"select", "ignore", "fail-on", "rules"}


@dataclass(frozen=True, slots=True)
class Settings:
    """What the rules run with. `thresholds` maps a rule code to {field name: value}."""

    select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    fail_on: str | None = None
    thresholds: dict[str, dict[str, Any]] = field(default_factory=dict)
    source: str | None = None

    def enabled(self, code: str) -> bool:
        """A rule runs when selected (by prefix; all when none) and not ignored."""
        selected = not self.select or any(code.startswith(p) for p in self.select)
        return selected and not any(code.startswith(p) for p in self.ignore)


def _table(path: Path) -> dict[str, Any] | None:
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(
            f"cannot read the settings ({exc})", path=path, hint="fix the TOML syntax"
        ) from exc
    if path.name == "pyproject.toml":
        tool = doc.get("tool", {})
        return tool.get("traceanalyzer") if isinstance(tool, dict) else None
    return doc


def load_settings(
    config: Path | None = None,
    overrides: tuple[str, ...] = (),
    fail_on: str | None = None,
    cwd: Path | None = None,
) -> Settings:
    """Settings from `config`, or the working directory's traceanalyzer.toml/pyproject.toml,
    then `--set` overrides and `--fail-on`."""
    here = cwd or Path.cwd()
    table: dict[str, Any] = {}
    source: str | None = None
    candidates = [config] if config else [here / "traceanalyzer.toml", here / "pyproject.toml"]
    for path in candidates:
        if path is None or not path.is_file():
            if config is not None:
                raise ConfigError("no such settings file", path=config, hint="check the path")
            continue
        found = _table(path)
        if found is not None:
            table, source = found, str(path)
            break
    unknown = set(table) - _TOP_KEYS
    if unknown:
        raise ConfigError(
            f"unknown settings {sorted(unknown)}",
            path=source,
            hint=f"valid keys: {', '.join(sorted(_TOP_KEYS))}",
        )
    thresholds: dict[str, dict[str, Any]] = {
        code: {k.replace("-", "_"): v for k, v in values.items()}
        for code, values in (table.get("rules") or {}).items()
    }
    for item in overrides:
        code, _, rest = item.partition(".")
        key, eq, raw = rest.partition("=")
        if not code or not key or not eq:
            raise ConfigError(
                f"--set {item!r} is not CODE.name=value",
                hint="e.g. --set TA001.min_host_wait_share=0.2",
            )
        try:
            value = tomllib.loads(f"v = {raw}")["v"]
        except tomllib.TOMLDecodeError:
            value = raw
        thresholds.setdefault(code, {})[key.replace("-", "_")] = value
    gate = fail_on or table.get("fail-on")
    if gate is not None and gate not in SEVERITIES:
        raise ConfigError(
            f"fail-on must be one of {', '.join(SEVERITIES)}, not {gate!r}", path=source
        )
    return Settings(
        select=tuple(table.get("select", ())),
        ignore=tuple(table.get("ignore", ())),
        fail_on=gate,
        thresholds=thresholds,
        source=source,
    )
