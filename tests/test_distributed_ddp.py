"""DistributedDataParallel on two processes (gloo, 127.0.0.1): compiled equals eager,
graphs are cut at DDP's buckets, and the reducer's hooks fire during backward.

The cases run once for the module (tests/dist_cases_ddp.py, through
tests/distributed_harness.py); each test checks what they measured, on
both ranks.
"""

from __future__ import annotations

import pytest

from distributed_harness import ranks, requires_gloo, results_fixture

# (the first test runs every case: generous per-test time on a loaded machine)
pytestmark = [requires_gloo(), pytest.mark.timeout(900)]

results = results_fixture("dist_cases_ddp")


def assert_matches_eager(r, tol=0.0):
    assert len(r["losses"][1]) == len(r["losses"][0]) >= 3
    assert r["loss_diff"] <= tol, r["losses"]
    assert r["grad_diff"] <= tol and r["param_diff"] <= tol, (r["grad_diff"], r["param_diff"])
    assert r["eager_fallbacks"] == 0


@pytest.mark.parametrize("name", ["ddp_inner_eager", "ddp_inner_aot", "ddp_outer_aot"])
def test_both_wrappings_train_like_eager_ddp(results, name):
    for r in ranks(results, name):
        assert_matches_eager(r)
        assert r["graphs"] >= 1 and r["frames_compiled"] == 1 and r["graph_breaks"] == 0


def test_graph_count_equals_ddp_bucket_count(results):
    for r in ranks(results, "bucket_graphs"):
        assert r["ddp_buckets"] == r["reducer_buckets"] == 3
        assert r["graphs"] == r["backend_calls"] == r["ddp_buckets"]
        # graph k (forward order) holds exactly bucket (n-1-k)'s parameters (buckets are in backward order)
        assert r["graph_params"] == list(reversed(r["buckets"]))


def test_one_bucket_one_graph(results):
    for r in ranks(results, "bucket_graphs_default_cap"):
        assert r["reducer_buckets"] == 1 and r["graphs"] == 1


def test_bucket_hooks_fire_between_backward_pieces(results):
    for r in ranks(results, "hooks_during_backward"):
        n = r["pieces"]
        assert n == 3
        order = [(kind, k) for kind, k, _ in r["events"]]
        expected = []
        for b in range(n):
            piece = n - 1 - b
            expected += [("bw_start", piece), ("bw_end", piece), ("bucket", b)]
        assert order == expected, r["events"]
        # bucket 0's all-reduce starts while the rest of backward still has to run
        times = {(kind, k): t for kind, k, t in r["events"]}
        assert times[("bucket", 0)] < times[("bw_start", 0)]


def test_without_cuts_every_hook_waits_for_the_whole_backward(results):
    for r in ranks(results, "hooks_without_cuts"):
        assert r["pieces"] == 1
        order = [(kind, k) for kind, k, _ in r["events"]]
        assert order == [("bw_start", 0), ("bw_end", 0), ("bucket", 0), ("bucket", 1), ("bucket", 2)]


@pytest.mark.parametrize("name", ["static_graph", "gradient_as_bucket_view", "find_unused_parameters",
                                  "no_sync_accumulation", "buffers_broadcast", "eval_then_train",
                                  "graph_break_in_forward", "dynamic_batch", "compiled_step_calls_ddp"])
def test_ddp_modes_match_eager(results, name):
    for r in ranks(results, name):
        assert_matches_eager(r)
        assert r["graphs"] >= 1


def test_gradients_stay_bucket_views(results):
    for r in ranks(results, "gradient_as_bucket_view"):
        assert r["grads_in_buckets"]


def test_buffers_are_broadcast(results):
    for r in ranks(results, "buffers_broadcast"):
        assert r["buffer_diff"] == 0.0 and r["buffers_equal_across_ranks"] and r["outer_diff"] == 0.0


def test_eval_mode_matches(results):
    for r in ranks(results, "eval_then_train"):
        assert r["eval_diff"] == 0.0


def test_graph_break_in_forward_gives_graphs_on_both_sides(results):
    for r in ranks(results, "graph_break_in_forward"):
        assert r["graph_breaks"] == 1 and r["graphs"] >= 2


def test_dynamic_batch_under_ddp_compiles_at_most_twice(results):
    for r in ranks(results, "dynamic_batch"):
        assert r["recompiles"] <= 1


def test_ddp_call_inside_a_compiled_step_breaks_cleanly(results):
    for r in ranks(results, "compiled_step_calls_ddp"):
        # the step's own frame breaks at the DDP call; the wrapped module compiles
        assert r["graph_breaks"] >= 1 and r["graphs"] >= 1


def test_ranks_share_compiling_the_pieces_with_inductor(results):
    rs = ranks(results, "shared_inductor_compile")
    for r in rs:
        assert_matches_eager(r, tol=1e-4)
        assert r["graphs"] == 3 and len(r["rounds"]) == 1
    rounds = [r["rounds"][0] for r in rs]
    claimed = [set(rd["claimed"]) for rd in rounds]
    # each piece compiled from scratch by exactly one rank ...
    assert claimed[0].isdisjoint(claimed[1]) and claimed[0] | claimed[1] == {0, 1, 2}
    for r, rd in zip(rs, rounds):
        assert sorted(rd["claimed"] + rd["waited"]) == [0, 1, 2]
        # ... and taken from AOTAutograd's cache (forward and backward) by the other
        assert r["aot_cache_hits"] == len(rd["waited"]) and r["aot_cache_misses"] == len(rd["claimed"])
