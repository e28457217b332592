"""Apache Kafka's jars: a release fetched from Maven Central, or a distribution or build the user points at.

Theory of operation
-------------------
A *dist* is what a broker's JVM (and the Java client driver of ``--client java``) runs from.
Both kinds have the same face: ``version`` (as Kafka itself reports it), ``label`` (what the
report and run.json name: ``Apache Kafka 4.3.1``), ``classpath()``, ``java()``, ``fetch(log)``
(the jars ready, or :class:`KafkaUnavailable`), ``logging`` (the backend of its SLF4J binding,
``"log4j2"`` or ``"log4j1"``: :func:`write_log_config` writes the configuration it reads),
``work_dir`` (where kafkacheck may build things for it: the Java driver) and ``fingerprint``
(changes when its jars do).

* :class:`KafkaDist` -- one release in the cache (``$KAFKACHECK_CACHE``, else
  ``$XDG_CACHE_HOME/kafkacheck``, else ``~/.cache/kafkacheck``): ``kafka-VERSION/libs/``
  holds the runtime classpath of ``org.apache.kafka:kafka_2.13`` plus a log4j 2 binding for
  SLF4J 1.x (Kafka's tarball ships a binding; no POM does), copied there by ``mvn
  dependency:copy-dependencies`` from a ``pom.xml`` this module writes. The fetch goes to a
  temporary directory that is renamed into place when complete, so an interrupted fetch
  leaves nothing half-done behind; later runs find ``libs/`` and start at once.
* :class:`KafkaHome` -- ``--kafka-home DIR`` (:func:`open_home`): a binary distribution
  (``DIR/libs/*.jar``, as ``kafka_2.13-X.tgz`` unpacks), or a source checkout built with
  ``./gradlew jar`` (the jars ``bin/kafka-run-class.sh`` puts on a checkout's classpath:
  ``core/build/dependant-libs-2.13*/``, ``clients/build/libs``, ``tools/build/libs`` and its
  dependant libs, ``core/build/libs``). Its version is read from the jars themselves:
  ``kafka/kafka-version.properties`` in kafka-clients (what the broker logs and reports), else
  the name of the core jar ``kafka_2.13-X.jar``. Its logging is whatever its SLF4J binding
  names: Kafka 4.x ships log4j 2 (``log4j-slf4j-impl`` or ``log4j-slf4j2-impl``), 3.x
  reload4j, a log4j 1 (``slf4j-reload4j``).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_VERSION = "4.3.1"
LOG4J_VERSION = "2.25.3"  # log4j-slf4j-impl: the binding for the SLF4J 1.7 that Kafka 4.x uses
FETCH_TIMEOUT_S = 900
OLDEST = (3, 7)  # the oldest release started and checked the same way (KRaft, static voters)


class KafkaUnavailable(RuntimeError):
    """Java or Maven is missing, or the jars could not be fetched: one line for the user."""


class KafkaVersionUnknown(KafkaUnavailable):
    """Maven Central has no such Apache Kafka release: a usage error (exit 3)."""


class NotKafka(ValueError):
    """``--kafka-home`` is not something kafkacheck can run as Apache Kafka: a usage error (exit 3)."""


def cache_root() -> Path:
    if os.environ.get("KAFKACHECK_CACHE"):
        return Path(os.environ["KAFKACHECK_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kafkacheck"


def check_version(version: str) -> str:
    if not re.fullmatch(r"\d+\.\d+\.\d+", version):
        raise ValueError(f"--kafka-version must look like {DEFAULT_VERSION}, not {version!r}")
    major, minor, _ = (int(x) for x in version.split("."))
    if (major, minor) < OLDEST:
        raise ValueError(f"--kafka-version {version}: kafkacheck runs Apache Kafka {OLDEST[0]}.{OLDEST[1]} or later "
                         "in KRaft mode")
    return version


def version_tuple(version: str) -> tuple[int, ...]:
    """``(4, 3, 1)`` for ``4.3.1``, and for a build's ``4.4.0-SNAPSHOT`` ``(4, 4, 0)``."""
    m = re.match(r"(\d+)\.(\d+)\.(\d+)", version)
    if m is None:
        raise ValueError(f"not an Apache Kafka version: {version!r}")
    return tuple(int(x) for x in m.groups())


def need_tool(tool: str, why: str) -> str:
    path = shutil.which(tool)
    if path is None:
        raise KafkaUnavailable(f"{tool} is not installed ({why}); install a JDK 17+ and Maven, "
                               "or skip the Kafka tests with -m 'not kafka'")
    return path


# ---------------------------------------------------------------- logging

def log4j2_config(level: str, stream: str = "SYSTEM_OUT", quiet: tuple[str, ...] = (),
                  levels: dict[str, str] | None = None) -> str:
    """A log4j2 properties file: everything at ``level`` to ``stream``, ``quiet`` loggers at WARN,
    the loggers of ``levels`` at theirs."""
    lines = ["status = warn", "appender.console.type = Console", "appender.console.name = CONSOLE",
             f"appender.console.target = {stream}", "appender.console.layout.type = PatternLayout",
             "appender.console.layout.pattern = [%d] %p %m (%c)%n", f"rootLogger.level = {level}",
             "rootLogger.appenderRef.console.ref = CONSOLE"]
    for i, name in enumerate(quiet):
        lines += [f"logger.q{i}.name = {name}", f"logger.q{i}.level = WARN"]
    for i, (name, at) in enumerate(sorted((levels or {}).items())):
        lines += [f"logger.l{i}.name = {name}", f"logger.l{i}.level = {at}"]
    return "\n".join(lines) + "\n"


def log4j1_config(level: str, stream: str = "System.out", quiet: tuple[str, ...] = (),
                  levels: dict[str, str] | None = None) -> str:
    """The same for log4j 1 (reload4j), which Kafka 3.x logs through."""
    lines = [f"log4j.rootLogger={level}, console", "log4j.appender.console=org.apache.log4j.ConsoleAppender",
             f"log4j.appender.console.Target={stream}", "log4j.appender.console.layout=org.apache.log4j.PatternLayout",
             "log4j.appender.console.layout.ConversionPattern=[%d] %p %m (%c)%n"]
    lines += [f"log4j.logger.{name}=WARN" for name in quiet]
    lines += [f"log4j.logger.{name}={at}" for name, at in sorted((levels or {}).items())]
    return "\n".join(lines) + "\n"


def write_log_config(logging: str, directory: Path, level: str, stderr: bool = False,
                     quiet: tuple[str, ...] = (), stem: str = "", levels: dict[str, str] | None = None) -> list[str]:
    """Write the configuration ``logging`` (a dist's backend) reads into ``directory``; the JVM
    options that make it read that file. ``levels``: loggers at levels of their own."""
    directory.mkdir(parents=True, exist_ok=True)
    if logging == "log4j1":
        path = directory / f"{stem}log4j.properties"
        path.write_text(log4j1_config(level, "System.err" if stderr else "System.out", quiet, levels))
        return [f"-Dlog4j.configuration=file:{path}"]
    assert logging == "log4j2", logging
    path = directory / f"{stem}log4j2.properties"
    path.write_text(log4j2_config(level, "SYSTEM_ERR" if stderr else "SYSTEM_OUT", quiet, levels))
    return [f"-Dlog4j2.configurationFile={path}"]


# ---------------------------------------------------------------- a release from Maven Central

POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>kafkacheck</groupId>
  <artifactId>apache-kafka-runtime</artifactId>
  <version>{version}</version>
  <packaging>pom</packaging>
  <!-- written by kafkacheck (kafkacheck/real/kafka_dist.py): the classpath of an Apache Kafka broker -->
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>{version}</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId><version>{log4j}</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId><artifactId>log4j-core</artifactId><version>{log4j}</version>
    </dependency>{bridge}
  </dependencies>
</project>
"""
# Kafka 3.x logs through log4j 1 (its tarball ships reload4j); its one direct use of log4j 1's
# classes (the broker loggers of DescribeConfigs) is bridged to log4j 2, which does the logging
LOG4J1_BRIDGE = """
    <dependency>
      <groupId>org.apache.logging.log4j</groupId><artifactId>log4j-1.2-api</artifactId><version>{log4j}</version>
    </dependency>""".replace("{log4j}", LOG4J_VERSION)


@dataclass
class KafkaDist:
    """One Apache Kafka release: its jars in the cache, fetched on first use."""

    version: str = DEFAULT_VERSION
    root: Path = field(default_factory=cache_root)
    logging = "log4j2"  # the binding the POM adds, for 3.x too (with the log4j 1 bridge)

    @property
    def home(self) -> Path:
        return self.root / f"kafka-{self.version}"

    @property
    def libs(self) -> Path:
        return self.home / "libs"

    @property
    def work_dir(self) -> Path:
        return self.home

    @property
    def label(self) -> str:
        return f"Apache Kafka {self.version}"

    @property
    def fingerprint(self) -> str:
        return ""  # a release's jars never change

    @property
    def fetched(self) -> bool:
        return (self.libs / f"kafka_2.13-{self.version}.jar").exists()

    def classpath(self) -> str:
        return str(self.libs / "*")

    def java(self) -> str:
        return need_tool("java", "Apache Kafka runs on Java 17 or later")

    def fetch(self, log=print) -> Path:
        """The jars, fetched from Maven Central with ``mvn`` unless already cached."""
        if self.fetched:
            return self.libs
        self.java()
        mvn = need_tool("mvn", "it fetches Apache Kafka's jars from Maven Central")
        self.root.mkdir(parents=True, exist_ok=True)
        log(f"fetching Apache Kafka {self.version} from Maven Central into {self.home} (once)")
        tmp = Path(tempfile.mkdtemp(prefix=f".kafka-{self.version}-", dir=self.root))
        try:
            (tmp / "pom.xml").write_text(POM.format(version=self.version, log4j=LOG4J_VERSION,
                                                    bridge=LOG4J1_BRIDGE if version_tuple(self.version) < (4,) else ""))
            cmd = [mvn, "-q", "-B", "-f", str(tmp / "pom.xml"), "dependency:copy-dependencies",
                   f"-DoutputDirectory={tmp / 'libs'}", "-DincludeScope=runtime"]
            try:
                done = subprocess.run(cmd, capture_output=True, text=True, timeout=FETCH_TIMEOUT_S,
                                      stdin=subprocess.DEVNULL)
            except subprocess.TimeoutExpired:
                raise KafkaUnavailable(f"fetching Apache Kafka {self.version} with mvn took more than "
                                       f"{FETCH_TIMEOUT_S} s") from None
            if done.returncode != 0 and maven_missing(done.stdout + done.stderr, "org.apache.kafka:kafka_2.13"):
                raise KafkaVersionUnknown(f"Apache Kafka {self.version} is not on Maven Central "
                                          "(org.apache.kafka:kafka_2.13); see https://kafka.apache.org/downloads")
            if done.returncode != 0 or not (tmp / "libs" / f"kafka_2.13-{self.version}.jar").exists():
                raise KafkaUnavailable(f"could not fetch Apache Kafka {self.version} from Maven Central: "
                                       f"{mvn_error(done.stdout + done.stderr)}")
            if not self.fetched:  # (another kafkacheck may have finished the same fetch meanwhile)
                if self.home.exists():  # a leftover without jars: an older layout, a partial copy
                    shutil.rmtree(self.home)
                try:
                    tmp.rename(self.home)
                except OSError:
                    if not self.fetched:
                        raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        log(f"fetched {len(list(self.libs.glob('*.jar')))} jars")
        return self.libs


def maven_missing(output: str, artifact: str) -> bool:
    """Whether Maven's output says ``artifact`` (group:name) is not in the repository: its words
    when it first looks, and when it remembers (in its local repository) that it looked before."""
    name = re.escape(artifact)
    return re.search(rf"(Could not find artifact|Failure to find) {name}\b|{name}:jar:\S+ was not found in",
                     output) is not None


def mvn_error(output: str) -> str:
    """The line of Maven's output that says what went wrong."""
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", x).strip() for x in output.splitlines()]
    lines = [x for x in lines if x]
    for x in lines:
        if "[ERROR]" in x and ("Could not" in x or "Failed" in x or "resolve" in x):
            return x.replace("[ERROR] ", "")[:300]
    errors = [x for x in lines if "[ERROR]" in x]
    return (errors[0] if errors else lines[-1] if lines else "mvn failed without output")[:300]


# ---------------------------------------------------------------- a distribution or build the user has

# what bin/kafka-run-class.sh leaves off the classpath
NOT_RUNTIME = re.compile(r"-(test|test-sources|sources|src|scaladoc|javadoc)\.jar$")
CORE_JAR = re.compile(r"kafka_2\.1\d-(.+)\.jar")
CLIENTS_JAR = re.compile(r"kafka-clients-(.+)\.jar")
VERSION = re.compile(r"\d+\.\d+\.\d+([-.+][\w.+-]*)?")  # 4.3.1, 4.4.0-SNAPSHOT, 3.9.1-vendor.2
# SLF4J bindings (1.x and 2.x) by jar name -> the backend that reads the configuration
BINDINGS = {"log4j-slf4j-impl-": "log4j2", "log4j-slf4j2-impl-": "log4j2",
            "slf4j-reload4j-": "log4j1", "slf4j-log4j12-": "log4j1"}


@dataclass(frozen=True)
class KafkaHome:
    """A Kafka distribution or build the user points at (``--kafka-home``); see :func:`open_home`."""

    home: Path
    jars: tuple[Path, ...]  # the broker's classpath, in order
    version: str
    logging: str  # "log4j2" or "log4j1"
    layout: str  # "distribution" or "checkout"

    @property
    def label(self) -> str:
        return f"Apache Kafka {self.version} (from {self.home})"

    @property
    def fetched(self) -> bool:
        return all(j.exists() for j in self.jars)

    @property
    def work_dir(self) -> Path:
        digest = hashlib.sha256(str(self.home).encode()).hexdigest()[:12]
        return cache_root() / "homes" / f"{self.home.name}-{digest}"

    @property
    def fingerprint(self) -> str:
        """Changes when the jars do (a rebuilt checkout): their names, sizes and times."""
        stats = [(j.name, j.stat().st_size, j.stat().st_mtime_ns) for j in self.jars if j.exists()]
        return hashlib.sha256(repr(stats).encode()).hexdigest()[:16]

    def classpath(self) -> str:
        return os.pathsep.join(str(j) for j in self.jars)

    def java(self) -> str:
        return need_tool("java", "Apache Kafka runs on Java 17 or later")

    def fetch(self, log=print) -> Path:
        """Nothing to fetch: the jars must still be there."""
        self.java()
        missing = [j for j in self.jars if not j.exists()]
        if missing:
            raise KafkaUnavailable(f"--kafka-home {self.home}: {missing[0]} is gone")
        return self.home


def open_home(directory: str | Path) -> KafkaHome:
    """``directory`` as a Kafka to run: its jars, version and logging (:class:`NotKafka`, one
    line, when it is not one kafkacheck can run)."""
    home = Path(directory).expanduser().resolve()
    if not home.is_dir():
        raise NotKafka(f"--kafka-home {directory}: no such directory")
    layout, jars = _home_jars(home)
    if not jars:
        raise NotKafka(f"--kafka-home {home} is not an Apache Kafka distribution or build: it has neither "
                       "libs/kafka_2.13-*.jar (a binary distribution, as kafka_2.13-X.tgz unpacks) nor "
                       "core/build/libs/kafka_2.13-*.jar (a source checkout after ./gradlew jar)")
    cores = [j for j in jars if CORE_JAR.fullmatch(j.name)]
    clients = [j for j in jars if CLIENTS_JAR.fullmatch(j.name)]
    for kind, found in (("core", cores), ("kafka-clients", clients)):
        if len(found) > 1:
            raise NotKafka(f"--kafka-home {home} has {len(found)} {kind} jars ({', '.join(j.name for j in found)}): "
                           "more than one build; remove the stale ones")
    if not cores:
        raise NotKafka(f"--kafka-home {home} has no Kafka broker jar (kafka_2.13-*.jar) among its jars")
    version = _home_version(home, cores[0], clients[0] if clients else None)
    return KafkaHome(home, tuple(jars), version, _logging(home, jars), layout)


def _home_jars(home: Path) -> tuple[str, list[Path]]:
    """The layout of ``home`` and its jars in classpath order (as bin/kafka-run-class.sh orders
    them); no jars when it is neither layout."""
    def runtime(paths) -> list[Path]:
        return [p for p in sorted(paths) if p.is_file() and not NOT_RUNTIME.search(p.name)]

    if any(CORE_JAR.fullmatch(p.name) for p in (home / "libs").glob("kafka_2.1*.jar")):
        return "distribution", runtime((home / "libs").glob("*.jar"))
    if any(CORE_JAR.fullmatch(p.name) for p in (home / "core" / "build" / "libs").glob("kafka_2.1*.jar")):
        jars: list[Path] = []
        for d in sorted(home.glob("core/build/dependant-libs-2.1*")):
            jars += runtime(d.glob("*.jar"))
        jars += runtime((home / "clients" / "build" / "libs").glob("kafka-clients-*.jar"))
        jars += runtime((home / "tools" / "build" / "libs").glob("kafka-tools-*.jar"))
        for d in sorted(home.glob("tools/build/dependant-libs-2.1*")):
            jars += runtime(d.glob("*.jar"))
        jars += runtime((home / "core" / "build" / "libs").glob("kafka_2.1*.jar"))
        return "checkout", list(dict.fromkeys(jars))
    return "", []


def _home_version(home: Path, core: Path, clients: Path | None) -> str:
    """The version the jars say: kafka-clients' kafka/kafka-version.properties, else the core
    jar's name."""
    version, source = None, None
    if clients is not None:
        version, source = jar_version(clients), clients.name
    if version is None:
        version, source = CORE_JAR.fullmatch(core.name).group(1), core.name
    if not VERSION.fullmatch(version):
        raise NotKafka(f"--kafka-home {home}: cannot read an Apache Kafka version from {source} ({version!r})")
    if version_tuple(version)[:2] < OLDEST:
        raise NotKafka(f"--kafka-home {home} is Apache Kafka {version}: kafkacheck runs Apache Kafka "
                       f"{OLDEST[0]}.{OLDEST[1]} or later in KRaft mode")
    return version


def jar_version(jar: Path) -> str | None:
    """``version=`` of ``kafka/kafka-version.properties`` in ``jar`` (None when it has none)."""
    try:
        with zipfile.ZipFile(jar) as z:
            text = z.read("kafka/kafka-version.properties").decode("iso-8859-1")
    except (OSError, KeyError, zipfile.BadZipFile):
        return None
    m = re.search(r"^version=(.*)$", text, re.MULTILINE)
    return m.group(1).strip() if m else None


def _logging(home: Path, jars: list[Path]) -> str:
    """The backend of the first SLF4J binding on the classpath (SLF4J takes the first)."""
    for jar in jars:
        for prefix, backend in BINDINGS.items():
            if jar.name.startswith(prefix):
                return backend
    raise NotKafka(f"--kafka-home {home} has no SLF4J binding kafkacheck can configure (log4j 2: "
                   "log4j-slf4j-impl or log4j-slf4j2-impl; log4j 1: slf4j-reload4j): it reads the broker's log "
                   "to know when it is ready")
