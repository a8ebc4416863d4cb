"""Instruction counts from inside a worker running under valgrind's callgrind.

Timed per-call figures of a few microseconds move by more than 10% between
repetitions on a small shared machine, which makes "is the ratio on Python
3.12 within 10% of 3.11's?" unanswerable from timings alone.  The number of
instructions the CPU executes for the same work is deterministic to a fraction
of a percent, whatever else the machine runs.  ``bench/run.py`` starts the
``instructions`` metric's workers as ``valgrind --tool=callgrind
--instr-atstart=no python -m bench.worker ...``; inside, this module issues
callgrind's client requests (a few machine instructions each) through a tiny C
library built once with the machine's compiler.

Example (inside such a worker)::

    cg = Callgrind.load()
    cg.start()
    f(x)
    n = cg.count("first call")      # instructions since start(), counters zeroed
"""

from __future__ import annotations

import ctypes
import glob
import hashlib
import os
import subprocess
import sys
import tempfile
from typing import Optional

#: where the counts are dumped (bench/run.py passes it to valgrind)
OUT_ENV = "BENCH_CALLGRIND_OUT"

_SOURCE = r"""
#include <valgrind/callgrind.h>
void bg_start(void) { CALLGRIND_START_INSTRUMENTATION; }
void bg_stop(void) { CALLGRIND_STOP_INSTRUMENTATION; }
void bg_dump(const char *label) { CALLGRIND_DUMP_STATS_AT(label); }
void bg_toggle(void) { CALLGRIND_TOGGLE_COLLECT; }
void bg_zero(void) { CALLGRIND_ZERO_STATS; }
int bg_running(void) { return RUNNING_ON_VALGRIND; }
"""


def valgrind_command(out_base: str) -> list:
    """The command prefix that runs a worker under callgrind; each process (forked
    children too) dumps to ``out_base.<pid>.<n>``."""
    return ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--collect-atstart=yes",
            "--dump-instr=no", "--compress-strings=no", f"--callgrind-out-file={out_base}.%p", "-q"]


def available() -> Optional[str]:
    """``None`` when callgrind can be used here, else why not."""
    from shutil import which
    if which("valgrind") is None:
        return "valgrind is not installed"
    if not os.path.exists("/usr/include/valgrind/callgrind.h"):
        return "valgrind's headers (callgrind.h) are not installed"
    if which("cc") is None and which("gcc") is None:
        return "no C compiler"
    return None


def _library() -> str:
    digest = hashlib.sha1(_SOURCE.encode()).hexdigest()[:12]
    path = os.path.join(tempfile.gettempdir(), f"bytegraph-bench-cg-{digest}.so")
    if not os.path.exists(path):
        src = path[:-3] + ".c"
        with open(src, "w") as f:
            f.write(_SOURCE)
        tmp = f"{path}.{os.getpid()}"
        subprocess.run(["cc", "-O1", "-shared", "-fPIC", "-o", tmp, src], check=True)
        os.replace(tmp, path)       # atomic: workers of two interpreters may race
    return path


class Callgrind:
    """The client requests of a process running under callgrind."""

    def __init__(self, lib, out_base: str):
        # each function pointer is looked up once, here: ctypes' first lookup of a
        # name costs thousands of instructions, which would land in some count
        self._start, self._stop, self._dump, self._toggle, self._zero = (
            lib.bg_start, lib.bg_stop, lib.bg_dump, lib.bg_toggle, lib.bg_zero)
        self._dump.argtypes = [ctypes.c_char_p]
        self._out = f"{out_base}.{os.getpid()}."      # this process's numbered dumps
        self._seen = set(glob.glob(self._out + "*"))

    @classmethod
    def load(cls) -> "Callgrind":
        out = os.environ.get(OUT_ENV)
        if not out:
            raise RuntimeError(f"the instructions metric runs under valgrind (bench/run.py sets {OUT_ENV})")
        lib = ctypes.CDLL(_library())
        if not lib.bg_running():
            raise RuntimeError("not running under valgrind")
        return cls(lib, out)

    def start(self) -> None:
        """Start instrumenting (the counters start at zero)."""
        self._start()
        self._zero()

    def stop(self) -> None:
        self._stop()

    def toggle(self) -> None:
        """Stop (or resume) counting, leaving instrumentation on (cheap: used around graph calls)."""
        self._toggle()

    def count(self, label: str) -> int:
        """Instructions counted since the last ``start``/``count``; the counters restart at zero."""
        self._dump(label.encode())
        self._toggle()              # reading the dump is not part of the next count
        try:
            return self._read_dump()
        finally:
            self._toggle()

    def _read_dump(self) -> int:
        new = sorted(set(glob.glob(self._out + "*")) - self._seen, key=lambda p: int(p[len(self._out):]))
        if not new:
            raise RuntimeError(f"callgrind wrote no dump under {self._out}")
        self._seen.update(new)
        total = None
        with open(new[-1]) as f:
            for line in f:
                if line.startswith(("summary:", "totals:")):
                    total = int(line.split()[1])
        if total is None:
            raise RuntimeError(f"no totals in {new[-1]}")
        return total


if __name__ == "__main__":
    print(available() or "callgrind is available", file=sys.stderr)
