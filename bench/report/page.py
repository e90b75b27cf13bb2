"""The report's page writer: Markdown text (:func:`md_escape`, :func:`markdown_table`) and each page written
as ``<stem>.md`` with its standalone ``<stem>.html`` (:func:`write_page`).  Every page module uses it."""

from __future__ import annotations

import html
from pathlib import Path

from bench import results

NA = "—"  # a value that is not there (not measured, not defined)


_MD_SPECIAL = str.maketrans({**{c: "\\" + c for c in "\\`*_[]|>"}, "<": "&lt;"})


def md_escape(text: str) -> str:
    """Text as literal Markdown (no emphasis, code, links or table breaks from names such as early_exit)."""
    return str(text).translate(_MD_SPECIAL)


def markdown_table(header: list[str], table: list[list[str]]) -> str:
    def cells(values):
        return "| " + " | ".join(md_escape(v) for v in values) + " |"
    return "\n".join([cells(header), "|" + "|".join("---" for _ in header) + "|"] + [cells(r) for r in table])


PAGE_STYLE = """
body{font-family:system-ui,sans-serif;margin:0 auto;padding:1em 2em;max-width:1400px;line-height:1.4;color:#222}
nav.toc{border:1px solid #ddd;background:#fafafa;padding:.5em 1em;margin:1em 0}
nav.toc ul{margin:.2em 0;padding-left:1.2em}
div.table-wrap{overflow-x:auto;max-width:100%;margin:.5em 0 1em 0}
table{border-collapse:collapse;font-size:85%}
td,th{border:1px solid #ccc;padding:2px 6px;white-space:nowrap;text-align:left;vertical-align:top}
th{background:#f0f0f0}
img{max-width:100%;height:auto;display:block;margin:.5em 0}
code{background:#f3f3f3;padding:0 .2em}
"""


def render_html(markdown_text: str, title: str) -> str:
    """A Markdown page as standalone HTML (Python-Markdown with its ``tables`` and ``toc`` extensions):
    a table of contents, every table inside a horizontally scrolling container, images inline."""
    import markdown

    converter = markdown.Markdown(extensions=["tables", "toc", "sane_lists"],
                                  extension_configs={"toc": {"toc_depth": "2"}})
    body = converter.convert(markdown_text)
    body = body.replace("<table>", '<div class="table-wrap"><table>').replace("</table>", "</table></div>")
    toc = f'<nav class="toc"><strong>Contents</strong>{converter.toc}</nav>'
    first_heading_end = body.find("</h1>")
    body = body[:first_heading_end + 5] + "\n" + toc + body[first_heading_end + 5:] if first_heading_end >= 0 \
        else toc + body
    return (f"<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{html.escape(title)}</title><style>{PAGE_STYLE}</style></head><body>\n{body}\n</body></html>\n")


def write_page(reports_dir: Path | str, stem: str, markdown_text: str, title: str) -> list[str]:
    """Write ``<stem>.md`` and its standalone ``<stem>.html`` (:func:`render_html`) atomically into
    ``reports_dir``; return both paths."""
    out = Path(reports_dir)
    out.mkdir(parents=True, exist_ok=True)
    md, page = out / f"{stem}.md", out / f"{stem}.html"
    results.atomic_write_text(md, markdown_text)
    results.atomic_write_text(page, render_html(markdown_text, title))
    return [str(md), str(page)]
