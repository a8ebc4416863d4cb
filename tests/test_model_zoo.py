"""The model zoo (issue 13): every architecture of ``tests/model_zoo.py``
compiled with bytegraph, compared with eager.

For each model:

- eval: output equal to eager at three input sizes; the same inputs again
  compile nothing; the third size compiles nothing (the dynamic entry made at
  the second serves it); no frame runs eagerly; the first call's graph count
  is at most the recorded one and every break is of a recorded kind;
- training: one step with ``aot_eager``, the loss and every parameter's
  gradient equal to eager's.

``make test`` runs the quick subset (``ZooModel.quick``); ``make test-models``
(and CI) the whole zoo.  Graph counts beside torch.compile's are measured by
``bench/zoo.py``, not here.
"""

import copy

import pytest
import torch

transformers = pytest.importorskip("transformers")

import bytegraph  # noqa: E402
from bytegraph import diagnostics  # noqa: E402
from conftest import CountingBackend  # noqa: E402
from model_zoo import HEADS, ZOO, first_tensor  # noqa: E402


def zoo_params():
    for name, z in ZOO.items():
        marks = [pytest.mark.models] + ([] if z.quick else [pytest.mark.zoo])
        yield pytest.param(name, marks=marks, id=name)


class BreakLog:
    """Collects the break records bytegraph reports while it is installed."""

    def __init__(self):
        self.records = []

    def __call__(self, event, payload):
        if event in ("break", "fallback"):
            self.records.append(payload)

    def __enter__(self):
        diagnostics.add_listener(self)
        return self

    def __exit__(self, *exc):
        diagnostics.remove_listener(self)


def assert_same_gradients(eager_model, compiled_model):
    """Every parameter's gradient equal to eager's.  A parameter that gets no
    gradient in eager (``None``: it feeds only outputs the loss ignores, like
    BERT's pooler here) gets zeros under AOT autograd, with torch.compile as with
    bytegraph: the compiled graph is one autograd node whose backward yields a
    gradient for every input.  That is allowed here, and only that."""
    for (n, p), q in zip(eager_model.named_parameters(), compiled_model.parameters()):
        if p.grad is None:
            assert q.grad is None or not q.grad.any(), n
            continue
        # tolerance: AOT autograd may reorder float reductions
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-3, atol=1e-5, msg=n)


def compiled_counts():
    s = bytegraph.stats()
    return s.frames_compiled, s.recompiles


@pytest.mark.parametrize("name", list(zoo_params()))
def test_eval_matches_eager_at_three_sizes_without_extra_compiles(name):
    z = ZOO[name]
    model, inputs = z.build()
    model.eval()
    reference = copy.deepcopy(model)
    backend = CountingBackend()
    compiled = bytegraph.compile(model, backend=backend)
    with torch.no_grad(), BreakLog() as log:
        for i, (args, kwargs) in enumerate(inputs):
            expected = first_tensor(reference(*args, **kwargs))
            got = first_tensor(compiled(*args, **kwargs))
            torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5, msg=f"{name} size {i}")
            if i == 0:
                first_graphs = backend.count
                first_breaks = list(log.records)
                before = compiled_counts()
                again = first_tensor(compiled(*args, **kwargs))
                torch.testing.assert_close(again, expected, rtol=1e-4, atol=1e-5)
                assert compiled_counts() == before, f"{name}: identical inputs compiled again"
            if i == 1:
                before_third = compiled_counts()
        if not z.third_size_compiles:
            assert compiled_counts() == before_third, f"{name}: the third size compiled again"
    assert bytegraph.stats().eager_fallbacks == 0, [str(r) for r in log.records]
    assert 1 <= first_graphs <= z.graphs, (first_graphs, [str(r) for r in first_breaks])
    unexpected = [str(r) for r in first_breaks if r.kind not in z.breaks]
    assert not unexpected, unexpected


@pytest.mark.parametrize("name", list(zoo_params()))
def test_one_training_step_with_aot_eager_matches_eager_gradients(name):
    z = ZOO[name]
    model, inputs = z.build(dropout=False)
    model.train()
    other = copy.deepcopy(model)
    compiled = bytegraph.compile(other, backend="aot_eager")
    args, kwargs = inputs[1]     # the second size: the first has batch 1, which BatchNorm refuses in training
    losses = []
    for m in (model, compiled):
        loss = first_tensor(m(*args, **kwargs)).float().pow(2).mean()
        loss.backward()
        losses.append(loss.detach())
    torch.testing.assert_close(losses[1], losses[0], rtol=1e-4, atol=1e-5)
    assert bytegraph.stats().graphs >= 1 and bytegraph.stats().eager_fallbacks == 0
    assert_same_gradients(model, other)


@pytest.mark.models
@pytest.mark.zoo
@pytest.mark.parametrize("name", list(HEADS))
def test_task_head_training_step_with_labels_matches_eager(name):
    """The loss is computed inside ``forward`` (loss modules built there,
    ``config.problem_type`` set there): one ``aot_eager`` step, same loss and
    gradients as eager, within the recorded graph count and break kinds."""
    h = HEADS[name]
    model, batch = h.build()
    model.train()
    other = copy.deepcopy(model)
    backend = CountingBackend("aot_eager")
    compiled = bytegraph.compile(other, backend=backend)
    with BreakLog() as log:
        losses = []
        for m in (model, compiled):
            loss = m(**batch).loss
            loss.backward()
            losses.append(loss.detach())
    torch.testing.assert_close(losses[1], losses[0], rtol=1e-4, atol=1e-5)
    assert bytegraph.stats().eager_fallbacks == 0
    assert_same_gradients(model, other)
    assert 1 <= backend.count <= h.graphs, (backend.count, [str(r) for r in log.records])
    unexpected = [str(r) for r in log.records if r.kind not in h.breaks]
    assert not unexpected, unexpected
