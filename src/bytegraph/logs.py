"""bytegraph's logs, wired into torch's logging system (``torch._logging``).

A torch.compile user turns them on the way they already know::

    TORCH_LOGS="+bytegraph"                      # everything bytegraph logs
    TORCH_LOGS="graph_breaks,recompiles,guards"  # just these
    torch._logging.set_logs(graph_breaks=True, modules={"bytegraph": logging.INFO})

``BYTEGRAPH_LOGS`` (and :func:`set_logs`) takes the same names and reaches
only bytegraph's logs; a name it does not know is an error, as in
``TORCH_LOGS``.  The families are torch's artifact names:

* ``graph_breaks``: each break and eager fallback, with the user's stack;
* ``recompiles``: each recompile, with every entry tried and why it failed;
* ``guards``: each entry's guard source;
* ``graph_code``: each captured graph as Python code (``graph`` is accepted as an alias);
* ``bytecode``: each transformed function's bytecode;
* ``errors``: internal errors that made a frame run eagerly;
* ``ddp_graphs``: graphs cut at DistributedDataParallel's gradient buckets;
* ``shared_compile``: how the ranks on one machine split compiling those pieces.

Each family is one logger, ``bytegraph.__<family>`` (torch's artifact
logger naming); records go through torch's handlers when torch's settings
enable them and through bytegraph's own stderr handler (``[bytegraph.<family>]``
prefix) when ``BYTEGRAPH_LOGS`` does.  Code on the trace path asks
:func:`enabled` before building a message.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Dict, Iterable

#: family -> description (the torch artifact of the same name, where torch has one)
FAMILIES: Dict[str, str] = {
    "graph_breaks": "each graph break and eager fallback, with the user's stack",
    "recompiles": "each recompile: every entry tried and the guard that failed",
    "guards": "the guards of each cache entry",
    "graph_code": "each captured graph as Python code",
    "bytecode": "each transformed function's bytecode",
    "errors": "internal errors that made a frame run eagerly",
    "layer_reuse": "repeated blocks: each one recorded and reused, and why a block was traced as usual",
    "ddp_graphs": "graphs cut at DistributedDataParallel's gradient buckets",
    "shared_compile": "how the ranks on one machine split compiling DDP's graph pieces, and each wait",
}

#: other spellings accepted by BYTEGRAPH_LOGS / set_logs
ALIASES = {"graph": "graph_code"}

ROOT = logging.getLogger("bytegraph")
_LOGGERS: Dict[str, logging.Logger] = {}
#: families BYTEGRAPH_LOGS / set_logs switched on
_OWN: set = set()


class _Prefix(logging.Formatter):
    def format(self, record):
        family = record.name.rpartition(".__")[2] if ".__" in record.name else record.name.rpartition(".")[2]
        return f"[bytegraph.{family}] {record.getMessage()}"


def _torch_logging():
    """torch's logging internals, or None when this torch has none we can use."""
    try:
        from torch._logging import _internal
    except Exception:  # pragma: no cover - every supported torch has it
        return None
    if not all(hasattr(_internal, n) for n in ("register_log", "register_artifact", "getArtifactLogger",
                                               "log_registry", "_init_logs")):
        return None
    return _internal


def _make_loggers() -> None:
    tl = _torch_logging()
    if tl is not None and not tl.log_registry.is_log("bytegraph"):
        # (TORCH_LOGS="+bytegraph" registered it already, as a module name)
        tl.register_log("bytegraph", "bytegraph")
    for family, description in FAMILIES.items():
        log = None
        if tl is not None:
            if family not in tl.log_registry.artifact_names:
                tl.register_artifact(family, description)
            log = tl.getArtifactLogger("bytegraph", family)
        _LOGGERS[family] = log or logging.getLogger(f"bytegraph.__{family}")
    if tl is not None and os.environ.get("TORCH_LOGS"):
        # torch applied TORCH_LOGS when it was imported, before bytegraph's logs
        # existed: apply it again so they get torch's handlers
        tl._init_logs()


def parse(spec: str) -> set:
    """The families a ``BYTEGRAPH_LOGS`` spec names; ValueError for an unknown name.

    Example::

        >>> sorted(parse("graph_breaks, recompiles"))
        ['graph_breaks', 'recompiles']
        >>> sorted(parse("+bytegraph")) == sorted(FAMILIES)
        True
    """
    wanted = set()
    for raw in spec.split(","):
        name = raw.strip().lstrip("+-")
        if not name:
            continue
        name = ALIASES.get(name, name)
        if name in ("all", "bytegraph"):
            wanted.update(FAMILIES)
        elif name in FAMILIES:
            wanted.add(name)
        else:
            valid = ", ".join(sorted(set(FAMILIES) | set(ALIASES) | {"all", "bytegraph"}))
            raise ValueError(f"unknown bytegraph log {name!r} in {spec!r}; valid names: {valid}")
    return wanted


class _Stderr(logging.StreamHandler):
    """A handler writing to whatever ``sys.stderr`` is at the time (pytest's
    capture, a redirected stream)."""

    def __init__(self):
        super().__init__(sys.stderr)
        self.setFormatter(_Prefix())

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value):
        pass


_HANDLER = _Stderr()


def set_logs(spec: str | Iterable[str] = "") -> None:
    """Switch bytegraph's own log output (to stderr, ``[bytegraph.<family>]``
    prefix) to exactly the families in ``spec``: ``BYTEGRAPH_LOGS`` syntax,
    ``""`` for none.  torch's settings (``TORCH_LOGS``,
    ``torch._logging.set_logs``) work beside it, through torch's handlers.

    Example::

        >>> set_logs("graph_breaks")
        >>> enabled("graph_breaks")
        True
        >>> set_logs("")
    """
    families = parse(spec if isinstance(spec, str) else ",".join(spec))
    _OWN.clear()
    _OWN.update(families)


def enabled(family: str) -> bool:
    """Would a record of ``family`` be shown?  (Cheap; the trace path asks before formatting.)"""
    return family in _OWN or _LOGGERS[family].isEnabledFor(logging.DEBUG)


def log(family: str, message: str, *args) -> None:
    """Log ``message % args`` under ``family`` when that family is on: once,
    through bytegraph's handler when ``BYTEGRAPH_LOGS`` asked for it, else
    through the logger (torch's handlers, or the program's own)."""
    logger = _LOGGERS[family]
    if family in _OWN:
        _HANDLER.handle(logging.LogRecord(logger.name, logging.DEBUG, "", 0, message, args, None))
    elif logger.isEnabledFor(logging.DEBUG):
        logger.debug(message, *args, stacklevel=2)


_make_loggers()
set_logs(os.environ.get("BYTEGRAPH_LOGS", ""))
