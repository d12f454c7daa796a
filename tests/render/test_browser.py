"""The HTML post-mortem in a real browser: headless chromium, offline, from file://.

Skips where chromium is not installed (`.ci/run` installs Debian's package). Chromium logs
every console message, errors and Content-Security-Policy violations included, as a
`:CONSOLE` line on stderr with `--enable-logging=stderr`; the page must log none.
"""

from __future__ import annotations

import html
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest
from matplotlib import image

from tests.conftest import SAMPLES
from tests.render.helpers import SCRIPT_NAME, evil_trace, external_references, page_for, parse
from tests.render.test_html import SECTIONS

BROWSER = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(BROWSER is None, reason="chromium is not installed")

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-default-apps",
    "--hide-scrollbars",
    "--enable-logging=stderr",
    "--v=0",
]


def chromium(page: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run headless chromium on `page` with a fresh profile; stdout and stderr as text."""
    assert BROWSER is not None
    profile = tempfile.mkdtemp(prefix="profile-", dir=tmp_path)
    cmd = [BROWSER, *FLAGS, f"--user-data-dir={profile}", *args, page.resolve().as_uri()]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


def console_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if ":CONSOLE" in line or "Uncaught" in line]


#: Runs in a host page around the report, which sits in a phone-wide iframe (headless
#: chromium will not make its own window narrower than 500 px): lists every element that
#: reaches past the frame's right edge outside a scrolling box, and the width of each
#: finding's text cell.
PROBE = """<script>
window.addEventListener("load", function () {
  var doc = document.getElementById("f").contentDocument, vw = doc.documentElement.clientWidth;
  var out = ["viewport " + vw, "scroll " + doc.documentElement.scrollWidth];
  doc.querySelectorAll("body *").forEach(function (e) {
    var inside = e.parentElement && e.parentElement.closest(".scroll, figure");
    if (!inside && !e.closest("svg") && e.getBoundingClientRect().right > vw + 1) {
      out.push("overflow " + e.tagName.toLowerCase() + "." + e.className);
    }
  });
  doc.querySelectorAll("table.findings > tbody > tr > td:last-child").forEach(function (e) {
    out.push("finding " + Math.round(e.getBoundingClientRect().width));
  });
  var pre = document.createElement("pre");
  pre.id = "probe";
  pre.textContent = out.join("\\n");
  document.body.appendChild(pre);
});
</script>"""


def narrow_layout(page: str, tmp_path: Path, width: int = 375) -> list[str]:
    """The probe's lines for `page` laid out `width` CSS px wide."""
    host = tmp_path / "host.html"
    host.write_text(
        '<!DOCTYPE html><html><body style="margin:0"><iframe id="f" style="border:0" '
        f'width="{width}" height="2000" srcdoc="{html.escape(page, quote=True)}"></iframe>'
        f"{PROBE}</body></html>",
        encoding="utf-8",
    )
    run = chromium(host, tmp_path, "--dump-dom", "--window-size=800,2000")
    probe = re.search(r'<pre id="probe">(.*?)</pre>', run.stdout, re.S)
    assert probe is not None, run.stderr[-2000:]
    return probe.group(1).splitlines()


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("pages")
    out = {}
    for name, src in (
        ("healthy", SAMPLES / "train_bf16_healthy.json.gz"),
        ("evil", evil_trace(root)),
        ("two_ranks", SAMPLES / "sampled_2rank"),
    ):
        path = root / f"{name}.html"
        path.write_text(page_for(src), encoding="utf-8")
        out[name] = path
    return out


def test_console_check_catches_errors(tmp_path: Path) -> None:
    """The negative control: a page with a script error and a blocked fetch is caught."""
    bad = tmp_path / "bad.html"
    bad.write_text(
        "<!DOCTYPE html><meta http-equiv='Content-Security-Policy' content=\"default-src 'none'\">"
        "<img src='https://example.invalid/x.png'><p>x</p>"
    )
    assert console_lines(chromium(bad, tmp_path, "--dump-dom").stderr)


@pytest.mark.parametrize("name", ["healthy", "evil"])
def test_dom_has_the_sections_and_no_console_errors(
    name: str, pages: dict[str, Path], tmp_path: Path
) -> None:
    run = chromium(pages[name], tmp_path, "--dump-dom")
    assert run.returncode == 0, run.stderr[-2000:]
    dom = run.stdout
    ids = {a.get("id") for _t, a in parse(dom).tags}
    assert set(SECTIONS) <= ids
    assert console_lines(run.stderr) == []
    # The sort script ran (CSP allowed it by hash): it made the headers focusable.
    assert 'tabindex="0"' in dom
    assert external_references(dom) == []
    if name == "evil":
        assert SCRIPT_NAME not in dom and "<img" not in dom
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in dom


def test_screenshot_is_not_blank(pages: dict[str, Path], tmp_path: Path) -> None:
    shot = tmp_path / "page.png"
    run = chromium(pages["healthy"], tmp_path, f"--screenshot={shot}", "--window-size=1280,2000")
    assert run.returncode == 0 and shot.exists(), run.stderr[-2000:]
    pixels = image.imread(shot)
    assert pixels.shape[0] >= 1000 and pixels.shape[1] >= 1000
    colours = np.unique(pixels.reshape(-1, pixels.shape[-1])[::97], axis=0)
    assert len(colours) > 20  # text, tables and the figures' colours, not one flat fill
    assert console_lines(run.stderr) == []


def test_narrow_check_catches_overflow(tmp_path: Path) -> None:
    """The negative control: a table wider than the phone, outside a scrolling box."""
    wide = "<table><tr>" + "<td>x" * 60 + "</table>"
    lines = narrow_layout(f"<!DOCTYPE html><body>{wide}</body>", tmp_path)
    assert "viewport 375" in lines and any(x.startswith("overflow table") for x in lines)


@pytest.mark.parametrize("name", ["healthy", "two_ranks"])
def test_phone_width_nothing_overflows(name: str, pages: dict[str, Path], tmp_path: Path) -> None:
    """At 375 px, wide tables scroll in their own box, and a finding's text gets the width
    (it used to collapse to a word per line beside the finding table's other columns)."""
    lines = narrow_layout(pages[name].read_text(encoding="utf-8"), tmp_path)
    assert "viewport 375" in lines and "scroll 375" in lines, lines[:5]
    assert [x for x in lines if x.startswith("overflow")] == []
    widths = [int(x.split()[1]) for x in lines if x.startswith("finding ")]
    assert widths and min(widths) >= 300


def test_roofline_and_ranks_in_the_browser(pages: dict[str, Path], tmp_path: Path) -> None:
    """The healthy page's FLOPs section draws the roofline (an inline SVG with its roof and
    points); the two-rank page shows the Ranks table; neither logs an error."""
    healthy = chromium(pages["healthy"], tmp_path, "--dump-dom")
    dom = healthy.stdout
    section = dom[dom.index('<section id="flops">') :]
    section = section[: section.index("</section>")]
    assert "<svg" in section and "arithmetic intensity" in section and "roof" in section
    assert console_lines(healthy.stderr) == []
    two = chromium(pages["two_ranks"], tmp_path, "--dump-dom")
    assert 'id="ranks"' in two.stdout and "peer wait" in two.stdout
    assert console_lines(two.stderr) == []


def test_every_figures_tick_labels_are_text(pages: dict[str, Path], tmp_path: Path) -> None:
    """In every page the browser renders, every figure's text (tick labels included) is
    plain text: no mathtext source (`$\\mathdefault{10^{3}}$`) shows; the roofline's log
    axes carry numbers."""
    for name, page in pages.items():
        dom = chromium(page, tmp_path, "--dump-dom").stdout
        texts = [html.unescape(t) for t in re.findall(r"<text[^>]*>([^<]*)</text>", dom)]
        assert texts, name
        assert not [t for t in texts if "$" in t or "mathdefault" in t], name
        if 'id="flops"' in dom and "arithmetic intensity" in dom:
            flops = dom[dom.index('<section id="flops">') :]
            labels = re.findall(r"<text[^>]*>([^<]*)</text>", flops[: flops.index("</section>")])
            assert any(re.fullmatch(r"[0-9.]+", t.strip()) for t in labels), name


def test_the_timeline_zooms_to_a_window(pages: dict[str, Path], tmp_path: Path) -> None:
    """The page's zoom view draws the bins of the window its address names (#zoom=10,30: ms
    from the window's start), and the whole window without one; no console error."""
    assert BROWSER is not None
    page = pages["healthy"]
    profile = tempfile.mkdtemp(prefix="profile-", dir=tmp_path)
    zoomed = subprocess.run(
        [
            BROWSER,
            *FLAGS,
            f"--user-data-dir={profile}",
            "--dump-dom",
            page.resolve().as_uri() + "#zoom=10,30",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    view = re.search(
        r'<svg id="zoom-view"[^>]*data-from-ms="([0-9.]+)" data-to-ms="([0-9.]+)"', zoomed.stdout
    )
    assert view is not None and view.groups() == ("10.00", "30.00")
    body = zoomed.stdout[view.start() : zoomed.stdout.index("</svg>", view.start())]
    assert body.count("<rect") > 10
    assert console_lines(zoomed.stderr) == []
    whole = chromium(page, tmp_path, "--dump-dom").stdout
    full = re.search(r'<svg id="zoom-view"[^>]*data-from-ms="([0-9.]+)"', whole)
    assert full is not None and full.group(1) == "0.00"
