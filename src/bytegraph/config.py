"""Settings that change how bytegraph compiles.  Plain module attributes.

Example::

    >>> import bytegraph
    >>> bytegraph.config.cache_size_limit = 4
"""

#: Cache entries per code object; beyond it the frame runs eagerly (one warning).
cache_size_limit: int = 8

#: Trace and transform frames even when they hold no tensor work, so Python
#: semantics of the transformed bytecode can be tested on pure-Python code.
force_transform: bool = False

#: Raise internal errors instead of falling back to eager (for bytegraph's own tests).
raise_on_error: bool = False

#: Maximum depth of inlined user calls before the call is treated as unsupported.
max_inline_depth: int = 64

#: Items a generator called inside a trace may yield (it is run to completion).
max_generator_items: int = 100_000
