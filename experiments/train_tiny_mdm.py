"""Train the small masked-diffusion model that Concept Petri Dish ships beside petri-tiny
(assets/petri-tiny-mdm): a ``ModernBertForMaskedLM`` (pre-norm; ``--arch bert``: ``BertForMaskedLM``)
on the same corpus and tokenizer (``<mask>`` added after its 4,096 tokens).

Objective (masked diffusion, as LLaDA trains: arXiv 2502.09992, eq. 3): a window of the packed
corpus is a clean prefix of P tokens (P drawn per batch in [--min-prefix, --max-prefix]) and a
canvas of --canvas tokens; per example t ~ U[0, 1], every canvas token is replaced by ``<mask>``
with probability t (at least one), the model reads prefix + canvas as one bidirectional sequence,
and the loss is the cross-entropy at the masked positions weighted by 1/t with t the realised mask
rate (that is, per example the mean over its masked positions; weighting by the drawn t instead let
the rare examples with t near 0 and one forced mask dominate). The petri sampler
(``petri.engine.families.masked``) reads a prompt + canvas the same way.

    python experiments/build_corpus.py --out data --no-tokenizer
    python experiments/train_tiny_mdm.py --data data --out runs/petri-tiny-mdm --device cuda --max-steps 1500 --minutes 3
    python experiments/train_tiny_mdm.py --smoke        # a few CPU steps of a tiny model
    bash experiments/issue22_mdm_device.sh              # the GPU sweep that picks the shipped checkpoint

Outputs in --out: ``config.json`` (with ``canvas_length`` and ``petri_sampler``, the sampler's
defaults), ``model.safetensors`` (bf16), the tokenizer files, ``metrics.json`` (held-out masked
cross-entropy per masked token at t = 0.25/0.5/0.75/1.0, the held-out unigram cross-entropy beside
it, the loss curve and the arguments).

Why the first runs learnt nothing (held-out unigram cross-entropy 6.748 nats; a left-neighbour
bigram mixed with the unigram reaches 4.67 on the held-out text, ``experiments/mdm_plateau.py
bigram``, so context is worth 2 nats at least):

- H200, BertForMaskedLM hidden 256 x 6 layers (5.92 M parameters, tied embeddings), batch 512,
  lr 1e-3, loss weighted by the drawn 1/t: 1,222 steps in 46 s, held-out masked CE 6.726 / 6.739 /
  6.747 / 6.741 at t = 0.25 / 0.5 / 0.75 / 1.0, the logits the same at every position and for every
  input. The same with the loss as now: 4,500 steps in 140 s, 6.725 / 6.738 / 6.746 / 6.740.
- CPU, ModernBertForMaskedLM hidden 128 x 2, batch 32, lr 2e-3: 187 steps, 6.736 at t = 0.25
  (too few steps to tell).

Checked on the CPU with ``experiments/mdm_plateau.py`` (one thread; hidden 64 x 2 layers, 2 heads,
prefix 16, canvas 32, batch 64, 30 warm-up steps, held-out masked CE at t = 0.25 on 256 fixed
windows; every figure below is that script's output, deterministic run to run):

- Nothing in the pipeline is broken. ``mdm_plateau.py context``: at initialisation changing token 5
  moves the logits at masked position 20 (by 5e-4 in BERT, 2e-4 in ModernBERT; position 5's own by
  0.6-0.8), so attention carries context; the mask id (4096) is inside the 4,097-row embedding.
  ``mdm_plateau.py copy --vocab 64`` (one token repeated 32 times, 25 % masked, BERT, lr 1e-3): masked
  CE 4.18 -> 2.34 -> 0.41 -> 0.04 after 0 / 100 / 200 / 300 steps.
- Every recipe first sits on the unigram plateau (the token frequencies, the same logits at every
  position: where the H200 runs ended). Post-norm BERT did not leave it: ``run --arch bert --lr 3e-3``
  (untied) 6.84 / 6.85 / 6.86 / 6.83 after 100 / 200 / 300 / 400 steps; ``run --arch bert --lr 1e-3
  --tie-embeddings`` (the H200 recipe, small) 6.83 / 6.83 / 6.81 / 6.81. Pre-norm ModernBERT left it
  after about 150 steps and kept going: ``run --arch modernbert --lr 3e-3`` (untied) 6.83 / 6.66 /
  6.44 / 6.30 / 6.19 / 6.05 / 5.94 / 5.85 after 100 ... 800 steps; with ``--tie-embeddings`` 6.83 /
  6.80 / 6.68 / 6.59 / 6.45 / 6.36 / 6.28 / 6.20 (slower here; on the H200 below tied was a little
  ahead, so tying does not decide it).
- So the first runs failed on the architecture: post-norm BERT stays on the plateau at each of these
  learning rates; not on the objective, the mask id, the corpus windows or bf16 (the CPU runs are
  float32 and show the same).

On one H200 (``experiments/issue22_mdm_device.sh``: recipes side by side for 2.3 minutes each while
the GPU tests ran beside them, about 600 steps each, hidden 256 x 6, batch 512, ``--max-steps 0``),
held-out masked CE at t = 0.25 / 0.5 / 0.75 / 1.0 (unigram 6.748):

- BERT untied lr 3e-4, 1,000 warm-up steps: 6.709 / 6.726 / 6.739 / 6.744 (662 steps): still on the plateau;
- ModernBERT tied lr 3e-3: 3.741 / 4.434 / 5.337 / 6.652 (630); untied lr 6e-3, 300 warm-up steps: 3.794 / 4.470 / 5.358 /
  6.651 (635); untied 3e-3: 3.893 / 4.534 / 5.387 / 6.652 (595); untied 1e-3: 4.406 / 4.916 / 5.609 /
  6.674 (582).
- The shipped checkpoint (assets/petri-tiny-mdm, its model card has the command): ModernBERT tied lr
  3e-3, 200 warm-up steps, alone on the GPU, ``--max-steps 1500``: 1,500 steps in 68.8 s, 2.987 /
  3.891 / 5.024 / 6.614. A run with ``--max-steps 0 --minutes 2.1`` stopped at 915 steps (3.433 at
  t = 0.25): the estimate from steps 10-40 (136 ms a step) is far above the later steps' ~55 ms on a
  GPU, so give ``--max-steps`` there.

The defaults are now that recipe (ModernBERT, lr 3e-3, 200 warm-up steps, tied embeddings).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from subject_data import is_subject_data, load_subject  # noqa: E402
from train_tiny import REPO, load_tokenizer, pack, read_lines, sample_starts, unigram_stats  # noqa: E402

NOISE_LEVELS = (0.25, 0.5, 0.75, 1.0)
MASK = "<mask>"


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description="Train the petri-tiny-mdm masked-diffusion model.")
    ap.add_argument("--data", type=Path, default=REPO / "data")
    ap.add_argument("--tokenizer", type=Path, default=REPO / "assets" / "petri-tiny")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--arch", choices=("modernbert", "bert"), default="modernbert",
                    help="ModernBertForMaskedLM (pre-norm, rotary positions) or BertForMaskedLM (post-norm; it "
                         "stayed at the unigram distribution in every run: see the docstring)")
    ap.add_argument("--tie-embeddings", action=argparse.BooleanOptionalAction, default=True,
                    help="share the input embedding with the output layer (the shipped checkpoint's; default on)")
    ap.add_argument("--canvas", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--intermediate", type=int, default=1024)
    ap.add_argument("--max-positions", type=int, default=256)
    ap.add_argument("--min-prefix", type=int, default=4)
    ap.add_argument("--max-prefix", type=int, default=96)
    ap.add_argument("--doc-start-frac", type=float, default=0.75)
    ap.add_argument("--max-docs", type=int, default=None)
    ap.add_argument("--prose-share", type=float, default=0.2,
                    help="with a subject corpus (train.jsonl): share of batches drawn from the prose, not the pairs")
    ap.add_argument("--batch-size", type=int, default=None, help="default 512 on CUDA, 16 on CPU")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.1)
    ap.add_argument("--warmup-steps", type=int, default=200)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--grad-clip", type=float, default=1.0)
    ap.add_argument("--max-steps", type=int, default=4000,
                    help="steps of the cosine schedule; 0: estimated from --minutes after 40 steps (not reproducible; "
                         "on a GPU it underestimates: the first steps are slow)")
    ap.add_argument("--minutes", type=float, default=3.0, help="training time budget (hard stop)")
    ap.add_argument("--log-every", type=int, default=100)
    ap.add_argument("--eval-windows", type=int, default=2048)
    ap.add_argument("--eval-prefix", type=int, default=48)
    ap.add_argument("--eval-batch-size", type=int, default=256)
    ap.add_argument("--sampler-steps", type=int, default=32, help="the checkpoint's default unmasking steps")
    ap.add_argument("--sampler-temperature", type=float, default=0.5,
                    help="the checkpoint's default Gumbel-max temperature (0: argmax, so two samples with the same "
                         "anchor layout come out identical)")
    args = ap.parse_args(argv)
    if args.smoke:
        for key, value in dict(hidden=32, layers=2, heads=2, intermediate=64, batch_size=8, warmup_steps=2,
                               log_every=2, eval_windows=16, eval_batch_size=16, max_docs=2000, max_steps=12).items():
            setattr(args, key, value)
        args.device = "cpu" if args.device == "auto" else args.device
        args.out = args.out or Path(tempfile.mkdtemp(prefix="petri-tiny-mdm-smoke-"))
    if args.out is None:
        ap.error("--out is required (except with --smoke)")
    if args.max_prefix + args.canvas > args.max_positions:
        ap.error("--max-prefix + --canvas must fit in --max-positions")
    return args


def build_model(args, vocab_size: int, special: dict, mask_id: int):
    if args.arch == "bert":
        from transformers import BertConfig, BertForMaskedLM

        config = BertConfig(
            vocab_size=vocab_size, hidden_size=args.hidden, num_hidden_layers=args.layers,
            num_attention_heads=args.heads, intermediate_size=args.intermediate,
            max_position_embeddings=args.max_positions, type_vocab_size=1, pad_token_id=special["pad"],
            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, tie_word_embeddings=args.tie_embeddings,
        )
        model_class = BertForMaskedLM
    else:
        from transformers import ModernBertConfig, ModernBertForMaskedLM

        config = ModernBertConfig(
            vocab_size=vocab_size, hidden_size=args.hidden, num_hidden_layers=args.layers,
            num_attention_heads=args.heads, intermediate_size=args.intermediate,
            max_position_embeddings=args.max_positions, pad_token_id=special["pad"], eos_token_id=special["eos"],
            bos_token_id=special["bos"], cls_token_id=special["bos"], sep_token_id=special["eos"],
            local_attention=args.max_positions, global_attn_every_n_layers=1, tie_word_embeddings=args.tie_embeddings,
        )
        model_class = ModernBertForMaskedLM
    config.canvas_length = args.canvas
    config.mask_token_id = mask_id
    config.petri_sampler = {"max_denoising_steps": args.sampler_steps, "temperature": args.sampler_temperature}
    return model_class(config)


def mask_canvas(clean: torch.Tensor, t: torch.Tensor, mask_id: int, generator: torch.Generator):
    """Each canvas token masked with probability t (B,); at least one per row. → (noisy, masked)."""
    b, c = clean.shape
    masked = torch.rand(b, c, generator=generator, device=clean.device) < t[:, None]
    first = torch.randint(0, c, (b,), generator=generator, device=clean.device)
    masked[torch.arange(b, device=clean.device), first] = True
    return torch.where(masked, torch.full_like(clean, mask_id), clean), masked


def canvas_logits(model, prefix: torch.Tensor, noisy: torch.Tensor) -> torch.Tensor:
    return model(input_ids=torch.cat([prefix, noisy], dim=1)).logits[:, prefix.shape[1]:]


@torch.no_grad()
def masked_cross_entropy(model, groups, args, mask_id, device, autocast) -> dict:
    """Held-out cross-entropy per masked token (nats) at fixed mask rates and masks. ``groups``:
    [(P, windows (n, P + canvas) int64 tensor), ...]."""
    model.eval()
    results = {}
    for level in NOISE_LEVELS:
        gen = torch.Generator().manual_seed(args.seed + int(level * 100))
        total, count = 0.0, 0
        for p, windows in groups:
            for i in range(0, len(windows), args.eval_batch_size):
                w = windows[i: i + args.eval_batch_size]
                prefix, clean = w[:, :p], w[:, p:]
                noisy, masked = mask_canvas(clean, torch.full((len(w),), level), mask_id, gen)
                with autocast():
                    logits = canvas_logits(model, prefix.to(device), noisy.to(device)).float()
                ce = F.cross_entropy(logits[masked.to(device)], clean.to(device)[masked.to(device)], reduction="sum")
                total, count = total + float(ce), count + int(masked.sum())
        results[str(level)] = total / count
    model.train()
    return results


def evaluate(model, stream, doc_starts, args, mask_id, device, autocast) -> dict:
    """On windows of the packed corpus with a prefix of ``--eval-prefix`` tokens."""
    window = args.eval_prefix + args.canvas
    rng = np.random.default_rng(args.seed + 1000)
    starts = sample_starts(rng, args.eval_windows, window, len(stream), doc_starts, 1.0)
    windows = torch.from_numpy(stream[starts[:, None] + np.arange(window)])
    return masked_cross_entropy(model, [(args.eval_prefix, windows)], args, mask_id, device, autocast)


def evaluate_pairs(model, held, args, mask_id, device, autocast) -> dict:
    """On held-out (prompt, answer) pairs: each canvas after its own prompt."""
    groups = [(p, torch.from_numpy(held.stream[starts[:, None] + np.arange(p + args.canvas)]))
              for p, starts in held.heldout_batches(args.eval_windows, args.seed + 1000)]
    return masked_cross_entropy(model, groups, args, mask_id, device, autocast)


def save(model, tokenizer_dir: Path, out: Path) -> int:
    from transformers import AutoTokenizer

    out.mkdir(parents=True, exist_ok=True)
    model.to(torch.bfloat16).save_pretrained(str(out))
    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    tokenizer.add_special_tokens({"mask_token": MASK})
    tokenizer.save_pretrained(str(out))
    return (out / "model.safetensors").stat().st_size


def train(args) -> dict:
    device = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    np_rng = np.random.default_rng(args.seed)
    tok, special = load_tokenizer(args.tokenizer)
    mask_id = tok.get_vocab_size()  # <mask> is added after the trained vocabulary
    vocab_size = mask_id + 1
    subject = is_subject_data(args.data)
    if subject:  # (prompt, answer) pairs and prose: experiments/subject_data.py
        windows, held = load_subject(args.data, tok, special, args.canvas, args.max_prefix, args.max_docs)
        train_stream, held_stream = windows.stream, held.stream
    else:
        train_stream, train_docs = pack(tok, read_lines(args.data / "corpus.txt", args.max_docs), special["eos"])
        held_stream, held_docs = pack(tok, read_lines(args.data / "heldout.txt", args.max_docs), special["eos"])
    batch_size = args.batch_size or (512 if device.type == "cuda" else 16)
    use_bf16 = device.type == "cuda"

    def autocast():
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=use_bf16)

    model = build_model(args, vocab_size, special, mask_id).to(device).train()
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: {n_params:,} parameters; device {device}; {len(train_stream):,} train tokens", flush=True)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and "embeddings" not in n]
    no_decay = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and "embeddings" not in n)]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}], lr=args.lr, betas=(0.9, 0.95))
    gen = torch.Generator(device=device).manual_seed(args.seed)
    stream_dev = torch.from_numpy(train_stream).to(device)

    total = args.max_steps or 10**9

    def lr_at(step: int) -> float:
        if step < args.warmup_steps:
            return args.lr * (step + 1) / args.warmup_steps
        progress = min(1.0, (step - args.warmup_steps) / max(1, total - args.warmup_steps))
        return args.lr * (args.min_lr_frac + (1 - args.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * progress)))

    losses, step, stop_reason, started = [], 0, "max_steps", time.time()
    while step < total:
        if time.time() - started > args.minutes * 60:
            stop_reason = "time_budget"
            break
        if step == 10:
            timed_from = time.time()
        if not args.max_steps and step == 40:  # the first steps pay warm-up costs: time steps 10..40
            per_step = (time.time() - timed_from) / 30
            total = step + int((args.minutes * 60 - (time.time() - started)) / per_step)
            print(f"estimated {total} steps from {per_step * 1000:.1f} ms/step", flush=True)
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step)
        if subject:
            p, starts = windows.draw(np_rng, batch_size, prose_share=args.prose_share, min_prefix=args.min_prefix,
                                     max_prefix=args.max_prefix, doc_start_frac=args.doc_start_frac)
        else:
            p = int(np_rng.integers(args.min_prefix, args.max_prefix + 1))
            starts = sample_starts(np_rng, batch_size, p + args.canvas, len(train_stream), train_docs,
                                   args.doc_start_frac)
        idx = torch.from_numpy(starts).to(device)[:, None] + torch.arange(p + args.canvas, device=device)
        batch = stream_dev[idx]
        prefix, clean = batch[:, :p], batch[:, p:]
        t = torch.rand(batch_size, generator=gen, device=device).clamp(min=1e-3)
        noisy, masked = mask_canvas(clean, t, mask_id, gen)
        with autocast():
            logits = canvas_logits(model, prefix, noisy).float()
        ce = F.cross_entropy(logits.reshape(-1, vocab_size), clean.reshape(-1), reduction="none").view_as(clean)
        # per sample the mean over its masked positions: the 1/t weight with t the realised mask rate
        loss = ((ce * masked).sum(-1) / masked.sum(-1)).mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
        optimizer.step()
        if step % args.log_every == 0:
            losses.append([step, loss.item()])
            print(f"step {step} loss {loss.item():.3f} ({time.time() - started:.0f} s)", flush=True)
        step += 1
    train_seconds = time.time() - started
    metrics = {"heldout_masked_ce": evaluate_pairs(model, held, args, mask_id, device, autocast) if subject
               else evaluate(model, held_stream, held_docs, args, mask_id, device, autocast)}
    metrics.update(unigram_stats(train_stream, held_stream, vocab_size))
    metrics.update(steps=step, schedule_steps=total, stop_reason=stop_reason, train_seconds=round(train_seconds, 1), parameters=n_params,
                   loss_curve=losses, device=str(device) + (f" ({torch.cuda.get_device_name()})" if use_bf16 else ""),
                   versions={"torch": torch.__version__, "transformers": __import__("transformers").__version__})
    metrics["checkpoint_bytes"] = save(model, args.tokenizer, args.out)
    metrics["args"] = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    (args.out / "metrics.json").write_text(json.dumps(metrics, indent=2))
    print("held-out masked CE:", metrics["heldout_masked_ce"], "unigram:",
          round(metrics["heldout_unigram_cross_entropy_nats"], 3), flush=True)
    return metrics


def main(argv=None) -> dict:
    return train(parse_args(argv))


if __name__ == "__main__":
    main()
