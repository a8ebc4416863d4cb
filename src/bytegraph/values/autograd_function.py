"""Custom ``torch.autograd.Function`` subclasses called with ``MyFn.apply(...)``.

The call becomes ONE graph node that calls the real ``MyFn.apply``: under the
``eager`` backend the program's own forward and backward run, and a backend
that traces autograd (``aot_eager``, ``inductor``) traces them once, at
compile time, into its forward and backward graphs.  That is exact only when
forward, ``setup_context`` and backward are pure tensor code: an effect
(``print``, a global write, an attribute write on an object other than
``ctx``) would run once at compile time, not on every call.  So before the
node is recorded, bytegraph traces them itself, with a model of ``ctx``,
inside a sandbox: what they do is checked (no effect, no tensor read from
anywhere but the arguments and ``ctx``, no write to an input) and then thrown
away -- only the guards they needed stay.  Whatever cannot be made exact
(``mark_dirty``, forward-mode AD, ``vjp`` overrides, keyword arguments, ...)
is a clean break at the ``apply`` call: it then runs natively between graphs.
"""

from __future__ import annotations

import torch

from ..errors import Unsupported, UserException
from ..torch_compat import FUNCTION_APPLY_PY, bound_apply
from .base import MethodCallValue, Value
from .constants import ConstantValue, NONE, const
from .containers import TupleValue
from .opaque import OpaqueValue

#: the Python function behind ``MyFn.apply`` where it is a Python classmethod
#: of ``Function`` (None where ``apply`` is the C method: see torch_compat)
FUNCTION_APPLY = FUNCTION_APPLY_PY

_BASE_SETUP_CONTEXT = torch.autograd.function._SingleLevelFunction.setup_context
_BASE_VJP = torch.autograd.Function.vjp
_BASE_JVP = torch.autograd.function._SingleLevelFunction.jvp
_BASE_BACKWARD = torch.autograd.function._SingleLevelFunction.backward

#: names of the real ctx object (``BackwardCFunction``) that the model does not
#: stand for: reading or writing one breaks rather than shadowing it
_CTX_METHODS = ("save_for_backward", "mark_dirty", "mark_non_differentiable", "set_materialize_grads",
                "save_for_forward")


def _kind(explanation: str) -> Unsupported:
    return Unsupported(explanation, kind="autograd_function",
                       hint="the Function's apply() runs natively between graphs")


class AutogradCtxValue(Value):
    """The ``ctx`` object a custom autograd Function's forward, setup_context
    and backward receive, while bytegraph traces them in a sandbox.

    Records what they ask of it: tensors saved for backward, outputs marked
    non-differentiable, whether grads are materialized, and plain attributes
    (``ctx.scale = k``).  ``needs_input_grad`` is a constant (the inputs'
    ``requires_grad`` is guarded).  It never outlives the sandbox: it cannot
    be rebuilt, so a ctx that escapes breaks.
    """

    __slots__ = ("ctx_type", "attrs", "saved", "needs_input_grad", "materialize", "non_differentiable",
                 "in_backward")

    def __init__(self, ctx_type, needs_input_grad: tuple):
        super().__init__()
        self.ctx_type = ctx_type
        self.attrs = {}
        self.saved = None
        self.needs_input_grad = needs_input_grad
        self.materialize = True
        self.non_differentiable = set()
        self.in_backward = False

    def python_type(self):
        return self.ctx_type

    def get_attr(self, tx, name):
        if name in self.attrs:
            return self.attrs[name]
        if name == "needs_input_grad":
            return const(self.needs_input_grad)
        if name == "saved_tensors":
            if not self.in_backward:
                raise _kind("ctx.saved_tensors read outside backward")
            return TupleValue(list(self.saved or ()))
        if name == "materialize_grads":
            return const(self.materialize)
        if name in _CTX_METHODS:
            return MethodCallValue(self, name)
        raise _kind(f"attribute {name!r} of an autograd Function's ctx")

    def set_attr(self, tx, name, value):
        if name in _CTX_METHODS or hasattr(self.ctx_type, name):
            raise _kind(f"setting ctx.{name}, an attribute of the ctx type itself")
        self.attrs[name] = value

    def call_method(self, tx, name, args, kwargs):
        from .tensors import TensorValue
        if kwargs:
            raise _kind(f"ctx.{name}() with keyword arguments")
        if name == "save_for_backward":
            if self.in_backward or not all(isinstance(a, TensorValue) or a is NONE or
                                           (a.is_constant() and a.as_constant() is None) for a in args):
                raise _kind("ctx.save_for_backward() of something other than tensors, in forward")
            self.saved = list(args)
            return NONE
        if name == "mark_non_differentiable":
            if not all(isinstance(a, TensorValue) for a in args):
                raise _kind("ctx.mark_non_differentiable() of a non-tensor")
            self.non_differentiable.update(id(a) for a in args)
            return NONE
        if name == "set_materialize_grads":
            if len(args) != 1 or not args[0].is_constant():
                raise _kind("ctx.set_materialize_grads() of a value not known while tracing")
            self.materialize = bool(args[0].as_constant())
            return NONE
        # mark_dirty (an in-place forward: the input's autograd history is
        # rewritten) and save_for_forward (forward-mode AD) are not modelled
        raise _kind(f"ctx.{name}()")

    def children(self):
        return [*self.attrs.values(), *(self.saved or ())]

    def reconstruct(self, cg):
        raise _kind("an autograd Function's ctx escapes its forward/backward")

    def __repr__(self):
        return f"AutogradCtxValue({self.ctx_type.__name__})"


_MISSING = object()


class _Sandbox:
    """The trace's state before forward/backward are traced, to check they
    had no effect and to throw their nodes away afterwards."""

    def __init__(self, tx, tensors):
        self.tx = tx
        graph = tx.graph
        se = tx.side_effects
        self.nodes = set(graph.graph.nodes)
        self.op_count = graph.op_count
        self.n_inputs = len(graph.inputs)
        self.effects = (len(se.order), len(se.mutated), len(se.attr_writes), len(se.global_writes),
                        len(se.deferred_calls), len(se.tensor_hooks), len(tx.trace.generators),
                        len(tx.trace.open_contexts), len(tx.trace.open_autocasts))
        self.tensors = [(t, t.fake._version) for t in tensors if not t.fake.is_inference()]
        self.grad = torch.is_grad_enabled()
        self.n_frames = len(tx.trace.frames)
        # (a global the trace already wrote, written again, changes no count)
        self.globals = {key: entry[2] for key, entry in se.global_writes.items()}
        # (nested: an apply inside a forward being checked)
        self.outer_watch = se.watch
        se.watch = []

    def check(self, what: str) -> None:
        tx = self.tx
        se = tx.side_effects
        effects = (len(se.order), len(se.mutated), len(se.attr_writes), len(se.global_writes),
                   len(se.deferred_calls), len(se.tensor_hooks), len(tx.trace.generators),
                   len(tx.trace.open_contexts), len(tx.trace.open_autocasts))
        if effects != self.effects or any(self.globals.get(key, _MISSING) is not entry[2]
                                          for key, entry in se.global_writes.items()):
            raise _kind(f"{what} has side effects (a mutation, a global or "
                        "attribute write, a hook, a generator) that would not run on every call")
        if len(tx.graph.inputs) != self.n_inputs:
            raise _kind(f"{what} reads a tensor that is not one of its inputs "
                        "(a global, a module parameter)")
        if any(t.fake._version != v for t, v in self.tensors):
            raise _kind(f"{what} writes to an input tensor in place")
        touched = {id(v) for v in se.watch}
        if touched and touched & self._reachable_before():
            raise _kind(f"{what} mutates an object made earlier in the trace")

    def _reachable_before(self) -> set:
        """ids of the values the program could reach before the sandbox: from
        the frames then running and from the side-effect tables (a list
        made in the trace and stored in a global, say)."""
        tx = self.tx
        se = tx.side_effects
        roots = list(se.existing_values()) + list(se.mutated)
        for obj, writes in se.attr_writes.items():
            roots.append(obj)
            roots.extend(writes.values())
        roots.extend(v for _, _, v in se.global_writes.values())
        for frame in tx.trace.frames[:self.n_frames]:
            roots.extend(frame.locals.values())
            roots.extend(frame.stack)
        seen = set()
        while roots:
            v = roots.pop()
            if not isinstance(v, Value) or id(v) in seen:
                continue
            seen.add(id(v))
            roots.extend(v.children())
            contents = getattr(v, "contents", None)  # a cell's
            if isinstance(contents, Value):
                roots.append(contents)
        return seen

    def rollback(self) -> None:
        """Erase the nodes the sandboxed code recorded (pure: nothing refers to them)."""
        graph = self.tx.graph
        torch._C._set_grad_enabled(self.grad)
        se = self.tx.side_effects
        if self.outer_watch is not None:
            self.outer_watch.extend(se.watch)
        se.watch = self.outer_watch
        for node in reversed(list(graph.graph.nodes)):
            if node in self.nodes:
                continue
            fake = node.meta.get("example_value")
            value = graph.value_of_fake.get(id(fake))
            if value is not None and getattr(value, "node", None) is node:
                del graph.value_of_fake[id(fake)]
            graph.graph.erase_node(node)
        graph.op_count = self.op_count


def _static(cls, name):
    """``cls.name`` as a plain function (forward/backward are staticmethods)."""
    import inspect
    import types
    try:
        attr = inspect.getattr_static(cls, name)
    except AttributeError:
        return None
    if isinstance(attr, staticmethod):
        attr = attr.__func__
    return attr if isinstance(attr, types.FunctionType) else None


def _run_sandboxed(tx, fn_value: Value, args, what: str) -> Value:
    """Call ``fn_value`` with grad mode off, as ``apply`` runs forward and backward."""
    from .functions import UserFunctionValue
    if not isinstance(fn_value, UserFunctionValue):
        raise _kind(f"{what} is a {fn_value.type_name()}, not a Python function")
    torch._C._set_grad_enabled(False)
    try:
        return fn_value.call(tx, list(args), {})
    except Unsupported as e:
        # the break is at the apply() call: a break inside forward would run
        # the rest of it outside the Function (its own backward lost)
        raise _kind(f"{what} is not capturable: {e.explanation}") from None
    except UserException as e:
        raise _kind(f"{what} raises {e.value.type_name()}") from None


def call_autograd_function(tx, cls_value: Value, args, kwargs) -> Value:
    """``cls.apply(*args)`` for a subclass of ``torch.autograd.Function``."""
    from .tensors import TensorValue, graph_call
    cls = cls_value.as_constant()
    name = cls.__name__
    if kwargs:
        raise _kind(f"{cls.__name__}.apply() with keyword arguments")
    if type(cls) is not torch.autograd.function.FunctionMeta:
        raise _kind(f"{cls.__name__} has metaclass {type(cls).__name__}")
    forward = _static(cls, "forward")
    backward = _static(cls, "backward")
    if forward is None or backward is None or backward is _BASE_BACKWARD:
        raise _kind(f"{cls.__name__}.forward/backward are not plain static methods")
    if _static(cls, "vjp") not in (None, _BASE_VJP):
        raise _kind(f"{cls.__name__} defines vjp()")
    if _static(cls, "jvp") not in (None, _BASE_JVP):
        raise _kind(f"{cls.__name__} defines jvp() (forward-mode AD)")
    setup = _static(cls, "setup_context")
    separate_setup = setup is not None and setup is not _BASE_SETUP_CONTEXT
    # read through the class, so the functions' identity is guarded
    fwd_v = cls_value.get_attr(tx, "forward")
    bwd_v = cls_value.get_attr(tx, "backward")
    setup_v = cls_value.get_attr(tx, "setup_context") if separate_setup else None

    for a in args:
        _check_argument(cls, a)
    tensors = [a for a in args if isinstance(a, TensorValue)]
    needs_input_grad = tuple(isinstance(a, TensorValue) and bool(a.fake.requires_grad) for a in args)
    executable = torch.is_grad_enabled() and any(needs_input_grad)
    sandbox = _Sandbox(tx, tensors)
    try:
        ctx = AutogradCtxValue(cls._backward_cls, needs_input_grad)
        if separate_setup:
            out = _run_sandboxed(tx, fwd_v, args, f"{name}.forward")
            _run_sandboxed(tx, setup_v, [ctx, TupleValue(list(args)), out], f"{name}.setup_context")
        else:
            out = _run_sandboxed(tx, fwd_v, [ctx, *args], f"{name}.forward")
        outs = out.items if type(out) is TupleValue else [out]
        if not all(isinstance(o, TensorValue) or isinstance(o, ConstantValue) for o in outs):
            raise _kind(f"{cls.__name__}.forward returns a {out.type_name()}, not tensors and constants")
        sandbox.check(f"{name}.forward")
        if executable:
            # The backward a backend that traces autograd would trace: every
            # tensor output gets a gradient (zeros for a non-differentiable
            # one unless grads are not materialized), a non-tensor one None.
            grads = []
            for o in outs:
                if isinstance(o, TensorValue) and (ctx.materialize or id(o) not in ctx.non_differentiable):
                    grads.append(graph_call(tx, "call_function", torch.ones_like, [o], {}))
                else:
                    grads.append(NONE)
            ctx.in_backward = True
            result = _run_sandboxed(tx, bwd_v, [ctx, *grads], f"{name}.backward")
            got = result.items if type(result) is TupleValue else [result]
            if not all(isinstance(g, TensorValue) or g.is_constant() and g.as_constant() is None for g in got):
                raise _kind(f"{cls.__name__}.backward returns something other than tensors and None")
            if len(got) != len(args):
                raise _kind(f"{cls.__name__}.backward returns {len(got)} gradients for {len(args)} inputs")
            sandbox.check(f"{name}.backward")
    finally:
        sandbox.rollback()
    return graph_call(tx, "call_function", _apply_of(cls), list(args), {})


def _check_argument(cls, a: Value) -> None:
    """Arguments the graph node can pass as the program does: tensors,
    symbolic and constant numbers.  A container would reach the real forward
    as a copy the graph makes (its changes lost, its identity another)."""
    from .symbolic import SymIntValue
    from .tensors import TensorValue
    if isinstance(a, (TensorValue, SymIntValue)):
        return
    if isinstance(a, ConstantValue):
        return
    raise _kind(f"{cls.__name__}.apply() of a {a.type_name()} (only tensors, numbers and constants are passed "
                "to the graph)")


def _apply_of(cls):
    """A graph target calling torch's ``Function.apply`` bound to ``cls`` (what
    was modelled: never an ``apply`` that ``cls`` overrides, whose own code was
    traced already; a fresh bound method on every read, so the class is held by
    a function fx can name)."""
    def apply(*args):
        return bound_apply(cls)(*args)
    apply.__name__ = apply.__qualname__ = f"{cls.__name__}_apply"
    return apply


class AutogradApplyValue(OpaqueValue):
    """torch's C ``Function.apply`` bound to a Function subclass: ``MyFn.apply``
    (or ``super().apply`` in an override) where ``Function.apply`` is the C
    method itself (torch 2.14; on 2.13 it is a Python classmethod, met as
    FUNCTION_APPLY in UserFunctionValue.call).  Calling it is
    ``call_autograd_function``; anything else is what it is for any C method.
    """

    __slots__ = ("cls_value",)

    def __init__(self, obj, cls_value: Value, source=None):
        super().__init__(obj, source, f"{obj.__self__.__name__}.apply used other than called",
                         "autograd_function", "the Function's apply() runs natively between graphs")
        self.cls_value = cls_value

    def call(self, tx, args, kwargs):
        return call_autograd_function(tx, self.cls_value, list(args), kwargs)
