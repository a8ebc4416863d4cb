"""Optional native checks that speed up generated guard functions.

Checking an input tensor in Python costs six attribute reads (type, dtype,
shape, strides, requires_grad, device), about 0.2 µs per tensor on every call.
``tensor_guard.cpp`` checks a whole list of tensors in one call, reading the
C++ tensor directly.  It is compiled against the installed torch by::

    python -m bytegraph.native build     # `make` runs this for you

and loaded the first time a guard is compiled.  The same module holds the C
call path of compiled functions (``Dispatch``: guards tried, the entry
called, no Python frame of its own) and of continuations (``Selector``, the
hit path of ``FrameRunner.select``).  When it is missing, stale (built
for another torch or Python, or from older source), disabled
(``bytegraph.config.native_guards = False`` or ``BYTEGRAPH_NATIVE_GUARDS=0``),
or fails its self-test, guards use the equivalent pure-Python conditions: same
answers, slower.

Example::

    >>> from bytegraph import native
    >>> m = native.load()              # None when unavailable
    >>> if m is not None:
    ...     import torch
    ...     chk = m.TensorCheck([(torch.Tensor, torch.float32, torch.device("cpu"), (2,), "contiguous", False)])
    ...     assert chk.check(torch.zeros(2)) and not chk.check(torch.zeros(3))
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
from typing import List, Optional

_SOURCE = os.path.join(os.path.dirname(__file__), "tensor_guard.cpp")
_BUILD_ROOT = os.path.join(os.path.dirname(__file__), "_build")

_module = None
_tried = False
#: why the native module could not be loaded (None when it was, or before the first try)
unavailable_reason: Optional[str] = None


def build_key() -> str:
    """Directory name of the build for this interpreter, torch and source.

    Example::

        >>> from bytegraph import native
        >>> native.build_key()                     # doctest: +SKIP
        'cpython-311-torch2.13.0_cpu-731be5022737'
    """
    import torch
    with open(_SOURCE, "rb") as f:
        digest = hashlib.sha1(f.read()).hexdigest()[:12]
    tag = sys.implementation.cache_tag  # e.g. cpython-311
    return f"{tag}-torch{torch.__version__}-{digest}".replace("+", "_")


def module_path() -> str:
    """Where the compiled module for the current environment lives.

    Example::

        >>> from bytegraph import native
        >>> native.module_path().endswith(".so")    # doctest: +SKIP
        True
    """
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    return os.path.join(_BUILD_ROOT, build_key(), "_native" + suffix)


def _compile_command(output: str) -> List[str]:
    import torch
    torch_dir = os.path.dirname(torch.__file__)
    include = os.path.join(torch_dir, "include")
    lib = os.path.join(torch_dir, "lib")
    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++") or "c++"
    cmd = [
        cxx, "-O2", "-shared", "-fPIC", "-std=c++20", "-w",
        f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
        "-I", include, "-I", os.path.join(include, "torch", "csrc", "api", "include"),
        "-I", sysconfig.get_paths()["include"],
        _SOURCE, "-o", output,
        "-L", lib, "-lc10", "-ltorch", "-ltorch_cpu", "-ltorch_python",
    ]
    if sys.platform == "darwin":
        cmd += ["-undefined", "dynamic_lookup", f"-Wl,-rpath,{lib}"]
    else:
        cmd += [f"-Wl,-rpath,{lib}"]
    return cmd


def build(force: bool = False, quiet: bool = False) -> str:
    """Compile ``tensor_guard.cpp`` for this environment; return the module's path.

    A no-op when an up-to-date build exists (unless ``force``).  Raises
    ``RuntimeError`` with the compiler's output when compilation fails.

    Example::

        >>> from bytegraph import native
        >>> path = native.build()          # doctest: +SKIP
    """
    path = module_path()
    if os.path.exists(path) and not force:
        return path
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    cmd = _compile_command(tmp)
    if not quiet:
        print("bytegraph: compiling native guard checks:", os.path.relpath(path), flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError("compiling bytegraph's native guard checks failed:\n"
                           + " ".join(cmd) + "\n" + proc.stdout + proc.stderr)
    os.replace(tmp, path)  # atomic: a concurrent loader never sees half a file
    return path


def load():
    """The native module, or None when guards use Python conditions (see ``status()``).

    Cheap after the first call; honours ``bytegraph.config.native_guards`` on every call.

    Example::

        >>> from bytegraph import native
        >>> m = native.load()
        >>> m is None or hasattr(m, "TensorCheck")
        True
    """
    from .. import config
    if not config.native_guards:
        return None
    if not _tried:
        _try_load()
    return _module


def status() -> str:
    """One line saying whether guards check tensors natively, and if not, why.

    Example::

        >>> from bytegraph import native
        >>> native.status()                        # doctest: +SKIP
        'on'
    """
    from .. import config
    if not config.native_guards:
        return "off (bytegraph.config.native_guards is False)"
    if load() is not None:
        return "on"
    return f"off ({unavailable_reason})"


def _try_load() -> None:
    global _module, _tried, unavailable_reason
    _tried = True
    try:
        path = module_path()
        if not os.path.exists(path):
            unavailable_reason = "not built for this torch/Python; run: python -m bytegraph.native build"
            return
        spec = importlib.util.spec_from_file_location("bytegraph.native._native", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _self_test(module)
    except Exception as e:  # a broken build must never break compilation
        unavailable_reason = f"failed to load: {type(e).__name__}: {e}"
        return
    _module = module
    unavailable_reason = None


def reload() -> None:
    """Forget the loaded state so the next ``load()`` looks again (after a build).

    Example::

        >>> from bytegraph import native
        >>> native.reload(); native.load() is native.load()
        True
    """
    global _module, _tried, unavailable_reason
    _module, _tried, unavailable_reason = None, False, None


def _self_test(m) -> None:
    """Reject a build whose view of tensors disagrees with torch's (e.g. an ABI mismatch)."""
    import torch
    cpu = torch.device("cpu")
    x = torch.zeros(2, 3)
    specs = [
        (torch.Tensor, torch.float32, cpu, (2, 3), "contiguous", False),
        (torch.Tensor, torch.float32, cpu, (3, 2), (1, 3), False),
        (torch.Tensor, torch.int64, cpu, (None, 4), None, False),
        (torch.nn.Parameter, torch.float32, cpu, (5,), "contiguous", True),
    ]
    chk = m.TensorCheck(specs)
    good = (x, x.t(), torch.zeros(7, 4, dtype=torch.int64), torch.nn.Parameter(torch.zeros(5)))
    bad = [
        (x.t(),) + good[1:],
        (x, x) + good[2:],
        good[:2] + (torch.zeros(7, 4),) + good[3:],
        good[:3] + (torch.nn.Parameter(torch.zeros(5), requires_grad=False),),
        good[:3] + (torch.zeros(5, requires_grad=True),),
    ]
    if not chk.check(*good) or any(chk.check(*b) for b in bad):
        raise RuntimeError("self-test failed: native tensor checks disagree with torch")
    if not m.distinct(x, good[2]) or m.distinct(x, good[2], x):
        raise RuntimeError("self-test failed: distinct()")
