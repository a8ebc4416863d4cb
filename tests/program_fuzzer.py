"""A seeded generator of small, always-terminating Python programs (issue 12).

``generate(seed)`` returns a :class:`Program`: the source text of a module
whose function ``entry(acc, d, box, buf)`` exercises closures and cells,
generators, ``with`` (a context-manager class, one that suppresses, and
``@contextlib.contextmanager``), try/except/else/finally, keyword /
``*args`` / ``**kwargs`` calls, loops with break/continue, comprehensions and
container / attribute / global mutation, with graph breaks (``print``,
``StringIO.write``, a ``@torch.compiler.disable`` call,
``bytegraph.graph_break()``, ``len(str(obj))``) placed at random, also inside
inlined callees, loops, try and with blocks.  ``tests/test_program_fuzzer.py``
runs each program eagerly and compiled and compares what a user can see.

Why it always terminates: loops are ``for`` over ``range(k)`` with k <= 3 or
``while`` loops whose counter is bumped first and bounded by a constant, and
a function only calls functions defined before it (no recursion).  Why it is
deterministic: the same seed gives the same text; programs print and store
only ints, strings and sorted sets (never ids, default reprs or hash order of
strings), and generators that are left suspended have no ``finally`` (so when
the garbage collector closes them is invisible).

The ``features`` of a program name the constructs it contains, so a test can
check that a seed range covers every construct.
"""

from __future__ import annotations

import dataclasses
import random
from typing import List, Set

PRELUDE = '''\
import contextlib
import torch
import bytegraph

G = 0
LOG = []
STORE = {}
SEEN = set()
GETTERS = []


class Box:
    def __init__(self, v):
        self.v = v
        self.items = []

    def add(self, k):
        self.v = (self.v + k) % 101
        return self.v

    def __repr__(self):
        return f"Box({self.v}, {self.items})"


OBJ = Box(7)


class CM:
    """A context manager class; suppress=True swallows the exception."""

    def __init__(self, log, tag, suppress=False):
        self.log = log
        self.tag = tag
        self.suppress = suppress

    def __enter__(self):
        self.log.append(("enter", self.tag))
        return self

    def __exit__(self, et, ev, tb):
        self.log.append(("exit", self.tag, et.__name__ if et is not None else None))
        return self.suppress


@contextlib.contextmanager
def cm(log, tag):
    log.append(("in", tag))
    try:
        yield tag * 2
    finally:
        log.append(("out", tag))


@torch.compiler.disable
def opaque(x):
    return x + 1


def make_counter():
    n = 0

    def inc(k=1):
        nonlocal n
        n = (n + k) % 1009
        return n

    def get():
        return n

    return inc, get


INC, GET = make_counter()
'''


@dataclasses.dataclass
class Program:
    seed: int
    source: str
    features: Set[str]


@dataclasses.dataclass
class _Fn:
    """What the statement generator may use inside one function."""
    kind: str                 # "entry", "helper" or "gen"
    lst: str                  # a list to mutate
    dct: str                  # a dict to mutate
    obj: str                  # a Box to mutate
    callees: List[str]        # helpers defined earlier (no recursion)
    gens: List[str]           # generator functions defined earlier
    ints: List[str]           # int locals
    printer: str              # ", file=buf" in entry, "" (stdout) elsewhere
    has_bump: bool = False    # a nonlocal closure ``bump`` is defined
    has_tensor: bool = False  # a tensor local ``t``
    loop_depth: int = 0
    nested_defs: int = 0


# every construct a seed range should cover (checked by the self-test)
ALL_FEATURES = frozenset("""
closure_nonlocal nested_def lambda gen_next gen_for gen_list genexpr with_class with_suppress
contextmanager try_except try_else try_finally raise_in_callee call_kw call_star call_starstar default_args
loop_break loop_continue while comprehension dict_mut list_mut set_mut attr_mut global_mut
break_print break_write break_disable break_graph_break break_str break_in_callee break_in_loop
break_in_try break_in_with tensor method_call
""".split())


class _Gen:
    def __init__(self, seed: int):
        self.r = random.Random(seed)
        self.features: Set[str] = set()
        self.tmp = 0

    # -- small pieces -------------------------------------------------------

    def fresh(self, prefix):
        self.tmp += 1
        return f"{prefix}{self.tmp}"

    def atom(self, fn: _Fn):
        r = self.r
        if r.random() < 0.7:
            return r.choice(fn.ints)
        return str(r.randint(0, 9))

    def expr(self, fn: _Fn):
        r = self.r
        a, b = self.atom(fn), self.atom(fn)
        form = r.randrange(6)
        if form == 0:
            return f"({a} + {b}) % 101"
        if form == 1:
            return f"({a} * {r.randint(1, 3)} - {b}) % 101"
        if form == 2:
            return f"{a} if {b} % 2 else {r.randint(0, 5)}"
        if form == 3:
            return f"len({fn.lst}) % 7"
        if form == 4:
            return f"{fn.dct}.get('k{r.randrange(3)}', {a})"
        return f"({a} + {fn.obj}.v) % 101"

    def cond(self, fn: _Fn):
        r = self.r
        a = self.atom(fn)
        return r.choice([f"{a} % {r.randint(2, 4)} == {r.randint(0, 1)}", f"{a} > {r.randint(0, 50)}",
                         f"len({fn.lst}) > {r.randint(0, 4)}", f"'k{r.randrange(3)}' in {fn.dct}"])

    def note_break(self, fn: _Fn, ctx):
        if fn.kind != "entry":
            self.features.add("break_in_callee")
        for c in ctx:
            self.features.add(f"break_in_{c}")

    # -- statements ---------------------------------------------------------

    def block(self, fn: _Fn, depth: int, ctx, n=None, may_raise=False):
        n = n if n is not None else self.r.randint(1, 3)
        out = []
        for _ in range(n):
            out += self.stmt(fn, depth, ctx, may_raise)
        return out or ["pass"]

    def stmt(self, fn: _Fn, depth: int, ctx, may_raise):
        r = self.r
        kinds = ["assign"] * 3 + ["list", "dict", "set", "attr", "global", "break", "break", "break"]
        if fn.callees:
            kinds += ["call", "call"]
        if fn.gens:
            kinds += ["gen"]
        if fn.has_bump:
            kinds += ["bump"]
        if fn.has_tensor:
            kinds += ["tensor"]
        kinds += ["lambda", "comp", "genexpr", "counter", "method"]
        if fn.nested_defs < 1:
            kinds += ["nested_def"]
        if may_raise:
            kinds += ["raise"]
        if depth < 2:
            kinds += ["if", "for", "for", "while", "try", "try", "with", "with"]
        if fn.loop_depth:
            kinds += ["loopctl"]
        kind = r.choice(kinds)
        return getattr(self, "s_" + kind)(fn, depth, ctx, may_raise)

    def s_assign(self, fn, depth, ctx, may_raise):
        return [f"{r_choice(self.r, fn.ints)} = {self.expr(fn)}"]

    def s_list(self, fn, depth, ctx, may_raise):
        self.features.add("list_mut")
        lst, e = fn.lst, self.expr(fn)
        return [self.r.choice([f"{lst}.append({e})", f"{lst}.extend([{e}, {self.atom(fn)}])",
                               f"{lst}.insert(0, {e})", f"if {lst}:\n    {lst}.pop()",
                               f"if {lst}:\n    {lst}[-1] = {e}", f"if len({lst}) > 1:\n    del {lst}[0]",
                               f"{lst}.reverse()"])]

    def s_dict(self, fn, depth, ctx, may_raise):
        self.features.add("dict_mut")
        d, k, e = fn.dct, f"'k{self.r.randrange(3)}'", self.expr(fn)
        return [self.r.choice([f"{d}[{k}] = {e}", f"{d}[{k}] = {d}.get({k}, 0) + 1",
                               f"{d}.pop({k}, None)", f"{d}.setdefault('l{self.r.randrange(2)}', []).append({e})",
                               f"{d}.update(k{self.r.randrange(3)}={e})", f"if {k} in {d}:\n    del {d}[{k}]"])]

    def s_set(self, fn, depth, ctx, may_raise):
        self.features.add("set_mut")
        s, e = "s", self.expr(fn)
        return [self.r.choice([f"{s}.add({e})", f"{s}.discard({self.atom(fn)})",
                               f"{s} |= {{{e}, {self.atom(fn)}}}"])]

    def s_attr(self, fn, depth, ctx, may_raise):
        self.features.add("attr_mut")
        o, e = fn.obj, self.expr(fn)
        return [self.r.choice([f"{o}.v = {e}", f"{o}.items.append({e})", f"setattr({o}, 'w', {e})",
                               f"{o}.v = (getattr({o}, 'w', 0) + {e}) % 101"])]

    def s_method(self, fn, depth, ctx, may_raise):
        self.features.add("method_call")
        return [f"{r_choice(self.r, fn.ints)} = {fn.obj}.add({self.atom(fn)})"]

    def s_global(self, fn, depth, ctx, may_raise):
        self.features.add("global_mut")
        return [self.r.choice([f"G = (G + {self.expr(fn)}) % 1009", f"LOG.append(('g', {self.atom(fn)}))",
                               f"STORE['k{self.r.randrange(3)}'] = {self.expr(fn)}"])]

    def s_counter(self, fn, depth, ctx, may_raise):
        self.features.add("closure_nonlocal")
        return [f"{r_choice(self.r, fn.ints)} = INC({self.atom(fn)})"]

    def s_bump(self, fn, depth, ctx, may_raise):
        self.features.add("closure_nonlocal")
        return [f"{r_choice(self.r, fn.ints)} = bump({self.atom(fn)})"]

    def s_break(self, fn, depth, ctx, may_raise):
        r = self.r
        a = self.atom(fn)
        self.note_break(fn, ctx)
        form = r.randrange(5)
        if form == 0:
            self.features.add("break_print")
            return [f"print('p', {a}, {fn.lst}[-1:]{fn.printer})"]
        if form == 1:
            self.features.add("break_write")
            stream = "buf" if fn.kind == "entry" else "OUT"
            return [f"{stream}.write(f'w{{{a}}};')"]
        if form == 2:
            self.features.add("break_disable")
            return [f"{r_choice(r, fn.ints)} = opaque({a}) % 101"]
        if form == 3:
            self.features.add("break_graph_break")
            return ["bytegraph.graph_break()"]
        self.features.add("break_str")
        return [f"{r_choice(r, fn.ints)} = len(str({fn.obj})) + {a}"]

    def s_tensor(self, fn, depth, ctx, may_raise):
        self.features.add("tensor")
        a = self.atom(fn)
        return [self.r.choice([f"t = t * 2 - {a}", f"t = torch.relu(t - {a}) + 1",
                               f"if t.sum() > {self.r.randint(0, 60)}:\n    t = t / 2",
                               f"{fn.lst}.append(int(t.max()) % 101)"])]

    def call_expr(self, fn):
        r = self.r
        name = r.choice(fn.callees)
        a, b, c = self.atom(fn), self.atom(fn), self.atom(fn)
        form = r.randrange(7)
        if form == 0:
            return f"{name}({a})"
        if form == 1:
            self.features.add("call_kw")
            return f"{name}({a}, y={b})"
        if form == 2:
            self.features.add("call_kw")
            return f"{name}({a}, {b}, z={c})"
        if form == 3:
            self.features.add("call_star")
            return f"{name}({a}, {b}, {c}, 4)"
        if form == 4:
            self.features.update(("call_star", "call_starstar"))
            return f"{name}(*[{a}, {b}], **{{'z': {c}, 'w': 1}})"
        if form == 5:
            self.features.add("call_kw")
            return f"{name}(x={a}, w={b})"
        self.features.add("call_starstar")
        return f"{name}({a}, **{{'y': {b}}})"

    def s_call(self, fn, depth, ctx, may_raise):
        return [f"{r_choice(self.r, fn.ints)} = {self.call_expr(fn)} % 101"]

    def s_gen(self, fn, depth, ctx, may_raise):
        r = self.r
        g, a, v = r.choice(fn.gens), self.atom(fn), self.fresh("v")
        form = r.randrange(5)
        if form == 0:
            self.features.add("gen_next")
            it = self.fresh("it")
            return [f"{it} = {g}({a})", f"{r_choice(r, fn.ints)} = (next({it}) + next({it}, -1)) % 101"]
        if form == 1:
            self.features.add("gen_for")
            fn.ints.append(v)
            fn.loop_depth += 1
            body = self.block(fn, depth + 1, ctx + ["loop"], n=r.randint(1, 2), may_raise=may_raise)
            fn.loop_depth -= 1
            fn.ints.remove(v)
            return [f"for {v} in {g}({a}, step={r.randint(1, 3)}):"] + _indent(body)
        if form == 2:
            self.features.add("gen_list")
            return [f"{fn.lst}.extend(list({g}({a})))"]
        if form == 3:
            self.features.add("gen_list")
            return [f"{r_choice(r, fn.ints)} = sum({g}({a})) % 101"]
        self.features.update(("gen_for", "comprehension"))
        return [f"{r_choice(r, fn.ints)} = len([{v} for {v} in {g}({a}) if {v} % 2])"]

    def s_lambda(self, fn, depth, ctx, may_raise):
        self.features.update(("lambda", "default_args"))
        f = self.fresh("f")
        return [f"{f} = lambda x, k={self.atom(fn)}: (x * 2 + k + {self.atom(fn)}) % 101",
                f"{r_choice(self.r, fn.ints)} = {f}({self.atom(fn)})"]

    def s_nested_def(self, fn, depth, ctx, may_raise):
        self.features.update(("nested_def", "default_args"))
        fn.nested_defs += 1
        f = self.fresh("inner")
        inner = _Fn("helper", fn.lst, fn.dct, fn.obj, [], [], ["x", "y"], fn.printer, nested_defs=1)
        body = ["global G", "s = SEEN"] + self.block(inner, 1, ctx, n=self.r.randint(1, 2))
        free = self.atom(fn)  # a free variable of the enclosing function (a cell)
        return ([f"def {f}(x, y={self.r.randint(0, 5)}):"] + _indent(body + [f"return (x + y + {free}) % 101"]) +
                [f"{r_choice(self.r, fn.ints)} = {f}({self.atom(fn)})"])

    def s_comp(self, fn, depth, ctx, may_raise):
        self.features.add("comprehension")
        a = self.atom(fn)
        return [self.r.choice([f"{fn.lst}.extend([j * 2 + {a} for j in range(3) if j != {a} % 3])",
                               f"{fn.dct}.update({{f'k{{j}}': j + {a} for j in range(2)}})",
                               f"{r_choice(self.r, fn.ints)} = len({{j % 3 for j in range({a} % 5)}})"])]

    def s_genexpr(self, fn, depth, ctx, may_raise):
        self.features.add("genexpr")
        a = self.atom(fn)
        return [self.r.choice([f"{r_choice(self.r, fn.ints)} = sum(j * {a} for j in range(4)) % 101",
                               f"{r_choice(self.r, fn.ints)} = int(any(j > {a} for j in range(5)))",
                               f"{fn.lst}.extend(tuple(j + 1 for j in range({a} % 3)))"])]

    def s_raise(self, fn, depth, ctx, may_raise):
        r = self.r
        if fn.kind != "entry":
            self.features.add("raise_in_callee")
        a = self.atom(fn)
        form = r.randrange(3)
        if form == 0:
            return [f"if {self.cond(fn)}:", f"    raise ValueError(f'bad {{{a}}}')"]
        if form == 1:
            return [f"if {self.cond(fn)}:", f"    {r_choice(r, fn.ints)} = {fn.dct}['missing']"]
        return [f"if {self.cond(fn)}:", f"    raise KeyError({a})"]

    def s_if(self, fn, depth, ctx, may_raise):
        out = [f"if {self.cond(fn)}:"] + _indent(self.block(fn, depth + 1, ctx, may_raise=may_raise))
        if self.r.random() < 0.5:
            out += ["else:"] + _indent(self.block(fn, depth + 1, ctx, may_raise=may_raise))
        return out

    def s_for(self, fn, depth, ctx, may_raise):
        v = self.fresh("i")
        fn.ints.append(v)
        fn.loop_depth += 1
        body = self.block(fn, depth + 1, ctx + ["loop"], may_raise=may_raise)
        fn.loop_depth -= 1
        fn.ints.remove(v)
        out = [f"for {v} in range({self.r.randint(1, 3)}):"] + _indent(body)
        if self.r.random() < 0.2:
            out += ["else:"] + _indent([f"{fn.lst}.append('for-else')"])
        return out

    def s_while(self, fn, depth, ctx, may_raise):
        self.features.add("while")
        v = self.fresh("w")
        fn.loop_depth += 1
        body = self.block(fn, depth + 1, ctx + ["loop"], may_raise=may_raise)
        fn.loop_depth -= 1
        return [f"{v} = 0", f"while {v} < {self.r.randint(1, 3)}:", f"    {v} += 1"] + _indent(body)

    def s_loopctl(self, fn, depth, ctx, may_raise):
        word = self.r.choice(["break", "continue"])
        self.features.add("loop_" + word)
        return [f"if {self.cond(fn)}:", f"    {word}"]

    def s_try(self, fn, depth, ctx, may_raise):
        r = self.r
        body = self.block(fn, depth + 1, ctx + ["try"], may_raise=True)
        if r.random() < 0.6:
            body += self.s_raise(fn, depth, ctx, True)
        if fn.callees and r.random() < 0.6:
            body += self.s_call(fn, depth, ctx, True)
        out = ["try:"] + _indent(body)
        shape = r.randrange(4)
        e = self.fresh("e")
        if shape != 3:
            self.features.add("try_except")
            handler = r.choice(["ValueError", "(KeyError, ZeroDivisionError)", "Exception"])
            out += [f"except {handler} as {e}:",
                    f"    {fn.lst}.append((type({e}).__name__, str({e})))"]
            out += _indent(self.block(fn, depth + 1, ctx, n=r.randint(0, 1)))
            if shape == 1:
                out += [f"except Exception as {e}:", f"    {fn.lst}.append(('other', type({e}).__name__))"]
            if r.random() < 0.4:
                self.features.add("try_else")
                out += ["else:"] + _indent(self.block(fn, depth + 1, ctx, n=1))
        if shape >= 2 or r.random() < 0.3:
            self.features.add("try_finally")
            out += ["finally:"] + _indent([f"{fn.lst}.append('fin')"] + self.block(fn, depth + 1, ctx, n=1))
        return out

    def s_with(self, fn, depth, ctx, may_raise):
        r = self.r
        tag = r.randint(0, 9)
        form = r.randrange(3)
        if form == 2:
            self.features.add("contextmanager")
            v = self.fresh("c")
            fn.ints.append(v)
            body = self.block(fn, depth + 1, ctx + ["with"], may_raise=may_raise)
            fn.ints.remove(v)
            return [f"with cm({fn.lst}, {tag}) as {v}:"] + _indent(body)
        self.features.add("with_class")
        suppress = form == 1
        # a suppressing manager may see an exception raised in its block
        body = self.block(fn, depth + 1, ctx + ["with"], may_raise=may_raise or suppress)
        if suppress:
            self.features.add("with_suppress")
            body += self.s_raise(fn, depth, ctx, True)
        return [f"with CM({fn.lst}, {tag}, suppress={suppress}):"] + _indent(body)


def r_choice(r, seq):
    return r.choice(seq)


def _indent(lines):
    return ["    " + line for piece in lines for line in piece.split("\n")]


def generate(seed: int) -> Program:
    """The program for ``seed`` (the same text every time)."""
    g = _Gen(seed)
    r = g.r
    parts = [PRELUDE, "OUT = None  # set by the test to a StringIO\n\n"]
    helpers: List[str] = []
    gens: List[str] = []
    for k in range(r.randint(1, 3)):
        if r.random() < 0.4:
            # a generator function: a bounded for loop yielding ints
            name = f"gen_{k}"
            fn = _Fn("gen", "LOG", "STORE", "OBJ", helpers[:], [], ["n", "step", "q"], "")
            body = ["global G", "s = SEEN", "q = n % 3"]
            body += [f"for i in range(n % 3 + 1):"]
            fn.ints.append("i")
            inner = g.block(fn, 2, ["loop"], n=r.randint(1, 2))
            body += _indent(inner + [f"yield (i * step + q) % 101"])
            parts.append(f"def {name}(n, step=1):\n" + "\n".join(_indent(body)) + "\n\n")
            gens.append(name)
        else:
            name = f"helper_{k}"
            g.features.add("default_args")
            fn = _Fn("helper", "LOG", "STORE", "OBJ", helpers[:], gens[:], ["x", "y", "z", "u"], "")
            body = ["global G", "s = SEEN", "u = (sum(args) + len(kw) + kw.get('w', 0)) % 101"]
            body += g.block(fn, 0, [], n=r.randint(1, 4), may_raise=r.random() < 0.5)
            body += [f"return (x + y * 2 + z + u) % 101"]
            parts.append(f"def {name}(x, y=1, *args, z=0, **kw):\n" + "\n".join(_indent(body)) + "\n\n")
            helpers.append(name)
    fn = _Fn("entry", "acc", "d", "box", helpers, gens, ["a", "b", "c"], ", file=buf",
             has_bump=r.random() < 0.7, has_tensor=r.random() < 0.3)
    body = ["global G", "a, b, c = 1, 2, 3", "s = set()"]
    if fn.has_tensor:
        body.append("t = torch.arange(4.0)")
    if fn.has_bump:
        body += ["count = 0", "def bump(k=1):", "    nonlocal count", "    count = (count + k) % 1009",
                 "    return count", "GETTERS.append(lambda: count)"]
    body += g.block(fn, 0, [], n=r.randint(3, 7), may_raise=r.random() < 0.3)
    ret = "a, b, c, sorted(s)" + (", t" if fn.has_tensor else "")
    body.append(f"return {ret}")
    parts.append("def entry(acc, d, box, buf):\n" + "\n".join(_indent(body)) + "\n")
    return Program(seed, "".join(parts), g.features)


if __name__ == "__main__":
    import sys
    print(generate(int(sys.argv[1]) if len(sys.argv) > 1 else 0).source)
