"""End-to-end demo: capture, compile and time the bundled transformer.

Run with ``make demo`` (which creates ``.venv`` first), or directly with
``.venv/bin/python -m examples.demo`` from the repository root.

Steps:
1. ``bytegraph.explain`` on the model and print its report (graphs, guards,
   graph-break reasons).
2. ``bytegraph.compile(..., backend="inductor")``: time the first call, which
   includes capture and Inductor's code generation, and check the result
   against eager PyTorch.
3. Time eager vs compiled in steady state and print ``bytegraph.stats()``.

Exit status is 0 on success and 1 if the compiled result differs from eager.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

# Make ``examples`` importable when run as a script (``python examples/demo.py``).
_ROOT = str(Path(__file__).resolve().parent.parent)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

import torch  # noqa: E402

import bytegraph  # noqa: E402
from examples.demo_model import Config, build  # noqa: E402

ATOL = 1e-5
RTOL = 1e-4
WARMUP = 10
REPEATS = 50


def median_ms(fn, *args, warmup=WARMUP, repeats=REPEATS):
    for _ in range(warmup):
        fn(*args)
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(*args)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1e3


def banner(title):
    print()
    print(f"== {title} " + "=" * max(0, 70 - len(title)))


def main() -> int:
    torch.manual_seed(0)
    cfg = Config()
    model_fn, params, x = build(cfg)
    print(
        f"demo model: {cfg.n_layers} layers, d_model={cfg.d_model}, "
        f"heads={cfg.n_heads}, d_ff={cfg.d_ff}, input {tuple(x.shape)}; "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads"
    )

    banner("bytegraph.explain")
    report = bytegraph.explain(model_fn)(params, x)
    print(report)

    # Start the compile run from a clean slate so the stats printed at the
    # end describe it alone.
    bytegraph.reset()

    banner("bytegraph.compile(backend='inductor')")
    fast = bytegraph.compile(model_fn, backend="inductor")
    start = time.perf_counter()
    got = fast(params, x)
    first_call_s = time.perf_counter() - start
    print(f"compile + first call: {first_call_s:.2f} s")

    expected = model_fn(params, x)
    max_diff = (got - expected).abs().max().item()
    if not torch.allclose(got, expected, atol=ATOL, rtol=RTOL):
        print(
            f"MISMATCH: compiled output differs from eager "
            f"(max abs diff {max_diff:.3e}, atol={ATOL}, rtol={RTOL})",
            file=sys.stderr,
        )
        return 1
    print(f"matches eager: max abs diff {max_diff:.3e} (atol={ATOL}, rtol={RTOL})")

    banner(f"steady state (median of {REPEATS} calls after {WARMUP} warm-up)")
    eager_ms = median_ms(model_fn, params, x)
    compiled_ms = median_ms(fast, params, x)
    print(f"{'variant':<22}{'median ms':>12}{'vs eager':>12}")
    print(f"{'eager':<22}{eager_ms:>12.3f}{1.0:>11.2f}x")
    print(f"{'bytegraph/inductor':<22}{compiled_ms:>12.3f}{eager_ms / compiled_ms:>11.2f}x")

    banner("bytegraph.stats()")
    stats = bytegraph.stats()
    for key, value in stats.as_dict().items():
        print(f"{key:<20}{value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
