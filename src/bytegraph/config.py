"""Settings that change how bytegraph compiles.  Plain module attributes.

Example::

    >>> import bytegraph
    >>> bytegraph.config.cache_size_limit = 4
"""

import os

#: Cache entries per code object; beyond it the frame runs eagerly (one warning).
cache_size_limit: int = 8

#: Entries a frame may compile without any of them holding a graph; past it,
#: calls with no tensor or module argument that miss every entry run as they
#: are (each such variant is a trace that gives a backend nothing).
max_graphless_variants: int = 2

#: Trace and transform frames even when they hold no tensor work, so Python
#: semantics of the transformed bytecode can be tested on pure-Python code.
force_transform: bool = False

#: Raise internal errors instead of falling back to eager (for bytegraph's own tests).
raise_on_error: bool = False

#: Maximum depth of inlined user calls before the call is treated as unsupported.
max_inline_depth: int = 64

#: Times one loop may run unrolled in a trace; past it the loop breaks and
#: runs with its body compiled once (a million-iteration loop would
#: otherwise take minutes to trace and give a gigantic graph).
max_loop_iterations: int = 10_000

#: Times one loop may run unrolled in a trace while neither it nor a loop
#: around it records a tensor operation; past it the frame breaks at the
#: (outermost) loop's head and the loop runs natively, its body not compiled
#: (break kind ``python_loop``).  Pure-Python loops of thousands of steps
#: (a queue filled in a loop, a table built item by item) would otherwise
#: cost seconds of tracing for a graph with nothing in it.  The code after
#: the loop is traced again as usual.
max_python_loop_iterations: int = 1000

#: The same for a loop whose iterations so far took more traced instructions
#: than this (inlined calls included) with no tensor operation: 500 rounds of
#: four inlined assertion calls are 200,000 instructions of tracing and an
#: empty graph.
max_python_loop_steps: int = 20_000

#: Items a list or tuple of plain constants (numbers, strings, None...) may
#: have and still be modelled item by item.  A longer pre-existing one is held
#: as it is and used natively (break kind ``large_container``), and a longer
#: one the trace would build (``[0] * n``, a folded ``str.split``) is built
#: natively: every item used would be wrapped, guarded and checked on every
#: call, and rebuilt item by item after the graph, which costs more than the
#: Python it replaces (a 5,000-item list counted in a loop took 20 s to trace).
max_constant_items: int = 2048

#: Items a pre-existing list or tuple of other objects (neither constants nor
#: tensors) may have and still be modelled item by item.  A longer one is held
#: as it is and used natively (break kind ``large_container``): each item
#: would be wrapped and guarded on every call, and a loop over them unrolled
#: (the 5,000 objects of ``gc.get_objects()`` in a loop took 60 s to trace and
#: guard).  Lists of tensors are modelled at any length: they are graph inputs.
max_object_items: int = 256

#: Items a generator or iterator may produce inside a trace (endless ones are unsupported).
max_generator_items: int = 100_000

#: Instructions one trace may run: loops over known items unroll, and a long
#: one (thousands of inlined calls) would take minutes to trace; past this
#: the frame breaks there (the loop body is outlined or runs eagerly).
max_trace_steps: int = 300_000

#: Seconds one trace may run symbolic execution (checked every 256th
#: instructions).  Past it the frame breaks at that instruction (break kind
#: ``trace_budget``, logged under ``graph_breaks``): the graph so far is
#: compiled and the rest of the frame continues in a continuation, compiled
#: in turn with a budget of its own; where no break is possible the frame runs
#: eagerly.  A retrace to a planned break is not timed (it stops at the same
#: instruction), so the result does not depend on the machine's speed once
#: the first trace chose the point.  ``max_trace_steps`` is the same budget in
#: instructions.
trace_budget_seconds: float = 30.0

#: Repeated layers compiled once (``bytegraph/layer_reuse.py``): the first
#: call of a block (an item of a ModuleList or Sequential with at least
#: ``reuse_min_layers`` siblings of the same class and parameter shapes) is
#: traced and cut out into a subgraph; each sibling whose guards match is
#: one call of that subgraph with its own parameters, not traced again.
#: Where it is not safe (side effects, random numbers, a different
#: attribute, hook or training flag...) the block is traced as usual and the
#: reason is logged (``layer_reuse``).  Off: every block is traced.
reuse_blocks: bool = True

#: Siblings of one structure a container must hold before its blocks are
#: reused (fewer: the graph stays whole; the saved tracing is small).
reuse_min_layers: int = 4

#: Recorded variants of one block structure in one trace (a variant per
#: argument shape, dtype, requires_grad or constant: the first layer's input
#: often differs from the others'); calls matching none are traced.
reuse_max_variants: int = 4

#: With Inductor, reused blocks whose outputs require grad (training, or a
#: forward with grad on) reach it as invoke_subgraph too, compiled with
#: Inductor's buffer reuse and in-place buffers and AOTAutograd's donated
#: buffers off (see block_graphs.lower_for_backend): each fixed a
#: wrong-gradient bug of torch 2.13's Inductor that an adversarial pass found,
#: one after the other (tests/test_layer_reuse_inductor.py).  Off by default
#: until more such testing passes; off, such graphs get the blocks' code
#: inline (Inductor then compiles every layer).
reuse_blocks_inductor_training: bool = False

#: Operations a block's trace must record to be reused (smaller blocks
#: would only split the backend's fusion).
reuse_min_ops: int = 16

#: With ``aot_eager`` and ``inductor``, block calls reach the backend as
#: torch's ``invoke_subgraph`` on one shared subgraph, which AOTAutograd
#: traces once and Inductor compiles once.  Off (or with another backend):
#: a plain call of the subgraph's code, traced through by the backend.
reuse_blocks_invoke_subgraph: bool = True

#: After a graph break inside inlined calls, hand each inner frame's
#: continuation to its caller's continuation as a callable that the caller's
#: call instruction runs (:class:`bytegraph.resume.Continuation`).  Compiling
#: the caller's continuation then inlines the inner one: the code after the
#: break is one graph, not one per frame of the call chain.  Off: each frame's
#: continuation runs on its own, innermost first, each with its own graph.
compose_continuations: bool = True

#: While a frame compiles, CPython's automatic *full* collections wait (young
#: ones still run).  A full collection walks the whole heap -- with torch and
#: transformers loaded, ~0.17 s -- and a compile allocates enough survivors to
#: start one, so the user's first call would pay it for objects that are not
#: garbage.  The threshold is restored when the outermost compile ends; the
#: collection then runs at its usual point in the program.  Off: compiles run
#: under whatever thresholds the program set.
defer_full_gc: bool = True

#: Check guarded tensors with the compiled helper in ``bytegraph.native`` when it
#: is built (one C++ call for all tensors instead of six attribute reads each).
#: ``BYTEGRAPH_NATIVE_GUARDS=0`` turns it off; guards then use Python conditions.
native_guards: bool = os.environ.get("BYTEGRAPH_NATIVE_GUARDS", "1") != "0"

#: Model ``t.item()``, ``t.tolist()``, ``float(t)``, ``int(t)`` and ``bool(t)``
#: as symbolic numbers computed by the graph (unbacked symbols of the shape
#: environment, as torch.compile's ``capture_scalar_outputs``): Python
#: arithmetic on them and tensor operations that take them stay in the graph.
#: Branching on one (``if t.item() > 0``) still breaks there: its value is
#: unknown while tracing.  Off: each such read is a graph break.
capture_scalar_outputs: bool = False

#: Under DistributedDataParallel, cut each captured graph at DDP's gradient
#: buckets and compile the pieces separately, so each bucket's all-reduce
#: starts while the rest of backward runs (bytegraph.distributed.ddp; the
#: ``ddp_graphs`` log shows the cuts).  Off: one graph, whose backward yields
#: every gradient at its end.
ddp_bucket_split: bool = True

#: Under DDP with backend ``"inductor"``, the ranks on one machine that share an
#: Inductor cache directory split the compiling of the bucket pieces: each
#: compiles its share first, then takes the others' from Inductor's cache
#: (bytegraph.distributed.shared_compile; the ``shared_compile`` log shows the
#: split).  Each rank still compiles every piece itself when the cache misses.
#: ``BYTEGRAPH_SHARED_COMPILE=0`` turns it off.
ddp_shared_compile: bool = os.environ.get("BYTEGRAPH_SHARED_COMPILE", "1") != "0"


#: Seconds a rank waits for another rank to compile a piece it owns before
#: compiling it itself (``ddp_shared_compile``).
shared_compile_timeout: float = 600.0
