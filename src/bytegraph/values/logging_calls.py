"""``logger.debug(...)``/``info``/``warning``/``error``/``critical``/``log``
on a ``logging.Logger`` whose level is disabled: captured as nothing.

Each of these methods is ``if self.isEnabledFor(LEVEL): self._log(...)``, and
``Logger.isEnabledFor`` is::

    if self.disabled: return False
    try: return self._cache[level]
    except KeyError: <lock, compute, store in _cache>

The trace does those two reads itself, through the logger's own (guarded)
attribute reads: ``disabled`` by value, ``_cache`` by its keys and the entry
read.  Every way the answer can change goes through them: ``setLevel``,
``logging.disable``, adding loggers to the hierarchy and ``manager.disable``
all clear every logger's ``_cache`` (``Manager._clear_cache``), and
``disabled`` is an attribute of the logger.  So:

* disabled (``disabled`` set, or a cached ``False``): the call is nothing;
* enabled (a cached ``True``): a graph break, the call runs natively (the
  record, handlers, I/O);
* not cached yet: a graph break too (the native call fills the cache), whose
  entry keeps a guard that the level is still uncached, so the next call
  recompiles and captures.

Only loggers whose ``isEnabledFor`` (and the method itself) are
``logging.Logger``'s are modelled; the method was already guarded where it
was read.
"""

from __future__ import annotations

import logging

from ..errors import Unsupported
from ..guards import Guard
from ..sources import AttrSource, ItemSource, ObjectSource
from .base import Value
from .constants import NONE, ConstantValue
from .containers import DictValue, key_of
from .objects import UserObjectValue, guard_class_lookup, special_lookup

#: level name in the logging module -> the Logger method that logs at it
LEVEL_METHODS = {
    "DEBUG": logging.Logger.debug, "INFO": logging.Logger.info, "WARNING": logging.Logger.warning,
    "ERROR": logging.Logger.error, "CRITICAL": logging.Logger.critical, None: logging.Logger.log,
}
_LEVEL_OF = {fn: name for name, fn in LEVEL_METHODS.items()}


class LoggerLevelMethodValue(Value):
    """One of ``logging.Logger``'s level methods (the function, held by
    identity); a call on a pre-existing logger checks the level as
    ``isEnabledFor`` would (module docstring)."""

    __slots__ = ("fn",)

    def __init__(self, fn, source=None):
        super().__init__(source)
        self.fn = fn

    def python_type(self):
        return type(self.fn)

    def real_object(self):
        return (self.fn,)

    def get_attr(self, tx, name):
        if name in ("__name__", "__qualname__", "__module__"):
            from .constants import const
            return const(getattr(self.fn, name))
        return super().get_attr(tx, name)

    def reconstruct(self, cg):
        if self.source is not None:
            return self.source.emit_load(cg)
        cg.load_object(self.fn)

    def call(self, tx, args, kwargs):
        what = f"logging.Logger.{self.fn.__name__}()"
        if not args or not isinstance(args[0], UserObjectValue) or args[0].source is None \
                or not isinstance(args[0].obj, logging.Logger):
            raise Unsupported(f"call to {what} on something other than a pre-existing logger", kind="logging",
                              hint="logging calls run natively between graphs")
        logger_value, rest = args[0], args[1:]
        level_name = _LEVEL_OF[self.fn]
        if level_name is None:  # Logger.log(level, msg, ...)
            if not rest or not rest[0].is_constant() or type(rest[0].as_constant()) is not int:
                raise Unsupported(f"call to {what} with a level that is not an int constant", kind="logging",
                                  hint="logging calls run natively between graphs")
            level = rest[0].as_constant()
        else:
            level = logging.__dict__.get(level_name)
            if type(level) is not int:
                raise Unsupported(f"call to {what} with logging.{level_name} rebound", kind="logging")
            tx.guards.add(Guard("CONSTANT_MATCH", ItemSource(ObjectSource(logging.__dict__, "logging.__dict__"),
                                                             level_name), level))
        if _is_disabled(tx, logger_value, level, what):
            return NONE
        raise Unsupported(f"call to {what} at an enabled level", kind="logging",
                          hint="logging calls run natively between graphs")


def _is_disabled(tx, logger_value: UserObjectValue, level: int, what: str) -> bool:
    """``not logger.isEnabledFor(level)``, read in the trace; raises
    ``Unsupported`` when the answer is not cached yet."""
    cls = type(logger_value.obj)
    if special_lookup(cls, "isEnabledFor") is not logging.Logger.__dict__["isEnabledFor"]:
        raise Unsupported(f"call to {what} on a logger with its own isEnabledFor", kind="logging",
                          hint="logging calls run natively between graphs")
    inst_dict = vars(logger_value.obj)
    if "isEnabledFor" in inst_dict:  # ``self.isEnabledFor`` would find the instance's own
        raise Unsupported(f"call to {what} on a logger with its own isEnabledFor", kind="logging",
                          hint="logging calls run natively between graphs")
    tx.guards.add(Guard("DICT_CONTAINS", AttrSource(logger_value.source, "__dict__"), ("isEnabledFor", False)))
    guard_class_lookup(tx, cls, "isEnabledFor", logging.Logger)
    tx.guards.add(Guard("ID_MATCH", ItemSource(AttrSource(ObjectSource(logging.Logger, "logging.Logger"),
                                                          "__dict__"), "isEnabledFor"),
                        logging.Logger.__dict__["isEnabledFor"]))
    if logger_value.get_attr(tx, "disabled").truth(tx):
        return True
    cache = logger_value.get_attr(tx, "_cache")
    if type(cache) is DictValue:
        entry = cache.entries.get(key_of(ConstantValue(level)))
        if entry is not None:
            return not entry[1].truth(tx)
        if cache.source is not None:
            exc = Unsupported(f"call to {what} at a level the logger has not cached yet", kind="logging",
                              hint="the call runs natively (and fills the cache); the next call recompiles")
            exc.recompile_guards = (Guard("TYPE_MATCH", cache.source, dict),
                                    Guard("DICT_CONTAINS", cache.source, (level, False)))
            raise exc
    raise Unsupported(f"call to {what}: the logger's level cache is not modelled", kind="logging",
                      hint="logging calls run natively between graphs")
