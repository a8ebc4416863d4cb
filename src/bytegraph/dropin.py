"""The drop-in switch: existing code that calls ``torch.compile`` or
``nn.Module.compile()`` runs through bytegraph, without editing that code.

Two ways to opt in:

* in Python, before the code compiles anything::

      import bytegraph
      bytegraph.use_for_torch_compile()        # undo: bytegraph.use_for_torch_compile(False)

* for a whole program, from outside::

      python -m bytegraph dropin enable        # once per environment (writes a .pth file)
      BYTEGRAPH_TORCH_COMPILE=1 python train.py

  With the variable unset (or ``0``) the program starts as it always does:
  the ``.pth`` file reads the variable and does nothing else.

While it is on, ``torch.compile`` called with ``model, **kwargs`` returns
``bytegraph.compile(model, **kwargs)`` (the same arguments: bytegraph takes
torch.compile's signature) and ``module.compile(**kwargs)`` compiles that
module's calls in place with bytegraph, as torch's does with torch.compile.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from typing import Optional

#: what the switch replaced: ("compile", torch.compile), ("Module.compile", nn.Module.compile)
_SAVED: dict = {}

PTH_NAME = "bytegraph_dropin.pth"
ENV_VAR = "BYTEGRAPH_TORCH_COMPILE"
# one line: a .pth file runs lines that start with "import"
_PTH_LINE = ("import os; os.environ.get('BYTEGRAPH_TORCH_COMPILE', '0') not in ('', '0') and "
             "__import__('bytegraph.dropin').dropin.use_for_torch_compile()\n")


def use_for_torch_compile(on: bool = True) -> None:
    """Route ``torch.compile`` and ``nn.Module.compile`` through bytegraph
    (``on=False`` puts torch's back).

    Example::

        >>> import bytegraph, torch
        >>> bytegraph.use_for_torch_compile()
        >>> torch_compile = torch.compile           # now bytegraph's
        >>> f = torch_compile(lambda x: x * 2, backend="eager")
        >>> isinstance(f, bytegraph.cache.CompiledFunction)
        True
        >>> bytegraph.use_for_torch_compile(False)
    """
    import torch
    if not on:
        if "compile" in _SAVED:
            torch.compile = _SAVED.pop("compile")
        if "Module.compile" in _SAVED:
            torch.nn.Module.compile = _SAVED.pop("Module.compile")
        return
    if "compile" in _SAVED:
        return
    _SAVED["compile"] = torch.compile
    _SAVED["Module.compile"] = torch.nn.Module.compile
    torch.compile = _torch_compile
    torch.nn.Module.compile = _module_compile


def is_on() -> bool:
    """Is ``torch.compile`` bytegraph's right now?

    Example::

        >>> is_on()
        False
    """
    return "compile" in _SAVED


def _torch_compile(model=None, **kwargs):
    """torch.compile, served by bytegraph (``bytegraph.use_for_torch_compile``)."""
    from .api import compile
    return compile(model, **kwargs)


def _module_compile(self, *args, **kwargs):
    """nn.Module.compile, served by bytegraph: this module's calls are compiled in place."""
    from .api import compile_module
    if args:   # (torch.compile's only positional parameter is the model: it is this module)
        raise TypeError("Module.compile() takes keyword arguments only (torch.compile's)")
    compile_module(self, **kwargs)


def _site_packages() -> str:
    return sysconfig.get_paths()["purelib"]


def pth_path() -> str:
    """Where ``enable`` writes the start-up hook for this environment.

    Example::

        >>> pth_path().endswith("bytegraph_dropin.pth")
        True
    """
    return os.path.join(_site_packages(), PTH_NAME)


def enable() -> str:
    """Install the start-up hook that reads ``BYTEGRAPH_TORCH_COMPILE``; return its path."""
    path = pth_path()
    with open(path, "w") as f:
        f.write(_PTH_LINE)
    return path


def disable() -> Optional[str]:
    """Remove the start-up hook; return its path if there was one."""
    path = pth_path()
    if os.path.exists(path):
        os.remove(path)
        return path
    return None


def main(argv=None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    command = args[0] if args else "status"
    if command == "enable":
        print(f"bytegraph: wrote {enable()}; run programs with {ENV_VAR}=1 to use bytegraph for torch.compile")
    elif command == "disable":
        path = disable()
        print(f"bytegraph: removed {path}" if path else "bytegraph: the start-up hook was not installed")
    elif command == "status":
        print(f"start-up hook: {'installed at ' + pth_path() if os.path.exists(pth_path()) else 'not installed'}; "
              f"{ENV_VAR}={os.environ.get(ENV_VAR, '')!r}")
    else:
        print("usage: python -m bytegraph dropin [enable|disable|status]", file=sys.stderr)
        return 2
    return 0

