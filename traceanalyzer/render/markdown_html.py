"""A small Markdown-to-HTML converter for the rule docs the HTML report embeds.

It covers what `docgen.rule_markdown` writes: headings, paragraphs, `-` lists, fenced
code, pipe tables, inline code and bold. Every piece of text is escaped first; links are
shown as text with their target in brackets, never as `href` (the page fetches nothing).
"""

from __future__ import annotations

import re

from markupsafe import Markup, escape

_CODE = re.compile(r"`([^`]+)`")
_BOLD = re.compile(r"\*\*([^*]+)\*\*")
_LINK = re.compile(r"\[([^\]]+)\]\(([^)]+)\)")


def _inline(text: str) -> str:
    out = str(escape(text))
    out = _LINK.sub(r"\1 (\2)", out)
    out = _CODE.sub(r"<code>\1</code>", out)
    return _BOLD.sub(r"<strong>\1</strong>", out)


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def markdown_html(text: str, heading_offset: int = 2) -> Markup:
    """Convert `text` to HTML; `# h` becomes `<h{1 + heading_offset}>`."""
    out: list[str] = []
    para: list[str] = []
    lines = text.splitlines()

    def flush() -> None:
        if para:
            out.append(f"<p>{_inline(' '.join(para))}</p>")
            para.clear()

    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        if stripped.startswith("```"):
            flush()
            body: list[str] = []
            i += 1
            while i < len(lines) and not lines[i].strip().startswith("```"):
                body.append(lines[i])
                i += 1
            out.append(f"<pre><code>{escape(chr(10).join(body))}</code></pre>")
        elif m := re.match(r"^(#{1,6})\s+(.*)$", stripped):
            flush()
            level = min(len(m.group(1)) + heading_offset, 6)
            out.append(f"<h{level}>{_inline(m.group(2))}</h{level}>")
        elif stripped.startswith("|"):
            flush()
            rows: list[list[str]] = []
            while i < len(lines) and lines[i].strip().startswith("|"):
                cells = _cells(lines[i])
                if not all(re.fullmatch(r":?-+:?", c) for c in cells):
                    rows.append(cells)
                i += 1
            i -= 1
            head = "".join(f"<th>{_inline(c)}</th>" for c in rows[0]) if rows else ""
            body_rows = "".join(
                "<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in r) + "</tr>" for r in rows[1:]
            )
            out.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body_rows}</tbody></table>")
        elif stripped.startswith(("- ", "* ")):
            flush()
            items: list[str] = []
            while i < len(lines) and lines[i].strip():
                item = lines[i].strip()
                if item.startswith(("- ", "* ")):
                    items.append(item[2:])
                elif items:
                    items[-1] += " " + item
                i += 1
            i -= 1
            out.append("<ul>" + "".join(f"<li>{_inline(x)}</li>" for x in items) + "</ul>")
        elif not stripped:
            flush()
        else:
            para.append(stripped)
        i += 1
    flush()
    return Markup("\n".join(out))
