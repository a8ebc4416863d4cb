"""bytegraph: a graph-capture compiler frontend for PyTorch.

Example::

    >>> import bytegraph, torch
    >>> @bytegraph.compile(backend="eager")
    ... def f(x):
    ...     return x.cos() * 2
    >>> f(torch.zeros(2))
    tensor([2., 2.])
"""

from . import config, logs, native, torch_switches, tracefile
from .api import ExplainReport, FrameReport, compile, compile_module, explain, reset, stats
from .decorators import allow_in_graph, disable, graph_break, is_compiling, set_stance
from .dropin import use_for_torch_compile
from .show import show
from .dynamic import mark_dynamic, mark_static
from .errors import (BackendError, BreakRecord, BytegraphError, GraphBreakError, InternalError, InvalidArgument,
                     InvalidArgumentType, RecompileError, Unsupported, UserLocation)

__all__ = [
    "compile", "compile_module", "explain", "reset", "stats", "graph_break", "config", "ExplainReport",
    "FrameReport",
    "disable", "allow_in_graph", "is_compiling", "set_stance", "RecompileError", "use_for_torch_compile", "show",
    "mark_dynamic", "mark_static", "native", "logs", "tracefile",
    "BytegraphError", "GraphBreakError", "Unsupported", "BackendError", "InternalError", "InvalidArgument",
    "InvalidArgumentType",
    "BreakRecord", "UserLocation",
]

torch_switches.install()   # torch.compiler.set_stance / reset mean the same for bytegraph's code

if __import__("os").environ.get("BYTEGRAPH_TORCH_COMPILE", "0") not in ("", "0"):
    use_for_torch_compile()   # the drop-in switch (see dropin.py), also when no start-up hook read it
