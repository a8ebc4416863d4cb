"""Train a small GPT on synthetic tokens with DistributedDataParallel and bytegraph.

Run on two CPU processes (gloo), from the repository root::

    .venv/bin/torchrun --nproc-per-node 2 --master-addr 127.0.0.1 --master-port 29511 \\
        examples/ddp_train.py --steps 30

Each rank gets its own batches of a synthetic language (every token is
followed by ``(token * 3 + 1) % vocab``), so the loss falls quickly.  The
model is wrapped as ``DDP(bytegraph.compile(model))`` (``--wrap outer``:
``bytegraph.compile(DDP(model))``); under DDP bytegraph cuts the captured
forward graph at DDP's gradient buckets (``--bucket-cap-mb``), so each
bucket's all-reduce runs while the rest of backward computes.  ``--check``
trains an eager DDP copy beside it and reports the largest difference of
losses and parameters.

Options: ``--backend`` (``inductor``, ``aot_eager``, ``eager``), ``--steps``,
``--batch``, ``--seq``, ``--layers``, ``--width``, ``--bucket-cap-mb``,
``--no-split`` (one graph, ``bytegraph.config.ddp_bucket_split = False``).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
import bytegraph  # noqa: E402


class Block(nn.Module):
    """Pre-norm transformer block: causal self-attention, then an MLP."""

    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.ln2 = nn.LayerNorm(width)
        self.fc = nn.Linear(width, 4 * width)
        self.out = nn.Linear(4 * width, width)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=-1)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    """Token and position embeddings, ``layers`` blocks, a final norm and a tied head."""

    def __init__(self, vocab=256, width=128, heads=4, layers=4, seq=64):
        super().__init__()
        self.tok = nn.Embedding(vocab, width)
        self.pos = nn.Embedding(seq, width)
        self.blocks = nn.ModuleList([Block(width, heads) for _ in range(layers)])
        self.ln = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        self.head.weight = self.tok.weight
        for name, p in self.named_parameters():
            if name.endswith("weight") and p.dim() == 2:
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * layers) if name.endswith(("proj.weight", "out.weight"))
                                else 0.02)

    def forward(self, idx, targets):
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln(x))
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def synthetic_batch(generator, batch, seq, vocab):
    """Sequences of the synthetic language: token i+1 = (3 * token i + 1) % vocab."""
    start = torch.randint(0, vocab, (batch, 1), generator=generator)
    steps = torch.arange(seq + 1)
    tokens = start.clone()
    seqs = [start]
    for _ in range(seq):
        tokens = (tokens * 3 + 1) % vocab
        seqs.append(tokens)
    data = torch.cat(seqs, dim=1)[:, :len(steps)]
    return data[:, :-1], data[:, 1:]


def make_model(args, seed=0):
    torch.manual_seed(seed)
    return GPT(vocab=args.vocab, width=args.width, heads=args.heads, layers=args.layers, seq=args.seq)


def wrap(model, args):
    """The model under DDP, compiled by bytegraph as ``--wrap`` says (``none``: eager DDP)."""
    kw = {"bucket_cap_mb": args.bucket_cap_mb} if args.bucket_cap_mb else {}
    if args.wrap == "none":
        return DDP(model, **kw)
    if args.wrap == "outer":
        return bytegraph.compile(DDP(model, **kw), backend=args.backend)
    return DDP(bytegraph.compile(model, backend=args.backend), **kw)


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--backend", default="inductor")
    p.add_argument("--wrap", choices=("inner", "outer", "none"), default="inner")
    p.add_argument("--bucket-cap-mb", type=float, default=0.25,
                   help="DDP's bucket size (MiB); small here so the small model has several buckets")
    p.add_argument("--no-split", action="store_true", help="one graph, not one per DDP bucket")
    p.add_argument("--check", action="store_true", help="train an eager DDP copy beside it and compare")
    return p.parse_args(argv)


def batches_for(rank, args, n):
    """Rank ``rank``'s ``n`` batches (the same on every run)."""
    g = torch.Generator().manual_seed(1000 + rank)
    return [synthetic_batch(g, args.batch, args.seq, args.vocab) for _ in range(n)]


def train(model, args, rank, label, batches=None, aligned=False, report=True):
    """AdamW steps over ``batches`` (default: ``args.steps`` of rank's own); the losses
    and each step's time.  ``aligned``: the ranks start each step together (a barrier)."""
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    losses, times = [], []
    for step, (idx, targets) in enumerate(batches or batches_for(rank, args, args.steps)):
        if aligned:
            dist.barrier()
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model(idx, targets)
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - start)
        losses.append(loss.item())
        if report and rank == 0 and (step % 10 == 0 or step == args.steps - 1):
            print(f"[{label}] step {step:3d}  loss {losses[-1]:.4f}  {times[-1] * 1e3:7.1f} ms", flush=True)
    return losses, times


def main(argv=None):
    args = parse(argv)
    torch.set_num_threads(max(1, int(os.environ.get("OMP_NUM_THREADS", "1"))))
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    bytegraph.config.ddp_bucket_split = not args.no_split
    model = make_model(args)
    compiled = wrap(model, args)
    losses, times = train(compiled, args, rank, f"bytegraph/{args.backend}" if args.wrap != "none" else "eager")
    if rank == 0:
        steady = sorted(times[1:])[len(times[1:]) // 2] if len(times) > 1 else float("nan")
        s = bytegraph.stats()
        print(f"first step {times[0]:.2f} s, median step {steady * 1e3:.1f} ms; "
              f"graphs {s.graphs}, graph breaks {s.graph_breaks}, eager fallbacks {s.eager_fallbacks}")
    if args.check:
        reference = make_model(args)
        args_eager = argparse.Namespace(**{**vars(args), "wrap": "none"})
        ref_losses, _ = train(wrap(reference, args_eager), args_eager, rank, "eager")
        worst_loss = max(abs(a - b) for a, b in zip(losses, ref_losses))
        worst_param = max((a - b).abs().max().item() for a, b in zip(model.parameters(), reference.parameters()))
        if rank == 0:
            print(f"compiled vs eager DDP: largest loss difference {worst_loss:.2e}, "
                  f"largest parameter difference {worst_param:.2e}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
