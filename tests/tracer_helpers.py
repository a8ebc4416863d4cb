"""Helpers in another module, inlined by the tracer tests (their globals are this module's)."""

import torch

SCALE = 3.0
OFFSET = torch.tensor([1.0, -1.0])


def scaled(x, factor=2):
    return x * factor * SCALE


def with_global_tensor(x):
    return x + OFFSET


def apply_twice(fn, x):
    return fn(fn(x))


def make_adder(k):
    def add(x):
        return x + k
    return add


def depth_sum(x, n):
    if n == 0:
        return x
    return depth_sum(x * 2, n - 1) + n
