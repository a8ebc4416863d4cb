"""Counters and the events that ``explain()`` reads (the logs are in :mod:`bytegraph.logs`)."""

from __future__ import annotations

import dataclasses
import logging
from typing import Callable, List

# the logs live in logs.py (wired into torch._logging); re-exported for the modules that log
from .logs import enabled, log, set_logs  # noqa: E402,F401

logger = logging.getLogger("bytegraph")


@dataclasses.dataclass
class Stats:
    """Counters a benchmark can read.  ``bytegraph.stats()`` returns a snapshot.

    Example::

        >>> import bytegraph
        >>> bytegraph.stats().graphs >= 0
        True
    """

    frames_compiled: int = 0      # frames traced into a transformed function
    frames_transformed: int = 0   # of those, frames with no graph (force_transform)
    graphs: int = 0               # graphs handed to a backend
    graph_breaks: int = 0
    recompiles: int = 0           # traces of a code object that already had an entry
    eager_fallbacks: int = 0      # frames run eagerly because they could not be captured
    cache_hits: int = 0
    cache_misses: int = 0
    layers_reused: int = 0        # block calls served by a block traced earlier in the same trace

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


STATS = Stats()

# Listeners receive events while a trace runs; ``explain()`` installs one.
_listeners: List[Callable[[str, object], None]] = []


def emit(event: str, payload: object) -> None:
    """Send an event (``"graph"``, ``"break"``, ``"fallback"``, ``"entry"``, ``"recompile"``) to listeners."""
    for listener in _listeners:
        listener(event, payload)


def listening() -> bool:
    """Is any listener installed?  (Events that cost work to build are made only then.)"""
    return bool(_listeners)


def add_listener(fn: Callable[[str, object], None]) -> None:
    _listeners.append(fn)


def remove_listener(fn: Callable[[str, object], None]) -> None:
    _listeners.remove(fn)
