"""On-disk storage: segments, indexes, partition logs and the log manager."""

from broker.log.config import LogConfig
from broker.log.log import Log, LogAppendInfo
from broker.log.manager import LogManager

__all__ = ["Log", "LogAppendInfo", "LogConfig", "LogManager"]
