"""Logs, counters and the records that ``explain()`` reads.

Log families are switched on by ``BYTEGRAPH_LOGS=graph,guards,bytecode,recompiles,graph_breaks,errors``
(or ``all``).  Each family is a child of the ``bytegraph`` logger and writes to
stderr.  Code on the trace path checks the module-level flag ``ENABLED[...]``
before building any message, so disabled logs cost one dict lookup.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
from typing import Callable, List

FAMILIES = ("graph", "guards", "bytecode", "recompiles", "graph_breaks", "errors")

logger = logging.getLogger("bytegraph")
ENABLED = {family: False for family in FAMILIES}


def set_logs(spec: str) -> None:
    """Enable log families from a comma separated spec (``"graph,guards"`` or ``"all"``).

    Example::

        >>> set_logs("graph_breaks")
        >>> ENABLED["graph_breaks"]
        True
    """
    wanted = {s.strip() for s in spec.split(",") if s.strip()}
    if "all" in wanted:
        wanted = set(FAMILIES)
    for family in FAMILIES:
        ENABLED[family] = family in wanted
    if any(ENABLED.values()) and not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("[%(name)s] %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
        logger.propagate = False


def log(family: str, message: str, *args) -> None:
    """Log ``message % args`` under ``family`` if that family is enabled."""
    if ENABLED[family]:
        logging.getLogger("bytegraph").getChild(family).info(message, *args)


set_logs(os.environ.get("BYTEGRAPH_LOGS", ""))


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

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


STATS = Stats()

# Listeners receive events while a trace runs; ``explain()`` installs one.
_listeners: List[Callable[[str, object], None]] = []


def emit(event: str, payload: object) -> None:
    """Send an event (``"graph"``, ``"break"``, ``"fallback"``, ``"entry"``) to listeners."""
    for listener in _listeners:
        listener(event, payload)


def add_listener(fn: Callable[[str, object], None]) -> None:
    _listeners.append(fn)


def remove_listener(fn: Callable[[str, object], None]) -> None:
    _listeners.remove(fn)
