"""``conform --kafka-home DIR``: a Kafka distribution or build as the target
(kafkacheck/real/kafka_dist.py). The homes are laid out from the cached releases' real jars, as
a binary distribution (``DIR/libs``, as kafka_2.13-X.tgz unpacks) or as a source checkout after
``./gradlew jar``; a 3.x distribution gets the reload4j binding its tarball ships. Reading a
home is quick and runs by default; the runs that start a node from one are ``slow``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from kafkacheck.cli import main
from kafkacheck.real.kafka_dist import KafkaDist, KafkaUnavailable, NotKafka, open_home, write_log_config

RELOAD4J = ("ch.qos.reload4j:reload4j:1.2.25", "org.slf4j:slf4j-reload4j:1.7.36")  # what 3.9's tarball ships


def _release(version: str) -> KafkaDist:
    dist = KafkaDist(version)
    try:
        dist.fetch(log=lambda *a: None)
    except KafkaUnavailable as e:
        pytest.skip(f"{e}; skip the Apache Kafka tests with -m 'not kafka'")
    return dist


def _distribution(tmp_path: Path, version: str, extra: tuple[Path, ...] = (), drop: str = "") -> Path:
    """DIR/libs/ of links to the cached jars of ``version`` (without those whose name starts
    with ``drop``), plus ``extra``."""
    libs = tmp_path / f"kafka_2.13-{version}" / "libs"
    libs.mkdir(parents=True)
    for jar in [*_release(version).libs.glob("*.jar"), *extra]:
        if not (drop and jar.name.startswith(drop)):
            (libs / jar.name).symlink_to(jar)
    return libs.parent


def _checkout(tmp_path: Path, version: str, core_name: str | None = None, strip_version: bool = False) -> Path:
    """A source checkout as ./gradlew jar leaves it: core/build/libs/kafka_2.13-V.jar,
    clients/build/libs/kafka-clients-V.jar, everything else in core/build/dependant-libs-2.13.x/
    (with ``strip_version``: a clients jar without kafka/kafka-version.properties)."""
    home = tmp_path / "kafka"
    dirs = {d: home / d for d in ("core/build/libs", "clients/build/libs", "core/build/dependant-libs-2.13.16")}
    for d in dirs.values():
        d.mkdir(parents=True)
    for jar in _release(version).libs.glob("*.jar"):
        if jar.name.startswith("kafka_2.13-"):
            (dirs["core/build/libs"] / (core_name or jar.name)).symlink_to(jar)
            (dirs["core/build/libs"] / jar.name.replace(".jar", "-test.jar")).symlink_to(jar)  # left out
        elif jar.name.startswith("kafka-clients-") and strip_version:
            with zipfile.ZipFile(jar) as src, zipfile.ZipFile(dirs["clients/build/libs"] / jar.name, "w") as dst:
                for item in src.infolist():
                    if item.filename != "kafka/kafka-version.properties":
                        dst.writestr(item, src.read(item))
        elif jar.name.startswith("kafka-clients-"):
            (dirs["clients/build/libs"] / jar.name).symlink_to(jar)
        else:
            (dirs["core/build/dependant-libs-2.13.16"] / jar.name).symlink_to(jar)
    return home


@pytest.fixture(scope="session")
def reload4j(tmp_path_factory) -> tuple[Path, ...]:
    """reload4j and its SLF4J binding, fetched with mvn: Kafka 3.x's tarball logs through them."""
    mvn = shutil.which("mvn")
    if mvn is None:
        pytest.skip("mvn is not installed; skip the Apache Kafka tests with -m 'not kafka'")
    out = tmp_path_factory.mktemp("reload4j")
    for artifact in RELOAD4J:
        subprocess.run([mvn, "-q", "-B", "dependency:copy", f"-Dartifact={artifact}", f"-DoutputDirectory={out}"],
                       check=True, capture_output=True, stdin=subprocess.DEVNULL, timeout=300)
    return tuple(sorted(out.glob("*.jar")))


# ---------------------------------------------------------------- reading a home (quick)


@pytest.mark.kafka
def test_a_binary_distribution_is_run_from_its_libs_with_the_version_its_jars_say(kafka_dist, tmp_path):
    home = _distribution(tmp_path, "4.3.1")
    (home / "libs" / "kafka_2.13-4.3.1-sources.jar").symlink_to(kafka_dist.libs / "kafka_2.13-4.3.1.jar")
    dist = open_home(home)
    assert (dist.version, dist.layout, dist.logging) == ("4.3.1", "distribution", "log4j2")
    assert dist.label == f"Apache Kafka 4.3.1 (from {home})"
    assert {j.name for j in dist.jars} == {j.name for j in kafka_dist.libs.glob("*.jar")}  # no -sources.jar
    assert dist.work_dir != kafka_dist.work_dir and dist.fetch() == home


@pytest.mark.kafka
def test_a_checkout_is_run_from_what_gradle_built_in_kafka_run_class_order(kafka_dist, tmp_path):
    dist = open_home(_checkout(tmp_path, "4.3.1"))
    names = [j.name for j in dist.jars]
    assert (dist.version, dist.layout, dist.logging) == ("4.3.1", "checkout", "log4j2")
    assert names[-1] == "kafka_2.13-4.3.1.jar" and "kafka_2.13-4.3.1-test.jar" not in names
    assert names.index("kafka-clients-4.3.1.jar") > names.index("kafka-metadata-4.3.1.jar")  # dependant-libs first
    assert len(names) == len(list(kafka_dist.libs.glob("*.jar")))


@pytest.mark.kafka
def test_without_kafka_version_properties_the_version_is_the_core_jars_name(kafka_dist, tmp_path):
    dist = open_home(_checkout(tmp_path, "4.3.1", core_name="kafka_2.13-4.4.0-SNAPSHOT.jar", strip_version=True))
    assert dist.version == "4.4.0-SNAPSHOT"
    assert open_home(_checkout(tmp_path / "b", "4.3.1", core_name="kafka_2.13-4.4.0-SNAPSHOT.jar")).version == "4.3.1"


@pytest.mark.kafka
def test_a_kafka_3_distribution_logs_through_reload4j_and_gets_a_log4j_1_config(reload4j, tmp_path):
    dist = open_home(_distribution(tmp_path, "3.9.1", extra=reload4j, drop="log4j-"))
    assert (dist.version, dist.logging) == ("3.9.1", "log4j1")
    options = write_log_config(dist.logging, tmp_path / "node", "INFO", quiet=("kafka.request.logger",))
    assert options == [f"-Dlog4j.configuration=file:{tmp_path / 'node' / 'log4j.properties'}"]
    text = (tmp_path / "node" / "log4j.properties").read_text()
    assert "log4j.rootLogger=INFO, console" in text and "log4j.logger.kafka.request.logger=WARN" in text


def test_loggers_get_levels_of_their_own_in_either_config(tmp_path):
    """What the Java client driver's config uses for the KIP-848 membership loggers."""
    levels = {"org.example.Membership": "DEBUG"}
    write_log_config("log4j2", tmp_path / "a", "WARN", stem="c-", levels=levels)
    text = (tmp_path / "a" / "c-log4j2.properties").read_text()
    assert "rootLogger.level = WARN" in text
    assert "logger.l0.name = org.example.Membership\nlogger.l0.level = DEBUG" in text
    write_log_config("log4j1", tmp_path / "b", "WARN", levels=levels)
    assert "log4j.logger.org.example.Membership=DEBUG" in (tmp_path / "b" / "log4j.properties").read_text()


@pytest.mark.kafka
def test_a_home_without_a_logging_binding_is_refused(kafka_dist, tmp_path):
    with pytest.raises(NotKafka, match="no SLF4J binding"):
        open_home(_distribution(tmp_path, "4.3.1", drop="log4j-slf4j"))


def _jar(path: Path, name: str, version: str | None = None) -> None:
    path.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path / name, "w") as z:
        if version is not None:
            z.writestr("kafka/kafka-version.properties", f"commitId=0\nversion={version}\n")


def _home(tmp_path: Path, kind: str) -> Path:
    """Directories that are not a Kafka kafkacheck can run."""
    home = tmp_path / kind
    home.mkdir()
    if kind == "no-version":
        _jar(home / "libs", "kafka_2.13-banana.jar")
    elif kind == "too-old":
        _jar(home / "libs", "kafka_2.13-3.6.2.jar")
        _jar(home / "libs", "kafka-clients-3.6.2.jar", "3.6.2")
    elif kind == "two-builds":
        _jar(home / "libs", "kafka_2.13-4.3.1.jar")
        _jar(home / "libs", "kafka-clients-4.3.1.jar", "4.3.1")
        _jar(home / "libs", "kafka-clients-4.3.0.jar", "4.3.0")
    elif kind == "not-kafka":
        _jar(home / "libs", "commons-io-2.14.0.jar")
    return home


@pytest.mark.parametrize("kind, says", [
    ("empty", "neither libs/kafka_2.13-*.jar"),
    ("not-kafka", "is not an Apache Kafka distribution or build"),
    ("no-version", "cannot read an Apache Kafka version from kafka_2.13-banana.jar"),
    ("too-old", "is Apache Kafka 3.6.2: kafkacheck runs Apache Kafka 3.7 or later"),
    ("two-builds", "2 kafka-clients jars"),
])
def test_a_kafka_home_that_is_not_a_kafka_is_one_line_and_exit_3(tmp_path, capsys, kind, says):
    home = _home(tmp_path, kind)
    assert main(["conform", "--spawn", "kafka", "--kafka-home", str(home), "--out", str(tmp_path / "o")]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0] and "Traceback" not in err[0], err
    assert not (tmp_path / "o" / "broker").exists()  # nothing started


@pytest.mark.parametrize("args, says", [
    (["--spawn", "kafka", "--kafka-home", "{home}", "--kafka-version", "4.3.1"], "leave out --kafka-version"),
    (["--spawn", "kafka", "--kafka-home", "{home}", "--kafka-version", "4.2.2,4.3.1"], "leave out --kafka-version"),
    (["--spawn", "reference", "--kafka-home", "{home}"], "goes with --spawn kafka"),
    (["--bootstrap", "127.0.0.1:9", "--kafka-home", "{home}"], "goes with --spawn kafka"),
    (["--spawn", "kafka", "--kafka-home", "{home}/missing"], "no such directory"),
])
def test_kafka_home_with_what_it_cannot_go_with_is_one_line_and_exit_3(tmp_path, capsys, args, says):
    home = _home(tmp_path, "too-old")  # checked after these
    code = main(["conform", *(a.replace("{home}", str(home)) for a in args), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 3 and len(err) == 1 and says in err[0], err


# ---------------------------------------------------------------- running a home (slow)


def _report(out: Path) -> dict:
    return json.loads((out / "report.json").read_text())


def _alive_under(path: Path) -> list[str]:
    procs = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout.splitlines()
    return [p for p in procs if str(path) in p and str(os.getpid()) != p.split()[0]]


@pytest.mark.kafka
@pytest.mark.slow
def test_a_4x_distribution_runs_a_case_and_a_workload_named_by_its_home(kafka_dist, tmp_path):
    home = _distribution(tmp_path, "4.3.1")
    out = tmp_path / "o"
    code = main(["conform", "--spawn", "kafka", "--brokers", "1", "--kafka-home", str(home), "--cases",
                 "produce-offsets-dense", "--workload", "queue", "--workload-seconds", "3", "--faults", "",
                 "--out", str(out)])
    report = _report(out)
    assert code == 0, report["entries"]
    assert report["target_version"] == f"Apache Kafka 4.3.1 (from {home})"
    run = json.loads((out / "queue" / "run.json").read_text())
    assert run["versions"]["broker"] == f"Apache Kafka 4.3.1 (from {home})"
    assert f"--kafka-home {home}" in _report(out / "queue")["reproduce"]  # the command that runs it again
    assert "Kafka Server started" in (out / "broker" / "kafka-1.log").read_text()
    assert (out / "broker" / "kafka-1" / "log4j2.properties").exists()
    assert _alive_under(out) == []


@pytest.mark.kafka
@pytest.mark.slow
@pytest.mark.parametrize("layout", ["3.9.1-distribution", "4.3.1-checkout"])
def test_a_3x_distribution_and_a_checkout_start_and_pass_a_case(kafka_dist, reload4j, tmp_path, layout):
    version, kind = layout.split("-")
    home = (_distribution(tmp_path, version, extra=reload4j, drop="log4j-") if kind == "distribution"
            else _checkout(tmp_path, version))
    out = tmp_path / "o"
    code = main(["conform", "--spawn", "kafka", "--brokers", "1", "--kafka-home", str(home), "--cases",
                 "produce-offsets-dense", "--workload", "none", "--out", str(out)])
    assert code == 0, _report(out)["entries"]
    assert _report(out)["target_version"] == f"Apache Kafka {version} (from {home})"
    log = (out / "broker" / "kafka-1.log").read_text()
    assert "Kafka Server started" in log and f"Kafka version: {version}" in log
    config = "log4j.properties" if version.startswith("3.") else "log4j2.properties"
    assert (out / "broker" / "kafka-1" / config).exists()
    assert _alive_under(out) == []
