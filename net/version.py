"""`--version` for every kl-* tool: the installed package's version, as Kafka's tools print theirs."""

from __future__ import annotations

from typing import Any, Callable

DIST = "kafka-lite"


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version(DIST)
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


def version_option() -> Callable[[Any], Any]:
    """A click `--version` flag: prints e.g. `0.1.0 (Kafka Lite)` and exits 0; the version is read only when
    the flag is given, so it costs the other commands nothing."""
    import click

    def show(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
        if value and not ctx.resilient_parsing:
            click.echo(f"{version()} (Kafka Lite)")
            ctx.exit(0)

    return click.option(
        "--version",
        is_flag=True,
        expose_value=False,
        is_eager=True,
        callback=show,
        help="Print the version and exit.",
    )
