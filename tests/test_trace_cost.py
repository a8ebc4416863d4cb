"""Tracing cost proportional to the tensor work (issue 17): long constant
containers, long pure-Python loops and iterator drains, and pure-Python frames
that recompile per new constant run natively instead of being modelled item
by item, iteration by iteration, variant by variant.

Each test compares compiled with eager (results, inputs afterwards) and
checks what bytegraph chose (the break kind, what was compiled), so each fails
where the old behaviour came back.  Timing is measured in bench/ and
``make test-cpython``'s slowest list, never here.
"""

import dis

import pytest
import torch

import bytegraph
from bytegraph import config, diagnostics

from conftest import assert_same, compile_counting


@pytest.fixture
def breaks():
    """The kinds of the graph breaks and fallbacks of the test, in order."""
    kinds = []

    def listener(event, payload):
        if event in ("break", "fallback"):
            kinds.append(payload.kind)

    diagnostics.add_listener(listener)
    yield kinds
    diagnostics.remove_listener(listener)


def _instructions(cf) -> int:
    return sum(len(list(dis.get_instructions(e.code))) for e in cf._entries if e.code is not None)


def test_a_list_of_constants_made_in_the_trace_is_rebuilt_from_one_constant():
    def f(x):
        table = list(range(1500))
        bytegraph.graph_break()       # the list outlives the graph: rebuilt after it
        return x + len(table), table

    cf, _ = compile_counting(f)
    x = torch.ones(2)
    out, table = cf(x)
    ref, ref_table = f(x)
    assert torch.equal(out, ref) and table == ref_table and type(table) is list
    assert table is not cf(x)[1]        # a new list per call, as eager makes
    # one tuple constant extended into a list, not 1500 LOAD_CONSTs
    assert _instructions(cf) < 200


def test_an_input_list_of_many_constants_is_held_and_used_natively(breaks):
    def f(x, letters):
        counts = [letters.count(c) for c in "abc"]
        letters.append("z")             # the caller's list, changed in place
        return x + sum(counts)

    letters = list("abracadabra" * 400)
    assert len(letters) > config.max_constant_items
    assert_same(f, torch.ones(2), letters, graphs=None, breaks=None)
    assert "large_container" in breaks


def test_an_input_list_of_few_constants_is_still_modelled(breaks):
    def f(x, letters):
        return x + letters.count("a")

    assert_same(f, torch.ones(2), list("abracadabra"), graphs=1, breaks=0)
    assert breaks == []


class _Item:
    def __init__(self, n):
        self.n = n


def test_an_input_list_of_many_objects_is_held_and_used_natively(breaks):
    # (CPython's test_descr loops over gc.get_objects(): every item was
    # wrapped and guarded, and the loop unrolled, a minute per call)
    def f(x, items):
        items.append(_Item(-1))         # the caller's list, changed in place
        hits = [o for o in items if type(o) is _Item and o.n % 7 == 0]
        return x + len(hits), hits

    items = [_Item(i) for i in range(1000)] + ["a", 3, None]
    assert len(items) > config.max_object_items
    cf, _ = compile_counting(f)
    ref_items, cf_items = list(items), list(items)
    ref, ref_hits = f(torch.ones(2), ref_items)
    out, hits = cf(torch.ones(2), cf_items)
    assert torch.equal(out, ref) and len(hits) == len(ref_hits)
    assert all(a is b for a, b in zip(hits, ref_hits))     # the same objects, not copies
    assert len(cf_items) == len(ref_items) == len(items) + 1
    assert "large_container" in breaks


def test_long_lists_of_tensors_or_few_objects_are_still_modelled(breaks):
    def f(x, tensors, objects):
        return x + sum(t.sum() for t in tensors) + sum(o.n for o in objects)

    tensors = [torch.full((2,), float(i)) for i in range(300)]
    assert len(tensors) > config.max_object_items
    assert_same(f, torch.ones(2), tensors, [_Item(i) for i in range(10)], graphs=1, breaks=0)
    assert breaks == []


def test_a_huge_repetition_runs_natively_and_gives_eagers_list(breaks):
    def f(x, n):
        zeros = [0] * n
        return x + len(zeros), repr(zeros)[:20], zeros

    cf, _ = compile_counting(f)
    out, text, zeros = cf(torch.ones(2), 100_000)
    ref = f(torch.ones(2), 100_000)
    assert torch.equal(out, ref[0]) and text == ref[1] and zeros == ref[2]
    assert "large_container" in breaks


def test_a_loop_of_inlined_calls_without_tensor_work_runs_natively(monkeypatch, breaks):
    # few iterations, but each one many traced instructions (the calls inlined)
    monkeypatch.setattr(config, "max_python_loop_steps", 500)
    log = []

    def check(a, b):
        if a != b:
            raise AssertionError((a, b))
        log.append(a)

    def f(x):
        for i in range(200):
            check(float(format(i / 1000, ".1f")), round(i / 1000, 1))
        return x + len(log)

    cf, _ = compile_counting(f)
    out = cf(torch.ones(2))
    assert torch.equal(out, torch.ones(2) + 200) and len(log) == 200
    assert "python_loop" in breaks


def test_the_same_loop_with_tensor_work_is_still_unrolled(monkeypatch):
    monkeypatch.setattr(config, "max_python_loop_steps", 50)

    def f(x):
        for i in range(30):
            x = x * 1.5 + round(i / 7, 2)
        return x

    assert_same(f, torch.ones(2), graphs=1, breaks=0)


def test_draining_a_long_pure_python_iterator_runs_natively(breaks):
    class Count:
        def __init__(self, n):
            self.i, self.n = 0, n

        def __iter__(self):
            return self

        def __next__(self):
            if self.i == self.n:
                raise StopIteration
            self.i += 1
            return self.i

    def f(x, it):
        items = list(it)
        return x + len(items), it.i

    cf, _ = compile_counting(f)
    n = config.max_python_loop_iterations + 500
    out, pos = cf(torch.ones(2), Count(n))
    assert torch.equal(out, torch.ones(2) + n) and pos == n
    assert "long_iteration" in breaks


def test_a_short_drain_is_still_traced(breaks):
    def f(x):
        return x + sum(list(iter(range(50))))

    assert_same(f, torch.ones(2), graphs=1, breaks=0)
    assert breaks == []


def test_a_pure_python_frame_stops_recompiling_for_each_new_constant(monkeypatch):
    monkeypatch.setattr(config, "force_transform", True)
    calls = []

    def total(values):
        s = 0.0
        for v in values:
            s += v
        calls.append(s)
        return s

    cf = bytegraph.compile(total, backend="eager")
    for k in range(6):
        values = [k + 0.5, k * 2.0, -1.25]
        assert cf(values) == total(values)   # eager's sum, every call
    # two entries traced, then the frame runs as it is for floats it has not seen
    assert bytegraph.stats().frames_compiled == config.max_graphless_variants
    assert len(calls) == 12


def test_a_graphless_frame_still_compiles_for_a_tensor(monkeypatch):
    monkeypatch.setattr(config, "force_transform", True)

    def scale(v, k):
        return v * k

    cf, be = compile_counting(scale)
    for k in range(4):
        assert cf(float(k), 3.0) == float(k) * 3.0
    x = torch.randn(3)
    assert torch.equal(cf(x, 2.0), x * 2.0)
    assert be.count == 1                  # the tensor call got a graph


def test_rebinding_a_local_another_local_still_holds_walks_nothing(monkeypatch):
    # ``prev = d; d = {}; d[1] = prev``: each rebinding drops a reference to a
    # mapping another local still holds, so nothing can be freed; walking the
    # chain for finalizers at each step was quadratic (CPython's test_repr_deep)
    from bytegraph.tracer import ops_locals
    walks = []
    real = ops_locals.finalizer_reachable
    monkeypatch.setattr(ops_locals, "finalizer_reachable", lambda v: walks.append(v.is_constant()) or real(v))

    def f(x):
        d = {}
        for i in range(300):
            prev = d
            d = {}
            d[1] = prev
        return x + len(d)

    assert_same(f, torch.ones(2), graphs=1, breaks=0)
    assert walks.count(False) < 20          # (the loop counter's rebinding walks a constant)


class _Noisy:
    log = []

    def __del__(self):
        _Noisy.log.append("freed")


def test_rebinding_the_last_reference_still_frees_at_once():
    def f(x):
        a = _Noisy()
        b = a
        b = None               # a still holds it: nothing freed here
        _Noisy.log.append("kept")
        a = None               # the last reference: freed here, as in eager
        _Noisy.log.append("after")
        return x + 1

    _Noisy.log.clear()
    f(torch.ones(2))
    expected = list(_Noisy.log)
    _Noisy.log.clear()
    out = bytegraph.compile(f, backend="eager")(torch.ones(2))
    assert torch.equal(out, torch.ones(2) + 1)
    assert _Noisy.log == expected == ["kept", "freed", "after"]


class _TemplateBase:
    pass


def test_a_class_statement_compile_needs_no_full_collection(monkeypatch):
    # the template class a class statement's trace makes is freed with the
    # young generations; one that a collection during the compile moved into
    # the oldest is moved under a private base, not collected by a full collection
    # (~0.1 s per compile with torch loaded: class-heavy tests took seconds)
    import gc
    from bytegraph import compiler
    full = []
    real_collect = gc.collect

    class _GC:
        def __getattr__(self, name):
            return getattr(gc, name)

        @staticmethod
        def collect(generation=2):
            if generation == 2:
                full.append(1)
            return real_collect(generation)

    monkeypatch.setitem(__import__("sys").modules, "gc", _GC())

    def f(x):
        class Sub(_TemplateBase):
            def scale(self):
                return 3
        return x * Sub().scale(), Sub.__mro__[1] is _TemplateBase

    saved = gc.get_threshold()
    gc.set_threshold(700, 1, 1)       # every young collection also runs the middle one
    try:
        cf = bytegraph.compile(f, backend="eager")
        out, based = cf(torch.ones(2))
        for _ in range(3):
            junk = [[i] for i in range(3000)]   # (collections during the next compile)
            del junk
    finally:
        monkeypatch.undo()
        gc.set_threshold(*saved)
    assert torch.equal(out, torch.ones(2) * 3) and based
    assert not full
    real_collect()
    assert _TemplateBase.__subclasses__() == []


def test_a_list_only_an_exhausted_iterator_held_is_freed_at_the_rebinding():
    # (the shortcut above counts only containers as holders: CPython's list
    # iterator drops its list once exhausted, though the model still lists it)
    _Noisy.log.clear()

    def f(x):
        items = [_Noisy()]
        it = iter(items)
        n = len(list(it))
        items = None           # the last reference: freed here
        _Noisy.log.append("after")
        return x + n

    f(torch.ones(2))
    expected = list(_Noisy.log)
    _Noisy.log.clear()
    out = bytegraph.compile(f, backend="eager")(torch.ones(2))
    assert torch.equal(out, torch.ones(2) + 1)
    assert _Noisy.log == expected == ["freed", "after"]


def test_a_rebuilt_list_of_computed_strings_keeps_their_identities():
    # (a tuple constant's name-like strings are interned by the code object
    # constructor: strings are not packed, each keeps its own object)
    import sys

    def f(x, s):
        parts = [s + "x", s + "y", s + "x", s + "z"]
        bytegraph.graph_break()
        return x + 1, parts[0] is parts[2], parts[0] is sys.intern(s + "x"), len({id(p) for p in parts})

    cf = bytegraph.compile(f, backend="eager")
    for s in ("abc", "abc", "q"):
        assert cf(torch.ones(2), s)[1:] == f(torch.ones(2), s)[1:] == (False, False, 4)


def test_a_compiled_frame_does_not_walk_the_stack_for_its_fake_mode(monkeypatch):
    """torch's FakeTensorMode records ``traceback.extract_stack()`` when it is
    made (for a debug message): a walk of the whole stack reading each
    frame's source line, which for code with no file on disk searches
    ``sys.path`` again per frame.  bytegraph makes one mode per compiled
    frame, so a chain of 200 resume functions paid it 200 times."""
    import traceback

    walks = []
    real = traceback.walk_stack
    monkeypatch.setattr(traceback, "walk_stack", lambda f: walks.append(1) or real(f))
    src = "def f(x):\n    x = x * 2\n    print('between')\n    return x + 1\n"
    ns = {}
    exec(compile(src, "<generated>", "exec"), ns)
    f = ns["f"]
    _, counter = assert_same(f, torch.randn(3), graphs=2, breaks=1, calls=1)
    assert counter.count == 2          # two graphs, each traced under its own fake mode
    assert walks == []
    import torch._subclasses.fake_tensor as ft
    assert ft.traceback is traceback   # put back after each mode


class _Stack(torch.nn.Module):
    """``n`` blocks applied in turn."""

    def __init__(self, block, n: int):
        super().__init__()
        self.blocks = torch.nn.ModuleList(block() for _ in range(n))

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return x


def test_graph_inputs_read_a_path_that_several_share_once():
    """A deep model's parameters are graph inputs whose sources share the
    path to their layer: the transformed code reads each shared part once
    (a 48-layer GPT-2's call went from 12,490 instructions to 6,757) and
    still reads the current parameters (a swapped layer is seen)."""
    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)
            self.norm = torch.nn.LayerNorm(4)

        def forward(self, x):
            return self.norm(self.lin(x)).relu()

    net = _Stack(Block, 6)
    cf, counter = compile_counting(net)
    x = torch.randn(2, 4)
    with torch.no_grad():
        assert torch.allclose(cf(x), net(x))
        assert counter.count == 1
        codes = [e.code for e in cf._bg_call._entries if e.code is not None]
        reads = [sum(1 for i in dis.get_instructions(c) if i.opname == "LOAD_ATTR" and i.argval == "_modules")
                 for c in codes]
        # self._modules, blocks._modules, and one per block: each read once
        assert max(reads) <= 2 + 6, reads
        # the loads read the current objects: a new layer in place of one
        net.blocks[3] = Block()
        assert torch.allclose(cf(x), net(x))


def test_reused_layers_inputs_keep_their_own_names():
    """A reused layer's parameter sources are copies of the first layer's on
    another base; a cached name must not come along (each input named the
    first layer's path, and so did the recompile reasons and the rebuilt
    module the cache blamed)."""
    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.l1 = torch.nn.Linear(8, 8)
            self.l2 = torch.nn.Linear(8, 8)
            self.n = torch.nn.LayerNorm(8)

        def forward(self, x):
            # (enough work for a block to be worth reusing)
            h = self.l1(x).relu() * 2 + 1
            h = self.l2(h).sigmoid() - 0.5
            h = self.n(h + x).tanh() * 0.9 + 0.1
            return (h * h + h).cos() + x.sin() - h.exp() * 0.01 + h.abs()

    net = _Stack(Block, 4)
    cf, counter = compile_counting(net)
    x = torch.randn(2, 8)
    with torch.no_grad():
        assert torch.allclose(cf(x), net(x))
    assert bytegraph.stats().layers_reused == 3
    (gm,) = counter.graphs
    names = [n.meta["source"] for n in gm.graph.nodes if n.op == "placeholder"]
    for i in range(4):
        assert sum(f"_modules['{i}']" in name for name in names) == 6, names
    assert len(set(names)) == len(names)
    net.blocks[2].l1.weight.requires_grad_(False)
    why = cf._bg_call._entries[0].guard.why_failed((net, x), {})
    assert "_modules['2']" in why, why


def test_a_long_chain_of_graph_inputs_still_compiles():
    """Graph inputs read through an 800-link chain (a linked list walked to
    its end): the shared prefixes are read piece by piece, never by a
    Python recursion as deep as the chain."""
    class Node:
        def __init__(self, w, nxt):
            self.w, self.next = w, nxt

    def f(head, x):
        nodes = []
        n = head
        while n is not None:
            nodes.append(n)
            n = n.next
        for n in reversed(nodes):
            x = x * n.w + 1e-3
        return x

    head = None
    for i in range(800):
        head = Node(torch.full((2,), 1.0 + i * 1e-3), head)
    cf, counter = compile_counting(f)
    x = torch.ones(2)
    assert torch.allclose(cf(head, x), f(head, x))
    assert counter.count == 1
    assert bytegraph.stats().eager_fallbacks == 0
