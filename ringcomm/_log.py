"""The Python side's lines in the core's debug log (include/ringcomm/debug.h): the same prefix,
levels, subsystems and file as the core's (RINGCOMM_DEBUG, RINGCOMM_DEBUG_SUBSYS,
RINGCOMM_DEBUG_FILE). Callers test ``enabled`` before building a message that costs anything."""

from __future__ import annotations

from ringcomm import _core

WARN = _core.LogLevel.WARN
INFO = _core.LogLevel.INFO
TRACE = _core.LogLevel.TRACE


def enabled(level: "_core.LogLevel", subsystem: str) -> bool:
    return _core.log_enabled(level, subsystem)


def log(level: "_core.LogLevel", subsystem: str, text: str) -> None:
    _core.log(level, subsystem, text)


def info(subsystem: str, text: str) -> None:
    _core.log(INFO, subsystem, text)
