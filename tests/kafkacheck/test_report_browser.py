"""report.html in a real headless browser: Chromium from Debian's packages (``apt-get install
chromium chromium-driver``), driven by Selenium through Debian's chromedriver (nothing is
downloaded). For a simulated run and a conform run of the reference broker, each valid and
with an anomaly (a bug switch): the page renders its timeline, clicking an anomaly's link
targets that op on the timeline and brings it into view, and the console stays free of
errors. Screenshots of the four pages go to a temporary directory, or to the directory
``KAFKACHECK_REPORT_SCREENSHOTS`` names (docs/images for the docs:
``KAFKACHECK_REPORT_SCREENSHOTS=docs/images pytest tests/kafkacheck/test_report_browser.py``).

Skipped, with the reason, where Chromium, chromedriver or Selenium is missing, unless
``KAFKACHECK_REQUIRE_CHROMIUM`` is set (CI sets it): then it fails.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import time
from pathlib import Path

import pytest

from kafkacheck.cli import main

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
SIZE = (1200, 800)


def _missing() -> str | None:
    if CHROMIUM is None:
        return "Chromium is not installed (Debian: apt-get install chromium chromium-driver)"
    if CHROMEDRIVER is None:
        return "chromedriver is not installed (Debian: apt-get install chromium-driver)"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[test]')"
    return None


@pytest.fixture(scope="module")
def browser():
    reason = _missing()
    if reason:
        if os.environ.get("KAFKACHECK_REQUIRE_CHROMIUM"):
            pytest.fail(f"{reason} (KAFKACHECK_REQUIRE_CHROMIUM is set)")
        pytest.skip(reason)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--force-device-scale-factor=1", f"--window-size={SIZE[0]},{SIZE[1]}", "--hide-scrollbars"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    try:
        driver.set_window_size(*SIZE)
        # the window's size includes its frame: make the page's viewport, the screenshot, SIZE
        inner = driver.execute_script("return [window.innerWidth, window.innerHeight]")
        driver.set_window_size(2 * SIZE[0] - inner[0], 2 * SIZE[1] - inner[1])
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    where = os.environ.get("KAFKACHECK_REPORT_SCREENSHOTS")
    path = Path(where) if where else tmp_path_factory.mktemp("screenshots")
    path.mkdir(parents=True, exist_ok=True)
    return path


def _errors(driver) -> list[dict]:
    return [e for e in driver.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]


def _open(driver, page: Path, fragment: str = "") -> None:
    driver.get_log("browser")  # drop what an earlier page logged
    driver.get(page.resolve().as_uri() + fragment)
    driver.execute_script("window.scrollTo(0, 0)")


def _check_page(driver, page: Path, shot: Path) -> int:
    """The page renders its timeline with ops and without console errors; its screenshot."""
    _open(driver, page)
    ops = driver.execute_script("return document.querySelectorAll('#timeline rect.op').length")
    assert ops > 0, "no op drawn on the timeline"
    assert driver.execute_script("return document.getElementById('verdict') !== null")
    assert driver.save_screenshot(str(shot)), f"no screenshot written to {shot}"
    header = shot.read_bytes()[:24]  # a PNG of the window's size
    assert header[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", header[16:24]) == SIZE, header
    assert _errors(driver) == []
    return ops


def _history_op(page: Path, index: int) -> dict:
    """History line ``index`` of the page's run directory."""
    with open(page.parent / "history.jsonl") as fh:
        for line in fh:
            op = json.loads(line)
            if op["index"] == index:
                return op
    raise AssertionError(f"no op {index} in {page.parent / 'history.jsonl'}")


def _in_view(driver, element_id: str) -> dict:
    """Where the element is, against the window and the timeline's scrolling box."""
    return driver.execute_script("""
        var el = document.getElementById(arguments[0]);
        var r = el.getBoundingClientRect(), box = el.closest('.scroll').getBoundingClientRect();
        var mid_x = (r.left + r.right) / 2, mid_y = (r.top + r.bottom) / 2;
        return {target: el.classList.contains('target'), anomaly: el.classList.contains('anom'),
                title: el.querySelector('title') ? el.querySelector('title').textContent : '',
                in_window: mid_x >= 0 && mid_x <= window.innerWidth && mid_y >= 0 && mid_y <= window.innerHeight,
                in_box: mid_x >= box.left && mid_x <= box.right && mid_y >= box.top && mid_y <= box.bottom,
                targets: document.querySelectorAll('.target').length};""", element_id)


def _check_links(driver, page: Path) -> None:
    """Clicking an anomaly's op link targets that op on the timeline, in view; so does the
    page opened at ``#op-N``."""
    from selenium.webdriver.common.by import By

    _open(driver, page)
    links = driver.find_elements(By.CSS_SELECTOR, "details.anomaly a.oplink[href^='#op-']")
    assert links, "no anomaly links to ops"
    for link in (links[0], links[-1]):
        op = link.get_attribute("href").rsplit("#", 1)[1]
        driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", link)
        link.click()
        where = _in_view(driver, op)
        assert where["target"] and where["targets"] == 1, where
        assert where["anomaly"], where
        index = int(op.removeprefix("op-"))
        assert where["title"].startswith(f"op {index} "), where
        recorded = _history_op(page, index)  # the op the history has at that index, not just the same id
        assert f"process {recorded['process']} {recorded['f']} {recorded['type']}" in where["title"], (recorded, where)
        assert where["in_window"] and where["in_box"], where
        assert driver.execute_script("return location.hash") == f"#{op}"
    _open(driver, page, f"#{op}")
    where = _in_view(driver, op)
    assert where["target"] and where["in_window"] and where["in_box"], where
    assert _errors(driver) == []


def test_the_console_check_sees_an_error(browser, tmp_path):
    """The console errors the tests look for are collected (else 'no console errors' proves nothing)."""
    page = tmp_path / "broken.html"
    page.write_text("<!doctype html><html><body><script>nosuchfunction();</script></body></html>")
    _open(browser, page)
    assert any("nosuchfunction" in e["message"] for e in _errors(browser))


def test_simulated_runs_report_in_the_browser(browser, shots, tmp_path):
    valid, bug = tmp_path / "valid", tmp_path / "bug"
    assert main(["run", "--ops", "1500", "--no-progress", "--out", str(valid)]) == 0
    assert main(["run", "--ops", "1500", "--bug", "ack-before-isr", "--keep-going", "--no-progress",
                 "--out", str(bug)]) == 1
    _check_page(browser, valid / "report.html", shots / "report-simulated-valid.png")
    _check_page(browser, bug / "report.html", shots / "report-simulated-bug.png")
    _check_links(browser, bug / "report.html")
    _check_event_link(browser, bug / "report.html")


def _check_event_link(driver, page: Path) -> None:
    """An invariant violation's link lands on the node event that recorded it: a mark of that
    kind on the node lane, at the time the anomaly gives."""
    from selenium.webdriver.common.by import By

    _open(driver, page)
    link = driver.find_elements(By.CSS_SELECTOR, "details.anomaly a.oplink[href^='#ev-']")[0]
    event = link.get_attribute("href").rsplit("#", 1)[1]
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", link)
    link.click()
    where = _in_view(driver, event)
    assert where["target"] and where["targets"] == 1 and where["anomaly"], where
    assert where["in_window"] and where["in_box"], where
    with open(page.parent / "events.jsonl") as fh:  # ev-N: line N of events.jsonl
        recorded = json.loads(fh.readlines()[int(event.removeprefix("ev-"))])
    assert where["title"].startswith(f"{recorded['kind']} on node {recorded['node']} "
                                     f"at {recorded['time'] / 1e9:.3f} s"), (recorded, where)
    assert f"the event at {recorded['time'] / 1e9:.3f} s" == link.text, link.text
    assert _errors(driver) == []


def test_conform_runs_report_in_the_browser(browser, shots, tmp_path):
    """The queue workload on the reference broker under the default faults (valid), and the txn
    workload on one with lso-off-by-one (G1a): each run's page, and the switch in its output."""
    pytest.importorskip("confluent_kafka")
    valid, bug = tmp_path / "conform-valid", tmp_path / "conform-bug"
    assert main(["conform", "--spawn", "reference", "--cases", "none", "--workload-seconds", "5",
                 "--out", str(valid)]) == 0
    assert main(["conform", "--spawn", "reference", "--client", "confluent", "--cases", "none", "--workload", "txn",
                 "--workload-seconds", "5", "--faults", "", "--bug", "lso-off-by-one", "--out", str(bug)]) == 1
    report = json.loads((bug / "txn" / "report.json").read_text())
    assert report["target"]["bugs"] == ["lso-off-by-one"]
    assert "--bug lso-off-by-one" in report["reproduce"]
    assert report["options"]["bug"] == "lso-off-by-one" and report["options"]["workload"] == "txn"
    assert json.loads((bug / "txn" / "run.json").read_text())["config"]["bugs"] == ["lso-off-by-one"]
    assert json.loads((bug / "report.json").read_text())["bugs"] == ["lso-off-by-one"]
    assert '<property name="bug_switches" value="lso-off-by-one"' in (bug / "junit.xml").read_text()
    assert "txn/report.html" in (bug / "report.html").read_text()  # the conformance page links the run's
    _check_page(browser, valid / "queue" / "report.html", shots / "report-conform-valid.png")
    _check_page(browser, bug / "txn" / "report.html", shots / "report-conform-bug.png")
    _check_links(browser, bug / "txn" / "report.html")


def test_a_large_runs_page_opens_fast(browser, tmp_path):
    """The page of a 100,000-op history (sampled) loads in well under a few seconds, and its
    anomaly's link still lands on its op; prints the load time (docs/how-to/report.md)."""
    from kafkacheck.report import write_report
    from tests.kafkacheck.test_report import _large_history

    out = tmp_path / "large"
    _large_history(out, 100_000, 2 * 33_333 + 1)
    start = time.monotonic()
    write_report(out)
    wrote_s = time.monotonic() - start
    _open(browser, out / "report.html")
    load_ms = browser.execute_script("return performance.getEntriesByType('navigation')[0].loadEventEnd")
    print(f"a page of {(out / 'report.html').stat().st_size / 1e6:.1f} MB for 100,000 ops, written in "
          f"{wrote_s:.1f} s, loaded in {load_ms:.0f} ms")
    assert load_ms < 10_000
    _check_links(browser, out / "report.html")
