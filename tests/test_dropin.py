"""The drop-in switch: a program written for torch.compile (it never imports
bytegraph) runs through bytegraph when BYTEGRAPH_TORCH_COMPILE=1 and the
start-up hook is installed, and is untouched otherwise."""

import os
import subprocess
import sys
import textwrap

import torch

import bytegraph
from bytegraph import dropin

SRC = os.path.dirname(os.path.dirname(os.path.abspath(bytegraph.__file__)))

# a program that knows nothing of bytegraph
USER_PROGRAM = textwrap.dedent("""
    import torch

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, x):
            return torch.relu(self.lin(x)) * 2

    torch.manual_seed(0)
    x = torch.randn(2, 4)
    net = Net()
    expected = net(x)

    fast = torch.compile(net, backend="eager")
    assert torch.allclose(fast(x), expected)

    other = Net()
    other.load_state_dict(net.state_dict())
    other.compile(backend="eager")
    assert torch.allclose(other(x), expected)

    @torch.compile(backend="eager", fullgraph=True)
    def scale(t):
        return t.sin() + 1

    assert torch.allclose(scale(x), x.sin() + 1)

    # every decorator form returns the compiled function (not called: inductor
    # would compile for seconds; what matters is who compiles)
    @torch.compile
    def bare(t):
        return t + 1

    @torch.compile(mode="max-autotune-no-cudagraphs")
    def tuned(t):
        return t * 2

    later = torch.compile(backend="inductor")(lambda t: t - 1)
    print("SERVED", sorted({type(g).__module__.split(".")[0] for g in (bare, tuned, later, fast)}))
    assert torch.allclose(torch.compile(backend="eager")(lambda t: t * 3)(x), x * 3)
    print("user program done")
""")

REPORT = textwrap.dedent("""
    import sys
    bg = sys.modules.get("bytegraph")
    dynamo = sys.modules.get("torch._dynamo.utils")   # (torch imports it for its own reasons too)
    frames = 0 if dynamo is None else dynamo.counters["frames"]["total"]
    print("BYTEGRAPH", None if bg is None else bg.stats().graphs, "DYNAMO_FRAMES", frames)
""")


def run_user_program(tmp_path, env_value):
    hook_dir = tmp_path / "site"
    hook_dir.mkdir(exist_ok=True)
    (hook_dir / dropin.PTH_NAME).write_text(dropin._PTH_LINE)
    script = tmp_path / "train.py"
    script.write_text(USER_PROGRAM + REPORT)
    # the hook is processed as it is in site-packages (site.addsitedir runs .pth lines)
    launcher = f"import site; site.addsitedir({str(hook_dir)!r}); import runpy; runpy.run_path({str(script)!r})"
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": SRC, "HOME": os.environ.get("HOME", "/tmp")}
    if env_value is not None:
        env["BYTEGRAPH_TORCH_COMPILE"] = env_value
    return subprocess.run([sys.executable, "-c", launcher], capture_output=True, text=True, env=env, timeout=300)


def test_switch_on_runs_torch_compile_through_bytegraph(tmp_path):
    proc = run_user_program(tmp_path, "1")
    assert proc.returncode == 0, proc.stderr
    assert "user program done" in proc.stdout
    # four compiled callables called, one graph each; torch.compile's frame evaluator compiled nothing
    assert "BYTEGRAPH 4 DYNAMO_FRAMES 0" in proc.stdout, proc.stdout
    assert "SERVED ['bytegraph']" in proc.stdout, proc.stdout


def test_switch_off_leaves_the_program_alone(tmp_path):
    for value in (None, "0"):
        proc = run_user_program(tmp_path, value)
        assert proc.returncode == 0, proc.stderr
        assert "BYTEGRAPH None DYNAMO_FRAMES" in proc.stdout and "DYNAMO_FRAMES 0" not in proc.stdout, \
            proc.stdout
        assert "SERVED [" in proc.stdout and "bytegraph" not in proc.stdout, proc.stdout


def test_function_switch_and_undo():
    original, module_compile = torch.compile, torch.nn.Module.compile
    bytegraph.use_for_torch_compile()
    try:
        assert dropin.is_on()
        f = torch.compile(lambda x: x * 3, backend="eager")
        assert isinstance(f, bytegraph.cache.CompiledFunction)
        torch.testing.assert_close(f(torch.ones(2)), torch.full((2,), 3.0))
        m = torch.nn.Linear(2, 2)
        m.compile(backend="eager")
        x = torch.randn(1, 2)
        torch.testing.assert_close(m(x), torch.nn.functional.linear(x, m.weight, m.bias))
        assert len(m._compiled_call_impl.__func__._entries) == 1
    finally:
        bytegraph.use_for_torch_compile(False)
    assert torch.compile is original and torch.nn.Module.compile is module_compile
    assert not dropin.is_on()


def test_enable_writes_and_disable_removes_the_hook(tmp_path, monkeypatch):
    monkeypatch.setattr(dropin, "_site_packages", lambda: str(tmp_path))
    path = dropin.enable()
    assert path == str(tmp_path / dropin.PTH_NAME)
    text = open(path).read()
    assert text.startswith("import ") and "BYTEGRAPH_TORCH_COMPILE" in text and text.count("\n") == 1
    assert dropin.disable() == path and not os.path.exists(path)
    assert dropin.disable() is None


def test_command_line_reports_status_without_warnings():
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": SRC, "HOME": os.environ.get("HOME", "/tmp")}
    proc = subprocess.run([sys.executable, "-m", "bytegraph", "dropin", "status"], capture_output=True, text=True,
                          env=env, timeout=120)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert proc.stdout.startswith("start-up hook:")
    bad = subprocess.run([sys.executable, "-m", "bytegraph", "dropin", "frobnicate"], capture_output=True,
                         text=True, env=env, timeout=120)
    assert bad.returncode == 2 and "usage" in bad.stderr
