"""report.html and report.json of a run directory (kafkacheck/report.py), without a browser:
what they hold, where they are written, and how big a large run's page is.
tests/kafkacheck/test_report_browser.py opens the pages in Chromium."""

from __future__ import annotations

import html
import json
import re
import subprocess
import sys
from pathlib import Path

from kafkacheck.cli import main
from kafkacheck.report import MAX_TIMELINE_OPS, write_report
from kafkacheck.report_history import fault_windows

ROOT = Path(__file__).resolve().parents[2]


def _page(run_dir: Path) -> str:
    return (run_dir / "report.html").read_text()


def _ids(page: str) -> set[str]:
    return set(re.findall(r'\bid=["\']([^"\']+)["\']', page))


def test_fault_windows_pair_each_fault_with_what_ends_it():
    def op(i, f, value, t):
        return [{"index": 2 * i, "time": t, "type": "invoke", "f": f, "value": value},
                {"index": 2 * i + 1, "time": t + 5, "type": "info", "f": f, "value": value}]

    nemesis = [*op(0, "pause", {"nodes": [1]}, 100), *op(1, "pause", {"nodes": [2]}, 200),
               *op(2, "partition", {"grudge": {"1": [2]}}, 250), *op(3, "resume", {"nodes": [2]}, 300),
               *op(4, "kill", {"nodes": [3]}, 350), *op(5, "heal", None, 400),
               *op(6, "resume", {"nodes": [1]}, 500), *op(7, "clock-skew", {"node": 1, "skew_ms": 300}, 600),
               *op(8, "clock-skew", {"node": 1, "skew_ms": 0}, 700),
               # a --template run's: a forced election is done at once; a delay ends when set to 0 ms
               *op(9, "elect", {"error": "NONE", "leader": 2, "partition": 0, "topic": "t0"}, 710),
               *op(10, "delay", {"ms": 20}, 720), *op(11, "delay", {"ms": 0}, 800),
               *op(12, "hold-back", {"requests": ["FetchRequest"], "ms": 0.00005}, 810)]
    windows = {(w["f"], tuple(w["nodes"])): (w["start"], w["end"]) for w in fault_windows(nemesis, 1000)}
    assert windows == {("pause", ("1",)): (105, 500), ("pause", ("2",)): (205, 300),
                       ("partition", ()): (255, 400),  # heal ends the network's faults, not a pause or a kill
                       ("kill", ("3",)): (355, 1000),  # never restarted: to the end of the run
                       ("clock-skew", ("1",)): (605, 700),
                       ("elect", ()): (715, 715), ("delay", ()): (725, 800), ("hold-back", ()): (815, 865)}


def test_a_simulated_run_writes_its_report_with_every_anomaly_op_anchored(tmp_path):
    out = tmp_path / "bug"
    code = main(["run", "--ops", "1500", "--bug", "ack-before-isr", "--keep-going", "--no-progress",
                 "--out", str(out)])
    assert code == 1
    report = json.loads((out / "report.json").read_text())
    results = json.loads((out / "results.json").read_text())
    assert report["target"]["bugs"] == ["ack-before-isr"]
    assert report["target"]["version"].startswith("reference ")
    assert report["reproduce"] == results["reproduce"] == \
        "kafkacheck run --seed 0 --ops 1500 --bug ack-before-isr --keep-going"
    assert report["options"] == {"seed": 0, "ops": 1500, "bug": ["ack-before-isr"], "keep_going": True}
    assert report["verdict"]["valid"] is False
    assert report["verdict"]["anomaly_types"] == results["anomaly_types"]
    assert report["drawn"]["sampled"] == [] and report["drawn"]["timeline_ops"] == report["history"]["client_ops"]
    page = _page(out)
    ids = _ids(page)
    for kind in results["anomaly_types"]:
        assert f"anomaly-{kind}" in _ids(page)
    linked = set(re.findall(r'class="oplink" href="#([^"]+)"', page))
    assert linked and linked <= ids, sorted(linked - ids)[:5]
    named = {o for items in results["anomalies"].values() for a in items for o in a["ops"]}
    for o in named:  # every op an anomaly names is drawn, marked as such
        assert re.search(rf'<rect id="op-{o}" data-inv="\d+" class="op \w+ anom"', page), o
    # invariant violations name no op: they link to the node event that recorded them
    assert any(i.startswith("ev-") for i in linked)
    assert "ack-before-isr" in page and results["reproduce"] in page
    # self-contained: nothing is fetched when the page opens
    assert not re.search(r'(src|href)="(https?:)?//', page)
    assert "<script src" not in page and "<link" not in page


def test_check_rewrites_the_report_and_import_jepsen_writes_one(tmp_path):
    out = tmp_path / "valid"
    assert main(["run", "--ops", "300", "--no-progress", "--out", str(out)]) == 0
    (out / "report.html").unlink()
    (out / "report.json").unlink()
    assert main(["check", str(out)]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["verdict"]["valid"] is True
    assert report["reproduce"] == "kafkacheck run --seed 0 --ops 300"  # kept from results.json
    assert "VALID" in _page(out)

    edn = ROOT / "tests" / "data" / "jepsen_kafka_cases" / "g1c-ww-wr-test.edn"
    imported = tmp_path / "jepsen"
    assert main(["import-jepsen", str(edn), "--out", str(imported)]) == 0
    report = json.loads((imported / "report.json").read_text())
    assert report["verdict"] is None and report["target"]["name"] == "jepsen"
    assert "Not judged yet" in _page(imported)
    main(["check", str(imported)])
    assert json.loads((imported / "report.json").read_text())["verdict"] is not None


def _large_history(run_dir: Path, n_ops: int, anomaly_op: int) -> None:
    """``n_ops`` sends and polls by 10 processes over 100 s, with a pause window, and a
    results.json naming one op: the page of a large run, made without simulating it."""
    run_dir.mkdir(parents=True)
    lines, t = [], 1_000_000_000
    for i in range(n_ops):
        p = i % 10
        f = "send" if i % 2 else "poll"
        t += 1_000_000
        lines.append({"index": len(lines), "time": t, "process": p, "type": "invoke", "f": f,
                      "value": [["send", "t0:0", i]] if f == "send" else [["poll"]]})
        if i == n_ops // 2:
            lines.append({"index": len(lines), "time": t, "process": "nemesis", "type": "info", "f": "pause",
                          "value": {"nodes": [1]}})
        lines.append({"index": len(lines), "time": t + 400_000, "process": p, "type": "ok", "f": f,
                      "value": [["send", "t0:0", [i, i]]] if f == "send" else [["poll", {"t0:0": [[i, i]]}]]})
    (run_dir / "history.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    (run_dir / "run.json").write_text(json.dumps({"format": 1, "run_id": "large", "target": "sim", "config": {}}))
    (run_dir / "results.json").write_text(json.dumps({
        "valid": False, "anomaly_types": ["lost-write"], "counts": {"lost-write": 1},
        "anomalies": {"lost-write": [{"explanation": "planted for the page's size test", "ops": [anomaly_op]}]}}))


def test_a_large_run_is_sampled_keeping_the_anomaly_ops(tmp_path, monkeypatch):
    from kafkacheck import report_history as module

    out = tmp_path / "large"
    n = 100_000
    anomaly_op = 2 * 33_333 + 1  # a completion that every k-th sampling would leave out
    _large_history(out, n, anomaly_op)
    summaries = []
    summary = module.summary
    monkeypatch.setattr(module, "summary", lambda *a: summaries.append(1) or summary(*a))
    write_report(out)
    report = json.loads((out / "report.json").read_text())
    assert report["history"]["client_ops"] == n
    assert report["drawn"]["timeline_ops"] < MAX_TIMELINE_OPS and report["drawn"]["sampled"]
    # only the values shown are summarised (doing every op's took most of a 1M-op report's 21 s)
    assert len(summaries) <= report["drawn"]["timeline_ops"] + 10, len(summaries)
    page = _page(out)
    assert f'id="op-{anomaly_op}"' in page and "Sampled:" in page
    size = (out / "report.html").stat().st_size
    assert size < 8_000_000, size  # a page a browser opens in about a second


def test_check_still_imports_only_the_standard_library_for_the_report():
    """The report module is imported by kafkacheck check: nothing beyond the standard library."""
    code = ("import sys; before = set(sys.modules); import kafkacheck.report; "
            "print(sorted(m for m in set(sys.modules) - before if not m.startswith(('kafkacheck', 'encodings'))"
            " and m.split('.')[0] not in sys.stdlib_module_names))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]", proc.stdout


def test_a_report_that_cannot_be_written_changes_neither_verdict_nor_exit_code(tmp_path, capsys):
    """A failing report (here report.html is a directory: as a full disk or an unwritable file
    would) is one line on stderr; check still writes results.json and exits with its verdict."""
    out = tmp_path / "bug"
    assert main(["run", "--ops", "300", "--bug", "ack-before-isr", "--keep-going", "--no-progress",
                 "--out", str(out)]) == 1
    (out / "report.html").unlink()
    (out / "report.html").mkdir()
    (out / "results.json").unlink()
    capsys.readouterr()
    assert main(["check", str(out)]) == 1
    assert json.loads((out / "results.json").read_text())["valid"] is False
    err = capsys.readouterr().err
    assert err.count("report.html not written") == 1 and "Traceback" not in err, err
    assert not (out / "report.json").exists()  # not left behind saying what the page does not
    assert write_report(out) is None


HOSTILE = "<b>&\"' x\" onmouseover=\"alert(1)"


def _hostile_run(run_dir: Path) -> None:
    """A run directory whose every string from the history, the broker and the checker is
    HOSTILE: topic, process, op type and error, fault, node event, explanation, target, options."""
    run_dir.mkdir(parents=True)
    topic = f"{HOSTILE}:0"
    lines = [
        {"index": 0, "time": 1_000, "process": HOSTILE, "type": "invoke", "f": "send", "value": [["send", topic, 1]]},
        {"index": 1, "time": 2_000, "process": "nemesis", "type": "info", "f": HOSTILE, "value": {"nodes": [HOSTILE]}},
        {"index": 2, "time": 5_000, "process": HOSTILE, "type": HOSTILE, "f": "send",
         "value": [["send", topic, [0, 1]]], "error": HOSTILE},
        {"index": 3, "time": 6_000, "process": 1, "type": "invoke", "f": HOSTILE, "value": [["poll"]]},
        {"index": 4, "time": 9_000, "process": 1, "type": "ok", "f": HOSTILE, "value": [["poll", {topic: [[0, 1]]}]]},
    ]
    (run_dir / "history.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    (run_dir / "events.jsonl").write_text(json.dumps({"time": 3_000, "node": HOSTILE, "kind": HOSTILE,
                                                      HOSTILE: HOSTILE}) + "\n")
    (run_dir / "run.json").write_text(json.dumps({
        "format": 1, "run_id": HOSTILE, "target": HOSTILE, "workload": HOSTILE, "seed": HOSTILE,
        "faults": [HOSTILE], "options": {HOSTILE: HOSTILE}, "versions": {"broker": HOSTILE},
        "config": {"bugs": [HOSTILE], "features": {HOSTILE: 1}, "broker_config": {HOSTILE: HOSTILE},
                   "topic_configs": {topic: {HOSTILE: HOSTILE}}, HOSTILE: HOSTILE}}))
    (run_dir / "results.json").write_text(json.dumps({
        "valid": False, "anomaly_types": [HOSTILE], "counts": {HOSTILE: 1}, "unknown": [HOSTILE],
        "reproduce": HOSTILE, "allowed": {HOSTILE: 1},
        "anomalies": {HOSTILE: [{"explanation": f"{topic} {HOSTILE}", "ops": [2, 4]}]},
        "allowed_anomalies": {HOSTILE: [{"explanation": HOSTILE, "ops": [4]}]}}))


def test_every_string_from_the_history_and_the_broker_is_escaped(tmp_path):
    from html.parser import HTMLParser

    class Tags(HTMLParser):
        def __init__(self):
            super().__init__()
            self.tags, self.attrs, self.text = [], [], []

        def handle_starttag(self, tag, attrs):
            self.tags.append(tag)
            self.attrs += [name for name, _ in attrs]

        def handle_data(self, data):
            self.text.append(data)

    out = tmp_path / "hostile"
    _hostile_run(out)
    assert write_report(out) is not None
    parser = Tags()
    parser.feed(_page(out))
    assert "b" not in parser.tags
    assert not [a for a in parser.attrs if a.startswith("on") or a in ("alert(1)", "x\"")], set(parser.attrs)
    text = "".join(parser.text)
    assert text.count(HOSTILE) >= 10  # shown, as text


def _svg(page: str, svg_id: str) -> str:
    return re.search(rf'<svg id="{svg_id}".*?</svg>', page, re.S).group(0)


def test_an_imported_jepsen_test_history_gets_a_lane_per_process_and_plots_inside_their_box(tmp_path):
    """Jepsen's checker tests are histories of a few ns: the plots' buckets stay inside the
    plot, and its two clients are two lanes though one's ops all end before the other's."""
    edn = ROOT / "tests" / "data" / "jepsen_kafka_cases" / "g1a-test.edn"
    out = tmp_path / "g1a"
    assert main(["import-jepsen", str(edn), "--out", str(out), "--check"]) == 1
    page = _page(out)
    for svg_id in ("latency", "throughput"):
        svg = _svg(page, svg_id)
        width = int(re.search(r'width="(\d+)"', svg).group(1))
        xs = [float(x) for pts in re.findall(r'points="([^"]*)"', svg) for x in re.findall(r'([-\d.]+),', pts)]
        xs += [float(x) for x in re.findall(r'cx="([-\d.]+)"', svg)]
        assert xs and all(0 <= x <= width for x in xs), (svg_id, max(xs))
    lanes = re.findall(r'<text class="lane" x="2" y="[\d.]+">([^<]*)<', _svg(page, "timeline"))
    assert lanes == ["p0", "p1"], lanes


def test_a_lane_goes_on_with_a_new_process_only_after_an_info(tmp_path):
    out = tmp_path / "lanes"
    out.mkdir()
    lines = []
    for process, start, end_type in ((0, 0, "info"), (5, 100, "ok"), (1, 0, "ok"), (2, 100, "ok")):
        lines += [{"time": start, "process": process, "type": "invoke", "f": "send", "value": []},
                  {"time": start + 10, "process": process, "type": end_type, "f": "send", "value": []}]
    lines.sort(key=lambda o: o["time"])
    (out / "history.jsonl").write_text("".join(json.dumps({**o, "index": i}) + "\n" for i, o in enumerate(lines)))
    write_report(out)
    lanes = re.findall(r'<text class="lane" x="2" y="[\d.]+">([^<]*)<', _svg(_page(out), "timeline"))
    # p0 crashed: the first process to start after it (p2) goes on in its lane; p1 ended ok,
    # so its lane is its own, and p5 gets a new one
    assert sorted(lanes) == ["p0, p2", "p1", "p5"], lanes
    # a bare history (no run.json): what is not known is left out, not printed as None
    assert "None" not in _page(out) and "unknown target &middot; bug switches none" in _page(out)


def test_a_large_run_with_many_anomalies_draws_the_ops_it_links_not_all_it_names(tmp_path):
    """A buggy long run's anomalies can name more ops than a page draws well: the sampled
    timeline keeps the ops its links land on, and every link still lands."""
    from kafkacheck.report import SAMPLED_TIMELINE_OPS

    out = tmp_path / "many"
    _large_history(out, 60_000, 1)
    anomalies = [{"explanation": f"planted {i}", "ops": [4 * i + 1, 4 * i + 3]} for i in range(10_000)]
    (out / "results.json").write_text(json.dumps({
        "valid": False, "anomaly_types": ["lost-write"], "counts": {"lost-write": len(anomalies)},
        "anomalies": {"lost-write": anomalies}}))
    write_report(out)
    report = json.loads((out / "report.json").read_text())
    assert report["drawn"]["timeline_ops"] <= SAMPLED_TIMELINE_OPS + 100, report["drawn"]
    page = _page(out)
    linked = set(re.findall(r'class="oplink" href="#([^"]+)"', page))
    assert len(linked) == 20 and linked <= _ids(page)


def test_an_offline_partition_ends_with_the_resume_or_restart_of_its_nodes():
    def op(i, f, value, t):
        return [{"index": 2 * i, "time": t, "type": "invoke", "f": f, "value": value},
                {"index": 2 * i + 1, "time": t + 5, "type": "info", "f": f, "value": value}]

    nemesis = [*op(0, "offline-partition", {"partition": "t0:1", "nodes": [2], "how": "pause"}, 100),
               *op(1, "heal", None, 200), *op(2, "resume", {"nodes": [2]}, 300),
               *op(3, "offline-partition", {"partition": "t0:0", "nodes": [1], "how": "kill"}, 400),
               *op(4, "restart", {"nodes": [1]}, 500)]
    windows = [(w["f"], w["nodes"], w["start"], w["end"]) for w in fault_windows(nemesis, 1000)]
    assert windows == [("offline-partition", ["2"], 105, 300), ("offline-partition", ["1"], 405, 500)]


def test_allowed_anomalies_are_folded_to_a_line_each_with_why_they_are_allowed(tmp_path):
    """A valid run's page shows its allowed anomalies as one closed line each (a count and the
    reason), opened on a click, so that its plots are not pushed screens down."""
    from kafkacheck.cli import main

    out = tmp_path / "r"
    assert main(["run", "--workload", "txn", "--seed", "0", "--ops", "300", "--no-progress", "--out", str(out)]) == 0
    results = json.loads((out / "results.json").read_text())
    page = _page(out)
    assert results["allowed"], "this run allows nothing: pick one that does"
    for kind in results["allowed"]:
        assert results["allowed_why"][kind]
        opening = page.index(f"id='allowed-{kind}'")
        tag = page[page.rindex("<details", 0, opening):opening]
        assert " open" not in tag  # folded
        assert html.escape(results["allowed_why"][kind], quote=True) in page
