"""``python -m bytegraph report``: the compile trace as one HTML page, checked
as text and in a real headless browser (Debian's chromium + chromedriver,
driven by selenium), with a screenshot."""

import os
import shutil
import struct
import subprocess
import sys
import zlib

import pytest
import torch

import bytegraph
from bytegraph import report, tracefile

HERE = os.path.abspath(__file__)
DOCS_SCREENSHOT = os.path.join(os.path.dirname(os.path.dirname(HERE)), "docs", "report.png")


class _Sink:
    def write(self, s):
        return len(s)


def _library_helper(y):
    # stands for a library function: the break is here, the user's line is its call
    print("stats", float(y.mean()), file=_Sink())
    return y.cos()


def _user_step(x, scale):
    y = torch.relu(x) * scale
    y = _library_helper(y)
    return y + 1


@pytest.fixture
def trace_dir(tmp_path):
    directory = str(tmp_path / "trace")
    tracefile.start(directory)
    try:
        step = bytegraph.compile(_user_step, backend="eager")
        for n, scale in ((4, 2), (5, 2), (5, 3), (6, 4)):   # a small recompile storm
            step(torch.randn(n), scale)
    finally:
        tracefile.stop()
    return directory


def test_page_has_the_counts_sections_and_marked_source(trace_dir, tmp_path):
    records = report.load(trace_dir)
    summary = report.summarize(records)
    assert list(summary)[0] == "_user_step"   # (then the helper's own continuation)
    s = _totals(summary)
    assert summary["_user_step"]["breaks"] >= 1 and s["recompiles"] >= 2 and s["graphs"] >= 2
    out = str(tmp_path / "report.html")
    proc = subprocess.run([sys.executable, "-m", "bytegraph", "report", trace_dir, "-o", out],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(bytegraph.__file__))})
    assert proc.returncode == 0, proc.stderr
    page = open(out, encoding="utf-8").read()
    assert f'<b id="count-graphs">{s["graphs"]}</b>' in page
    assert f'<b id="count-recompiles">{s["recompiles"]}</b>' in page
    assert "http://" not in page and "https://" not in page and "<script src" not in page   # self-contained
    # the break's line is marked and linked to its reason
    call_line = next(n for n, line in enumerate(open(HERE), 1) if 'print("stats"' in line)
    assert f'class="src brk" data-line="{call_line}"' in page and 'href="#fn-0-break-0"' in page
    assert 'id="fn-0-break-0"' in page and "[print]" in page
    assert 'id="phase-chart"' in page and 'data-phase="trace"' in page
    assert '<pre class="code">def _user_step(x, scale):' in page   # readable transformed code
    assert f'id="recompile-timeline" data-count="{s["recompiles"]}"' in page and "→" in page


def _totals(summary):
    return {k: sum(v[k] for v in summary.values()) for k in ("graphs", "breaks", "recompiles")}


def _png_size_and_colors(path):
    """(width, height, distinct colours) of an 8-bit RGB(A) PNG (decoded here: no imaging library needed)."""
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height, depth, ctype = struct.unpack(">IIBB", data[16:26])
    assert depth == 8 and ctype in (2, 6)
    chunks, i = [], 8
    while i < len(data):
        n = struct.unpack(">I", data[i:i + 4])[0]
        if data[i + 4:i + 8] == b"IDAT":
            chunks.append(data[i + 8:i + 8 + n])
        i += 12 + n
    raw = zlib.decompress(b"".join(chunks))
    bpp = 4 if ctype == 6 else 3
    stride = width * bpp
    previous = bytearray(stride)
    colors = set()
    for row in range(height):
        kind = raw[row * (stride + 1)]
        line = bytearray(raw[row * (stride + 1) + 1:(row + 1) * (stride + 1)])
        for j in range(stride):
            left = line[j - bpp] if j >= bpp else 0
            up = previous[j]
            corner = previous[j - bpp] if j >= bpp else 0
            if kind == 1:
                line[j] = (line[j] + left) & 0xFF
            elif kind == 2:
                line[j] = (line[j] + up) & 0xFF
            elif kind == 3:
                line[j] = (line[j] + (left + up) // 2) & 0xFF
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                line[j] = (line[j] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 0xFF
        if row % 30 == 0:
            colors.update(bytes(line[j:j + 3]) for j in range(0, stride, bpp * 5))
        previous = line
    return width, height, colors


def _browser():
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    try:
        import selenium  # noqa: F401
    except ImportError:
        return None, "selenium is not installed"
    if not chromium or not driver:
        return None, "chromium and chromedriver are not installed (apt-get install chromium chromium-driver)"
    return (chromium, driver), ""


def test_page_loads_in_headless_chromium_without_errors(trace_dir, tmp_path):
    found, why = _browser()
    if found is None:
        if os.environ.get("BYTEGRAPH_REQUIRE_BROWSER") == "1":
            pytest.fail(why)
        pytest.skip(why)
    chromium, driver_path = found
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By

    out = report.write(trace_dir, str(tmp_path / "report.html"))
    summary = _totals(report.summarize(report.load(trace_dir)))
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--window-size=1200,900", "--disable-dev-shm-usage"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    browser = webdriver.Chrome(service=Service(driver_path), options=options)
    try:
        browser.set_page_load_timeout(60)
        browser.get("file://" + out)
        assert browser.title == "bytegraph compile report"
        assert browser.find_element(By.ID, "count-graphs").text == str(summary["graphs"])
        assert browser.find_element(By.ID, "count-breaks").text == str(summary["breaks"])
        assert browser.find_element(By.ID, "count-recompiles").text == str(summary["recompiles"])
        assert len(browser.find_elements(By.CSS_SELECTOR, "#phase-chart rect.bar")) >= 3
        marked = browser.find_elements(By.CSS_SELECTOR, ".src.brk a")
        assert marked and marked[0].get_attribute("href").endswith("#fn-0-break-0")
        errors = [e for e in browser.get_log("browser") if e.get("level") == "SEVERE"]
        assert errors == []
        shot = str(tmp_path / "report.png")
        assert browser.save_screenshot(shot)
    finally:
        browser.quit()
    width, height, colors = _png_size_and_colors(shot)
    assert (width, height) == (1200, 900) or width >= 800
    assert len(colors) > 3, "the screenshot is blank"
    if os.environ.get("BYTEGRAPH_UPDATE_SCREENSHOT") == "1":
        shutil.copyfile(shot, DOCS_SCREENSHOT)   # the README's image
