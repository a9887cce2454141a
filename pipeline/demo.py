"""Helpers of scripts/demo.sh: live status lines, waiting for the group to catch up, the final check.

The demo's work directory holds what each stage leaves behind:
  acked.txt            tweet ids the producer got acknowledgements for (acks=all), one per line
  producer.log         the producer's progress lines
  consumer-N.jsonl     one JSON line per record a group member processed (id, hashtags, p, o)
  spark.json           the Spark job's totals and top hashtags (kl-spark hashtags --summary-json)

    python -m pipeline.demo status  WORK          one line: produced/acked, consumed per member
    python -m pipeline.demo wait    WORK --timeout 60   until the group consumed every acked tweet
    python -m pipeline.demo summary WORK          the three counts and top hashtags; exit 1 unless equal
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections import Counter
from pathlib import Path

import click


def acked_ids(work: Path) -> set[str]:
    path = work / "acked.txt"
    return set(path.read_text().split()) if path.exists() else set()


def producer_progress(work: Path) -> str:
    path = work / "producer.log"
    if not path.exists():
        return "producer starting"
    lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    for ln in reversed(lines):
        m = re.search(r"sent (\d+)\s+acked (\d+)\s+failed (\d+)", ln)
        if m:
            return f"produced {m.group(1)} acked {m.group(2)} failed {m.group(3)}"
        m = re.search(r"acknowledged (\d+) of (\d+)", ln)
        if m:
            return f"producer done: {m.group(1)}/{m.group(2)} acknowledged"
    return "producer starting"


def consumer_files(work: Path) -> list[Path]:
    return sorted(work.glob("consumer-*.jsonl"))


def read_consumed(work: Path) -> tuple[dict[str, list[str]], dict[str, int], dict[str, set[int]]]:
    """(id -> hashtags over all members, records per member, partitions seen per member)."""
    tweets: dict[str, list[str]] = {}
    per_member: dict[str, int] = {}
    parts: dict[str, set[int]] = {}
    for f in consumer_files(work):
        name = f.stem
        n = 0
        seen: set[int] = set()
        with open(f, encoding="utf-8") as fh:
            for line in fh:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue  # a line being written right now
                n += 1
                seen.add(rec["p"])
                tweets.setdefault(rec["id"], rec["hashtags"])
        per_member[name], parts[name] = n, seen
    return tweets, per_member, parts


@click.group()
def main() -> None:
    """Helpers of scripts/demo.sh."""


@main.command("wait-group")
@click.argument("bootstrap")
@click.argument("group")
@click.argument("members", type=int)
@click.option("--timeout", type=float, default=60)
def wait_group(bootstrap: str, group: str, members: int, timeout: float) -> None:
    """Until the group is Stable with this many members (so each starts with its own partitions)."""
    from client.sync import Admin
    from net.errors import KafkaLiteError

    deadline = time.monotonic() + timeout
    with Admin(bootstrap) as admin:
        while True:
            try:
                d = admin.describe_group(group)
                if d.state == "Stable" and len(d.members) == members:
                    owned = ", ".join(
                        sorted("p" + ",".join(str(tp[1]) for tp in sorted(m.assignment)) for m in d.members)
                    )
                    click.echo(f"group {group} is stable: {members} members, partitions {owned}")
                    return
            except KafkaLiteError:
                pass  # not created yet, or the coordinator is loading
            if time.monotonic() > deadline:
                raise click.ClickException(f"group {group} did not reach {members} stable members in {timeout:g}s")
            time.sleep(0.3)


@main.command()
@click.argument("work", type=click.Path(path_type=Path))
@click.option("--since", type=float, default=None, help="Epoch seconds the elapsed time counts from.")
def status(work: Path, since: float | None) -> None:
    tweets, per_member, parts = read_consumed(work)
    members = "  ".join(
        f"{name.removeprefix('consumer-')}: {n} (p{','.join(map(str, sorted(parts[name]))) or '-'})"
        for name, n in per_member.items()
    )
    t = f"[{time.time() - since:5.1f}s] " if since is not None else ""
    click.echo(f"{t}{producer_progress(work)} | group consumed {len(tweets)} distinct | {members}")


@main.command()
@click.argument("work", type=click.Path(path_type=Path))
@click.option("--timeout", type=float, default=60)
def wait(work: Path, timeout: float) -> None:
    """Until every acknowledged tweet was consumed by some member (at least once delivery: maybe twice)."""
    want = acked_ids(work)
    deadline = time.monotonic() + timeout
    last = 0.0
    while True:
        tweets, _, _ = read_consumed(work)
        missing = len(want - tweets.keys())
        if not missing:
            click.echo(f"the group has consumed all {len(want)} acknowledged tweets")
            return
        if time.monotonic() > deadline:
            raise click.ClickException(f"after {timeout:g}s the group still misses {missing} acknowledged tweets")
        if time.monotonic() - last >= 3:
            last = time.monotonic()
            click.echo(f"waiting for the group: {missing} acknowledged tweets not consumed yet")
        time.sleep(0.5)


@main.command()
@click.argument("work", type=click.Path(path_type=Path))
@click.option("--top", "top_n", type=int, default=10)
def summary(work: Path, top_n: int) -> None:
    """Acknowledged = consumed (distinct) = counted by Spark, and the top hashtags of both."""
    acked = acked_ids(work)
    tweets, per_member, _ = read_consumed(work)
    spark = json.loads((work / "spark.json").read_text())
    group_counts = Counter(t for tags in tweets.values() for t in tags)
    group_top = sorted(group_counts.items(), key=lambda kv: (-kv[1], kv[0]))[:top_n]
    spark_top = [tuple(x) for x in spark["top"]][:top_n]
    extra = set(tweets) - acked
    click.echo("")
    click.echo(f"  acknowledged by the producer (acks=all)  {len(acked):>7}")
    click.echo(
        f"  consumed by the group (distinct ids)     {len(tweets):>7}"
        f"   ({sum(per_member.values())} records over {len(per_member)} members)"
    )
    click.echo(
        f"  counted by Spark (distinct ids)          {spark['tweets']:>7}   ({spark['records']} records on disk)"
    )
    click.echo("")
    click.echo(f"  {'rank':<5}{'hashtag (group)':<28}{'count':>7}    {'hashtag (Spark)':<28}{'count':>7}")
    for i in range(max(len(group_top), len(spark_top))):
        g = group_top[i] if i < len(group_top) else ("", "")
        s = spark_top[i] if i < len(spark_top) else ("", "")
        click.echo(f"  {i + 1:<5}{'#' + g[0]:<28}{g[1]:>7}    {'#' + s[0]:<28}{s[1]:>7}")
    click.echo("")
    live_file = work / "stream.json"
    live_top = [tuple(x) for x in json.loads(live_file.read_text())["top"]][:top_n] if live_file.exists() else None
    if live_top is not None:
        same = "the same" if live_top == spark_top else "DIFFERENT"
        click.echo(
            f"  live Spark job (Structured Streaming, summed over its windows): {same} top {top_n} as the batch job"
        )
        if live_top != spark_top:
            click.echo(f"    live: {live_top}")
        click.echo("")
    ok = len(acked) == len(tweets) == spark["tweets"] and not extra and group_top == spark_top
    ok = ok and live_top in (None, spark_top)
    if not ok:
        why = []
        if extra:
            why.append(f"{len(extra)} consumed tweets were never acknowledged")
        if group_top != spark_top:
            why.append("the group's and Spark's top hashtags differ")
        if live_top not in (None, spark_top):
            why.append("the live Spark job's and the batch job's top hashtags differ")
        raise click.ClickException("MISMATCH: " + ("; ".join(why) or "the three counts differ"))
    live = ", the live job's" if live_top is not None else ""
    click.echo(
        f"OK: acknowledged = consumed = counted by Spark = {len(acked)}, and the group's{live} and the batch "
        f"job's hashtag counts agree"
    )


if __name__ == "__main__":
    sys.exit(main())
