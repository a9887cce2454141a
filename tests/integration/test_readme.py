"""The README's cluster commands and Python snippets run as written, in the README's order, against a cluster
started as the README says (issue 24 §3): `orders` made by kl-topics, then the "From Python" snippet (which
once died with TopicAlreadyExistsError), the Kafka-client commands (kcat) and the confluent-kafka snippet.
Only the ports and the data directory are changed, to free ones."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.test_ports import free_layout

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def fenced(lang: str) -> list[str]:
    return [body for kind, body in re.findall(r"```(\w*)\n(.*?)```", README, re.S) if kind == lang]


def block(lang: str, containing: str) -> str:
    found = [b for b in fenced(lang) if containing in b]
    assert len(found) == 1, f"one {lang} block of the README with {containing!r}"
    return found[0]


def commands(bash: str) -> list[str]:
    """The block's command lines, continuations joined, comment lines left out."""
    joined = bash.replace("\\\n", " ")
    return [line.strip() for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def command(bash: str, starting: str) -> str:
    found = [c for c in commands(bash) if c.startswith(starting)]
    assert len(found) == 1, f"one command starting {starting!r}"
    return found[0]


@pytest.fixture
def local(tmp_path):
    """Rewrites the README's ports (9092.., 19092..) and data directory (/tmp/kl) to free ones here."""
    base = free_layout(3, kafka=True)
    data = tmp_path / "kl"

    def rewrite(text: str) -> str:
        text = re.sub(r"\b19092\b", str(base + 300), text)
        text = re.sub(r"\b9092\b", str(base), text)
        return re.sub(r"/tmp/kl\b", str(data), text)

    yield rewrite
    subprocess.run([str(ROOT / ".venv/bin/kl-cluster"), "down", "--data-dir", str(data)], capture_output=True)


def run(cmd: str, kind: str = "bash") -> str:
    env = {**os.environ, "PATH": f"{ROOT / '.venv/bin'}:{os.environ['PATH']}"}
    argv = ["bash", "-euo", "pipefail", "-c", cmd] if kind == "bash" else [sys.executable, "-c", cmd]
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0 and "Traceback" not in done.stderr, (cmd, done.stdout, done.stderr)
    return done.stdout


def test_the_readmes_commands_and_snippets_run_as_written(local):
    cluster = block("bash", "kl-cluster up --brokers 3 --base-port 9092 --data-dir /tmp/kl --dashboard")
    kafka = block("bash", "--kafka-base-port 19092")
    # the cluster, with the Kafka listeners the later commands use, and `orders` as the first block makes it
    up = run(local(command(kafka, "kl-cluster up"))).splitlines()
    assert up[0].count(",") == 2 and up[2].startswith("# ports: native ")
    run(local(command(cluster, "kl-topics --bootstrap-server 127.0.0.1:9092 --create --topic orders")))
    # "From Python:" right after it
    snippet = block("python", "from client import Producer, Consumer, Admin, NewTopic, TopicPartition")
    printed = run(local(snippet), "python")
    assert re.fullmatch(r"[0-2] 0 b'customer-42' b'payload'\n", printed), printed
    # "Use your Kafka client": kcat and confluent-kafka on the same cluster, orders already there
    lines = commands(kafka)
    assert lines[0].startswith("kl-cluster up") and len(lines) == 5
    for cmd in lines[1:]:
        out = run(local(cmd))
        if cmd.startswith("kcat -C"):
            got = sorted(out.splitlines())
            assert len(got) == 2, out
            assert re.fullmatch(r"k1 hello \(partition [0-2], offset [01]\)", got[0]), out
            assert re.fullmatch(r"k2 world \(partition [0-2], offset [01]\)", got[1]), out
        if cmd.startswith("kcat -L"):
            assert "3 brokers:" in out and 'topic "orders" with 3 partitions' in out
    printed = run(local(block("python", "from confluent_kafka import Consumer, Producer")), "python")
    assert re.fullmatch(r"b'k[123]' b'(hello|world|from librdkafka)'\n", printed), printed
    status = run(local(command(cluster, "kl-cluster status")))
    assert "Topic: payments" in status and "Topic: orders" in status
