"""The HTML leaderboard renders as a page a researcher can read: checked in headless Chromium (Debian's
``chromium``, installed by scripts/setup.sh).  Markdown is rendered (no literal ``**`` or backticks), every
table-of-contents link resolves, wide tables sit in horizontally scrolling containers, every image loads,
and the page itself does not overflow the window."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from bench.report import build as report
from tests.test_report_files import PARITY_DEFAULT, _parity_rows

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

PROBE = """
<script>
window.addEventListener('load', () => {
  const out = {};
  const text = document.body.innerText;
  out.literal_markup = (text.match(/\\*\\*|`/g) || []).length;
  const links = [...document.querySelectorAll('nav.toc a')];
  out.toc_links = links.length;
  out.toc_unresolved = links.filter(a => !document.getElementById(decodeURIComponent(a.hash.slice(1)))).length;
  const tables = [...document.querySelectorAll('table')];
  out.tables = tables.length;
  out.tables_not_scrolling = tables.filter(t => {
    const box = t.parentElement; const s = getComputedStyle(box).overflowX;
    return !(s === 'auto' || s === 'scroll');
  }).length;
  out.wide_tables = tables.filter(t => t.scrollWidth > t.parentElement.clientWidth).length;
  const imgs = [...document.images];
  out.images = imgs.length;
  out.images_broken = imgs.filter(i => !(i.complete && i.naturalWidth > 0)).length;
  out.page_overflow = document.documentElement.scrollWidth - window.innerWidth;
  const pre = document.createElement('pre'); pre.id = 'bench-probe'; pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>
"""


def probe(page: Path, width: int = 1000) -> dict:
    """Load ``page`` (with the probe script appended) in headless Chromium and return what the probe saw."""
    probed = page.with_name("probed_" + page.name)
    probed.write_text(page.read_text().replace("</body>", PROBE + "</body>"))
    out = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--allow-file-access-from-files",
                          f"--window-size={width},900", "--virtual-time-budget=5000", "--dump-dom",
                          probed.as_uri()], capture_output=True, text=True, timeout=180)
    match = re.search(r'<pre id="bench-probe">(.*?)</pre>', out.stdout, flags=re.S)
    assert match, f"probe did not run; chromium said: {out.stderr[-2000:]}"
    return json.loads(match.group(1).replace("&quot;", '"'))


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (scripts/setup.sh installs Debian's chromium)")
def test_leaderboard_page_renders_in_chromium(tmp_path):
    res, out = tmp_path / "results", tmp_path / "reports"
    _parity_rows(res, PARITY_DEFAULT, 32, 0.1, "big")
    report.main(str(res), str(out), echo=lambda line: None)
    seen = probe(out / "leaderboard.html")
    assert seen["literal_markup"] == 0, seen
    assert seen["toc_links"] >= 2 and seen["toc_unresolved"] == 0, seen
    assert seen["tables"] >= 3 and seen["tables_not_scrolling"] == 0, seen
    assert seen["wide_tables"] >= 1, seen  # the rows table is wider than the window: it must scroll, not spill
    assert seen["images"] >= 2 and seen["images_broken"] == 0, seen
    assert seen["page_overflow"] <= 0, seen


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (scripts/setup.sh installs Debian's chromium)")
def test_probe_detects_the_defects_it_checks_for(tmp_path):
    """The checks can fail: a page with literal markup, a dead anchor, a bare wide table and a missing image."""
    page = tmp_path / "bad.html"
    wide = "<table><tr>" + "".join(f"<td>column-{i}-with-long-text</td>" for i in range(40)) + "</tr></table>"
    page.write_text("<!doctype html><html><body><nav class='toc'><a href='#nowhere'>x</a></nav>"
                    f"<p>**bold** and `code`</p>{wide}<img src='missing.png'></body></html>")
    seen = probe(page)
    assert seen["literal_markup"] >= 3 and seen["toc_unresolved"] == 1
    assert seen["tables_not_scrolling"] == 1 and seen["images_broken"] == 1 and seen["page_overflow"] > 0
