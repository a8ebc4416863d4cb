"""What a user reads: graph nodes carry the user's stack (node.meta["stack_trace"])."""

import inspect
import pytest
import os

import torch

import bytegraph
from conftest import CountingBackend, captured_logs

HERE = os.path.abspath(__file__)


def _line_of(fn, text):
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if text in line)


def scaled_relu(h):
    return torch.relu(h) * 2


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        h = self.lin(x)
        return scaled_relu(h)


def test_every_node_carries_the_users_stack_innermost_last():
    be = CountingBackend()
    m = bytegraph.compile(Block(), backend=be)
    m(torch.randn(2, 4))
    (gm,) = be.graphs
    calls = [n for n in gm.graph.nodes if n.op in ("call_function", "call_method", "call_module")]
    assert calls
    for node in calls:
        trace = node.meta.get("stack_trace")
        assert trace, node
        assert "bytegraph" + os.sep not in trace.replace("bytegraph" + os.sep + "tests", "")
        files = [line.split('"')[1] for line in trace.splitlines() if line.startswith("  File ")]
        assert files[0] == HERE   # the outermost frame is the user's forward
    relu = next(n for n in calls if n.target is torch.relu)
    entries = [line.strip() for line in relu.meta["stack_trace"].splitlines()]
    forward_line = _line_of(Block.forward, "return scaled_relu(h)")
    helper_line = _line_of(scaled_relu, "torch.relu(h) * 2")
    assert entries == [f'File "{HERE}", line {forward_line}, in Block.forward', "return scaled_relu(h)",
                       f'File "{HERE}", line {helper_line}, in scaled_relu', "return torch.relu(h) * 2"]
    assert "No stacktrace found" not in gm.print_readable(print_output=False)


def test_a_break_inside_a_library_names_the_users_line_first_then_the_stack():
    import json

    def step(x):
        y = x * 2
        meta = json.dumps({"n": 3})     # the break is deep inside json's encoder
        return y + len(meta)

    with pytest.raises(bytegraph.GraphBreakError) as info:
        bytegraph.compile(step, backend="eager", fullgraph=True)(torch.ones(2))
    record = info.value.record
    text = str(info.value)
    user_line = _line_of(step, "json.dumps")
    first = text.splitlines()[0]
    assert f"at {HERE}:{user_line} in " in first and "step" in first
    assert f", inside {json.__file__.rsplit(os.sep, 1)[0]}" in first
    assert record.user_location.lineno == user_line and record.location.filename.startswith(
        os.path.dirname(json.__file__))
    stack = text.split("stack (innermost last):\n", 1)[1].splitlines()
    assert stack[0].strip() == f'File "{HERE}", line {user_line}, in {step.__qualname__}'
    assert stack[1].strip() == "meta = json.dumps({\"n\": 3})     # the break is deep inside json's encoder"
    assert "json" + os.sep + "encoder.py" in stack[-2]    # innermost last


def test_recompile_storm_messages():
    f = bytegraph.compile(lambda x, k: x * k, backend="eager", dynamic=False, recompile_limit=3, name="storm")
    calls = [(torch.ones(2), 1), (torch.ones(2, 3), 1), (torch.ones(2, 3, dtype=torch.float64), 1),
             (torch.ones(4), 2)]
    with captured_logs("recompiles") as messages:
        import logging
        records = []
        handler = logging.Handler()
        handler.emit = records.append
        logging.getLogger("bytegraph").addHandler(handler)
        try:
            for x, k in calls:
                torch.testing.assert_close(f(x, k), x * k)
        finally:
            logging.getLogger("bytegraph").removeHandler(handler)
    first_line = _line_of(test_recompile_storm_messages, "recompile_limit=3")
    assert messages[0].splitlines() == [
        f"recompiling storm ({HERE}:{first_line}), "
        "entry 1 of at most 3; no entry's guards hold:",
        "    entry 0: guard failed: x: Tensor dtype=torch.float32 device=cpu shape=[2] stride=[1] "
        "requires_grad=False (changed: rank 1 → 2 (shape [2] → [2, 3]))"]
    assert messages[1].splitlines()[1:] == [
        "    entry 0: guard failed: x: Tensor dtype=torch.float32 device=cpu shape=[2] stride=[1] "
        "requires_grad=False (changed: dtype torch.float32 → torch.float64, rank 1 → 2 (shape [2] → [2, 3]))",
        "    entry 1: guard failed: x: Tensor dtype=torch.float32 device=cpu shape=[2, 3] stride=[3, 1] "
        "requires_grad=False (changed: dtype torch.float32 → torch.float64)"]
    (limit,) = [r.getMessage() for r in records if r.levelname == "WARNING"]
    assert limit.startswith(f"bytegraph: storm ({HERE}:")
    assert "hit its recompile_limit (3); further new variants run eagerly" in limit
    assert "k == 1 (1 → 2)" in limit and "Fix: make what changes dynamic" in limit


SHAPE_ERROR_PROGRAM = """
import torch, bytegraph
lin = torch.nn.Linear(4, 3)
def f(x):
    h = lin(x)
    return h @ torch.ones(5, 2)
bytegraph.compile(f, backend="eager")(torch.ones(2, 4))
"""


def test_a_users_shape_error_prints_only_the_users_traceback(tmp_path):
    import subprocess
    import sys
    script = tmp_path / "prog.py"
    script.write_text(SHAPE_ERROR_PROGRAM)
    src = os.path.dirname(os.path.dirname(os.path.abspath(bytegraph.__file__)))
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=180,
                          env={"PATH": os.environ.get("PATH", ""), "PYTHONPATH": src})
    lines = proc.stderr.strip().splitlines()
    assert lines[0] == "Traceback (most recent call last):", proc.stderr
    assert lines[-1] == "RuntimeError: mat1 and mat2 shapes cannot be multiplied (2x3 and 5x2)"
    assert len(lines) <= 8, proc.stderr
    assert "bytegraph" + os.sep not in proc.stderr.replace("import torch, bytegraph", "")
    assert "fake_tensor" not in proc.stderr and "During handling" not in proc.stderr


def test_user_exception_has_no_bytegraph_frames_or_chain(native_mode):
    def f(x):
        h = x.sum(0)
        return h @ torch.ones(5, 2)

    cf = bytegraph.compile(f, backend="eager")
    for _ in range(2):
        with pytest.raises(RuntimeError) as info:
            cf(torch.ones(2, 4))
        assert info.value.__context__ is None and info.value.__cause__ is None
        frames = [entry.name for entry in info.traceback]
        assert frames[-1] == "f"
        if native_mode == "native":   # (the Python call path is a frame of its own)
            own = [e for e in info.traceback if os.sep + "bytegraph" + os.sep in str(e.path)
                   and os.sep + "tests" + os.sep not in str(e.path)]
            assert own == [], own


def test_fullgraph_error_names_the_users_line_past_any_package_and_keeps_its_traceback_short(tmp_path):
    # a package outside this environment (another site-packages: a user site, a system one)
    pkg = tmp_path / "site-packages" / "bg_pkg_under_test"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("def normalize(x):\n    m = x.mean()\n    if m > 0:\n        return x - m\n"
                                     "    return x\n")
    import sys
    sys.path.insert(0, str(tmp_path / "site-packages"))
    try:
        import bg_pkg_under_test

        def model(x):
            y = x * 2
            return bg_pkg_under_test.normalize(y) + 1

        with pytest.raises(bytegraph.GraphBreakError) as info:
            bytegraph.compile(model, backend="eager", fullgraph=True)(torch.ones(3))
    finally:
        sys.path.remove(str(tmp_path / "site-packages"))
        sys.modules.pop("bg_pkg_under_test", None)
    record = info.value.record
    assert record.user_location.lineno == _line_of(model, "bg_pkg_under_test.normalize(y)")
    assert record.location.filename == str(pkg / "__init__.py")
    # the error's own traceback: the user's call, then at most the two frames that raise it
    frames = [f for f in __import__("traceback").extract_tb(info.value.__traceback__)]
    assert len([f for f in frames if "bytegraph" + os.sep in f.filename]) <= 2, frames
    assert not info.value.__cause__ and info.value.__suppress_context__


def _inner_with_break(x):
    m = x.mean()
    print("between", file=__import__("io").StringIO())
    return x - m


def test_recompile_of_a_resume_function_names_the_users_local():
    def outer(x):
        y = _inner_with_break(x * 2)
        return y + 1

    f = bytegraph.compile(outer, backend="eager", dynamic=False)
    f(torch.ones(3))
    with captured_logs("recompiles") as messages:
        torch.testing.assert_close(f(torch.ones(2, 2)), outer(torch.ones(2, 2)))
    tried = [line.strip() for m in messages for line in m.splitlines() if line.strip().startswith("entry ")]
    assert any("_inner_with_break's x (___bg_s" in line for line in tried), tried
    # a generated name is never the subject of a reason without the user's name beside it
    assert not [line for line in tried if line.split("guard failed: ", 1)[1].startswith("___bg_")], tried
