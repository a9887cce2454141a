"""Constants the generated message classes use as zero values (Kafka's defaults for uuid and timestamp fields)."""

from __future__ import annotations

import datetime
import uuid

ZERO_UUID = uuid.UUID(int=0)  # Kafka's Uuid.ZERO_UUID: "no topic id"
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
