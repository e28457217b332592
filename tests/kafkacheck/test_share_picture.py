"""The report's picture of a share run (kafkacheck/share_picture.py): a hand-made history's
bars (one per delivery, coloured by its holder, ended by an ack, the lock's expiry or a crash,
placed by time), a simulated run's page, a bug switch's anomaly outlined on its bars, no
picture for another workload, and the picture in Chromium when it is set up."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from kafkacheck.cli import main
from kafkacheck.report import write_report
from tests.kafkacheck.test_report_browser import _errors, _open, browser, shots  # noqa: F401 (fixtures)

SVG = "{http://www.w3.org/2000/svg}"


def _pictures(page: str) -> dict[str, ET.Element]:
    """The page's share pictures by partition, parsed."""
    found = re.findall(r'<svg class="share".*?</svg>', page, re.S)
    return {svg.get("data-key"): svg for svg in map(ET.fromstring, found)}


def _bars(svg: ET.Element) -> list[ET.Element]:
    return [e for e in svg.iter(f"{SVG}rect") if "dl" in (e.get("class") or "").split()]


def _title(e: ET.Element) -> str:
    return e.find(f"{SVG}title").text


def _op(index: int, process, kind: str, f: str, t_ms: float, value=None, **extra) -> dict:
    return {"index": index, "process": process, "type": kind, "f": f, "time": int(t_ms * 1e6), "value": value, **extra}


def _hand_made(run_dir: Path) -> None:
    """p1 takes offsets 0 and 1, accepts 0 and releases 1; p2 takes 1 (count 2) and lets its
    lock (100 ms) expire, then releases it too late (refused); p3 takes 1 (count 3) and accepts
    it; p1 takes 2 and crashes. An anomaly (made up) names p2's acquire."""
    k = "t0:0"
    history = [
        _op(0, 1, "invoke", "acquire", 10), _op(1, 1, "ok", "acquire", 20, {k: [[0, "a", 1], [1, "b", 1]]}),
        _op(2, 1, "invoke", "ack", 30, {k: [[0, "accept"], [1, "release"]]}),
        _op(3, 1, "ok", "ack", 35, {"errors": {k: "NONE"}, k: [[0, "accept"], [1, "release"]]}),
        _op(4, 2, "invoke", "acquire", 45), _op(5, 2, "ok", "acquire", 50, {k: [[1, "b", 2]]}, fetch_time=int(40e6)),
        _op(6, 2, "invoke", "ack", 160, {k: [[1, "release"]]}),
        _op(7, 2, "ok", "ack", 165, {"errors": {k: "INVALID_RECORD_STATE"}, k: [[1, "release"]]}),
        _op(8, 3, "invoke", "acquire", 200), _op(9, 3, "ok", "acquire", 210, {k: [[1, "b", 3]]}),
        _op(10, 3, "invoke", "ack", 220, {k: [[1, "accept"]]}), _op(11, 3, "ok", "ack", 225, {k: [[1, "accept"]]}),
        _op(12, 1, "invoke", "acquire", 300), _op(13, 1, "ok", "acquire", 310, {k: [[2, "c", 1]]}),
        _op(14, 1, "invoke", "crash", 320), _op(15, 1, "info", "crash", 320),
        _op(16, 0, "invoke", "send", 400, [["send", k, "d"]]), _op(17, 0, "ok", "send", 401, [["send", k, [3, "d"]]]),
    ]
    run_dir.mkdir()
    (run_dir / "history.jsonl").write_text("".join(json.dumps(o) + "\n" for o in history))
    share = {"group": "g", "keys": [k], "lock_ms": 100, "delivery_limit": 5, "clock_slack_ms": 0}
    (run_dir / "run.json").write_text(json.dumps({"run_id": "hand", "workload": "share", "config": {"share": share}}))
    anomaly = {"key": k, "offset": 1, "ops": [5], "explanation": "made up"}
    (run_dir / "results.json").write_text(json.dumps({"valid": False, "anomaly_types": ["share-double-acquired"],
                                                      "anomalies": {"share-double-acquired": [anomaly]}}))


def test_a_hand_made_history_draws_a_bar_per_delivery_ended_as_it_ended(tmp_path):
    out = tmp_path / "hand"
    _hand_made(out)
    page = write_report(out).read_text()
    svg = _pictures(page)["t0:0"]
    bars = _bars(svg)
    got = [(b.get("data-process"), int(b.get("data-offset")), b.get("data-end"), b.get("data-applied")) for b in bars]
    assert sorted(got) == sorted([("1", 0, "accept", "yes"), ("1", 1, "release", "yes"), ("2", 1, "expiry", ""),
                                  ("3", 1, "accept", "yes"), ("1", 2, "crash", "")])
    fill = {b.get("data-process"): set() for b in bars}
    for b in bars:
        fill[b.get("data-process")].add(b.get("fill"))
    assert all(len(f) == 1 for f in fill.values()) and len(set.union(*fill.values())) == 3  # a colour per process
    titles = {(b.get("data-process"), b.get("data-offset")): _title(b) for b in bars}
    assert "end: accept by op 3, applied" in titles[("1", "0")]
    assert "end: release by op 3, applied" in titles[("1", "1")]
    # p2's lock starts at its fetch (40 ms, before its invoke) and expires 100 ms later
    assert "delivery count 2" in titles[("2", "1")] and "held from 0.040 s to 0.140 s" in titles[("2", "1")]
    assert "end: lock expired (100 ms after the start)" in titles[("2", "1")]
    assert "its consumer crashed (op 15)" in titles[("1", "2")]
    # offset 1's three deliveries, left to right in time, on one row; the expired one pale
    row = sorted((b for b in bars if b.get("data-offset") == "1"), key=lambda b: float(b.get("x")))
    assert [b.get("data-process") for b in row] == ["1", "2", "3"] and len({b.get("y") for b in row}) == 1
    assert float(row[0].get("x")) + float(row[0].get("width")) <= float(row[1].get("x"))
    assert "expiry" in row[1].get("class")
    # p2's late release ended no delivery: a diamond, refused; the anomaly outlines p2's bar only
    (ack,) = [e for e in svg.iter(f"{SVG}path") if (e.get("class") or "").startswith("ack")]
    assert ack.get("data-process") == "2" and "not applied: INVALID_RECORD_STATE" in _title(ack)
    assert [(b.get("data-process"), b.get("data-offset")) for b in bars if "anom" in b.get("class")] == [("2", "1")]
    assert "named by share-double-acquired" in titles[("2", "1")]
    assert "every offset delivered or acknowledged (3), 5 deliveries" in page


def test_a_history_the_picture_cannot_read_costs_the_picture_not_the_page(tmp_path):
    out = tmp_path / "hand"
    _hand_made(out)
    with open(out / "history.jsonl", "a") as fh:  # an acquire whose records are not [offset, value, count]
        fh.write(json.dumps(_op(18, 4, "invoke", "acquire", 500)) + "\n")
        fh.write(json.dumps(_op(19, 4, "ok", "acquire", 510, {"t0:0": [7]})) + "\n")
    page = write_report(out).read_text()
    assert "id='share-heading'" in page and "Not drawn: TypeError" in page and 'id="timeline"' in page


def test_a_share_runs_page_has_a_picture_per_partition(tmp_path):
    out = tmp_path / "share"
    assert main(["run", "--workload", "share", "--seed", "0", "--ops", "300", "--no-progress", "--out", str(out)]) == 0
    page = (out / "report.html").read_text()
    pictures = _pictures(page)
    keys = json.loads((out / "run.json").read_text())["config"]["share"]["keys"]
    assert sorted(pictures) == sorted(keys) and "id='share-heading'" in page
    acquired = sum(len(records) for line in (out / "history.jsonl").read_text().splitlines()
                   for o in [json.loads(line)] if o["f"] == "acquire" and o["type"] == "ok"
                   for records in o["value"].values())
    bars = [b for svg in pictures.values() for b in _bars(svg)]
    assert len(bars) == acquired  # a short run: every delivery drawn
    assert {b.get("data-end") for b in bars} >= {"accept", "release"}
    assert all(f"process {b.get('data-process')}</span>" in page for b in bars)  # each holder in the legend


@pytest.fixture(scope="module")
def bug_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("share") / "bug"
    assert main(["run", "--workload", "share", "--bug", "share-ack-any-holder", "--seed", "0", "--ops", "1000",
                 "--no-progress", "--out", str(out)]) == 1
    return out


def test_a_bug_switchs_anomaly_is_outlined_on_its_bars(bug_run):
    results = json.loads((bug_run / "results.json").read_text())
    page = (bug_run / "report.html").read_text()
    pictures = _pictures(page)
    for a in results["anomalies"]["share-ack-not-held"]:
        on_row = [e for e in pictures[a["key"]].iter() if e.get("data-offset") == str(a["offset"])]
        outlined = {int(e.get("data-op")) for e in on_row if "anom" in (e.get("class") or "").split()}
        assert outlined == set(a["ops"]), (a, outlined)  # both holders' bars and the ack of the one not holding it
    assert "names and 2 either side of each" in page  # drawn first


def test_another_workloads_page_has_no_share_picture(tmp_path):
    out = tmp_path / "queue"
    assert main(["run", "--ops", "200", "--no-progress", "--out", str(out)]) == 0
    page = (out / "report.html").read_text()
    assert "share-heading" not in page and 'class="share"' not in page


def test_the_picture_renders_in_the_browser(browser, shots, bug_run):  # noqa: F811
    """Its anomaly outlined as the timeline's; a screenshot there (docs/images/report-share-picture.png:
    ``KAFKACHECK_REPORT_SCREENSHOTS=docs/images pytest tests/kafkacheck/test_share_picture.py``)."""
    _open(browser, bug_run / "report.html")
    drawn = browser.execute_script("""
        var svg = document.querySelectorAll('svg.share'), bad = document.querySelector('svg.share .anom');
        bad.closest('.scroll').previousElementSibling.previousElementSibling.scrollIntoView();  // its heading
        var r = svg[0].getBoundingClientRect();
        return {n: svg.length, w: r.width, h: r.height, bars: document.querySelectorAll('svg.share rect.dl').length,
                stroke: getComputedStyle(bad).stroke};""")
    assert drawn["n"] == 2 and drawn["w"] > 1000 and drawn["h"] > 400 and drawn["bars"] > 300, drawn
    assert drawn["stroke"] == "rgb(213, 0, 0)", drawn  # the page's anomaly outline
    assert browser.save_screenshot(str(shots / "report-share-picture.png"))
    assert _errors(browser) == []
