"""Collectives in compiled code, DTensor inputs and FSDP2 training on two processes
(gloo, 127.0.0.1), each compared with eager.

The cases run once for the module (tests/dist_cases_collectives.py, through
tests/distributed_harness.py); each test checks what they measured, on
both ranks.
"""

from __future__ import annotations

import pytest

from distributed_harness import ranks, requires_gloo, results_fixture

# (the first test runs every case: generous per-test time on a loaded machine)
pytestmark = [requires_gloo(), pytest.mark.timeout(900)]

results = results_fixture("dist_cases_collectives")


def same_as_eager(r):
    assert r["diff"] == 0.0 and r["args_diff"] == 0.0
    assert r["eager_fallbacks"] == 0


def test_functional_collectives_are_graph_nodes(results):
    for r in ranks(results, "funcol_in_graph"):
        same_as_eager(r)
        assert r["graphs"] == 1 and r["graph_breaks"] == 0
        assert {"all_reduce", "all_gather_tensor", "reduce_scatter_tensor", "broadcast"} <= set(r["targets"][0])


def test_functional_collective_backward_through_aot(results):
    for r in ranks(results, "funcol_aot_training"):
        assert r["grad_diff"] == 0.0 and r["graphs"] == 1 and r["eager_fallbacks"] == 0


def test_unused_collective_is_kept(results):
    for r in ranks(results, "funcol_unused_result_still_runs"):
        same_as_eager(r)
        assert "all_reduce" in r["targets"][0]
        assert r["after"] == 1.0      # 0 + 1: the next all-reduce paired with its partner


def test_in_place_all_reduce_is_traced_with_a_copy_back(results):
    for r in ranks(results, "inplace_all_reduce"):
        same_as_eager(r)
        assert r["graphs"] == 1 and r["graph_breaks"] == 0 and r["recompiles"] == 0
        assert r["targets"][0].count("all_reduce") == 2 and r["targets"][0].count("copy_") == 2


def test_in_place_collective_family(results):
    for r in ranks(results, "inplace_variants"):
        same_as_eager(r)
        assert r["graphs"] == 1 and r["graph_breaks"] == 0


def test_async_collective_is_a_clean_break(results):
    for r in ranks(results, "async_collective_breaks"):
        same_as_eager(r)
        assert "async_collective" in r["break_kinds"] and r["graphs"] == 2


def test_barrier_is_a_clean_break(results):
    for r in ranks(results, "barrier_breaks"):
        same_as_eager(r)
        assert r["break_kinds"] == ["c10d_call"] and r["graphs"] == 2


def test_rank_and_world_size_are_guarded_constants(results):
    for r in ranks(results, "rank_constants"):
        same_as_eager(r)
        assert r["graphs"] == 1 and r["graph_breaks"] == 0 and r["recompiles"] == 0
        assert any(g.startswith("process group default: name") for g in r["guards"])


def test_another_process_group_recompiles(results):
    for r in ranks(results, "rank_of_another_group"):
        assert r["same"] and r["recompiles"] == 1 and r["graph_breaks"] == 0 and r["eager_fallbacks"] == 0


@pytest.mark.parametrize("name", ["dtensor_eager_backend", "dtensor_aot"])
def test_dtensor_inputs_are_traced(results, name):
    for r in ranks(results, name):
        assert r["diff"] == 0.0 and r["grad_diff"] == 0.0
        assert r["graphs"] == 1 and r["graph_breaks"] == 0 and r["eager_fallbacks"] == 0
        assert r["placements"] == "(Shard(dim=1),)"


def test_dtensor_placement_is_guarded(results):
    for r in ranks(results, "dtensor_placement_guard"):
        assert r["diff"] == 0.0 and r["eager_fallbacks"] == 0
        assert r["recompiles"] == 2            # Shard(0), Shard(1), Replicate(); Shard(0) again hits
        assert len(r["subclass_guards"]) == 1 and "Shard(dim=0)" in r["subclass_guards"][0]


def test_dtensor_optimizer_step(results):
    for r in ranks(results, "dtensor_optimizer_step"):
        assert r["diff"] == 0.0 and r["graphs"] == 1 and r["graph_breaks"] == 0 and r["eager_fallbacks"] == 0


@pytest.mark.parametrize("name", ["fsdp2_whole_model", "fsdp2_compiled_blocks", "fsdp2_no_reshard_after_forward"])
def test_fsdp2_trains_like_eager(results, name):
    for r in ranks(results, name):
        assert r["loss_diff"] == 0.0 and r["grad_diff"] == 0.0 and r["param_diff"] == 0.0
        assert r["params_are_dtensors"] and r["eager_fallbacks"] == 0 and r["graphs"] >= 1


def test_fsdp2_hooks_run_natively_around_traced_blocks(results):
    for r in ranks(results, "fsdp2_whole_model"):
        assert r["break_kinds"] == ["native_module_hooks", "resumed_loop"]
        # the input layer, one graph per block kind (identity, then structure), the output layer
        assert r["explain_graphs"] == 4


def test_dtensor_methods_with_mesh_and_placements(results):
    for r in ranks(results, "dtensor_redistribute"):
        for backend in ("eager", "aot_eager"):
            red = r[f"redistribute_{backend}"]
            assert red["diff"] == 0.0 and red["graphs"] == 1 and red["graph_breaks"] == 0
            # DTensor.from_local is traced into and breaks; the result is eager's
            local = r[f"from_local_{backend}"]
            assert local["diff"] == 0.0 and local["eager_fallbacks"] == 0
