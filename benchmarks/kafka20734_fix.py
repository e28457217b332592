"""KAFKA-20734's fix, built: Apache Kafka 4.3 with the leader lookup of 3.9 restored, as a
distribution for ``kafkacheck conform --kafka-home``.

    python benchmarks/kafka20734_fix.py                   # 4.3.1: build, check, print the command
    python benchmarks/kafka20734_fix.py --version 4.3.0
    python benchmarks/kafka20734_fix.py --run             # ... and run that command on the build
    python benchmarks/kafka20734_fix.py --run -- --brokers 1 --cases produce-offsets-dense --workload none

The change, in words (nothing of Kafka's source is in this repository: the script edits the
sources jar Maven Central publishes, at run time). Since 4.3.0 (KAFKA-17573, apache/kafka
PR #19232) ``org.apache.kafka.metadata.KRaftMetadataCache`` is Java, in the kafka-metadata jar.
Its ``getPartitionLeaderEndpoint(topic, partition, listener)`` chains Optionals: the topic, then
the partition, then ``flatMap`` to the leader's broker registration, then ``map`` to the broker's
node for the listener, else ``Node.noNode()``. When the partition exists but has no leader
(leader -1: every replica down) or its leader broker is not in the metadata image, that
``flatMap`` gives ``Optional.empty()``: the answer that means "no such partition". The
transaction marker sender of the coordinator (kafka_2.13's
``TransactionMarkerChannelManager.addTxnMarkersToBrokerQueue``) reads an empty answer as "likely
deleted" (KAFKA-5202), removes the partition from the transaction and completes it without its
marker. The Scala cache of 3.9.1 to 4.2.2 answered ``Node.noNode()`` there, which parks the
marker until the partition has a leader again. The edit turns that last ``flatMap`` into a
``map`` whose empty result becomes ``Node.noNode()``: an unknown topic or partition still
answers ``Optional.empty()``, a leader with the listener its node, a leader without it
``Node.noNode()`` as before, and now a partition without a (registered) leader ``Node.noNode()``
too. That is what apache/kafka PR #22680 (KAFKA-20734, open) proposes.

Steps: the version's jars (kafkacheck's cache, fetched with mvn if needed) and the sources
jar of ``org.apache.kafka:kafka-metadata:VERSION`` (``mvn dependency:copy``, classifier
``sources``; Maven Central has none for 4.2.2 and 4.4.0); ``KRaftMetadataCache.java`` edited
by a checked text edit (the expected code must be found exactly once, else nothing is built);
compiled alone with ``javac`` against the version's jars, for the Java release of the jar's own
class files; a copy of kafka-metadata-VERSION.jar whose ``KRaftMetadataCache*.class`` are the
new ones; a distribution directory (``~/.cache/kafkacheck/kafka-VERSION-kafka20734/libs``: the
version's jars, that one replaced). Then it checks what it built: the class bytes differ,
``javap`` reads the patched class and finds one more ``Node.noNode()`` call, and a small probe
(a Java program of ours, run on the original jars and on the build) asks both caches for the
leader of a partition without a leader, of one whose leader is not registered, of one whose
leader is, and of an unknown topic and partition: only the first two answers may change,
from empty to ``noNode``. Exit 0 when built (with ``--run``: the command's exit code), 2 when
it could not be built or checked, 3 for a version it cannot patch.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from kafkacheck.real.kafka_dist import (
    KafkaDist,
    KafkaUnavailable,
    cache_root,
    maven_missing,
    mvn_error,
    need_tool,
    version_tuple,
)

CLASS = "org/apache/kafka/metadata/KRaftMetadataCache"
SOURCE = f"{CLASS}.java"
ARTIFACT = "org.apache.kafka:kafka-metadata"
CONFORM = ["--brokers", "3", "--cases", "none", "--workload", "txn", "--faults", "offline-partition"]
# the lookup's leader step, as 4.3.0 and 4.3.1 write it: flatMap to the leader's registration,
# map it to its node for the listener (else noNode); the edit makes the flatMap a map and adds
# the missing else
LEADER_STEP = re.compile(
    r"\.flatMap\((?P<p>\w+) -> Optional\.ofNullable\(image\.cluster\(\)\.broker\((?P=p)\.leader\)\)"
    r"(?P<node>\s*\.map\((?P<b>\w+) -> (?P=b)\.node\(listenerName\.value\(\)\)\.orElse\(Node\.noNode\(\)\)\))\);")
PROBE_CLASS = "LeaderlessLookup"
PROBE = """
import java.util.List;
import java.util.Optional;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.metadata.PartitionRecord;
import org.apache.kafka.common.metadata.RegisterBrokerRecord;
import org.apache.kafka.common.metadata.TopicRecord;
import org.apache.kafka.common.network.ListenerName;
import org.apache.kafka.image.MetadataDelta;
import org.apache.kafka.image.MetadataImage;
import org.apache.kafka.image.MetadataProvenance;
import org.apache.kafka.metadata.KRaftMetadataCache;
import org.apache.kafka.server.common.KRaftVersion;

/** kafkacheck's probe: what KRaftMetadataCache.getPartitionLeaderEndpoint answers for a topic "out"
 * whose partition 0 has no leader, 1 a leader (broker 2) that is not registered, 2 a registered
 * leader (broker 3, listener INTERNAL); then an unknown partition and an unknown topic. */
public class LeaderlessLookup {
    public static void main(String[] args) {
        Uuid topic = Uuid.randomUuid();
        MetadataDelta delta = new MetadataDelta.Builder().setImage(MetadataImage.EMPTY).build();
        RegisterBrokerRecord.BrokerEndpointCollection endpoints = new RegisterBrokerRecord.BrokerEndpointCollection();
        endpoints.add(new RegisterBrokerRecord.BrokerEndpoint().setName("INTERNAL").setHost("127.0.0.1").setPort(9093)
            .setSecurityProtocol((short) 0));
        delta.replay(new RegisterBrokerRecord().setBrokerId(3).setIncarnationId(Uuid.randomUuid()).setBrokerEpoch(1)
            .setEndPoints(endpoints).setFenced(false));
        delta.replay(new TopicRecord().setName("out").setTopicId(topic));
        int[][] partitions = {{0, -1, 2}, {1, 2, 2}, {2, 3, 3}};  // partition, leader, its one replica
        for (int[] p : partitions) {
            delta.replay(new PartitionRecord().setTopicId(topic).setPartitionId(p[0]).setLeader(p[1]).setLeaderEpoch(1)
                .setReplicas(List.of(p[2])).setIsr(p[1] < 0 ? List.of() : List.of(p[1])));
        }
        KRaftMetadataCache cache = new KRaftMetadataCache(1, () -> KRaftVersion.KRAFT_VERSION_1);
        cache.setImage(delta.apply(MetadataProvenance.EMPTY));
        ListenerName listener = ListenerName.normalised("INTERNAL");
        System.out.println("no-leader " + show(cache.getPartitionLeaderEndpoint("out", 0, listener)));
        System.out.println("leader-not-registered " + show(cache.getPartitionLeaderEndpoint("out", 1, listener)));
        System.out.println("leader-registered " + show(cache.getPartitionLeaderEndpoint("out", 2, listener)));
        System.out.println("unknown-partition " + show(cache.getPartitionLeaderEndpoint("out", 7, listener)));
        System.out.println("unknown-topic " + show(cache.getPartitionLeaderEndpoint("gone", 0, listener)));
    }

    static String show(Optional<Node> node) {
        return node.isEmpty() ? "empty" : node.get().isEmpty() ? "noNode" : "node " + node.get().id();
    }
}
"""
BEFORE = {"no-leader": "empty", "leader-not-registered": "empty", "leader-registered": "node 3",
          "unknown-partition": "empty", "unknown-topic": "empty"}
AFTER = {**BEFORE, "no-leader": "noNode", "leader-not-registered": "noNode"}


class Refused(Exception):
    """A version this script cannot patch (exit 3)."""


class Failed(Exception):
    """It could not be built or did not check out (exit 2)."""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--version", default="4.3.1", help="the Apache Kafka release to patch (4.3.0 or 4.3.1)")
    ap.add_argument("--out", type=Path, help="the distribution directory (default "
                                             "~/.cache/kafkacheck/kafka-VERSION-kafka20734)")
    ap.add_argument("--run", action="store_true", help="run the printed kafkacheck conform command on the build")
    ap.add_argument("conform", nargs=argparse.REMAINDER, help="after --: the conform options (default: "
                                                              + " ".join(CONFORM) + ")")
    args = ap.parse_args(argv)
    extra = args.conform[1:] if args.conform[:1] == ["--"] else args.conform
    try:
        home = build(args.version, args.out or cache_root() / f"kafka-{args.version}-kafka20734")
    except Refused as e:
        print(f"kafka20734_fix: {e}", file=sys.stderr)
        return 3
    except (Failed, KafkaUnavailable) as e:
        print(f"kafka20734_fix: {e}", file=sys.stderr)
        return 2
    command = [sys.executable, "-m", "kafkacheck.cli", "conform", "--spawn", "kafka", "--kafka-home", str(home),
               *(extra or [*CONFORM, "--out", f"runs/kafka20734-fixed-{args.version}"])]
    print("run on it:\n  kafkacheck " + " ".join(command[3:]))
    if args.run:
        sys.stdout.flush()
        os.execv(sys.executable, command)  # conform itself: its Ctrl-C, its exit code
    return 0


def build(version: str, out: Path) -> Path:
    """The patched distribution of ``version`` in ``out`` (replaced if there), checked."""
    if not re.fullmatch(r"\d+\.\d+\.\d+", version):
        raise Refused(f"--version must look like 4.3.1, not {version!r}")
    if version_tuple(version) < (4, 3):
        raise Refused(f"Apache Kafka {version} is not affected: its getPartitionLeaderEndpoint is the Scala "
                      "KRaftMetadataCache of kafka_2.13, which answers Node.noNode for a leaderless partition "
                      "(the regression came with 4.3.0)")
    dist = KafkaDist(version)
    dist.fetch()
    work = cache_root() / "kafka20734" / version
    work.mkdir(parents=True, exist_ok=True)
    source = patch_source(read_source(fetch_sources(version, work)), version)
    metadata_jar = dist.libs / f"kafka-metadata-{version}.jar"
    classes = compile_class(source, dist, work, class_release(metadata_jar))
    home = write_distribution(dist, metadata_jar, classes, out)
    check(dist, home, metadata_jar, work)
    return home


def fetch_sources(version: str, work: Path) -> Path:
    """kafka-metadata's sources jar from Maven Central (Maven's local repository keeps it)."""
    jar = work / f"kafka-metadata-{version}-sources.jar"
    if jar.exists():
        return jar
    mvn = need_tool("mvn", "it fetches kafka-metadata's sources jar from Maven Central")
    print(f"fetching {ARTIFACT}:{version}:sources from Maven Central")
    done = subprocess.run([mvn, "-q", "-B", "dependency:copy", f"-Dartifact={ARTIFACT}:{version}:jar:sources",
                           f"-DoutputDirectory={work}"], capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          timeout=600)
    if done.returncode != 0 and maven_missing(done.stdout + done.stderr, ARTIFACT):
        raise Refused(f"Maven Central has no sources jar for {ARTIFACT}:{version} (4.2.2 and 4.4.0 were published "
                      "without one); patch 4.3.0 or 4.3.1, or patch a source checkout and give its ./gradlew jar "
                      "build to kafkacheck conform --kafka-home")
    if done.returncode != 0 or not jar.exists():
        raise Failed(f"could not fetch {ARTIFACT}:{version}:sources: {mvn_error(done.stdout + done.stderr)}")
    return jar


def read_source(sources_jar: Path) -> str:
    with zipfile.ZipFile(sources_jar) as z:
        try:
            return z.read(SOURCE).decode()
        except KeyError:
            raise Failed(f"{sources_jar.name} has no {SOURCE}: not the Java cache of 4.3+") from None


def patch_source(text: str, version: str) -> str:
    """``text`` with getPartitionLeaderEndpoint's leader step made to answer Node.noNode() for an
    existing partition without a registered leader; Failed unless the expected code is there once."""
    start = text.find("public Optional<Node> getPartitionLeaderEndpoint(")
    end = text.find("\n    }\n", start)
    body = text[start:end] if start >= 0 and end > start else ""
    found = LEADER_STEP.findall(body)
    if len(found) != 1:
        raise Failed(f"getPartitionLeaderEndpoint of Kafka {version}'s KRaftMetadataCache.java is not the code this "
                     f"script edits ({len(found)} matches of its leader step; already fixed?): nothing was built")
    new_body = LEADER_STEP.sub(lambda m: f".map({m['p']} -> Optional.ofNullable(image.cluster().broker({m['p']}.leader))"
                                         f"{m['node']}\n                .orElse(Node.noNode()));", body)
    return text[:start] + new_body + text[end:]


def class_release(jar: Path) -> int:
    """The Java release the jar's KRaftMetadataCache.class was compiled for (major version - 44)."""
    with zipfile.ZipFile(jar) as z:
        head = z.read(f"{CLASS}.class")[:8]
    if head[:4] != b"\xca\xfe\xba\xbe":
        raise Failed(f"{jar.name}: {CLASS}.class is not a class file")
    return int.from_bytes(head[6:8], "big") - 44


def compile_class(source: str, dist: KafkaDist, work: Path, release: int) -> dict[str, bytes]:
    """The edited source compiled alone against the version's jars: {jar entry: class bytes}."""
    javac = need_tool("javac", "it compiles the patched class")
    print(f"compiling the edited KRaftMetadataCache.java against Apache Kafka {dist.version}'s jars")
    with tempfile.TemporaryDirectory(dir=work) as tmp:
        src = Path(tmp) / "src" / SOURCE
        src.parent.mkdir(parents=True)
        src.write_text(source)
        classes = Path(tmp) / "classes"
        done = subprocess.run([javac, "--release", str(release), "-implicit:none", "-proc:none", "-nowarn",
                               "-d", str(classes), "-cp", dist.classpath(), str(src)],
                              capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=300)
        if done.returncode != 0:
            raise Failed(f"javac refused the patched {SOURCE}: {(done.stdout + done.stderr).strip()[:400]}")
        built = {str(p.relative_to(classes)): p.read_bytes() for p in classes.rglob("*.class")}
    print(f"compiled for Java {release}: {len(built)} class file(s)")
    return built


def _ours(name: str) -> bool:
    return name == f"{CLASS}.class" or (name.startswith(f"{CLASS}$") and name.endswith(".class"))


def write_distribution(dist: KafkaDist, metadata_jar: Path, classes: dict[str, bytes], out: Path) -> Path:
    """``out``/libs: the version's jars, kafka-metadata's a copy with ``classes`` in place of its own."""
    with zipfile.ZipFile(metadata_jar) as z:
        old = {i.filename for i in z.infolist() if _ours(i.filename)}
    if old != set(classes):
        raise Failed(f"the compiled classes ({sorted(classes)}) are not the jar's ({sorted(old)})")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        (tmp / "libs").mkdir()
        for jar in dist.libs.glob("*.jar"):
            if jar != metadata_jar:
                _link_or_copy(jar, tmp / "libs" / jar.name)
        with zipfile.ZipFile(metadata_jar) as src, zipfile.ZipFile(tmp / "libs" / metadata_jar.name, "w") as dst:
            for item in src.infolist():
                dst.writestr(item, classes[item.filename] if item.filename in classes else src.read(item))
        (tmp / "KAFKA-20734.txt").write_text(
            f"Apache Kafka {dist.version} with KRaftMetadataCache.getPartitionLeaderEndpoint answering Node.noNode() "
            "for an existing partition without a registered leader (KAFKA-20734, apache/kafka PR #22680); "
            "built by kafkacheck's benchmarks/kafka20734_fix.py\n")
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"patched build: {out} ({len(list((out / 'libs').glob('*.jar')))} jars; {metadata_jar.name} patched)")
    return out


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def check(dist: KafkaDist, home: Path, metadata_jar: Path, work: Path) -> None:
    """The build differs where it should and nowhere else the probe can see (Failed if not)."""
    with zipfile.ZipFile(metadata_jar) as a, zipfile.ZipFile(home / "libs" / metadata_jar.name) as b:
        before, after = a.read(f"{CLASS}.class"), b.read(f"{CLASS}.class")
    if before == after:
        raise Failed("the patched KRaftMetadataCache.class is the original's: nothing changed")
    print(f"KRaftMetadataCache.class: sha256 {_sha(before)} -> {_sha(after)}")
    calls = [_no_node_calls(jar) for jar in (metadata_jar, home / "libs" / metadata_jar.name)]
    if calls[1] != calls[0] + 1:
        raise Failed(f"javap: {calls[0]} Node.noNode() calls before, {calls[1]} after; expected one more")
    print(f"javap reads the patched class: Node.noNode() called {calls[0]} -> {calls[1]} times")
    print("asking the original and the patched KRaftMetadataCache for leaders (the probe, two JVMs)")
    answers = [probe(classpath, work) for classpath in (dist.classpath(), str(home / "libs" / "*"))]
    for name, answer, want in (("the original", answers[0], BEFORE), ("the patched build", answers[1], AFTER)):
        if answer != want:
            raise Failed(f"{name} answers {answer}, expected {want}")
    print("getPartitionLeaderEndpoint, original -> patched: "
          + "; ".join(f"{k} {answers[0][k]} -> {answers[1][k]}" for k in BEFORE))


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:12]


def _no_node_calls(jar: Path) -> int:
    javap = need_tool("javap", "it reads the patched class")
    done = subprocess.run([javap, "-c", "-p", "-cp", str(jar), CLASS.replace("/", ".")], capture_output=True,
                          text=True, stdin=subprocess.DEVNULL, timeout=120)
    if done.returncode != 0:
        raise Failed(f"javap cannot read {CLASS} in {jar}: {done.stderr.strip()[:300]}")
    return done.stdout.count("Method org/apache/kafka/common/Node.noNode:")


def probe(classpath: str, work: Path) -> dict[str, str]:
    """What the KRaftMetadataCache on ``classpath`` answers (:data:`PROBE`), by case."""
    java, javac = need_tool("java", "it runs the probe"), need_tool("javac", "it compiles the probe")
    with tempfile.TemporaryDirectory(dir=work) as tmp:
        (Path(tmp) / f"{PROBE_CLASS}.java").write_text(PROBE)
        done = subprocess.run([javac, "-nowarn", "-d", tmp, "-cp", classpath, str(Path(tmp) / f"{PROBE_CLASS}.java")],
                              capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=300)
        if done.returncode == 0:
            done = subprocess.run([java, "-cp", f"{classpath}{os.pathsep}{tmp}", PROBE_CLASS], capture_output=True,
                                  text=True, stdin=subprocess.DEVNULL, timeout=120)
    if done.returncode != 0:
        raise Failed(f"the probe failed on {classpath}: {(done.stdout + done.stderr).strip()[-400:]}")
    return dict(line.split(" ", 1) for line in done.stdout.splitlines() if line.split(" ", 1)[0] in BEFORE)


if __name__ == "__main__":
    sys.exit(main())
