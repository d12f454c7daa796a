"""Rule documentation, generated from the rules themselves (docs/rules/ and `traceanalyzer
rule CODE`): docstring sections, thresholds, and the worked example with its finding.

The pages are generated ahead of time (`python -m traceanalyzer.docgen`, which runs each
rule's example through the pipeline, so this module sits above the API) into docs/rules/ and
into the package (`rules/pages/`); `rules.rule_pages.rule_page` reads the packaged page, so
the HTML renderer and `traceanalyzer rule` never run an analysis. A test checks that both
copies are up to date."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from traceanalyzer import api
from traceanalyzer.config import Settings
from traceanalyzer.render.base import static_text
from traceanalyzer.rules import rule_pages
from traceanalyzer.rules.base import DOC_SECTIONS, Rule
from traceanalyzer.rules.examples import write_example
from traceanalyzer.rules.rule_pages import PAGES


def example_findings(rule: type[Rule], bad: bool = True) -> list[str]:
    """Run the whole pipeline on the rule's example trace; the finding lines it produces."""
    events = rule.example_bad if bad else rule.example_good
    with tempfile.TemporaryDirectory() as tmp:
        path = write_example(events, Path(tmp), f"{rule.code}_{'bad' if bad else 'good'}")
        rep = api.report(path, settings=Settings(select=(rule.code,)))
    return [f"[{f.severity.value}] {f.rule} {f.title}: {f.message}" for f in rep.findings]


def rule_markdown(rule: type[Rule]) -> str:
    """The page for one rule."""
    docs = rule.docs()
    summary = (rule.__doc__ or "").strip().splitlines()[0]
    lines = [
        f"# {rule.code} {rule.slug}: {rule.title}",
        "",
        summary,
        "",
        f"Category `{rule.category}`; default severity `{rule.default_severity.value}` "
        "(the severity follows the share of step time a fix would save, where that is known).",
        "",
    ]
    extra = [s for s in docs if s not in DOC_SECTIONS]  # optional: Impact estimate, References
    for section in (*DOC_SECTIONS, *extra):
        lines += [f"## {section}", "", docs[section], ""]
    fields = rule.threshold_fields()
    lines += ["## Thresholds", ""]
    if fields:
        lines += ["| name | default | meaning |", "| --- | --- | --- |"]
        lines += [f"| `{f.name}` | {f.default} | {f.metadata['help']} |" for f in fields]
        lines += [
            "",
            "Set them in `pyproject.toml`:",
            "",
            "```toml",
            f"[tool.traceanalyzer.rules.{rule.code}]",
        ]
        lines += [f"{f.name.replace('_', '-')} = {f.default}" for f in fields]
        lines += ["```", "", f"or once: `--set {rule.code}.{fields[0].name}=VALUE`.", ""]
    else:
        lines += ["None.", ""]
    lines += [
        "## Advice",
        "",
        rule.advice,
        "",
        "## Example",
        "",
        "The rule's bad example trace (see the rule's module) gives:",
        "",
        "```",
    ]
    lines += example_findings(rule) or ["(no finding)"]
    lines += ["```", ""]
    return "\n".join(lines)


#: Where the generated pages ship inside the package.
def index_markdown(rules: list[type[Rule]]) -> str:
    """docs/rules/README.md: one line per rule."""
    lines = ["# Rules", "", "| code | slug | category | title |", "| --- | --- | --- | --- |"]
    lines += [f"| [{r.code}]({r.code}.md) | {r.slug} | {r.category} | {r.title} |" for r in rules]
    return "\n".join(lines) + "\n"


def write_docs(folder: Path, rules: list[type[Rule]]) -> list[Path]:
    """(Re)write docs/rules/ and the packaged pages; returns the files written."""
    folder.mkdir(parents=True, exist_ok=True)
    packaged = Path(rule_pages.__file__).parent / PAGES
    packaged.mkdir(exist_ok=True)
    written = []
    for rule in rules:
        page = rule_markdown(rule)
        for path in (folder / f"{rule.code}.md", packaged / f"{rule.code}.md"):
            path.write_text(page, encoding="utf-8")
            written.append(path)
    index = folder / "README.md"
    index.write_text(index_markdown(rules), encoding="utf-8")
    # the glossary ships in the package (the HTML page embeds it); docs/ holds a copy
    glossary = folder.parent / "glossary.md"
    glossary.write_text(static_text("glossary.md"), encoding="utf-8")
    return [*written, index, glossary]


def main() -> None:
    """`python -m traceanalyzer.docgen [FOLDER]`: regenerate docs/rules/."""
    from traceanalyzer.rules import ALL_RULES

    folder = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("docs/rules")
    for path in write_docs(folder, ALL_RULES):
        print(path)


if __name__ == "__main__":
    main()
