"""The wire both sides share.

kio (Kafka's message schemas, used by net/consumer_protocol.py and the broker's Kafka listener) imports
hypothesis whenever it is installed, only to register test strategies for its types; hypothesis pulls in
pytest and trio, about 1 s of CPU at every client and broker start (several seconds on a loaded machine,
most of a console consumer's time to its first message). Kafka Lite never uses those strategies, so kio is
imported here, before anything else of ours can, with hypothesis hidden; a later `import hypothesis` (the
tests) works as usual.
"""

import sys


def _import_kio_without_hypothesis() -> None:
    if "kio" in sys.modules or "hypothesis" in sys.modules:
        return  # too late, or hypothesis is in use anyway: nothing to save
    sys.modules["hypothesis"] = None  # type: ignore[assignment]  # makes `import hypothesis` raise ImportError
    try:
        import kio.static.primitive  # noqa: F401
    except ImportError:  # kio itself missing: its importers will say so
        pass
    finally:
        del sys.modules["hypothesis"]


_import_kio_without_hypothesis()
