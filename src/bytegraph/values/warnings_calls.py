"""``warnings.warn(message, category, stacklevel)``: captured as a side effect.

The call is not run in the trace.  What ``_warnings.warn`` computes from the
stack is computed here instead: the frame ``stacklevel`` points at (the frame
calling ``warn``, or one of its inlined callers, each of which is one real
Python frame in eager), and from it the file name, the line of the
instruction it is executing, the module name (its globals' ``__name__``) and
its globals (whose ``__warningregistry__`` is the registry).  After the graph,
in program order with the other effects, the generated code calls
:func:`replay_warn`, which does what ``_warnings.warn`` does with that
context: get or create the registry, then ``_warnings.warn_explicit`` -- so
the filters, the ``once``/``default`` registries and the display or
recording are CPython's own, run at the point eager runs them relative to
every other effect.

What the trace must know, because it cannot move an exception:

* the warning does not become an exception: the filters' action for it is not
  ``"error"`` (else a graph break, the call runs natively);
* showing it runs no program code and touches nothing the trace reads:
  ``showwarning``/``formatwarning``/``_showwarnmsg`` are the module's own, and
  the sink is either the default one (stderr) or a ``catch_warnings(record=True)``
  log (a ``list.append``) that no list the trace reads is;
* the category is a builtin warning class, or a subclass of one without
  special methods (making and showing the instance runs no program code).

All of it is one guard (``WARN_OK``), re-checked on every call, so changing the
filters to ``"error"`` recompiles; any other filter change needs nothing, as
the replay reads the filters when it runs.  Messages must be strings; a
``stacklevel`` past the compiled frame breaks (``warnings`` kind).
"""

from __future__ import annotations

import _warnings
import builtins
import re
import sys
import types
import warnings

from ..errors import Unsupported
from ..guards import Guard
from .base import PLAIN_CLASS_BODY_NAMES, Value
from .constants import NONE

_WARN_EXPLICIT = _warnings.warn_explicit
#: (code of bytegraph's own inlined helpers is no frame of the program's)
_PACKAGE_DIR = __file__.rsplit("/values/", 1)[0]
_DISPLAY_FUNCTIONS = ("_showwarnmsg", "_showwarnmsg_impl", "_formatwarnmsg", "_formatwarnmsg_impl")
_codes: dict = {}


def _stdlib_code(name: str):
    """The code of the ``warnings`` module's own function ``name``, from its
    source file (the module's attribute may be replaced, e.g. by
    ``catch_warnings(record=True)``; a fresh copy of the module has other
    function objects of equal code)."""
    if not _codes:
        import importlib.util
        spec = importlib.util.find_spec("warnings")
        module_code = spec.loader.get_code("warnings") if spec is not None and spec.loader is not None else None
        for c in getattr(module_code, "co_consts", ()):
            if isinstance(c, types.CodeType) and c.co_name in _DISPLAY_FUNCTIONS:
                _codes[c.co_name] = c
        _codes.setdefault("", None)  # (looked once)
    return _codes.get(name)
_ACTIONS = ("ignore", "always", "default", "module", "once")
_LIST_APPEND = type([].append)


def replay_warn(message, category, filename, lineno, module, f_globals):
    """``_warnings.warn``'s work once the context is known (see module docstring)."""
    registry = f_globals.get("__warningregistry__")
    if registry is None:
        registry = {}
        f_globals["__warningregistry__"] = registry
    _WARN_EXPLICIT(message, category, filename, lineno, module, registry, None)


def _action(category, text: str, module: str, lineno: int):
    """The filters' action for the warning (``_warnings``' ``get_filter``), or
    None when deciding it could run code (a filter that is not made of
    strings, regexes and plain classes)."""
    w = _module()
    if w is None:
        return None
    filters = w.__dict__.get("filters")
    if type(filters) is not list:
        return None
    for item in filters:
        if type(item) is not tuple or len(item) != 5:
            return None
        action, msg, cat, mod, ln = item
        if type(action) is not str or type(ln) is not int or type(cat) is not type or \
                type(cat).__subclasscheck__ is not type.__subclasscheck__:
            return None
        matched = []
        for pattern, value in ((msg, text), (mod, module)):
            if pattern is None:
                matched.append(True)
            elif type(pattern) is str:
                matched.append(pattern == value)
            elif type(pattern) is re.Pattern:
                matched.append(pattern.match(value) is not None)
            else:
                return None
        if matched[0] and issubclass(category, cat) and matched[1] and (ln == 0 or lineno == ln):
            return action
    action = w.__dict__.get("defaultaction")
    return action if type(action) is str else None


def _module():
    """The ``warnings`` module ``_warnings`` reads its state from: the one in
    ``sys.modules`` when it runs (else None: its own defaults, not modelled)."""
    w = sys.modules.get("warnings")
    return w if type(w) is types.ModuleType else None


def _module_function(w, name: str) -> bool:
    fn = w.__dict__.get(name)
    code = _stdlib_code(name)
    return type(fn) is types.FunctionType and fn.__globals__ is w.__dict__ and code is not None and fn.__code__ == code


def _sink_ok(excluded=()) -> bool:
    """Showing the warning runs no program code (see module docstring)."""
    w = _module()
    if w is None or not _module_function(w, "_showwarnmsg") or \
            w.__dict__.get("showwarning") is not w.__dict__.get("_showwarning_orig"):
        return False
    impl = w.__dict__.get("_showwarnmsg_impl")
    if type(impl) is types.FunctionType:
        # formatted (linecache reads the file) and written to sys.stderr
        return _module_function(w, "_showwarnmsg_impl") and _module_function(w, "_formatwarnmsg") and \
            w.__dict__.get("formatwarning") is w.__dict__.get("_formatwarning_orig") and \
            _module_function(w, "_formatwarnmsg_impl")
    # catch_warnings(record=True): log.append
    return type(impl) is _LIST_APPEND and type(impl.__self__) is list and impl.__name__ == "append" and \
        all(impl.__self__ is not other for other in excluded)


def record_list():
    w = _module()
    impl = w.__dict__.get("_showwarnmsg_impl") if w is not None else None
    return impl.__self__ if type(impl) is _LIST_APPEND and type(impl.__self__) is list else None


def warn_ok(expected, *lists) -> bool:
    """The guard: the warning still is not an error, the sink still runs no
    program code and is none of ``lists`` (the lists the trace read), and the
    registry global is absent or a dict."""
    category, text, module, lineno, f_globals = expected
    action = _action(category, text, module, lineno)
    registry = f_globals.get("__warningregistry__")
    return action in _ACTIONS and _sink_ok(lists) and (registry is None or type(registry) is dict)


_PLAIN_CLASS_KEYS = PLAIN_CLASS_BODY_NAMES - {"__annotations__"}


def _is_builtin_warning(cls) -> bool:
    """A warning class whose instances are made, compared and shown by
    builtin code only: a builtin category, or a subclass of one that defines
    no special method (``class TracerWarning(Warning): pass``)."""
    if type(cls) is not type or not issubclass(cls, Warning):
        return False
    for klass in cls.__mro__:
        if klass.__module__ == "builtins":
            continue
        if type(klass) is not type or any(k.startswith("__") and k not in _PLAIN_CLASS_KEYS for k in vars(klass)):
            return False
    return True


def _frame_for(tx, stacklevel: int):
    """The traced frame ``stacklevel`` points at; each step up must be one
    real Python frame of eager's stack (a direct call of an inlined function)."""
    frame = tx
    for _ in range(max(stacklevel, 1) - 1):
        if frame.parent is None:
            raise Unsupported(f"warnings.warn(stacklevel={stacklevel}) pointing above the compiled frame",
                              kind="warnings", hint="the call runs natively between graphs")
        if not frame.one_frame or frame.code.co_filename.startswith(_PACKAGE_DIR):
            raise Unsupported(f"warnings.warn(stacklevel={stacklevel}) through a call bytegraph does not make "
                              "as one Python frame", kind="warnings", hint="the call runs natively between graphs")
        frame = frame.parent
    if "importlib" in frame.code.co_filename and "_bootstrap" in frame.code.co_filename:
        raise Unsupported("warnings.warn from importlib's frames", kind="warnings")
    return frame


def _bind(tx, args, kwargs):
    names = ("message", "category", "stacklevel", "source")
    if len(args) > len(names) or any(k not in names for k in kwargs) or \
            any(k in kwargs for k in names[:len(args)]):
        raise Unsupported("warnings.warn() with unexpected arguments", kind="warnings")
    bound = dict(zip(names, args))
    bound.update(kwargs)
    if "message" not in bound:
        raise Unsupported("warnings.warn() without a message", kind="warnings")
    return bound


def warn_handler(tx, args, kwargs) -> Value:
    bound = _bind(tx, args, kwargs)
    msg_value = bound["message"]
    if not msg_value.is_constant() or type(msg_value.as_constant()) is not str:
        raise Unsupported(f"warnings.warn() of a {msg_value.type_name()} message", kind="warnings",
                          hint="the call runs natively between graphs")
    message = msg_value.as_constant()
    category = UserWarning
    cat_value = bound.get("category")
    if cat_value is not None and not (cat_value.is_constant() and cat_value.as_constant() is None):
        if not cat_value.is_constant():
            raise Unsupported("warnings.warn() with a category that is not a constant", kind="warnings")
        category = cat_value.as_constant()
        if not (isinstance(category, type) and issubclass(category, Warning)):
            tx.raise_python_exception(TypeError(
                f"category must be a Warning subclass, not '{type(category).__name__}'"))
    if not _is_builtin_warning(category):
        raise Unsupported(f"warnings.warn() of a {category.__qualname__} (a warning class of the program)",
                          kind="warnings", hint="the call runs natively between graphs")
    level_value = bound.get("stacklevel")
    stacklevel = 1
    if level_value is not None:
        if not level_value.is_constant() or type(level_value.as_constant()) is not int:
            raise Unsupported("warnings.warn() with a stacklevel that is not an int constant", kind="warnings")
        stacklevel = level_value.as_constant()
    source_value = bound.get("source")
    if source_value is not None and not (source_value.is_constant() and source_value.as_constant() is None):
        raise Unsupported("warnings.warn(source=...)", kind="warnings")
    frame = _frame_for(tx, stacklevel)
    f_globals = frame.f_globals
    module = f_globals.get("__name__")
    if module is None or type(module) is not str:
        raise Unsupported("warnings.warn() from a frame whose globals' __name__ is not a str", kind="warnings")
    filename = frame.code.co_filename
    lineno = frame.location().lineno
    if type(lineno) is not int:
        raise Unsupported("warnings.warn() at an instruction without a line number", kind="warnings")
    action = _action(category, message, module, lineno)
    if action == "error":
        raise Unsupported("warnings.warn() of a warning the filters turn into an error", kind="warnings",
                          hint="the warning is raised natively, where eager raises it")
    se = tx.side_effects
    log = record_list()
    known_log = se.existing(log) if log is not None else None
    if action not in _ACTIONS or not _sink_ok() or (known_log is not None and not isinstance(known_log, _LogValue)):
        raise Unsupported("warnings.warn() whose filters or display the trace does not model", kind="warnings",
                          hint="the call runs natively between graphs")
    registry = f_globals.get("__warningregistry__")
    if registry is not None and type(registry) is not dict:
        raise Unsupported("warnings.warn() with a __warningregistry__ that is not a dict", kind="warnings")
    expected = (category, message, module, lineno, f_globals)
    se.warn_guards.append(expected)
    if log is not None and known_log is None:
        # the recorded log changes only at the replay: the trace must not read it
        se.track_existing(log, _LogValue(log))
    se.defer_call(_Replay(message, category, filename, lineno, module, f_globals), [])
    return NONE


def _log_value_class():
    from .objects import OpaqueValue

    class LogValue(OpaqueValue):
        """The list ``catch_warnings(record=True)`` records into, once a
        warning of the trace will append to it at the replay: any use of it
        in the trace is a break (it would not see the warning yet)."""

        __slots__ = ()

        def __init__(self, log):
            super().__init__(log, None, "the warnings log of catch_warnings(record=True), which a warning in "
                             "this trace appends to", "warnings", "read it outside the compiled function")
    return LogValue


_LogValue = _log_value_class()


class _Replay:
    """The deferred ``replay_warn`` call with its context bound (codegen loads it as a constant)."""

    __slots__ = ("args",)

    def __init__(self, *args):
        self.args = args

    def __call__(self):
        replay_warn(*self.args)


def add_warn_guards(side_effects, guards) -> None:
    """At the end of a trace: one ``WARN_OK`` guard per captured warning,
    given the sources of every list the trace read (the sink must be none)."""
    if not side_effects.warn_guards:
        return
    from .containers import BaseListValue
    lists = tuple(v.source for v in side_effects.existing_values()
                  if isinstance(v, BaseListValue) and v.source is not None)
    for expected in side_effects.warn_guards:
        guards.add(Guard("WARN_OK", None, expected, others=lists))


__all__ = ["warn_handler", "replay_warn", "warn_ok", "add_warn_guards", "builtins"]
