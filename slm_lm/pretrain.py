"""Pre-training on a tokenised corpus under a time (or update) budget: the trainer of the shipped models.

ESPnet's trainer (`slm-lm-train`) is the recipe's path. This one is for pre-training where ESPnet is
not installed (a lent GPU machine) or where a fixed *time* budget is the unit of comparison: the
learning rate follows the fraction of the budget spent (linear warm-up, then linear decay to zero), so
kinds given the same minutes get the same schedule. Batches are sentences of similar length under a
padded-token budget, as ESPnet's `numel` batches; bf16/fp16 autocast with the loss in float32.

Corpus format (`encode_corpus`): the token ids of every sentence, pieces only, each sentence followed
by 0 (`<blank>`, never a piece), as little-endian uint16, lzma-compressed: `NAME.ids.xz`.
"""
import lzma
import os
import random
import time
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from slm_lm import model_dir
from slm_lm.config import LMConfig
from slm_lm.errors import InputError
from slm_lm.fileio import atomic_open, write_atomic
from slm_lm.models import model_from_config
from slm_lm.precision import autocast, resolve_dtype
from slm_lm.tokenizer import Tokenizer



def encode_corpus(text, tokenizer: Tokenizer, out, max_sentences: int = 0) -> dict:
    """Encode `text` (one normalised sentence a line) into `out` (.ids.xz); returns counts.

    With `max_sentences`, only the first that many lines are encoded (a subset small enough to travel).
    """
    if tokenizer.vocab_size > 65535:
        raise InputError(f"vocabulary of {tokenizer.vocab_size} does not fit uint16 ids")
    ids, sentences = [], 0
    with open(text, encoding="utf-8-sig") as handle:
        for number, line in enumerate(tqdm(handle, desc=f"encode {Path(text).name}", unit="sent"), 1):
            if max_sentences and sentences == max_sentences:
                break
            line = line.strip()
            if not line:
                raise InputError(f"{text}:{number}: empty line")
            try:
                pieces = tokenizer.encode(line)
            except InputError as e:
                raise InputError(f"{text}:{number}: {e}") from None
            ids.extend(pieces)
            ids.append(0)
            sentences += 1
    array = np.asarray(ids, dtype="<u2")
    with atomic_open(out, "wb") as handle:
        handle.write(lzma.compress(array.tobytes(), preset=9 | lzma.PRESET_EXTREME))
    return {"sentences": sentences, "pieces": int(len(array) - sentences), "bytes": os.path.getsize(out)}


def load_corpus(path) -> list:
    """Sentences of an `.ids.xz` corpus as a list of int64 numpy arrays (pieces only)."""
    try:
        array = np.frombuffer(lzma.decompress(Path(path).read_bytes()), dtype="<u2").astype(np.int64)
    except (OSError, lzma.LZMAError) as e:
        raise InputError(f"{path}: cannot read the encoded corpus: {e}") from None
    if len(array) == 0 or array[-1] != 0:
        raise InputError(f"{path}: not an encoded corpus (must end with a 0 separator)")
    ends = np.flatnonzero(array == 0)
    starts = np.concatenate([[0], ends[:-1] + 1])
    return [array[s:e] for s, e in zip(starts, ends)]


def batches(lengths: list, max_tokens: int, rng: random.Random, pool: int = 100):
    """Index lists of sentences of similar length; each batch pads to at most `max_tokens` tokens.

    The order is shuffled, then sorted by length inside pools of about `pool` batches, and the
    batches are shuffled: every sentence is used once per pass.
    """
    order = list(range(len(lengths)))
    rng.shuffle(order)
    mean = max(1, sum(lengths) // max(1, len(lengths)))
    chunk = max(1, pool * max_tokens // mean)
    out = []
    for start in range(0, len(order), chunk):
        part = sorted(order[start : start + chunk], key=lambda i: lengths[i])
        batch = []
        for i in part:  # ascending lengths: the newest sentence is the longest
            if batch and (len(batch) + 1) * lengths[i] > max_tokens:
                out.append(batch)
                batch = []
            batch.append(i)
        if batch:
            out.append(batch)
    rng.shuffle(out)
    return out


def collate(sentences: list, index: list, sos_eos: int, max_positions: int):
    """(tokens [B, T], lengths [B]) for `<s> pieces </s>` rows, pieces cut to fit `max_positions`."""
    rows = [sentences[i][: max_positions - 2] for i in index]
    n = np.array([len(r) for r in rows])
    tokens = np.zeros((len(rows), int(n.max()) + 2), dtype=np.int64)
    row_of = np.repeat(np.arange(len(rows)), n)
    column = np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n) + 1
    tokens[row_of, column] = np.concatenate(rows)
    tokens[:, 0] = sos_eos
    tokens[np.arange(len(rows)), n + 1] = sos_eos
    return torch.from_numpy(tokens), torch.from_numpy(n + 2)


def learning_rate(peak: float, fraction: float, warmup: float) -> float:
    """Linear warm-up over the first `warmup` of the budget, then linear decay to 0 at its end."""
    if fraction < warmup:
        return peak * fraction / warmup
    return peak * max(0.0, 1.0 - fraction) / max(1e-9, 1.0 - warmup)


@torch.no_grad()
def evaluate(model, sentences, sos_eos, max_tokens, device, dtype, word_table=None) -> float:
    """Cross-entropy (nats per scored token) of the model's training objective on `sentences`
    (`word_table`: per token id, whether it begins a word, for the whole-word objective)."""
    model.eval()
    total, count = 0.0, 0
    lengths = [len(s) + 2 for s in sentences]
    for index in batches(lengths, max_tokens, random.Random(0)):
        tokens, lens = collate(sentences, index, sos_eos, model.config.max_positions)
        words = None if word_table is None else word_table[tokens].to(device)
        with autocast(device, dtype):
            loss, n = model.loss(tokens.to(device), lens.to(device), words)
        total += float(loss)
        count += n
    model.train()
    return total / max(1, count)


def export(model, tokenizer: Tokenizer, directory, card: dict, whole_words: bool = False) -> None:
    """Write a scoring-ready directory: fp16 `model.safetensors`, config.json, tokenizer, training.json.
    A model trained on whole words is scored on whole words by default (config.json's scorer section)."""
    model_dir.export(directory, model, tokenizer, {"normalize": True, **({"whole_words": True} if whole_words else {})},
                     card)


def initialise(model, spec: str, tokenizer: Tokenizer) -> None:
    """Copy the weights of a saved model (a shipped name or a model directory) into `model`.

    The tokenizer and every parameter's shape must match; the kind may differ where the parameters are
    the same (SLM, CLM, MLM and T-TA share one backbone: a CLM's or an MLM's weights can start an SLM, as
    the paper's BERT initialisation does).
    """
    from slm_lm.scorer import Scorer

    source = Scorer.from_pretrained(spec)
    if source.tokenizer.digest() != tokenizer.digest():
        raise InputError(f"--init {spec}: its tokenizer is not the one of the training data")
    theirs, ours = source.model.state_dict(), model.state_dict()
    misfits = sorted(set(theirs) ^ set(ours)) or [k for k in ours if theirs[k].shape != ours[k].shape]
    if misfits:
        raise InputError(f"--init {spec}: its {source.model.config.kind} weights do not fit this "
                         f"{model.config.kind} (first difference: {misfits[0]}); give the same shape options")
    model.load_state_dict({k: v.to(ours[k].dtype) for k, v in theirs.items()})


class Budget:
    """Training spent against a budget, validation left out: seconds of the wall clock or of this
    process's CPU time, or, with `max_updates`, a number of updates (the same schedule on any machine).

    `spent` is the clock time spent, whatever the budget. `share(updates)` is the share of the budget spent
    after `updates` updates (the learning-rate schedule's clock). `fraction(updates)` is the same, or with
    `deadline` (wall-clock seconds for this process, validation included) the larger of the two shares: the run ends when it reaches 1, so
    it always ends by its deadline, and a run stopped by its deadline resumes (from its checkpoint) where
    its schedule left off.
    """

    def __init__(self, seconds: float, clock: str = "wall", spent: float = 0.0, deadline: float = 0.0,
                 max_updates: int = 0):
        if clock not in ("wall", "cpu"):
            raise ValueError(f"clock must be 'wall' or 'cpu', got {clock!r}")
        if (seconds > 0) == (max_updates > 0):
            raise ValueError(f"give a budget of seconds or of updates, not both or neither "
                             f"(seconds={seconds}, max_updates={max_updates})")
        self.seconds, self.spent, self.deadline = seconds, spent, deadline
        self.max_updates = max_updates
        self._now = time.process_time if clock == "cpu" else time.monotonic
        self._started = time.monotonic()
        self._mark = None

    def resume(self):
        self._mark = self._now()

    def pause(self):
        if self._mark is not None:
            self.spent += self._now() - self._mark
            self._mark = None

    def share(self, updates: int) -> float:
        if self.max_updates:
            return updates / self.max_updates
        return (self.spent + (self._now() - self._mark if self._mark is not None else 0.0)) / self.seconds

    def fraction(self, updates: int) -> float:
        share = self.share(updates)
        if self.deadline:
            share = max(share, (time.monotonic() - self._started) / self.deadline)
        return share


def pretrain(kind: str, data_dir, out_dir, minutes: float, model_args: dict, peak_lr: float = 1e-3,
             warmup: float = 0.05, batch_tokens: int = 4096, device: str = "cpu", dtype: str = "float32",
             valid_every_min: float = 10.0, valid_sentences: int = 0, clock: str = "wall",
             deadline_min: float = 0.0, seed: int = 0, threads: int = 0, content_loss: float = 0.0,
             content_sample: float = 1.0, init: str = "", whole_words: bool = False, max_updates: int = 0) -> dict:
    """Train `kind` on `data_dir`/{train,valid}.ids.xz for `minutes` of `clock` time, or (`minutes` 0)
    for `max_updates` updates; resumable. Validation runs every `valid_every_min` minutes of `clock` time.

    `content_loss` (SLM only) is the weight of the content streams' neighbour-prediction loss, taken at
    a `content_sample` share of positions (`SlidingLM.loss`); validation reports the query stream's CE.
    `init` starts a new run from a saved model's weights (see `initialise`); a resumed run ignores it.
    `whole_words` trains (and validates) the objective of whole-word scoring: each piece predicted without
    the later pieces of its own word (`LanguageModel.token_logprobs`); the model is then scored that way.
    `dtype` is the autocast dtype, or auto (`slm_lm.precision.resolve_dtype`); the card records the resolved one.

    Writes `out_dir`/checkpoint.pt (resume), curve.tsv (budget minutes, updates, tokens, train and
    valid CE; with `content_loss` the train column is the whole objective per query-stream token) and
    the scoring-ready `out_dir`/model/ (see `export`), refreshed at every validation.
    """
    if content_loss and kind != "slm":
        raise ValueError(f"content_loss is an SLM option; kind is {kind!r}")
    if not 0.0 < content_sample <= 1.0:
        raise ValueError(f"content_sample must be in (0, 1], got {content_sample}")
    data_dir, out_dir = Path(data_dir), Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if threads:
        torch.set_num_threads(threads)
    dev = torch.device(device)
    dtype = resolve_dtype(dtype, dev)
    tokenizer = Tokenizer.from_dir(data_dir)
    word_table = torch.tensor(tokenizer.word_start_ids()) if whole_words else None
    train, valid = load_corpus(data_dir / "train.ids.xz"), load_corpus(data_dir / "valid.ids.xz")
    if valid_sentences:
        valid = valid[:valid_sentences]
    cfg = LMConfig(kind=kind, vocab_size=tokenizer.vocab_size, **model_args)
    torch.manual_seed(seed)
    model = model_from_config(cfg).to(dev)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
                                  lr=peak_lr, betas=(0.9, 0.98), eps=1e-6, fused=dev.type == "cuda")
    state = {"spent": 0.0, "updates": 0, "tokens": 0, "epoch": 0, "position": 0, "next_valid": 0.0}
    checkpoint, curve = out_dir / "checkpoint.pt", out_dir / "curve.tsv"
    if checkpoint.exists():
        saved = torch.load(checkpoint, map_location=dev, weights_only=True)
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        state = saved["state"]
    elif init:
        initialise(model, init, tokenizer)
    if not curve.exists():
        write_atomic(curve, "minutes\tupdates\ttokens\ttrain_ce\tvalid_ce\n")
    lengths = [len(s) + 2 for s in train]
    budget = Budget(60.0 * minutes, clock, state["spent"], 60.0 * deadline_min, max_updates)
    card = {"kind": kind, "parameters": sum(p.numel() for p in model.parameters()),
            **({"budget_updates": max_updates} if max_updates else {"budget_minutes": minutes}), "clock": clock,
            "peak_lr": peak_lr, "warmup": warmup, "batch_tokens": batch_tokens,
            "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
            "threads": torch.get_num_threads(), "dtype": dtype, "train_sentences": len(train),
            "train_tokens_per_epoch": sum(lengths) - len(lengths), "valid_sentences": len(valid), "seed": seed}
    loss_options = dict(content_weight=content_loss, content_sample=content_sample) if content_loss else {}
    card.update(loss_options)
    if init:
        card["init"] = init
    if whole_words:
        card["whole_words"] = True
    running, running_n = 0.0, 0
    bar = tqdm(total=max_updates or round(budget.seconds), desc=kind if max_updates else f"{kind} ({clock} s)",
               unit="update" if max_updates else "s", mininterval=30)
    model.train()
    while True:
        order = batches(lengths, batch_tokens, random.Random(seed * 1000 + state["epoch"]))
        while state["position"] < len(order):
            fraction = budget.fraction(state["updates"])
            if fraction >= 1.0 or budget.spent >= state["next_valid"]:
                valid_ce = evaluate(model, valid, tokenizer.eos_id, batch_tokens, dev, dtype, word_table)
                train_ce = running / running_n if running_n else float("nan")
                running, running_n = 0.0, 0
                state["spent"] = budget.spent
                with open(curve, "a") as handle:
                    handle.write(f"{budget.spent / 60:.2f}\t{state['updates']}\t{state['tokens']}\t"
                                 f"{train_ce:.4f}\t{valid_ce:.4f}\n")
                state["next_valid"] = budget.spent + 60.0 * valid_every_min
                card.update(updates=state["updates"], tokens_seen=state["tokens"], spent_minutes=budget.spent / 60,
                            epochs=state["tokens"] / card["train_tokens_per_epoch"], valid_ce=valid_ce,
                            lr=optimizer.param_groups[0]["lr"])
                export(model, tokenizer, out_dir / "model", card, whole_words)
                with atomic_open(checkpoint, "wb") as handle:
                    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "state": state}, handle)
                if fraction >= 1.0:
                    bar.close()
                    return card
            budget.resume()
            for group in optimizer.param_groups:
                group["lr"] = learning_rate(peak_lr, budget.share(state["updates"]), warmup)
            tokens, lens = collate(train, order[state["position"]], tokenizer.eos_id, cfg.max_positions)
            words = None if word_table is None else word_table[tokens].to(dev, non_blocking=True)
            with autocast(dev, dtype):
                loss_sum, n = model.loss(tokens.to(dev, non_blocking=True), lens.to(dev, non_blocking=True), words,
                                         **loss_options)
            (loss_sum / n).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            budget.pause()
            state["updates"] += 1
            state["tokens"] += n
            state["position"] += 1
            if state["updates"] % 20 == 0:
                running += float(loss_sum.detach()) / n
                running_n += 1
                bar.n = state["updates"] if max_updates else round(budget.spent)
                bar.refresh()
        state["epoch"] += 1
        state["position"] = 0
