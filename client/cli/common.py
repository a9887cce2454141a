"""What every CLI shares: --bootstrap-server, --command-config, and one-line errors."""

from __future__ import annotations

import functools
import logging
import sys
from pathlib import Path
from typing import Any, Callable

import click

from net.errors import KafkaLiteError

bootstrap_option = click.option(
    "--bootstrap-server",
    "bootstrap_server",
    required=True,
    metavar="HOST:PORT[,HOST:PORT]",
    help="Broker(s) to connect to; the client finds the partition leaders itself.",
)


def client_config_option(*aliases: str) -> Callable[[Any], Any]:
    """--command-config FILE, and the tool's Kafka name for it too (kafka-console-consumer.sh's
    --consumer.config, kafka-console-producer.sh's --producer.config)."""
    return click.option(
        "--command-config",
        *aliases,
        "command_config",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        metavar="FILE",
        help="Client configs in a Java properties file (Kafka's names: client.id, request.timeout.ms, ...), as "
        "Kafka's tools take them.",
    )


command_config_option = client_config_option()


def client_kwargs(
    family: Any, command_config: Path | None = None, props: dict[str, str] | None = None
) -> dict[str, Any]:
    """Keyword arguments for a client of `family` (client/config.py) from a --command-config file and then
    KEY=VALUE options, validated by the family's schema (one line naming the key when one is wrong)."""
    from net.config_def import read_properties

    merged: dict[str, str] = {}
    if command_config is not None:
        if not command_config.is_file():
            raise click.ClickException(f"--command-config {command_config}: no such file")
        merged.update(read_properties(command_config))
    merged.update(props or {})
    merged.pop("bootstrap.servers", None)  # the command line's --bootstrap-server says where
    kwargs: dict[str, Any] = family.kwargs_from_properties(merged)
    return kwargs


def parse_kv(items: tuple[str, ...], what: str, strip_values: bool = True) -> dict[str, str]:
    """KEY=VALUE options. strip_values=False keeps a value's spaces and tabs (a separator may be one)."""
    out = {}
    for item in items:
        if "=" not in item:
            raise click.UsageError(f"{what} expects key=value, got {item!r}")
        k, v = item.split("=", 1)
        out[k.strip()] = v.strip() if strip_values else v
    return out


def one_line_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A failure is one clear line on stderr and exit code 1, never a traceback."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        logging.basicConfig(level=logging.ERROR, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
        try:
            return fn(*args, **kwargs)
        except click.UsageError as e:  # flags that do not go together: the reason, without the usage preamble
            raise click.ClickException(e.format_message()) from None
        except click.ClickException:
            raise
        except KafkaLiteError as e:
            raise click.ClickException(f"{e.code.name}: {e}") from None
        except (ValueError, OSError, TypeError) as e:
            raise click.ClickException(str(e)) from None
        except KeyboardInterrupt:
            sys.exit(130)
        except Exception as e:  # last resort: still one line, with the type to report a bug by
            raise click.ClickException(f"unexpected {type(e).__name__}: {e}") from None

    return wrapper
