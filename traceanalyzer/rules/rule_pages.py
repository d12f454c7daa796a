"""The rules' documentation pages as shipped in the package (`rules/pages/`), read without
running anything: the HTML renderer and `traceanalyzer rule CODE` show them. They are
generated ahead of time from the rules themselves by `python -m traceanalyzer.docgen`."""

from __future__ import annotations

from importlib import resources

#: The packaged pages' folder, beside this module.
PAGES = "pages"


def rule_page(code: str) -> str:
    """The generated page of rule `code`, as shipped in the package (no analysis runs)."""
    return (resources.files("traceanalyzer.rules") / PAGES / f"{code}.md").read_text(
        encoding="utf-8"
    )
