"""bytegraph.bytecode: decode, edit, analyse and reassemble CPython bytecode.

Public interface:

* :class:`Instr`, :class:`ExnEntry`, :func:`instr` -- the instruction model
  (normalized, direction-free opnames; jump targets and exception handlers
  as object references);
* :func:`decode` -- code object -> cached tuple of Instr;
* :func:`copy_instrs` -- editable deep copy of an instruction list;
* :func:`assemble` -- Instr list + template code object -> new code object;
* :func:`stack_effect`, :func:`max_stack_depth`, :func:`live_locals` -- analyses.

CPython version specifics are confined to :mod:`.versions`; :mod:`.emit` lowers
operations (calls, function creation) to the running version's instructions.
"""

from . import emit
from .analysis import (find_loops, live_locals, max_stack_depth, natural_loops, stack_depths, stack_effect,
                       successors)
from .assemble import assemble
from .decode import clear_cache, decode
from .instr import ExnEntry, Instr, copy_instrs, instr
from .versions import SPEC

__all__ = [
    "Instr", "ExnEntry", "instr", "decode", "clear_cache", "copy_instrs", "assemble",
    "stack_effect", "successors", "max_stack_depth", "live_locals", "stack_depths", "find_loops", "natural_loops",
    "SPEC", "emit",
]
