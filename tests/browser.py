"""Render a local HTML file in headless Chromium and report what happened.

A test helper, not part of fwbench: it drives Chromium over the DevTools
protocol (CDP) on a websocket, with nothing beyond the standard library and
websocket-client. Use it from a test as

    from tests.browser import chromium_path, render

    if chromium_path() is None:
        pytest.skip("chromium is not installed")
    page = render(tmp_path / "report.html")
    assert page.console_errors == [] and page.exceptions == []

Each render starts its own Chromium with a fresh temporary profile and always
stops it again (its whole process group, which holds only processes it
started) and removes the profile, also on errors and timeouts.

With `width=1280` the page is laid out in a viewport that wide and its layout is
checked (Rendered.layout): text boxes that overlap, text or boxes reaching past
the page's right edge, and each figure's rendered width with the smallest font
of its SVG at that width and the SVG's texts that overlap there; `screenshot=path`
also saves a PNG of the page (the first SCREENSHOT_MAX_PX of it) for a human.
From a shell:

    .venv/bin/python -m tests.browser results/<run>/report.html --screenshot shot.png

Nothing leaves the machine: Chromium's proxy is a local port that refuses
connections, so a request for http://... or https://... fails at once, yet it is
still seen (Network.requestWillBeSent) and listed in Rendered.external_requests.
"""
from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import websocket

# URL schemes that need no network. Anything else a page asks for is "external".
LOCAL_SCHEMES = frozenset({"file", "data", "blob", "about", "chrome-extension", "devtools",
                           "chrome", "chrome-error"})
QUIET_S = 0.3      # after the load event: settled once no event arrived for this long ...
SETTLE_MAX_S = 3.0  # ... or after this long at most
IMAGE_WAIT_MS = 2000  # at most this long for <img> still loading when the page is inspected
STOP_WAIT_S = 5.0   # SIGTERM, then SIGKILL after this long
VIEWPORT_H = 900    # the viewport's height when a width is set (the page scrolls)
SCREENSHOT_MAX_PX = 16000  # a screenshot covers at most this much of the page's height
OVERLAP_PX = 1.0    # two text boxes overlap when they share more than this both ways

# Runs in the page once it has loaded. Lazy images are switched to eager and
# every <img> gets a bounded chance to finish, so "broken" means broken.
_INSPECT_JS = """
(async () => {
  const imgs = Array.from(document.querySelectorAll('img'));
  for (const img of imgs) if (img.loading === 'lazy') img.loading = 'eager';
  await Promise.all(imgs.map(img => img.complete ? null : new Promise(done => {
    img.addEventListener('load', done, {once: true});
    img.addEventListener('error', done, {once: true});
    setTimeout(done, %d);
  })));
  const label = img => img.alt || (img.getAttribute('src') || img.currentSrc || '').slice(0, 60);
  return {
    figures: document.querySelectorAll('figure').length,
    images: imgs.length,
    images_broken: imgs.filter(img => !img.complete || img.naturalWidth === 0).map(label),
    svg_inline: document.querySelectorAll('svg:not(svg svg)').length,
    title: document.title,
    text: document.body ? document.body.innerText : '',
  };
})()
""" % IMAGE_WAIT_MS


# Runs in the page when a width was set. Text boxes are the boxes of the text itself
# (a Range over the element's contents), not of the element, so a table cell's
# padding or a heading's margin is no overlap; an element holding another of the
# selected ones is left to its children. A figure's SVG is read back from its data
# URI for the font sizes its <text> elements declare, in SVG user units.
_LAYOUT_JS = """
(async () => {
  const W = document.documentElement.clientWidth;
  const SEL = 'h1,h2,h3,h4,h5,h6,p,li,th,td,caption,figcaption,summary,dt,dd,pre';
  const name = el => el.tagName.toLowerCase() + ' "' +
      el.innerText.trim().replace(/\\s+/g, ' ').slice(0, 50) + '"';
  const boxes = [];
  for (const el of document.querySelectorAll(SEL)) {
    if (!el.innerText || !el.innerText.trim() || el.querySelector(SEL)) continue;
    const range = document.createRange();
    range.selectNodeContents(el);
    const rects = Array.from(range.getClientRects()).filter(r => r.width > 0 && r.height > 0);
    if (!rects.length) continue;
    boxes.push({name: name(el),
                l: Math.min(...rects.map(r => r.left)) + scrollX,
                r: Math.max(...rects.map(r => r.right)) + scrollX,
                t: Math.min(...rects.map(r => r.top)) + scrollY,
                b: Math.max(...rects.map(r => r.bottom)) + scrollY});
  }
  boxes.sort((x, y) => x.t - y.t);
  const overlaps = [];
  for (let i = 0; i < boxes.length; i++) {
    const a = boxes[i];
    for (let j = i + 1; j < boxes.length && boxes[j].t < a.b - %(tol)s; j++) {
      const b = boxes[j];
      const w = Math.min(a.r, b.r) - Math.max(a.l, b.l);
      const h = Math.min(a.b, b.b) - Math.max(a.t, b.t);
      if (w > %(tol)s && h > %(tol)s)
        overlaps.push(a.name + ' overlaps ' + b.name + ' (' + w.toFixed(0) + ' x ' +
                      h.toFixed(0) + ' px)');
    }
  }
  const overflows = [];
  for (const x of boxes)
    if (x.r > W + 0.5 || x.l < -0.5)
      overflows.push(x.name + ' spans x ' + x.l.toFixed(0) + '..' + x.r.toFixed(0) +
                     ' of a ' + W + ' px page');
  for (const el of document.querySelectorAll('table,figure,img,pre')) {
    const r = el.getBoundingClientRect();
    if (r.right + scrollX > W + 0.5)
      overflows.push(el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') +
                     ' reaches x ' + (r.right + scrollX).toFixed(0) + ' of a ' + W + ' px page');
  }
  // Each figure's SVG inline at its image's size, in a hidden holder, to measure
  // its text boxes. All holders go in before any is measured and come out after
  // the last: one layout of the page for all figures, not one each (at seed 000's
  // size, 18 figures on a 10,000-box page, that was ~0.7 s a figure). A holder is
  // absolutely placed, so neither it nor another holder moves any box measured.
  const figures = [], measure = [];
  for (const fig of document.querySelectorAll('figure')) {
    const img = fig.querySelector('img');
    const src = img ? (img.getAttribute('src') || '') : '';
    const out = {id: fig.id || '', alt: img ? img.alt : '',
                 width: img ? img.getBoundingClientRect().width : 0,
                 viewbox_width: null, fonts: [], text_overlaps: []};
    if (src.startsWith('data:image/svg+xml')) {
      const svg = new DOMParser().parseFromString(
          await (await fetch(src)).text(), 'image/svg+xml').documentElement;
      const vb = (svg.getAttribute('viewBox') || '').trim().split(/[\\s,]+/).map(Number);
      out.viewbox_width = vb.length === 4 ? vb[2] : parseFloat(svg.getAttribute('width'));
      for (const t of svg.querySelectorAll('text')) {
        const st = t.getAttribute('style') || '';
        const m = st.match(/font-size:\\s*([\\d.]+)px/) || st.match(/font:[^;]*?([\\d.]+)px/);
        const size = m ? parseFloat(m[1]) : parseFloat(t.getAttribute('font-size') || 'NaN');
        if (!isNaN(size)) out.fonts.push([size, t.textContent.trim().slice(0, 40)]);
      }
      const holder = document.createElement('div');
      holder.style.cssText = 'position:absolute;left:0;top:0;visibility:hidden';
      const copy = document.importNode(svg, true);
      copy.setAttribute('width', out.width + 'px');
      copy.setAttribute('height', img.getBoundingClientRect().height + 'px');
      holder.appendChild(copy);
      measure.push([out, holder, copy]);
    }
    figures.push(out);
  }
  for (const [, holder] of measure) document.body.appendChild(holder);
  for (const [out, , copy] of measure) {
    const texts = Array.from(copy.querySelectorAll('text'))
        .filter(t => t.textContent.trim())
        .map(t => [t.textContent.trim().slice(0, 30), t.getBoundingClientRect()]);
    for (let i = 0; i < texts.length; i++)
      for (let j = i + 1; j < texts.length; j++) {
        const [a, ra] = texts[i], [b, rb] = texts[j];
        const w = Math.min(ra.right, rb.right) - Math.max(ra.left, rb.left);
        const h = Math.min(ra.bottom, rb.bottom) - Math.max(ra.top, rb.top);
        if (w > %(tol)s && h > %(tol)s)
          out.text_overlaps.push('"' + a + '" overlaps "' + b + '" (' + w.toFixed(0) +
                                 ' x ' + h.toFixed(0) + ' px)');
      }
  }
  for (const [, holder] of measure) holder.remove();
  return {width: W, page_width: document.documentElement.scrollWidth,
          page_height: document.documentElement.scrollHeight,
          text_boxes: boxes.length, overlaps, overflows, figures};
})()
""" % {"tol": OVERLAP_PX}


@dataclass
class FigureBox:
    id: str
    alt: str
    width_px: float                # the image's rendered width
    min_font_px: float | None      # its SVG's smallest <text> font at that width (None: none)
    min_font_text: str             # ... and that text
    text_overlaps: list[str]       # its SVG's text boxes that overlap at that size


@dataclass
class Layout:
    width: int                     # the viewport's CSS width
    page_width: int                # document scrollWidth (above width: the page scrolls sideways)
    page_height: int
    text_boxes: int                # text elements measured
    overlaps: list[str]            # text boxes that overlap, "A overlaps B (w x h px)"
    overflows: list[str]           # text, tables, figures reaching past the page's edges
    figures: list[FigureBox]
    screenshot: Path | None = None


def _layout(page: dict) -> Layout:
    figures = []
    for f in page.pop("figures"):
        fonts, vw = f["fonts"], f["viewbox_width"]
        low = min(fonts, default=None)
        scale = f["width"] / vw if vw else None
        figures.append(FigureBox(f["id"], f["alt"], f["width"],
                                 low[0] * scale if low and scale else None,
                                 low[1] if low else "", f["text_overlaps"]))
    return Layout(figures=figures, **page)


@dataclass
class Rendered:
    console_errors: list[str]      # console.error/console.assert, and Log entries at level "error"
    exceptions: list[str]          # uncaught JS errors (Runtime.exceptionThrown)
    external_requests: list[str]   # request URLs that would need the network, in order, once each
    failed_requests: list[str]     # "URL errorText" for each Network.loadingFailed
    figures: int                   # <figure> elements
    images: int                    # <img> elements
    images_broken: list[str]       # <img> not loaded or with naturalWidth 0: alt text or src[:60]
    svg_inline: int                # outermost inline <svg> elements (an <svg> inside one is not counted)
    title: str
    text: str                      # document.body.innerText
    layout: Layout | None = None   # with render(width=...) only


def chromium_path() -> str | None:
    """The Chromium executable, or None when there is none."""
    if os.access("/usr/bin/chromium", os.X_OK):
        return "/usr/bin/chromium"
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return None


def render(html_path: str | Path, timeout_s: float = 30.0, width: int | None = None,
           screenshot: str | Path | None = None) -> Rendered:
    """Load html_path in a fresh headless Chromium and report what happened.

    width: lay the page out in a viewport this many CSS pixels wide (device scale
    1) and check its layout (Rendered.layout); screenshot: save a PNG of it there
    (needs width).

    Raises FileNotFoundError for a missing file, RuntimeError when Chromium is
    missing, will not start or cannot load the page, and TimeoutError when the
    page has not loaded within timeout_s (which bounds the whole call, start
    and stop of Chromium included, give or take STOP_WAIT_S).
    """
    path = Path(html_path).resolve()
    if screenshot is not None and width is None:
        raise ValueError("render: a screenshot needs a width")
    if not path.is_file():
        raise FileNotFoundError(f"render: no such file: {path}")
    exe = chromium_path()
    if exe is None:
        raise RuntimeError("render: chromium not found (install Debian's chromium package)")
    deadline = time.monotonic() + timeout_s
    work = Path(tempfile.mkdtemp(prefix="fwbench-chromium-"))
    # Chromium's proxy: a port held bound but never listening, so every
    # connection to it is refused and no request can wait on the network.
    dead_port = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    proc = None
    ws = None
    try:
        dead_port.bind(("127.0.0.1", 0))
        proc = _start(exe, work, dead_port.getsockname()[1])
        port = _devtools_port(proc, work, deadline)
        ws = websocket.create_connection(
            _page_ws_url(port, deadline), timeout=max(0.1, deadline - time.monotonic()),
            suppress_origin=True,  # Chromium refuses websockets with an Origin it was not told to allow
            http_no_proxy=["127.0.0.1"])  # never via an http_proxy from the environment
        return _drive(_Cdp(ws), path.as_uri(), deadline, width,
                      Path(screenshot) if screenshot else None)
    except (websocket.WebSocketException, OSError) as e:  # OSError: URLError, refused, reset
        if isinstance(e, TimeoutError):
            raise
        raise RuntimeError(f"render: DevTools connection failed: {e!r}{_log_tail(work)}") from e
    finally:
        if ws is not None:
            try:
                ws.close(timeout=0.5)
            except Exception:
                pass
        if proc is not None:
            _stop(proc, work)
        dead_port.close()
        shutil.rmtree(work, ignore_errors=True)


def _start(exe: str, work: Path, proxy_port: int) -> subprocess.Popen:
    argv = [
        exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
        "--no-default-browser-check", "--disable-extensions", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
        f"--proxy-server=http://127.0.0.1:{proxy_port}",
        "--proxy-bypass-list=<-loopback>",  # loopback too goes to the dead proxy
        f"--user-data-dir={work / 'profile'}", "--remote-debugging-port=0", "about:blank",
    ]
    # A home of its own, so nothing is written to the real one (dconf, crash
    # report folders, NSS database).
    home = work / "home"
    env = {**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"),
           "XDG_CACHE_HOME": str(home / ".cache"), "XDG_DATA_HOME": str(home / ".local/share")}
    home.mkdir()
    with open(work / "chromium.log", "wb") as log:
        # Its own session and process group, so _stop can signal that group
        # (see there for the crash handlers, which leave it).
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                env=env, start_new_session=True)


def _devtools_port(proc: subprocess.Popen, work: Path, deadline: float) -> int:
    """The port Chromium chose: line 1 of DevToolsActivePort in its profile."""
    active = work / "profile" / "DevToolsActivePort"
    while True:
        try:
            lines = active.read_text().splitlines()
            if len(lines) >= 2 and lines[0].strip().isdigit():
                return int(lines[0])
        except OSError:
            pass
        if proc.poll() is not None:
            raise RuntimeError(f"render: chromium exited with status {proc.returncode} "
                               f"before DevTools was up{_log_tail(work)}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"render: chromium started no DevTools server in time{_log_tail(work)}")
        time.sleep(0.02)


def _http(port: int, path: str, method: str, deadline: float):
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # ignore http_proxy
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method)
    with opener.open(req, timeout=max(0.1, deadline - time.monotonic())) as resp:
        return json.load(resp)


def _page_ws_url(port: int, deadline: float) -> str:
    """The websocket of the about:blank page Chromium opened, or of a new one."""
    give_up = min(deadline, time.monotonic() + 2.0)
    while True:
        for target in _http(port, "/json/list", "GET", deadline):
            if target.get("type") == "page" and target.get("webSocketDebuggerUrl"):
                return target["webSocketDebuggerUrl"]
        if time.monotonic() > give_up:
            break
        time.sleep(0.05)
    return _http(port, "/json/new?about:blank", "PUT", deadline)["webSocketDebuggerUrl"]


class _Cdp:
    """Commands and their replies (matched by id); every other message is an event."""

    def __init__(self, ws):
        self.ws = ws
        self.next_id = 0
        self.replies: dict[int, dict] = {}
        self.events: list[dict] = []
        self.last_event = time.monotonic()

    def send(self, method: str, params: dict | None = None) -> int:
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params or {}}))
        return self.next_id

    def call(self, method: str, params: dict | None = None, *, deadline: float) -> dict:
        cid = self.send(method, params)
        while cid not in self.replies:
            if not self.pump(deadline):
                raise TimeoutError(f"render: no reply to {method} in time")
        reply = self.replies.pop(cid)
        if "error" in reply:
            raise RuntimeError(f"render: {method} failed: {reply['error']}")
        return reply.get("result", {})

    def pump(self, until: float) -> bool:
        """Take one message; False if none came before until."""
        remaining = until - time.monotonic()
        if remaining <= 0:
            return False
        self.ws.settimeout(remaining)
        try:
            raw = self.ws.recv()
        except websocket.WebSocketTimeoutException:
            return False
        msg = json.loads(raw)
        if "id" in msg:
            self.replies[msg["id"]] = msg
        else:
            self.events.append(msg)
            self.last_event = time.monotonic()
            if msg.get("method") == "Page.javascriptDialogOpening":
                # alert(), confirm(), prompt() would stop the page until answered.
                self.send("Page.handleJavaScriptDialog", {"accept": False})
        return True


def _drive(cdp: _Cdp, url: str, deadline: float, width: int | None = None,
           screenshot: Path | None = None) -> Rendered:
    for domain in ("Page", "Runtime", "Log", "Network"):
        cdp.call(f"{domain}.enable", deadline=deadline)
    if width is not None:
        cdp.call("Emulation.setDeviceMetricsOverride",
                 {"width": width, "height": VIEWPORT_H, "deviceScaleFactor": 1,
                  "mobile": False}, deadline=deadline)
    first = len(cdp.events)
    nav = cdp.call("Page.navigate", {"url": url}, deadline=deadline)
    if nav.get("errorText"):
        raise RuntimeError(f"render: could not load {url}: {nav['errorText']}")
    while not any(e.get("method") == "Page.loadEventFired" for e in cdp.events[first:]):
        if not cdp.pump(deadline):
            pending = _pending_requests(cdp.events)
            raise TimeoutError(f"render: {url} did not finish loading in time"
                               + (f"; still waiting for {pending}" if pending else ""))
    settle_until = min(deadline, time.monotonic() + SETTLE_MAX_S)
    while time.monotonic() < settle_until:
        cdp.pump(min(settle_until, cdp.last_event + QUIET_S))
        if time.monotonic() >= cdp.last_event + QUIET_S:
            break
    result = cdp.call("Runtime.evaluate", {"expression": _INSPECT_JS, "returnByValue": True,
                                           "awaitPromise": True}, deadline=deadline)
    if "exceptionDetails" in result:
        raise RuntimeError(f"render: inspecting the page failed: {_exception_text(result['exceptionDetails'])}")
    page = result["result"]["value"]
    layout = None
    if width is not None:
        result = cdp.call("Runtime.evaluate", {"expression": _LAYOUT_JS, "returnByValue": True,
                                               "awaitPromise": True}, deadline=deadline)
        if "exceptionDetails" in result:
            raise RuntimeError(f"render: measuring the layout failed: "
                               f"{_exception_text(result['exceptionDetails'])}")
        layout = _layout(result["result"]["value"])
        if screenshot is not None:
            height = min(layout.page_height, SCREENSHOT_MAX_PX)
            shot = cdp.call("Page.captureScreenshot", {
                "format": "png", "captureBeyondViewport": True,
                "clip": {"x": 0, "y": 0, "width": width, "height": height, "scale": 1}},
                deadline=deadline)
            screenshot.write_bytes(base64.b64decode(shot["data"]))
            layout.screenshot = screenshot
    return Rendered(**_from_events(cdp.events[first:]), **page, layout=layout)


def _from_events(events: list[dict]) -> dict:
    console_errors, exceptions, external, failed = [], [], [], []
    urls: dict[str, str] = {}
    for e in events:
        method, p = e.get("method"), e.get("params", {})
        if method == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
            console_errors.append(" ".join(_remote_text(a) for a in p.get("args", [])))
        elif method == "Log.entryAdded" and p.get("entry", {}).get("level") == "error":
            entry = p["entry"]
            text, where = entry.get("text", ""), entry.get("url", "")
            console_errors.append(f"{text} ({where})" if where and where not in text else text)
        elif method == "Runtime.exceptionThrown":
            exceptions.append(_exception_text(p.get("exceptionDetails", {})))
        elif method in ("Network.requestWillBeSent", "Network.webSocketCreated"):
            url = p.get("request", {}).get("url") if method == "Network.requestWillBeSent" else p.get("url")
            if url:
                urls[p.get("requestId", "")] = url
                if urlsplit(url).scheme.lower() not in LOCAL_SCHEMES and url not in external:
                    external.append(url)
        elif method == "Network.loadingFailed":
            url = urls.get(p.get("requestId", ""), "<unknown URL>")
            failed.append(f"{url} {p.get('errorText', '')}".rstrip())
    return {"console_errors": console_errors, "exceptions": exceptions,
            "external_requests": external, "failed_requests": failed}


def _pending_requests(events: list[dict]) -> list[str]:
    pending: dict[str, str] = {}
    for e in events:
        method, p = e.get("method"), e.get("params", {})
        if method == "Network.requestWillBeSent":
            pending[p.get("requestId", "")] = p.get("request", {}).get("url", "")
        elif method in ("Network.loadingFinished", "Network.loadingFailed"):
            pending.pop(p.get("requestId", ""), None)
    return list(pending.values())


def _remote_text(obj: dict) -> str:
    """A console argument (a CDP RemoteObject) as text."""
    if "value" in obj:
        value = obj["value"]
        return value if isinstance(value, str) else json.dumps(value)
    return str(obj.get("unserializableValue") or obj.get("description") or obj.get("type", "?"))


def _exception_text(details: dict) -> str:
    exc = details.get("exception") or {}
    return str(exc.get("description") or exc.get("value") or details.get("text") or "unknown exception")


def _log_tail(work: Path, lines: int = 5) -> str:
    try:
        text = (work / "chromium.log").read_text(errors="replace")
    except OSError:
        return ""
    tail = [line for line in text.splitlines() if line.strip() and "dbus" not in line][-lines:]
    return ("; chromium said: " + " | ".join(tail)) if tail else ""


def _stop(proc: subprocess.Popen, work: Path) -> None:
    """Stop Chromium and every process it started; wait until they are gone.

    Those are the members of its process group (start_new_session=True makes
    the group id Chromium's own pid, and Linux does not reuse a pid while a
    group of that id has members), plus Debian's chrome_crashpad_handler
    processes, which leave the group (setsid) but are known by the private
    temporary directory on their command line. Nothing else is signalled.
    """
    pgid = proc.pid
    _killpg(pgid, signal.SIGTERM)
    try:
        proc.wait(timeout=STOP_WAIT_S)
    except subprocess.TimeoutExpired:
        _killpg(pgid, signal.SIGKILL)
        proc.wait()
    # The rest exit on their own once Chromium is gone; whatever is still
    # there after a moment is killed.
    for kill, grace in ((False, 1.0), (True, STOP_WAIT_S)):
        if kill:
            _killpg(pgid, signal.SIGKILL)
            for pid in leftover_processes(pgid, work):
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        give_up = time.monotonic() + grace
        while leftover_processes(pgid, work) and time.monotonic() < give_up:
            time.sleep(0.02)


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def leftover_processes(pgid: int, work: Path) -> list[int]:
    """Live (not zombie) processes in group pgid or naming a path under work on their command line."""
    marker = (str(work).rstrip("/") + "/").encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                state, _ppid, pgrp = f.read().rsplit(b")", 1)[1].split()[:3]
            if state == b"Z":
                continue
            if int(pgrp) != pgid:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    if marker not in f.read():
                        continue
        except (OSError, ValueError):
            continue
        found.append(int(name))
    return found


def main(argv: list[str] | None = None) -> int:
    """Render one page at a width, print its layout problems, save a screenshot."""
    import argparse
    ap = argparse.ArgumentParser(prog="python -m tests.browser", description=main.__doc__)
    ap.add_argument("html")
    ap.add_argument("--width", type=int, default=1280)
    ap.add_argument("--screenshot", help="PNG to write (default: beside the page)")
    ap.add_argument("--timeout", type=float, default=60.0)
    args = ap.parse_args(argv)
    shot = args.screenshot or str(Path(args.html).with_suffix(f".{args.width}px.png"))
    try:
        r = render(args.html, args.timeout, width=args.width, screenshot=shot)
    except (OSError, RuntimeError, TimeoutError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    lay = r.layout
    print(f"{args.html}: {lay.width} px wide, page {lay.page_width} x {lay.page_height} px, "
          f"{lay.text_boxes} text boxes, {len(lay.figures)} figures; screenshot {shot}")
    for kind, items in (("overlap", lay.overlaps), ("overflow", lay.overflows),
                        ("console error", r.console_errors), ("exception", r.exceptions)):
        for x in items:
            print(f"{kind}: {x}")
    for f in lay.figures:
        print(f"figure {f.id}: {f.width_px:.0f} px wide, smallest text "
              + ("none (no SVG text)" if f.min_font_px is None else
                 f"{f.min_font_px:.1f} px ({f.min_font_text!r})"))
        for x in f.text_overlaps:
            print(f"overlap in figure {f.id}: {x}")
    bad = (lay.overlaps or lay.overflows or r.console_errors or r.exceptions
           or any(f.text_overlaps for f in lay.figures))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
