"""Why the first petri-tiny-mdm runs learnt nothing: the CPU checks behind the docstring of
experiments/train_tiny_mdm.py (small models, a few minutes each on one CPU thread).

    python experiments/mdm_plateau.py bigram                   # what context is worth: a left-neighbour bigram
    python experiments/mdm_plateau.py context                  # a masked position's logits see other tokens
    python experiments/mdm_plateau.py copy --vocab 64          # one token repeated, 25 % masked: learnt?
    python experiments/mdm_plateau.py run --arch bert --lr 3e-3 --steps 400        # real corpus (needs data/)
    python experiments/mdm_plateau.py run --arch modernbert --lr 3e-3 --steps 800 [--tie-embeddings]

``run`` trains hidden 64 x 2 layers (2 heads), prefix 16 + canvas 32, batch 64, 30 warm-up steps,
t ~ U[0, 1] with train_tiny_mdm's loss, and prints the held-out masked cross-entropy at t = 0.25 on
256 fixed held-out windows every 100 steps (the held-out unigram cross-entropy is 6.748 nats).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import train_tiny_mdm as mdm  # noqa: E402
from train_tiny import REPO, load_tokenizer, pack, read_lines, sample_starts  # noqa: E402

SPECIAL = {"pad": 0, "eos": 1, "bos": 2, "unk": 3}


def small_model(arch: str, vocab_size: int, tie: bool, canvas: int = 32):
    args = mdm.parse_args(["--out", "unused", "--arch", arch, "--hidden", "64", "--layers", "2", "--heads", "2",
                           "--intermediate", "256", "--canvas", str(canvas),
                           "--tie-embeddings" if tie else "--no-tie-embeddings"])
    torch.manual_seed(0)
    return mdm.build_model(args, vocab_size, SPECIAL, vocab_size - 1)


def check_bigram(data: Path) -> None:
    """Held-out cross-entropy of a left-neighbour bigram (0.7) mixed with the add-one unigram (0.3)."""
    tok, special = load_tokenizer(REPO / "assets" / "petri-tiny")
    train, _ = pack(tok, read_lines(data / "corpus.txt", None), special["eos"])
    held, _ = pack(tok, read_lines(data / "heldout.txt", None), special["eos"])
    v = tok.get_vocab_size()
    counts = np.zeros((v, v), np.float32)
    np.add.at(counts, (train[:-1], train[1:]), 1)
    unigram = (np.bincount(train, minlength=v) + 1.0) / (len(train) + v)
    bigram = 0.7 * counts / np.maximum(counts.sum(1, keepdims=True), 1) + 0.3 * unigram[None]
    print(f"held-out bigram CE {-np.log(bigram[held[:-1], held[1:]]).mean():.3f} nats, "
          f"unigram {-np.log(unigram[held]).mean():.3f}")


def check_context() -> None:
    """Change token 5 of a 40-token sequence; how far do the logits at masked position 20 move?"""
    for arch in ("bert", "modernbert"):
        model = small_model(arch, 4097, tie=True).eval()
        x = torch.randint(4, 4096, (2, 40))
        x[:, 20] = 4096
        y = x.clone()
        y[:, 5] = (y[:, 5] + 7) % 4096
        with torch.no_grad():
            a, b = model(input_ids=x).logits, model(input_ids=y).logits
        print(f"{arch}: max change at masked position 20 {float((a[:, 20] - b[:, 20]).abs().max()):.2e}, "
              f"at position 5 itself {float((a[:, 5] - b[:, 5]).abs().max()):.2e}")


def check_copy(arch: str, lr: float, vocab: int, steps: int) -> None:
    """32 copies of one random token, 25 % masked: the masked ones are the visible ones' token."""
    model = small_model(arch, vocab + 1, tie=True)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95))
    gen = torch.Generator().manual_seed(0)
    for step in range(steps + 1):
        for group in opt.param_groups:
            group["lr"] = lr * min(1.0, (step + 1) / 30)
        x = torch.randint(4, vocab, (32, 1), generator=gen).repeat(1, 32)
        noisy, masked = mdm.mask_canvas(x, torch.full((32,), 0.25), vocab, gen)
        loss = F.cross_entropy(model(input_ids=noisy).logits[masked], x[masked])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 50 == 0:
            print(f"step {step} masked CE {loss.item():.3f}", flush=True)


def run(args) -> None:
    prefix, canvas, window = 16, 32, 48
    tok, special = load_tokenizer(REPO / "assets" / "petri-tiny")
    mask_id = tok.get_vocab_size()
    vocab_size = mask_id + 1
    train, train_docs = pack(tok, read_lines(args.data / "corpus.txt", 30000), special["eos"])
    held, held_docs = pack(tok, read_lines(args.data / "heldout.txt", None), special["eos"])
    model = small_model(args.arch, vocab_size, args.tie_embeddings, canvas)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.01)
    rng, gen = np.random.default_rng(0), torch.Generator().manual_seed(0)
    starts = sample_starts(np.random.default_rng(1), 256, window, len(held), held_docs, 1.0)
    heldout = torch.from_numpy(held[starts[:, None] + np.arange(window)])

    def evaluate() -> float:
        model.eval()
        with torch.no_grad():
            noisy, masked = mdm.mask_canvas(heldout[:, prefix:], torch.full((256,), 0.25), mask_id,
                                            torch.Generator().manual_seed(5))
            logits = mdm.canvas_logits(model, heldout[:, :prefix], noisy)
            ce = float(F.cross_entropy(logits[masked], heldout[:, prefix:][masked]))
        model.train()
        return ce

    started = time.time()
    for step in range(args.steps + 1):
        for group in opt.param_groups:
            group["lr"] = args.lr * min(1.0, (step + 1) / 30)
        batch = torch.from_numpy(train[sample_starts(rng, 64, window, len(train), train_docs, 0.75)[:, None]
                                       + np.arange(window)])
        clean = batch[:, prefix:]
        t = torch.rand(64, generator=gen).clamp(min=1e-3)
        noisy, masked = mdm.mask_canvas(clean, t, mask_id, gen)
        logits = mdm.canvas_logits(model, batch[:, :prefix], noisy)
        ce = F.cross_entropy(logits.reshape(-1, vocab_size), clean.reshape(-1), reduction="none").view_as(clean)
        loss = ((ce * masked).sum(-1) / masked.sum(-1)).mean()
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step % 100 == 0:
            print(f"step {step} loss {loss.item():.3f} held-out CE at t=0.25 {evaluate():.3f} "
                  f"({time.time() - started:.0f} s)", flush=True)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("check", choices=("bigram", "context", "copy", "run"))
    ap.add_argument("--arch", choices=("bert", "modernbert"), default="bert")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--vocab", type=int, default=64, help="copy: the vocabulary size")
    ap.add_argument("--tie-embeddings", action=argparse.BooleanOptionalAction, default=False)
    ap.add_argument("--data", type=Path, default=REPO / "data")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    if args.check == "bigram":
        check_bigram(args.data)
    elif args.check == "context":
        check_context()
    elif args.check == "copy":
        check_copy(args.arch, args.lr, args.vocab, args.steps)
    else:
        run(args)


if __name__ == "__main__":
    main()
