"""The `sinkscope serve` viewer in a real browser: Debian's Chromium, headless, driven through the
DevTools protocol over a pipe (--remote-debugging-pipe: no extra package, no network). Clicks are
real mouse events at the elements' positions. Fails on any console error or uncaught exception in
the page (except the HTTP 400 the bad-input step provokes on purpose), and writes a screenshot of
each view to $SINKSCOPE_SCREENSHOTS (docs/viewer/ holds the committed ones).

Run by CTest (browser_viewer); skipped with a message when Chromium is missing, except under CI
(CI=true), where a missing browser is a failure: scripts/setup.sh installs it."""

import base64
import json
import os
import pathlib
import queue
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
MODEL = REPO / "models" / "stories260K" / "stories260K.bin"
SHOTS = pathlib.Path(os.environ.get("SINKSCOPE_SCREENSHOTS", tempfile.mkdtemp(prefix="viewer-shots-")))


def chromium_path():
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    if os.environ.get("CI"):
        pytest.fail("Chromium is not installed (scripts/setup.sh installs it): the browser tests must run in CI")
    pytest.skip("Chromium is not installed: apt-get install chromium (scripts/setup.sh does)")


class Browser:
    """A headless Chromium page driven over the DevTools pipe (fd 3 in, fd 4 out, NUL-separated JSON)."""

    def __init__(self, chromium, width=1300, height=1700):
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()
        self.profile = tempfile.mkdtemp(prefix="viewer-chromium-")

        def fds():
            os.dup2(to_child_r, 3)
            os.dup2(from_child_w, 4)

        self.proc = subprocess.Popen(
            [chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe",
             "--no-first-run", "--no-default-browser-check", f"--user-data-dir={self.profile}",
             f"--window-size={width},{height}", "about:blank"],
            preexec_fn=fds, close_fds=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_child_r)
        os.close(from_child_w)
        self._next_id = 0
        self._replies = {}
        self._cond = threading.Condition()
        self.events = queue.Queue()
        self.console_errors = []
        threading.Thread(target=self._read, daemon=True).start()
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.send(f"{domain}.enable")
        self.send("Emulation.setDeviceMetricsOverride", width=width, height=height,
                  deviceScaleFactor=1, mobile=False)

    def _read(self):
        buf = b""
        while True:
            chunk = os.read(self._from_child, 1 << 16)
            if not chunk:
                return
            buf += chunk
            while b"\0" in buf:
                raw, buf = buf.split(b"\0", 1)
                msg = json.loads(raw)
                if "id" in msg:
                    with self._cond:
                        self._replies[msg["id"]] = msg
                        self._cond.notify_all()
                else:
                    self._event(msg)

    def _event(self, msg):
        method, params = msg.get("method"), msg.get("params", {})
        if method == "Runtime.exceptionThrown":
            self.console_errors.append("exception: " + json.dumps(params["exceptionDetails"])[:500])
        elif method == "Runtime.consoleAPICalled" and params.get("type") == "error":
            self.console_errors.append("console.error: " + json.dumps(params.get("args"))[:500])
        elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
            self.console_errors.append("log: " + params["entry"].get("text", "")[:500])

    def call(self, method, session=None, timeout=120, **params):
        self._next_id += 1
        mid = self._next_id
        msg = {"id": mid, "method": method, "params": params}
        if session:
            msg["sessionId"] = session
        os.write(self._to_child, json.dumps(msg).encode() + b"\0")
        with self._cond:
            if not self._cond.wait_for(lambda: mid in self._replies, timeout=timeout):
                raise TimeoutError(f"{method}: no reply in {timeout} s")
            reply = self._replies.pop(mid)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    def send(self, method, **params):
        return self.call(method, session=self.session, **params)

    def eval(self, expression):
        r = self.send("Runtime.evaluate", expression=expression, awaitPromise=True, returnByValue=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expression}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def wait_for(self, expression, timeout=120):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            value = self.eval(expression)
            if value:
                return value
            time.sleep(0.05)
        raise TimeoutError(f"waiting for {expression}")

    def click(self, selector, dx=0.5, dy=0.5):
        """A real mouse click (pressed and released) inside the element, at fractions dx, dy."""
        rect = self.eval(f"(() => {{ const e = document.querySelector({json.dumps(selector)}); "
                         f"e.scrollIntoView({{block: 'center'}}); const r = e.getBoundingClientRect(); "
                         f"return [r.left, r.top, r.width, r.height]; }})()")
        x, y = rect[0] + rect[2] * dx, rect[1] + rect[3] * dy
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            self.send("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)

    def drag(self, selector, start, end):
        rect = self.eval(f"(() => {{ const r = document.querySelector({json.dumps(selector)})"
                         f".getBoundingClientRect(); return [r.left, r.top, r.width, r.height]; }})()")
        pt = lambda f: (rect[0] + rect[2] * f[0], rect[1] + rect[3] * f[1])
        (x0, y0), (x1, y1) = pt(start), pt(end)
        self.send("Input.dispatchMouseEvent", type="mousePressed", x=x0, y=y0, button="left", clickCount=1)
        self.send("Input.dispatchMouseEvent", type="mouseMoved", x=x1, y=y1, button="left")
        self.send("Input.dispatchMouseEvent", type="mouseReleased", x=x1, y=y1, button="left", clickCount=1)

    def screenshot(self, name):
        SHOTS.mkdir(parents=True, exist_ok=True)
        data = self.send("Page.captureScreenshot", format="png", captureBeyondViewport=True)["data"]
        path = SHOTS / name
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self):
        try:
            self.call("Browser.close", timeout=10)
        except Exception:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        shutil.rmtree(self.profile, ignore_errors=True)


def cli_path():
    return os.environ.get("SINKSCOPE_CLI", str(REPO / "build" / "src" / "cli" / "sinkscope"))


@pytest.fixture(scope="module")
def server_address():
    text = pathlib.Path(tempfile.mkdtemp()) / "story.txt"
    text.write_text((REPO / "data" / "default_text.txt").read_text() * 4)
    proc = subprocess.Popen([cli_path(), "serve", "--model", str(MODEL), "--port", "0", "--texts",
                             str(text)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    assert "listening on" in line, proc.stderr.read()
    # The address printed ends in ?token=...: the page gets it (and a cookie) from there; the
    # requests below send it as X-Sinkscope-Token.
    url = line.split()[-1]
    base, token = url.split("?token=")
    TOKEN["value"] = token
    yield base, url
    proc.terminate()
    proc.wait(timeout=10)


TOKEN = {"value": ""}


def get(url):
    req = urllib.request.Request(url, headers={"X-Sinkscope-Token": TOKEN["value"]})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


def post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json",
                                          "X-Sinkscope-Token": TOKEN["value"]})
    try:
        with urllib.request.urlopen(req, timeout=600) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


@pytest.fixture(scope="module")
def server(server_address):
    return server_address[0]


@pytest.fixture(scope="module")
def page(server_address):
    browser = Browser(chromium_path())
    browser.send("Page.navigate", url=server_address[1])
    browser.wait_for("window.viewer && window.viewer.model")
    yield browser
    browser.close()


def test_analyze_heatmap_and_pattern_match_the_json(page, server):
    page.eval("document.getElementById('samples').value = 4; document.getElementById('length').value = 48")
    page.click("#run-analyze")
    page.wait_for("window.viewer.report")
    report = page.eval("window.viewer.report")
    # Every heatmap cell shows the report's alpha_0.
    cells = page.eval("[...document.querySelectorAll('.cell')].map(c => [c.dataset.condition, +c.dataset.layer, +c.dataset.head, +c.dataset.alpha])")
    by_name = {c["name"]: c for c in report["conditions"]}
    assert len(cells) == len(by_name) * 5 * 8
    for cond, l, h, alpha in cells:
        assert alpha == by_name[cond]["alpha"][0][l][h]
    page.screenshot("viewer-analyze.png")

    # Click the cell of no-bos, layer 2, head 3: the pattern drawn is the server's tile for that head.
    page.click(".cell[data-condition='no-bos'][data-layer='2'][data-head='3']")
    page.wait_for("window.viewer.drawn && window.viewer.drawn.layer === 2 && window.viewer.drawn.head === 3")
    drawn = page.eval("window.viewer.drawn")
    run = page.eval("window.viewer.run")
    tile = get(f"{server}api/pattern?run={run}&condition=no-bos&layer=2&head=3&q0=0&q1=48&k0=0&k1=48&bins=256")
    assert drawn["values"] == tile["values"] and drawn["rows"] == 48 == drawn["cols"]
    # Causal: nothing above the diagonal; rows are distributions.
    for i in range(48):
        row = tile["values"][i * 48:(i + 1) * 48]
        assert all(v == 0 for v in row[i + 1:]) and abs(sum(row) - 1) < 1e-4
    lit = page.eval("(() => { const c = document.getElementById('pattern-canvas'); const d = c.getContext('2d')"
                    ".getImageData(0, 0, c.width, c.height).data; let n = 0; for (let i = 0; i < d.length; i += 4)"
                    " if (d[i] > 120) n++; return n; })()")
    assert lit > 1000  # the diagonal and the bright cells are drawn
    # Hovering names the real tokens of the query and key under the pointer.
    rect = page.eval("(() => { const r = document.getElementById('pattern-canvas').getBoundingClientRect(); return [r.left, r.top, r.width, r.height]; })()")
    page.send("Input.dispatchMouseEvent", type="mouseMoved", x=rect[0] + rect[2] * 0.01, y=rect[1] + rect[3] * 0.99)
    tokens = page.eval("window.viewer.tokens['no-bos']")
    hover = page.wait_for("document.getElementById('hover').textContent.startsWith('query 47')")
    assert json.dumps(tokens[47]) in page.eval("document.getElementById('hover').textContent") and hover
    # Click a query row: its top keys.
    page.click("#pattern-canvas", dx=0.2, dy=0.8)
    page.wait_for("window.viewer.row")
    row = page.eval("window.viewer.row")
    assert row["keys"] and abs(row["keys"][0]["p"] - max(tile["values"][row["query"] * 48:(row["query"] + 1) * 48])) < 1e-6
    # Drag to zoom: a smaller window, fetched as a new tile.
    page.drag("#pattern-canvas", (0.05, 0.5), (0.5, 0.95))
    page.wait_for("window.viewer.drawn.q0 > 0")
    page.screenshot("viewer-pattern.png")
    assert not page.console_errors, page.console_errors


def test_explain_and_stream_views(page, server):
    page.click("#run-explain")
    page.wait_for("window.viewer.explain", timeout=300)
    verdict = page.eval("document.getElementById('verdict').textContent")
    body = {"text": page.eval("document.getElementById('text').value"), "condition": "bos",
            "samples": 4, "length": 48, "seed": 0}
    status, direct = post(server + "api/explain", body)
    assert status == 200 and verdict == direct["verdict"] == page.eval("window.viewer.explain.verdict")
    page.screenshot("viewer-explain.png")
    page.eval("document.getElementById('file').value = '0'")  # the server-side text
    page.click("#run-stream")
    page.wait_for("window.viewer.stream", timeout=300)
    stream = page.eval("window.viewer.stream")
    assert [r["policy"] for r in stream["runs"]] == ["sinks", "window"]
    assert all(len(stream["nll"][r["policy"]]) == r["tokens_scored"] for r in stream["runs"])
    assert page.eval("document.querySelectorAll('#stream-chart polyline').length") == 2
    page.screenshot("viewer-stream.png")
    page.eval("document.getElementById('file').value = ''")
    assert not page.console_errors, page.console_errors


def test_long_input_stays_responsive(page, server):
    """T = 8192 (stories260K, RoPE, beyond its 512-token context): the pattern view fetches a tile of
    at most 256 x 256 cells, and the page keeps drawing frames while the server computes it.
    SINKSCOPE_VIEWER_LONG_T changes T: scripts/sanitize.sh runs it at 1024 (still beyond the context,
    still a 256 x 256 tile), where the sanitizers check the same code in far less time."""
    long_t = os.environ.get("SINKSCOPE_VIEWER_LONG_T", "8192")
    page.eval("""(() => {
      document.querySelectorAll('.cond').forEach(c => c.checked = c.value === 'bos');
      document.getElementById('samples').value = 1; document.getElementById('length').value = LONG_T;
      document.getElementById('allow-long').checked = true;
      document.getElementById('file').value = '0';
      window.viewer.report = null; })()""".replace("LONG_T", long_t))
    page.click("#run-analyze")
    page.wait_for(f"window.viewer.report && window.viewer.report.settings.length === {long_t}", timeout=600)
    # A frame-gap monitor while the pattern loads and draws.
    page.eval("""(() => { window.gaps = []; let last = performance.now(); window.monitor = true;
      const tick = (t) => { window.gaps.push(t - last); last = t; if (window.monitor) requestAnimationFrame(tick); };
      requestAnimationFrame(tick); })()""")
    page.click(".cell[data-condition='bos'][data-layer='1'][data-head='0']")
    page.wait_for(f"window.viewer.drawn && window.viewer.drawn.tokens === {long_t} && window.viewer.drawn.layer === 1", timeout=300)
    page.eval("window.monitor = false")
    drawn = page.eval("({rows: window.viewer.drawn.rows, cols: window.viewer.drawn.cols, n: window.viewer.drawn.values.length, ms: window.viewer.lastPatternMs})")
    worst_gap = page.eval("Math.max(...window.gaps)")
    print(f"T = {long_t}: tile {drawn['rows']} x {drawn['cols']} ({drawn['n']} values) in {drawn['ms']:.0f} ms; "
          f"longest frame gap while loading {worst_gap:.0f} ms")
    assert drawn["n"] <= 256 * 256 and drawn["rows"] == 256
    assert worst_gap < 1000
    page.screenshot("viewer-long.png")
    assert not page.console_errors, page.console_errors


def test_bad_input_shows_an_error_and_the_server_goes_on(page, server):
    page.eval("""(() => { document.getElementById('length').value = 100000;
      document.getElementById('allow-long').checked = false; document.getElementById('file').value = ''; })()""")
    page.click("#run-analyze")
    message = page.wait_for("(() => { const s = document.getElementById('analyze-status'); "
                            "return s.classList.contains('error') && s.textContent; })()")
    assert "context" in message
    # The only console entries are the browser's notes on the HTTP 400 itself.
    assert all("400" in e for e in page.console_errors), page.console_errors
    page.console_errors.clear()
    for body, code, words in [({"text": "x", "length": 100000}, 400, "context"),
                              ({"text": "   "}, 400, "empty"),
                              ({"file": 7}, 400, "file"),
                              ({"text": "a story", "conditions": ["nope"]}, 400, "condition"),
                              ({"text": "Once upon a time", "samples": 0}, 400, "samples")]:
        status, reply = post(server + "api/analyze", body)
        assert status == code and words in reply["error"], (body, status, reply)
    req = urllib.request.Request(server + "api/analyze", data=b'{"text": "\xff\xfe"}', method="POST",
                                 headers={"Content-Type": "application/json", "X-Sinkscope-Token": TOKEN["value"]})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(req, timeout=30)
    assert e.value.code == 400
    big = urllib.request.Request(server + "api/analyze", data=b" " * (9 << 20), method="POST",
                                 headers={"Content-Type": "application/json", "X-Sinkscope-Token": TOKEN["value"]})
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(big, timeout=30)
    assert e.value.code == 413
    for path in ["../etc/passwd", "api/../../etc/passwd", "docs/SERVE.md"]:
        with pytest.raises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(urllib.request.Request(server + path, headers={"X-Sinkscope-Token": TOKEN["value"]}), timeout=30)
        assert e.value.code == 404
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(urllib.request.Request(server + "api/pattern?run=999&condition=bos&layer=0&head=0",
                                                      headers={"X-Sinkscope-Token": TOKEN["value"]}), timeout=30)
    assert e.value.code == 404
    # A slow analysis does not block other requests.
    slow = threading.Thread(target=post, args=(server + "api/analyze",
                                              {"text": "Once upon a time " * 400, "samples": 256, "length": 256}))
    slow.start()
    time.sleep(0.3)
    t0 = time.monotonic()
    assert get(server + "api/model")["n_layers"] == 5
    quick = time.monotonic() - t0
    still_running = slow.is_alive()
    slow.join()
    print(f"GET /api/model during a slow analysis: {quick * 1000:.0f} ms (slow one still running: {still_running})")
    assert quick < 2.0


def test_another_local_origin_cannot_use_the_viewer(page, server):
    """A page from a second local origin (another port of 127.0.0.1: same site, other origin) tries
    what any web page can: a CORS read of /api/model and a "simple" no-cors POST that would start an
    analysis. The browser blocks the read, and the server refuses both (Origin check): nothing runs."""
    import http.server
    body = b"<!doctype html><title>other origin</title><p>another local page</p>"

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    # Threaded: Chromium keeps an idle connection open to the page's origin, and a single-threaded
    # server would sit in that connection's read until Chromium gives up (about 90 s) on shutdown.
    other = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    other.daemon_threads = True
    threading.Thread(target=other.serve_forever, daemon=True).start()
    try:
        before = get(server + "api/model")["served"]
        page.send("Page.navigate", url=f"http://127.0.0.1:{other.server_address[1]}/")
        page.wait_for("document.title === 'other origin'")
        outcome = page.eval(f"""(async () => {{
          const out = {{}};
          try {{ const r = await fetch({json.dumps(server + 'api/model')}); out.read = 'status ' + r.status; }}
          catch (e) {{ out.read = 'blocked'; }}
          try {{ await fetch({json.dumps(server + 'api/analyze')}, {{method: 'POST', mode: 'no-cors',
                 headers: {{'Content-Type': 'text/plain'}}, body: JSON.stringify({{text: 'Once upon a time'}})}});
                 out.post = 'sent'; }}
          catch (e) {{ out.post = 'blocked'; }}
          return out; }})()""")
        after = get(server + "api/model")["served"]
        print(f"from http://127.0.0.1:{other.server_address[1]}: {outcome}; refused {before['refused']} -> {after['refused']}")
        assert outcome["read"] == "blocked"
        assert after["analyze"] == before["analyze"]
        assert after["refused"] >= before["refused"] + 1
    finally:
        other.shutdown()
        other.server_close()
        page.console_errors.clear()
