"""Tests of the CPython test-suite runner (tests/cpython_suite.py) on a small
fake test package, so they run in seconds and do not depend on CPython's tests."""

import json
import sys
import textwrap

import pytest

import bytegraph
import cpython_suite as suite

FAKE_TESTS = '''
import unittest

class T(unittest.TestCase):
    def test_pass(self):
        total = 0
        for i in range(4):
            total += i
        self.assertEqual(total, 6)

    def test_fail_eagerly(self):
        self.assertEqual(1, 2)

    def test_skipped(self):
        self.skipTest("not here")

    def test_other(self):
        self.assertIn(2, [1, 2, 3])
'''

SLOW_EAGERLY = '''
import time
import unittest

class S(unittest.TestCase):
    def test_fast(self):
        self.assertTrue(True)

    def test_slow_eagerly(self):
        end = time.process_time() + 0.4
        while time.process_time() < end:
            pass
'''


@pytest.fixture
def fake_package(tmp_path, monkeypatch):
    pkg = tmp_path / "bgfake"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "test_fake.py").write_text(textwrap.dedent(FAKE_TESTS))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    yield "bgfake"
    for name in [m for m in sys.modules if m.startswith("bgfake")]:
        del sys.modules[name]


def test_counts_eager_passes_and_transformed_runs(fake_package):
    res = suite.run_module("test_fake", package=fake_package)
    assert res["eager"] == 2                      # the failing and the skipped test do not count
    assert res["compiled"] == 2 and res["broken"] == []
    assert res["clean"] == 2                      # transformed, no frame ran eagerly
    # the tests with the most CPU time added by compiling, most first
    assert {name for _, name in res["slowest"]} == {"test_fake.T.test_pass", "test_fake.T.test_other"}
    assert "most added" in suite._line(res)


def test_the_slowest_list_counts_what_compiling_added(fake_package, tmp_path):
    (tmp_path / fake_package / "test_slowfake.py").write_text(textwrap.dedent(SLOW_EAGERLY))
    res = suite.run_module("test_slowfake", package=fake_package)
    added = {name: s for s, name in res["slowest"]}
    assert set(added) == {"test_slowfake.S.test_fast", "test_slowfake.S.test_slow_eagerly"}
    assert [s for s, _ in res["slowest"]] == sorted(added.values(), reverse=True)
    # 0.4 s of CPU eagerly and about as much compiled: compiling added far less than that
    assert added["test_slowfake.S.test_slow_eagerly"] < 0.25, added


def test_a_test_failing_only_compiled_is_broken(fake_package, monkeypatch):
    def compile_that_breaks(fn, **kwargs):
        def wrapper(self):
            raise AssertionError("compiled run differs")
        return wrapper

    monkeypatch.setattr(bytegraph, "compile", compile_that_breaks)
    res = suite.run_module("test_fake", package=fake_package)
    assert sorted(res["broken"]) == ["test_fake.T.test_other", "test_fake.T.test_pass"]
    assert "compiled run differs" in res["errors"]["test_fake.T.test_pass"]
    assert res["compiled"] == 0


def test_a_run_with_an_eager_fallback_is_not_clean(fake_package, monkeypatch):
    real_compile = bytegraph.compile

    def compile_with_fallback(fn, **kwargs):
        compiled = real_compile(fn, **kwargs)

        def wrapper(self):
            bytegraph.diagnostics.STATS.eager_fallbacks += 1
            return compiled(self)
        return wrapper

    monkeypatch.setattr(bytegraph, "compile", compile_with_fallback)
    res = suite.run_module("test_fake", package=fake_package)
    assert res["compiled"] == 2 and res["clean"] == 0
    assert sorted(res["fallbacks"]) == ["test_fake.T.test_other", "test_fake.T.test_pass"]


def test_untestable_methods_are_skipped_with_their_reason(fake_package, monkeypatch):
    monkeypatch.setitem(suite.UNTESTABLE, "test_fake.T.test_pass", "reads its own frame")
    res = suite.run_module("test_fake", package=fake_package)
    assert res["eager"] == 2 and res["skipped_untestable"] == 1 and res["compiled"] == 1


def test_untestable_entries_name_real_tests_and_give_reasons():
    for test_id, reason in suite.UNTESTABLE.items():
        assert test_id.split(".")[0] in suite.MODULES, test_id
        assert reason.strip(), test_id


def test_main_runs_modules_in_children_and_reports(fake_package, tmp_path, capsys):
    out_json = tmp_path / "out.json"
    status = suite.main(["test_fake", "--package", fake_package, "--json", str(out_json), "--jobs", "1"])
    text = capsys.readouterr().out
    assert status == 0
    assert "test_fake" in text and "broken   0" in text and "clean    2 (100.0% of eager)" in text
    (res,) = json.loads(out_json.read_text())
    assert res["eager"] == 2 and res["clean"] == 2


def test_main_fails_when_a_module_cannot_run(fake_package, capsys):
    status = suite.main(["test_missing_module", "--package", fake_package, "--jobs", "1"])
    assert status == 1
    assert "FAILED test_missing_module" in capsys.readouterr().out


def test_the_core_subset_is_part_of_the_whole_list():
    assert suite.CORE_MODULES and set(suite.CORE_MODULES) <= set(suite.MODULES)
    assert len(set(suite.CORE_MODULES)) == len(suite.CORE_MODULES)
