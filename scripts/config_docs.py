"""Write docs/CONFIGURATION.md from the config schemas (net/config_def.py), or --check that it is current.

python scripts/config_docs.py          # rewrite the file
python scripts/config_docs.py --check  # exit 1 if the file differs from what the schemas say
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from broker.log.config import LogConfig  # noqa: E402
from broker.server.config import BrokerConfig  # noqa: E402
from client.config import AdminConfig, ConsumerConfig, ProducerConfig  # noqa: E402
from net.config_def import render_markdown  # noqa: E402

DOC = ROOT / "docs" / "CONFIGURATION.md"

HEADER = """# Configuration

Generated from the config schemas by `python scripts/config_docs.py`; do not edit by hand (a test checks
that this file matches the code). Every key has Kafka's name, and Kafka's meaning where Kafka has it.
Values are strings as in a `.properties` file: booleans are `true`/`false`, integers decimal.

"""


def render() -> str:
    sections = [
        render_markdown(
            BrokerConfig,
            "Broker configs",
            "Set in a `server.properties` file (`kl-broker start --config FILE`, Java properties syntax), with "
            "`--override KEY=VALUE`, or with the dedicated flags (`--id`, `--port`, `--data-dir`, `--peers`, "
            "...), later ones winning. `kl-broker configs --config FILE` prints the result as "
            "`kafka-configs.sh --describe --all` does; `kl-broker configs --keys` lists this table. The `log.*` "
            "rows at the end are the defaults of the topic configs below.",
        ),
        render_markdown(
            LogConfig,
            "Topic configs",
            "Per topic: `kl-topics --create --config KEY=VALUE`, changed with `kl-topics --alter --config "
            "KEY=VALUE` / `--delete-config KEY`; the broker's `log.*` keys set their defaults.",
        ),
        render_markdown(
            ProducerConfig,
            "Producer configs",
            "`Producer(bootstrap, linger_ms=10, ...)` (Kafka's name with `_` for `.`), `kl-produce "
            "--producer-property KEY=VALUE` or `--producer.config FILE` (kafka-console-producer.sh's names), "
            "`kl-perf produce --producer-props KEY=VALUE` (kafka-producer-perf-test's), or a properties file given "
            "to any CLI with `--command-config`.",
        ),
        render_markdown(
            ConsumerConfig,
            "Consumer configs",
            '`Consumer(bootstrap, group_id="g", ...)`, `kl-consume --consumer-property KEY=VALUE` or '
            "`--consumer.config FILE` (kafka-console-consumer.sh's names; `--command-config FILE` too), or "
            "`kl-perf consume --consumer.config FILE`.",
        ),
        render_markdown(
            AdminConfig,
            "Admin client configs",
            "`Admin(bootstrap, request_timeout_ms=...)`, or `--command-config FILE` to `kl-topics`, `kl-groups` and "
            "`kl-dashboard`.",
        ),
    ]
    return HEADER + "\n".join(sections)


def main() -> int:
    text = render()
    if "--check" in sys.argv[1:]:
        if not DOC.exists() or DOC.read_text() != text:
            print(f"{DOC.relative_to(ROOT)} is out of date: run python scripts/config_docs.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
