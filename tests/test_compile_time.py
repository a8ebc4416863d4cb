"""Compile time at scale (issue 17): per-frame phase times in explain(), the
trace budget, and tracing that does not repeat itself.

Timing is measured in bench/, never here: these tests check what is
reported and that every budget keeps eager's results.
"""

import torch

import bytegraph
from bytegraph import config

from conftest import assert_same, compile_counting


def _long(x, n):
    for i in range(n):
        x = x * 1.001 + i
    return x


def test_explain_reports_each_frames_phase_times():
    def f(x):
        y = x.sin()
        bytegraph.graph_break()
        return y.cos()

    report = bytegraph.explain(f)(torch.ones(3))
    assert len(report.frames) == 2            # the frame, and the continuation after its break
    for frame in report.frames:
        assert set(frame.phases) == {"trace", "backend", "codegen", "guards"}
        assert all(v >= 0 for v in frame.phases.values())
        assert frame.traces >= 1 and frame.trace_steps > 0
    # the break restarts the root's trace once (it stops before the break the second time)
    assert report.frames[0].traces == 2
    assert report.frames[0].function == "test_explain_reports_each_frames_phase_times.<locals>.f"
    text = str(report)
    assert "compile time per frame" in text and "trace(s)" in text


def test_time_budget_breaks_the_frame_and_keeps_eagers_result(monkeypatch):
    # a budget already spent when the trace starts: the first check (the 256th
    # instruction, inside the loop) breaks there; the code after it continues in
    # a continuation with a budget of its own, spent too, and so on: each frame
    # captures a slice of the loop, and the whole still gives eager's answer
    monkeypatch.setattr(config, "trace_budget_seconds", -1.0)
    records = []
    bytegraph.diagnostics.add_listener(lambda e, p: records.append(p) if e in ("break", "fallback") else None)
    try:
        cf, be = compile_counting(_long)
        x = torch.randn(4)
        assert torch.equal(cf(x, 600), _long(x, 600))
    finally:
        bytegraph.diagnostics._listeners.clear()
    assert {r.kind for r in records} == {"trace_budget"}
    assert "config.trace_budget_seconds" in records[0].hint


def test_steps_budget_splits_a_long_trace(monkeypatch):
    monkeypatch.setattr(config, "max_trace_steps", 400)
    out, be = assert_same(_long, torch.randn(4), 600, graphs=None, breaks=None)
    assert be.count >= 1
    assert bytegraph.stats().eager_fallbacks == 0


def _many_breaks(x, sink):
    x = x * 2
    print(1, file=sink)
    x = x + 1
    print(2, file=sink)
    x = x.sin()
    print(3, file=sink)
    return x * 3


def test_a_resume_function_holds_only_the_code_that_can_still_run():
    import io
    from bytegraph import resume
    from bytegraph.bytecode import decode
    out, be = assert_same(_many_breaks, torch.randn(3), io.StringIO(), graphs=4, breaks=3, check_identity=False)
    made = [c for c, o in resume._ORIGINS.items() if o.base is _many_breaks.__code__ and o.kind == "resume"]
    assert len(made) == 3
    base = len(decode(_many_breaks.__code__))
    sizes = sorted(len(decode(c)) - resume.origin_of(c).prologue for c in made)
    # each holds the code after its break, so later resume functions are shorter
    assert sizes[0] < sizes[1] < sizes[2] < base, (sizes, base)


def _loops_with_breaks(x):
    # breaks inside a comprehension (inlined in 3.12+), a for loop and a
    # nested loop, each with code after the loop that reads what it built
    ys = [x * i for i in range(3) if print(i) is None]
    total = torch.stack(ys).sum(0)
    for i in range(2):
        print("outer", i)
        for j in range(2):
            total = total + i * j
            print("inner", j)
        total = total * 2
    zs = {k: print(k) or x + k for k in range(2)}
    return total + zs[1] - zs[0], [len(ys), i, j]


def test_a_resume_function_past_a_loop_exit_resumes_where_the_base_did(capsys):
    # 3.12+: an exhausted FOR_ITER skips the END_FOR behind its target.  A
    # resume function that dropped that (never run) END_FOR got a new one from
    # the assembler, which shifted the later code: a break after the loop
    # then resumed two instructions late, skipping ``STORE_FAST ys``
    # (UnboundLocalError).  With config.raise_on_error any assembled resume
    # function whose size differs from what was laid out is an internal error.
    x = torch.ones(2)
    expected = _loops_with_breaks(x)
    eager_out = capsys.readouterr().out
    compiled = bytegraph.compile(_loops_with_breaks, backend="eager")
    for _ in range(2):
        got = compiled(x)
        assert torch.equal(got[0], expected[0]) and got[1] == expected[1]
        assert capsys.readouterr().out == eager_out
    assert bytegraph.stats().graph_breaks > 0 and bytegraph.stats().eager_fallbacks == 0
