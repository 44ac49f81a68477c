"""The headless-Chromium helper (tests/browser.py) against small pages.

Each test writes its page into tmp_path. Tests that need Chromium skip, with
the reason, when it is not installed.
"""
import base64
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

# The repository root, so `tests.browser` imports however pytest was started
# (`python -m pytest` from the root has it on sys.path already).
ROOT = str(Path(__file__).resolve().parents[2])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from tests import browser  # noqa: E402
from tests.browser import chromium_path, render  # noqa: E402

SVG = base64.b64encode(b'<svg xmlns="http://www.w3.org/2000/svg" width="40" height="20">'
                       b'<rect width="40" height="20" fill="teal"/></svg>').decode()
SVG_IMG = f"data:image/svg+xml;base64,{SVG}"


@pytest.fixture
def chromium():
    path = chromium_path()
    if path is None:
        pytest.skip("chromium is not installed (Debian package chromium)")
    return path


def page(tmp_path: Path, body: str, title: str = "t") -> Path:
    path = tmp_path / "page.html"
    path.write_text(f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title>"
                    f"</head><body>{body}</body></html>")
    return path


def live_processes(pgid: int, marker: str) -> list[str]:
    """Live processes in group pgid or with marker on their command line (checked apart from browser.py)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if stat[0] != b"Z" and (int(stat[2]) == pgid or marker.encode() in cmd):
            found.append(f"{pid} {cmd[:120]!r}")
    return found


@pytest.fixture
def started(monkeypatch):
    """What render started: the Popen handles and its temporary directories."""
    record = {"procs": [], "dirs": []}
    real_popen, real_mkdtemp = subprocess.Popen, tempfile.mkdtemp

    def popen(*args, **kwargs):
        proc = real_popen(*args, **kwargs)
        record["procs"].append(proc)
        return proc

    def mkdtemp(*args, **kwargs):
        path = real_mkdtemp(*args, **kwargs)
        record["dirs"].append(path)
        return path

    monkeypatch.setattr(browser.subprocess, "Popen", popen)
    monkeypatch.setattr(browser.tempfile, "mkdtemp", mkdtemp)
    return record


def assert_nothing_left(started):
    assert len(started["procs"]) == 1 and len(started["dirs"]) == 1
    proc, work = started["procs"][0], started["dirs"][0]
    assert proc.returncode is not None, "chromium was not waited for"
    assert live_processes(proc.pid, work + "/") == []
    assert not os.path.exists(work), "temporary profile left behind"


def test_clean_page(chromium, tmp_path, started):
    body = ("<h1>Results</h1><p>Two figures follow.</p>"
            f"<figure><img src='{SVG_IMG}' alt='first'><figcaption>One</figcaption></figure>"
            f"<figure><img src='{SVG_IMG}' alt='second'><figcaption>Two</figcaption></figure>")
    t0 = time.monotonic()
    r = render(page(tmp_path, body, title="Clean report"))
    elapsed = time.monotonic() - t0
    assert r.console_errors == []
    assert r.exceptions == []
    assert r.external_requests == []
    assert r.failed_requests == []
    assert (r.figures, r.images, r.images_broken, r.svg_inline) == (2, 2, [], 0)
    assert r.title == "Clean report"
    assert "Results" in r.text and "Two figures follow." in r.text
    assert elapsed < 10, f"a render took {elapsed:.1f} s"
    assert_nothing_left(started)


def test_inline_svg_counts_outermost(chromium, tmp_path):
    body = ("<figure><svg width='10' height='10'><svg width='5' height='5'></svg></svg></figure>"
            "<svg width='10' height='10'></svg>")
    r = render(page(tmp_path, body))
    assert (r.figures, r.svg_inline, r.images) == (1, 2, 0)


def test_console_error(chromium, tmp_path):
    r = render(page(tmp_path, '<script>console.log("fine"); console.error("boom")</script>'))
    assert r.console_errors == ["boom"]
    assert r.exceptions == []


def test_console_assert(chromium, tmp_path):
    r = render(page(tmp_path, '<script>console.assert(1 === 1, "holds"); '
                              'console.assert(1 === 2, "fails")</script>'))
    assert r.console_errors == ["fails"]


def test_uncaught_exception(chromium, tmp_path):
    r = render(page(tmp_path, '<p>before</p><script>throw new Error("kaput")</script>'))
    assert len(r.exceptions) == 1 and "kaput" in r.exceptions[0]
    assert r.console_errors == []
    assert "before" in r.text


def test_external_request_recorded_and_bounded(chromium, tmp_path, started):
    url = "http://198.18.0.1/x.png"
    t0 = time.monotonic()
    r = render(page(tmp_path, f'<img src="{url}" alt="remote">'))
    elapsed = time.monotonic() - t0
    assert r.external_requests == [url]
    assert len(r.failed_requests) == 1 and r.failed_requests[0].startswith(url + " net::ERR_")
    assert r.images_broken == ["remote"]
    assert any(url in e for e in r.console_errors)  # "Failed to load resource: ..."
    assert elapsed < 10, f"an unreachable image held the render for {elapsed:.1f} s"
    assert_nothing_left(started)


def test_requests_do_not_leave_the_browser(chromium, tmp_path):
    """Even loopback: a listening local server gets no connection."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.setblocking(False)
        url = f"http://127.0.0.1:{server.getsockname()[1]}/leak.png"
        r = render(page(tmp_path, f'<img src="{url}"><script>fetch("{url}?x").catch(() => 0)</script>'))
        with pytest.raises(BlockingIOError):
            server.accept()
    assert r.external_requests == [url, url + "?x"]


def test_broken_image(chromium, tmp_path):
    r = render(page(tmp_path, f'<img src="data:image/png;base64,AAAA"><img src="{SVG_IMG}">'))
    assert r.images == 2
    assert r.images_broken == ["data:image/png;base64,AAAA"]


def test_missing_image_file(chromium, tmp_path):
    r = render(page(tmp_path, '<img src="missing.png" alt="gone">'))
    assert r.images_broken == ["gone"]
    assert r.external_requests == []
    assert len(r.failed_requests) == 1 and "missing.png net::ERR_FILE_NOT_FOUND" in r.failed_requests[0]
    assert any("missing.png" in e for e in r.console_errors)


def test_hung_page_times_out_and_cleans_up(chromium, tmp_path, started):
    with pytest.raises(TimeoutError, match="did not finish loading"):
        render(page(tmp_path, "<script>while (true) {}</script>"), timeout_s=4)
    assert_nothing_left(started)


def test_missing_chromium(monkeypatch, tmp_path):
    monkeypatch.setattr(browser, "chromium_path", lambda: None)
    with pytest.raises(RuntimeError, match="chromium not found"):
        render(page(tmp_path, "<p>x</p>"))


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError):
        render(tmp_path / "nope.html")


# A figure whose SVG text is 6 px in a 400-unit-wide viewBox, shown 400 px wide,
# with two labels drawn over each other.
SMALL_TEXT_SVG = base64.b64encode(
    b'<svg xmlns="http://www.w3.org/2000/svg" width="400pt" height="100pt" '
    b'viewBox="0 0 400 100"><text x="10" y="50" style="font-size: 6px">tiny</text>'
    b'<text x="10" y="80" style="font: 12px sans-serif">big</text>'
    b'<text x="14" y="82" style="font: 12px sans-serif">over</text></svg>').decode()


def test_layout_check_catches_overlap_overflow_and_small_text(chromium, tmp_path):
    """The layout check at 1280 px can fail: a paragraph moved onto a heading, a table
    wider than the page, a figure with 6-pixel text and two labels on each other; and
    it takes a screenshot."""
    body = ("<h2>Ranking at a glance</h2>"
            "<p style='position:relative;top:-1.6em'>This paragraph sits on the heading.</p>"
            "<p>Clear of everything.</p>"
            "<table style='white-space:nowrap'><tr>" +
            "<td>1,234,567 [1,200,000, 1,300,000] (5)</td>" * 8 +
            "</tr></table>"
            f"<figure><img src='data:image/svg+xml;base64,{SMALL_TEXT_SVG}' alt='small'"
            " style='width:400px'></figure>")
    shot = tmp_path / "page.png"
    r = render(page(tmp_path, body), width=1280, screenshot=shot)
    lay = r.layout
    assert lay.width <= 1280 and lay.text_boxes >= 11
    assert len(lay.overlaps) == 1
    assert lay.overlaps[0].startswith('h2 "Ranking at a glance" overlaps p "This paragraph')
    assert lay.page_width > 1280
    assert any(o.startswith("table reaches x ") for o in lay.overflows)
    assert any(o.startswith('td "1,234,567') for o in lay.overflows)
    assert not any("Clear of everything" in x for x in lay.overlaps + lay.overflows)
    (fig,) = lay.figures
    assert fig.width_px == 400 and fig.min_font_px == pytest.approx(6.0)
    assert fig.min_font_text == "tiny"
    assert len(fig.text_overlaps) == 1 and fig.text_overlaps[0].startswith(
        '"big" overlaps "over"')
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert lay.screenshot == shot


def test_screenshot_needs_a_width(tmp_path):
    with pytest.raises(ValueError, match="needs a width"):
        render(page(tmp_path, "<p>x</p>"), screenshot=tmp_path / "x.png")
