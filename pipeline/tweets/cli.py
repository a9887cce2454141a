"""kl-tweets: the tweet stream. `produce` publishes tweets for hashtags, `consume` counts them in a group.

kl-tweets produce --bootstrap-server B --topic tweets --hashtag kafka --rate 50 --duration 60
kl-tweets produce --bootstrap-server B --topic tweets --file tweets.jsonl      # or --file - (stdin)
X_BEARER_TOKEN=... kl-tweets produce --bootstrap-server B --topic tweets --source x --hashtag kafka
kl-tweets consume --bootstrap-server B --topic tweets --group counters        # run several
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time

import click

from client.cli.common import bootstrap_option, one_line_errors
from net.version import version_option


def _stop_on_signals() -> threading.Event:
    """SIGTERM / SIGINT end the run cleanly (flush, commit, final report) instead of killing it."""
    stop = threading.Event()

    def handler(signum, frame) -> None:  # type: ignore[no-untyped-def]
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
    return stop


@click.group()
@version_option()
def main() -> None:
    """Publish tweet events to a topic, and count their hashtags in a consumer group."""


@main.command()
@bootstrap_option
@click.option("--topic", default="tweets", show_default=True)
@click.option("--hashtag", "hashtags", multiple=True, metavar="TAG", help="Tracked hashtag (repeat for several).")
@click.option(
    "--source",
    type=click.Choice(["generate", "file", "x"]),
    default=None,
    help="generate: synthetic tweets (default); file: --file JSONL; x: the X API v2 filtered stream.",
)
@click.option("--file", "path", default=None, metavar="PATH", help="JSON lines of tweets; '-' reads stdin.")
@click.option(
    "--rate", type=float, default=None, help="Tweets per second (default 50 generated, unlimited from a file)."
)
@click.option("--count", type=click.IntRange(1), default=None, help="Stop after this many tweets.")
@click.option("--duration", type=float, default=None, help="Stop after this many seconds.")
@click.option("--seed", type=int, default=None, help="Seed of the generator (reproducible tweets).")
@click.option("--bursts/--no-bursts", default=True, show_default=True, help="Generator: rate bursts during trends.")
@click.option("--bearer-token-env", default="X_BEARER_TOKEN", show_default=True, help="Env var with the X API token.")
@click.option("--rule", "rules", multiple=True, help="X stream rule (default: one rule per --hashtag, '#tag').")
@click.option("--api-url", default=None, help="X API base URL (default https://api.twitter.com).")
@click.option("--acked-file", default=None, metavar="FILE", help="Write the acknowledged tweet ids here.")
@click.option("--progress-every", type=float, default=1.0, show_default=True, help="Seconds between progress lines.")
@click.option("--linger-ms", type=int, default=5, show_default=True)
@one_line_errors
def produce(
    bootstrap_server,
    topic,
    hashtags,
    source,
    path,
    rate,
    count,
    duration,
    seed,
    bursts,
    bearer_token_env,
    rules,
    api_url,
    acked_file,
    progress_every,
    linger_ms,
) -> None:  # type: ignore[no-untyped-def]
    """Publish tweets (key = user id, value = JSON) with acks=all and report what was acknowledged."""
    from client.sync import Producer
    from pipeline.tweets.generator import SyntheticTweets
    from pipeline.tweets.produce import Pacer, ProduceStats, publish, read_jsonl, write_ids

    source = source or ("file" if path else "generate")
    if source == "file" and not path:
        raise click.UsageError("--source file needs --file PATH (or - for stdin)")
    if path and source != "file":
        raise click.UsageError("--file goes with --source file")
    wanted = {h.lstrip("#").lower() for h in hashtags}
    stats = ProduceStats()
    factor = lambda: 1.0  # noqa: E731
    if source == "generate":
        gen = SyntheticTweets(list(hashtags) or ["kafka"], seed=seed, bursts=bursts)
        tweets = iter(gen)
        factor = gen.rate_factor
        rate = 50.0 if rate is None else rate
    elif source == "file":
        stream = sys.stdin if path == "-" else open(path, encoding="utf-8")
        tweets = read_jsonl(stream, stats, wanted)
        rate = 0.0 if rate is None else rate
    else:
        from pipeline.tweets.xapi import DEFAULT_API, FilteredStream

        token = os.environ.get(bearer_token_env, "")
        if not token:
            raise click.ClickException(f"the X API source needs a bearer token in ${bearer_token_env}")
        x_rules = list(rules) or [f"#{h.lstrip('#')}" for h in hashtags]
        if not x_rules:
            raise click.UsageError("--source x needs --hashtag or --rule")
        # Reconnects and skipped objects are worth seeing (the CLI default level is ERROR).
        logging.getLogger("kafkalite.tweets").setLevel(logging.WARNING)
        stream_x = FilteredStream(token, x_rules, api_url or DEFAULT_API)
        active = stream_x.sync_rules()
        click.echo(f"X stream rules: {', '.join(r.get('value', '?') for r in active)}", err=True)
        tweets = iter(stream_x)
        rate = 0.0 if rate is None else rate

    stop = _stop_on_signals()
    t0 = time.monotonic()

    def progress(s: ProduceStats, elapsed: float) -> None:
        click.echo(
            f"[produce {elapsed:5.1f}s] sent {s.sent}  acked {s.acked}  failed {s.failed}  "
            f"({s.sent / max(elapsed, 1e-9):.0f}/s)",
            err=True,
        )

    with Producer(bootstrap_server, acks="all", linger_ms=linger_ms) as producer:
        try:
            publish(
                producer, topic, tweets, stats, Pacer(rate, factor), count, duration, progress, progress_every, stop
            )
        except KeyboardInterrupt:
            pass
        try:
            producer.flush(120)
        except Exception as e:  # noqa: BLE001 - counted below from the callbacks; the line says why
            stats.first_error = stats.first_error or str(e)
    elapsed = time.monotonic() - t0
    if acked_file:
        write_ids(acked_file, stats.acked_ids)
    click.echo(
        f"acknowledged {stats.acked} of {stats.sent} tweets to {topic} in {elapsed:.1f}s "
        f"({stats.failed} failed{f', {stats.skipped} input lines skipped' if stats.skipped else ''})"
    )
    if stats.failed:
        raise click.ClickException(f"{stats.failed} tweets were not acknowledged; first error: {stats.first_error}")


@main.command()
@bootstrap_option
@click.option("--topic", default="tweets", show_default=True)
@click.option("--group", required=True, help="Consumer group: processes with the same group share the partitions.")
@click.option("--output", default=None, metavar="FILE", help="Append one JSON line per record (id, hashtags, p, o).")
@click.option("--top", "top_n", type=click.IntRange(1), default=5, show_default=True)
@click.option("--report-every", type=float, default=5.0, show_default=True, help="Seconds between progress lines.")
@click.option("--max-idle", type=float, default=None, help="Exit after this many seconds without a record.")
@click.option("--session-timeout-ms", type=int, default=45000, show_default=True)
@click.option("--heartbeat-interval-ms", type=int, default=None, help="Default: session timeout / 3.")
@click.option("--name", default=None, help="Label for the progress lines (default: pid).")
@one_line_errors
def consume(
    bootstrap_server,
    topic,
    group,
    output,
    top_n,
    report_every,
    max_idle,
    session_timeout_ms,
    heartbeat_interval_ms,
    name,
) -> None:  # type: ignore[no-untyped-def]
    """Count hashtags of the tweets this member is assigned; SIGTERM/Ctrl-C commits and leaves the group."""
    from client.sync import Consumer
    from pipeline.tweets.consume import CountState, count_hashtags

    label = name or f"pid {os.getpid()}"
    state = CountState()
    stop = _stop_on_signals()
    hb = heartbeat_interval_ms or max(100, session_timeout_ms // 3)

    def report(s: CountState) -> None:
        tops = ", ".join(f"#{t} {c}" for t, c in s.top(top_n))
        parts = ",".join(str(p) for p in sorted(s.partitions)) or "-"
        click.echo(f"[{label}] partitions {parts}: {len(s.seen)} tweets; top {tops}", err=True)

    out = open(output, "a", encoding="utf-8") if output else None
    try:
        with Consumer(
            bootstrap_server,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=session_timeout_ms,
            heartbeat_interval_ms=hb,
        ) as consumer:
            try:
                count_hashtags(consumer, topic, state, stop, out, max_idle, report, report_every)
            except KeyboardInterrupt:
                pass
    finally:
        if out is not None:
            out.close()
    click.echo(f"[{label}] {len(state.seen)} distinct tweets in {state.records} records; top {top_n}:")
    for tag, c in state.top(top_n):
        click.echo(f"  #{tag:<24} {c}")


if __name__ == "__main__":
    main()
