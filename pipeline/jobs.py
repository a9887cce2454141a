"""The batch jobs of `kl-spark`: hashtags, stats, export. Each takes a DataFrame read by the
`kafkalite` source and returns DataFrames / rows; the CLI prints and writes them.

Tweets are the JSON events of pipeline/tweets/model.py. Delivery into the topic is at least once
(a producer retry after a broker failure can store a tweet twice), so counting is per distinct
tweet id, the same rule the consumer-group counter (`kl-tweets consume`) follows.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

TWEET_SCHEMA = (
    "id string, user struct<id:string,username:string>, text string, hashtags array<string>, created_at string"
)
_HASHTAG_RX = r"#(\w+)"
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def window_duration(spec: str) -> str:
    """'30s', '1m', '5m', '1h', '1d' -> Spark's interval text ('1 minutes')."""
    m = re.fullmatch(r"\s*(\d+)\s*([smhd])\s*", spec or "")
    if not m or int(m.group(1)) <= 0:
        raise ValueError(f"--window must look like 30s, 1m, 5m, 1h or 1d, got {spec!r}")
    return f"{int(m.group(1))} {_UNITS[m.group(2)]}"


def parse_tweets(df: DataFrame) -> DataFrame:
    """id, user_id, hashtags (lower-case, distinct), ts (event time) of every record that is a tweet.

    Hashtags come from the event's `hashtags` list, or from the text when the list is absent;
    the event time is `created_at`, or the record timestamp when that does not parse."""
    t = df.select(F.from_json(F.col("value").cast("string"), TWEET_SCHEMA).alias("t"), "timestamp")
    from_text = F.expr(f"regexp_extract_all(t.text, '{_HASHTAG_RX}', 1)")
    tags = F.coalesce(F.col("t.hashtags"), from_text)
    return t.where(F.col("t.id").isNotNull()).select(
        F.col("t.id").alias("id"),
        F.col("t.user.id").alias("user_id"),
        F.array_distinct(F.transform(tags, lambda x: F.lower(x))).alias("hashtags"),
        F.coalesce(F.to_timestamp("t.created_at"), F.col("timestamp")).alias("ts"),
    )


def tweets(df: DataFrame) -> DataFrame:
    """One row per distinct tweet id (parse_tweets, duplicates from producer retries dropped)."""
    return parse_tweets(df).dropDuplicates(["id"])


def stream_hashtags(df: DataFrame, window: str = "30s", watermark: str = "1m") -> DataFrame:
    """Hashtag counts per tumbling window of event time over a stream, the batch job's rule (distinct tweet
    ids) kept with bounded state: a duplicate is dropped while its window is open, and a window's state is
    dropped once the watermark (the newest event time seen minus `watermark`) has passed its end. Columns:
    window_start, window_end, hashtag, count."""
    t = parse_tweets(df).withWatermark("ts", window_duration(watermark)).dropDuplicatesWithinWatermark(["id"])
    tags = t.select("ts", F.explode("hashtags").alias("hashtag")).where(F.length("hashtag") > 0)
    per = tags.groupBy(F.window("ts", window_duration(window)).alias("w"), "hashtag").count()
    return per.select(F.col("w.start").alias("window_start"), F.col("w.end").alias("window_end"), "hashtag", "count")


def as_records(counts: DataFrame) -> DataFrame:
    """Window counts as the sink's key and value: key 'window_start|hashtag', value JSON of the row. The topic's
    last value per key is the window's count (a compacted topic keeps just that)."""
    key = F.concat_ws("|", F.date_format("window_start", "yyyy-MM-dd'T'HH:mm:ssXXX"), "hashtag")
    value = F.to_json(
        F.struct(
            F.date_format("window_start", "yyyy-MM-dd'T'HH:mm:ssXXX").alias("window_start"),
            F.date_format("window_end", "yyyy-MM-dd'T'HH:mm:ssXXX").alias("window_end"),
            "hashtag",
            "count",
        )
    )
    return counts.select(key.alias("key"), value.alias("value"))


@dataclass
class HashtagResult:
    records: int  # records read from the topic
    tweets: int  # distinct tweet ids
    top: list  # rows (hashtag, count), most frequent first
    windows: DataFrame  # window_start, window_end, rank, hashtag, count
    overall: DataFrame


def hashtags(df: DataFrame, top_n: int = 10, window: str = "1m") -> HashtagResult:
    """Top-N hashtags overall and per tumbling window of event time."""
    # One scan of the segments: everything below works on the cached values.
    base = df.select("value", "timestamp").cache()
    records = base.count()
    tw = tweets(base).cache()
    tags = tw.select("id", "ts", F.explode("hashtags").alias("hashtag")).where(F.length("hashtag") > 0)
    overall = tags.groupBy("hashtag").count().orderBy(F.desc("count"), F.asc("hashtag")).limit(top_n)
    per = tags.groupBy(F.window("ts", window_duration(window)).alias("w"), "hashtag").count()
    rank = F.row_number().over(Window.partitionBy("w").orderBy(F.desc("count"), F.asc("hashtag")))
    windows = (
        per.withColumn("rank", rank)
        .where(F.col("rank") <= top_n)
        .select(F.col("w.start").alias("window_start"), F.col("w.end").alias("window_end"), "rank", "hashtag", "count")
        .orderBy("window_start", "rank")
    )
    n_tweets = tw.count()
    top = [(r["hashtag"], r["count"]) for r in overall.collect()]
    return HashtagResult(records, n_tweets, top, windows, overall)


def stats(df: DataFrame) -> list:
    """Per topic-partition: records, key+value bytes, first/last offset and timestamp, distinct keys."""
    size = F.coalesce(F.length("key"), F.lit(0)) + F.coalesce(F.length("value"), F.lit(0))
    return (
        df.select("topic", "partition", "offset", "timestamp", "key", size.alias("size"))
        .groupBy("topic", "partition")
        .agg(
            F.count(F.lit(1)).alias("records"),
            F.sum("size").alias("bytes"),
            F.min("offset").alias("first_offset"),
            F.max("offset").alias("last_offset"),
            F.min("timestamp").alias("first_timestamp"),
            F.max("timestamp").alias("last_timestamp"),
            F.countDistinct("key").alias("distinct_keys"),
        )
        .orderBy("topic", "partition")
        .collect()
    )


def distinct_keys(df: DataFrame) -> dict[str, int]:
    """Distinct keys per topic (across its partitions)."""
    return {r["topic"]: r["n"] for r in df.groupBy("topic").agg(F.countDistinct("key").alias("n")).collect()}


def export(df: DataFrame, out: str, mode: str = "errorifexists") -> list:
    """Write the records as Parquet under out/topic=T/partition=P/; returns (topic, partition, rows)."""
    df.write.mode(mode).partitionBy("topic", "partition").parquet(out)
    # Count what landed (Parquet counts from its footers) rather than scanning the segments twice.
    written = df.sparkSession.read.parquet(out).groupBy("topic", "partition").count()
    return sorted((r["topic"], r["partition"], r["count"]) for r in written.collect())
