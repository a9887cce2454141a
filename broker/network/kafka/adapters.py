"""Per Kafka api: the native handler call a request means, and the Kafka response its answer makes.

Each `Adapter` maps a Kafka request (plain data from kio's entity, see entities.py) to one native
request (api key and msgpack-style body, docs/FORMAT.md §6) served by the same handlers as the native
listener, and maps the native answer back to a version-independent response dict (entities.build
keeps what the client's version has). `error` answers a request that failed as a whole, with the
code in every row, as Kafka's `getErrorResponse` does.

Every api is typed now (net/schema/, codec.py TypedKafkaRequest: no adapter) but the SASL pair, whose adapters
are SECURITY_ADAPTERS in security_adapters.py (the login is the connection's, and a SaslHandshake v0 changes the
framing of what follows), which codec.py's ADAPTERS gathers. A new api is typed (scripts/generate_messages.py).
"""

from __future__ import annotations

from typing import Any

from net.errors import ErrorCode


class AdapterError(Exception):
    """A request this listener answers itself with an error in every row (no handler call)."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


class Adapter:
    api_key: int
    versions: tuple[int, int]

    def request(self, req: dict[str, Any], version: int) -> tuple[int, dict[str, Any]]:
        """(native api key, native body) for this Kafka request."""
        raise NotImplementedError

    def response(self, native: dict[str, Any], req: dict[str, Any], version: int) -> dict[str, Any] | None:
        """The Kafka response (plain data) for the native answer; None: send nothing."""
        raise NotImplementedError

    def error(self, req: dict[str, Any], version: int, code: int, message: str | None) -> dict[str, Any]:
        """The response to a request that failed as a whole."""
        raise NotImplementedError


# --- ApiVersions (answered by the codec itself) ------------------------------------------------------


def api_versions_response(error_code: int, served: dict[int, tuple[int, int]]) -> dict[str, Any]:
    keys = [{"api_key": 18, "min_version": 0, "max_version": 4}]
    keys += [{"api_key": k, "min_version": lo, "max_version": hi} for k, (lo, hi) in served.items()]
    keys.sort(key=lambda r: r["api_key"])
    return {"error_code": error_code, "api_keys": keys, "throttle_time": 0}
