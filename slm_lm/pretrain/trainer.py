"""The pre-training run: its settings, the training loop, validation, the checkpoint, the card and the export.

Writes `out_dir`/checkpoint.pt (resume: the model, the optimizer, the loop state, every random-number state
the training draws from, and what the run is: kind, model config, seed, tokenizer), curve.tsv (budget minutes,
updates, tokens, train and valid CE; with `content_loss` the train column is the whole objective per
query-stream token) and the scoring-ready `out_dir`/model/ (see `export`) with its card (training.json), all
refreshed at every validation (model/ as a whole: `install_model`); with `keep_models`, each validation's
export is also kept in `out_dir`/snapshots/UPDATES/ (`keep_snapshot`). One run writes into `out_dir` at a
time (`slm_lm.common.fileio.exclusive_dir_lock`); resuming a checkpoint with another kind, model shape, dropout, seed
or tokenizer is refused.
"""
import pickle
import random
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from slm_lm.common.errors import InputError, os_problem
from slm_lm.common.fileio import check_readable, exclusive_dir_lock, new_directory, read_text_lines, write_atomic
from slm_lm.common.outputs import check_output_dir, finish_interrupted, staged_outputs
from slm_lm.common.progress import progress_bar
from slm_lm.model import directory as model_dir
from slm_lm.model.config import LMConfig
from slm_lm.model.kinds import model_from_config
from slm_lm.model.precision import autocast, resolve_dtype
from slm_lm.model.tokenizer import Tokenizer
from slm_lm.pretrain.corpus import PackedRows, Sentences, load_corpus, pack_rows
from slm_lm.pretrain.schedule import Budget, learning_rate

COMMAND = "slm-pretrain"
CHECKPOINT_FILE = "checkpoint.pt"
MODEL_DIR = "model"  # the scoring-ready export, replaced as a whole at every validation
SNAPSHOTS_DIR = "snapshots"  # with keep_models: SNAPSHOTS_DIR/UPDATES/, the export of each validation, kept
CURVE_FILE = "curve.tsv"
CURVE_HEADER = "minutes\tupdates\ttokens\ttrain_ce\tvalid_ce\n"
PROGRESS_EVERY = 20  # updates between refreshes of the progress bar
COMPILE_CHOICES = ("auto", "on", "off")  # auto: on for CUDA


@dataclass
class PretrainSettings:
    """What `pretrain` trains, on what, for how long and how: `slm-pretrain train` builds it from its options.

    The budget is `minutes` of `clock` time (wall, or this process's CPU time) or, with `minutes` 0,
    `updates` updates; `deadline_minutes` of wall-clock time (0: none) end this process whatever the budget
    (a later run resumes). Each update trains on `batch_tokens` tokens: rows of `row_tokens` tokens (0: the
    model's `max_positions`), each holding whole sentences (`slm_lm.pretrain.corpus.pack_rows`; a sentence
    longer than a row is cut to it, and the card counts them). `compile` compiles the step's forward and
    backward (`torch.compile`, before the budget starts; auto: on CUDA). Validation runs every
    `valid_every_minutes` of `clock` time, on the first `valid_sentences` sentences (0: all). `content_loss`
    (SLM only) is the weight of the content streams' neighbour-prediction loss, taken at a `content_sample`
    share of positions (`SlidingLM.loss`);
    validation reports the query stream's CE. `whole_words` trains (and validates) the objective of
    whole-word scoring: each piece predicted without the later pieces of its own word
    (`LanguageModel.token_logprobs`); the model is then scored that way. `init` starts a new run from a
    saved model's weights (see `initialise`); a resumed run ignores it. `dtype` is the autocast dtype, or
    auto (`slm_lm.model.precision.resolve_dtype`); the card records the resolved one. `keep_models` keeps the
    export of every validation (`keep_snapshot`); it changes no training, so it is no part of the run's
    identity (`run_identity`): a run may be resumed with or without it.
    """

    kind: str
    data_dir: Path  # train.ids.xz, valid.ids.xz and the tokenizer files
    out_dir: Path
    model_args: dict  # LMConfig fields but kind and vocab_size
    minutes: float = 0.0
    updates: int = 0
    clock: str = "wall"
    deadline_minutes: float = 0.0
    peak_lr: float = 1e-3
    warmup: float = 0.05  # share of the budget for the linear warm-up
    batch_tokens: int = 4096  # tokens per update, padding included: a whole number of rows
    row_tokens: int = 0  # 0: max_positions
    compile: str = "auto"
    device: str = "cpu"
    dtype: str = "float32"
    threads: int = 0  # CPU threads (0: torch's default)
    seed: int = 0
    valid_every_minutes: float = 10.0
    valid_sentences: int = 0
    content_loss: float = 0.0
    content_sample: float = 1.0
    whole_words: bool = False
    init: str = ""
    keep_models: bool = False

    def check(self) -> None:
        """Raise ValueError on settings that cannot work together (the budget is `Budget`'s to check)."""
        if self.content_loss and self.kind != "slm":
            raise ValueError(f"content_loss is an SLM option; kind is {self.kind!r}")
        if not 0.0 < self.content_sample <= 1.0:
            raise ValueError(f"content_sample must be in (0, 1], got {self.content_sample}")
        max_positions = self.model_args.get("max_positions", LMConfig.max_positions)
        if isinstance(max_positions, int) and max_positions < 3:
            raise ValueError(f"--max-positions {max_positions}: too small for one piece between <s> and </s> "
                             "(at least 3)")
        if self.row_tokens and isinstance(max_positions, int) and not 3 <= self.row_tokens <= max_positions:
            raise ValueError(f"--row-tokens {self.row_tokens}: must be between 3 and --max-positions {max_positions}")
        row = self.row_tokens or max_positions
        if isinstance(row, int) and self.batch_tokens < row:
            raise ValueError(f"--batch-tokens {self.batch_tokens}: under one row of {row} tokens (--row-tokens, "
                             "or --max-positions)")
        if self.compile not in COMPILE_CHOICES:
            raise ValueError(f"compile must be one of {COMPILE_CHOICES}, got {self.compile!r}")
        if self.threads < 0:
            raise ValueError(f"--threads {self.threads}: must be a positive number of threads (0: torch's default)")

    def loss_options(self) -> dict:
        """Keyword arguments of the model's training loss beyond the paper's."""
        return dict(content_weight=self.content_loss, content_sample=self.content_sample) if self.content_loss else {}


@torch.no_grad()
def validation_ce(model, rows: PackedRows, device, dtype, word_table=None) -> float:
    """Cross-entropy (nats per scored token) of the model's training objective on the batches of `rows`
    (`word_table`: per token id, whether it begins a word, for the whole-word objective)."""
    model.eval()
    total, count = torch.zeros((), device=device, dtype=torch.float64), 0
    for batch in range(len(rows)):
        tokens, sentences = rows[batch]
        with autocast(device, dtype):
            loss, _ = model.packed_loss(tokens, sentences, None if word_table is None else word_table[tokens])
        total += loss
        count += rows.predicted[batch]
    model.train()
    return float(total) / max(1, count)


def new_model_and_optimizer(settings: PretrainSettings, vocab_size: int, device: torch.device):
    """The freshly initialised model (seeded with `settings.seed`) and its AdamW optimizer (no weight decay on
    biases and norms)."""
    config = LMConfig(kind=settings.kind, vocab_size=vocab_size, **settings.model_args)
    torch.manual_seed(settings.seed)
    model = model_from_config(config).to(device)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
                                  lr=settings.peak_lr, betas=(0.9, 0.98), eps=1e-6,
                                  fused=device.type in ("cuda", "cpu"))  # one kernel, and no step count read back
    return model, optimizer


def new_loop_state() -> dict:
    """Where a new run starts: budget seconds spent, updates, tokens seen, epoch, batch position in the epoch,
    the budget seconds of the next validation, and the curve's rows so far (curve.tsv is written from them)."""
    return {"spent": 0.0, "updates": 0, "tokens": 0, "epoch": 0, "position": 0, "next_valid": 0.0, "curve": []}


def curve_rows(path, updates: int) -> list:
    """The rows of the curve file `path` up to `updates` (for a checkpoint saved before the curve was kept
    in it: a row written after the checkpoint, by a run killed before its next one, is dropped)."""
    if not path.exists():
        return []
    rows = [line for number, line in read_text_lines(path) if number > 1]
    return [row for row in rows if row.count("\t") == 4 and row.split("\t")[1].isdigit()
            and int(row.split("\t")[1]) <= updates]


def rng_states(device: torch.device) -> dict:
    """Every random-number state the training draws from: torch's CPU generator (dropout, masks, samples),
    the device's CUDA generator, python's and numpy's global ones. The batch order needs none: it is drawn
    from a generator seeded with the seed and the epoch (`_TrainingRun.train`), the position in it is in the
    loop state."""
    numpy_state = np.random.get_state()
    states = {"torch": torch.get_rng_state(), "python": random.getstate(),
              "numpy": [numpy_state[0], torch.from_numpy(numpy_state[1].astype(np.int64)), *numpy_state[2:]]}
    if device.type == "cuda":
        states["cuda"] = torch.cuda.get_rng_state(device)
    return states


def set_rng_states(states: dict, device: torch.device) -> None:
    """Restore what `rng_states` saved."""
    torch.set_rng_state(states["torch"].cpu())
    version, internal, gauss = states["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, *rest = states["numpy"]
    np.random.set_state((name, keys.cpu().numpy().astype(np.uint32), *rest))
    if device.type == "cuda" and "cuda" in states:
        torch.cuda.set_rng_state(states["cuda"].cpu(), device)


def run_identity(settings: "PretrainSettings", config: LMConfig, tokenizer: Tokenizer) -> dict:
    """What a checkpoint must share with the run that resumes it: kind, model config, seed, tokenizer."""
    return {"config": config.to_dict(), "seed": settings.seed, "tokenizer": tokenizer.digest()}


def save_checkpoint(path, model, optimizer, state: dict, rng: dict | None = None, identity: dict | None = None) -> None:
    """Write the model, the optimizer, the loop state (see `new_loop_state`), the random-number states
    (`rng_states`) and the run's identity (`run_identity`) to `path` atomically."""
    saved = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "state": state}
    if rng is not None:
        saved["rng"] = rng
    if identity is not None:
        saved["identity"] = identity
    write_atomic(path, model_dir.torch_bytes(saved))


def read_checkpoint(path, device) -> dict:
    """The checkpoint saved by `save_checkpoint` (weights only: no code runs); unreadable -> InputError."""
    check_readable(path)  # a regular file with content: an empty one would say nothing (EOFError)
    try:
        return torch.load(path, map_location=device, weights_only=True)
    except (OSError, EOFError, RuntimeError, ValueError, pickle.UnpicklingError) as e:
        reason = os_problem(e, path) if isinstance(e, OSError) else (str(e).strip().splitlines() or [""])[0]
        raise InputError(f"{path}: cannot read the checkpoint, truncated or garbled? ({type(e).__name__}"
                         f"{': ' + reason if reason else ''}); move it away to train from the start") from None


def check_identity(path, saved: dict, identity: dict) -> None:
    """Refuse to resume the checkpoint `path` (as read, `saved`) in a run of another kind, model config,
    seed or tokenizer; a checkpoint saved before identities were recorded is not checked here."""
    theirs = saved.get("identity")
    if not isinstance(theirs, dict):
        return
    old, new = theirs.get("config", {}), identity["config"]
    if old.get("kind") != new["kind"]:
        raise InputError(f"{path}: a checkpoint of kind {old.get('kind')}, this run's --kind is {new['kind']}; "
                         f"resume it with --kind {old.get('kind')} or give another --out")
    option = {"vocab_size": "the tokenizer's vocabulary"}
    differences = [f"{k}={old.get(k)} (this run: {option.get(k, '--' + k.replace('_', '-'))} {new[k]})"
                   for k in new if old.get(k) != new[k]]
    if theirs.get("seed") != identity["seed"]:
        differences.append(f"seed={theirs.get('seed')} (this run: --seed {identity['seed']})")
    if differences:
        raise InputError(f"{path}: a checkpoint of another {new['kind']}: " + ", ".join(differences) +
                         "; resume it with its options or give another --out")
    if theirs.get("tokenizer") != identity["tokenizer"]:
        raise InputError(f"{path}: trained with another tokenizer (digest {theirs.get('tokenizer')}) than the "
                         f"--data one ({identity['tokenizer']}); resume it with its data or give another --out")


def load_checkpoint(path, model, optimizer, device, identity: dict | None = None) -> dict:
    """Restore the model, the optimizer and the random-number states saved by `save_checkpoint`; returns the
    loop state saved with them. With `identity` (`run_identity`), a checkpoint of another run is refused
    (InputError) before anything is restored."""
    saved = read_checkpoint(path, device)
    if not isinstance(saved, dict) or not {"model", "optimizer", "state"} <= set(saved):
        raise InputError(f"{path}: not a checkpoint of slm-pretrain")
    if identity is not None:
        check_identity(path, saved, identity)
    try:
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
    except (RuntimeError, ValueError, KeyError) as e:
        first = str(e).strip().splitlines()[-1].strip()
        raise InputError(f"{path}: does not fit this run's {model.config.kind} ({first}); resume it with its "
                         "options or give another --out") from None
    if "rng" in saved:
        set_rng_states(saved["rng"], torch.device(device))
    return saved["state"]


def training_card(settings: PretrainSettings, model, device: torch.device, dtype: str, train: list,
                  valid: list, row_tokens: int) -> dict:
    """The settings part of the training card (training.json); `record_validation` adds the progress."""
    s = settings
    card = {"kind": s.kind, "parameters": sum(p.numel() for p in model.parameters()),
            **({"budget_updates": s.updates} if s.updates else {"budget_minutes": s.minutes}), "clock": s.clock,
            "peak_lr": s.peak_lr, "warmup": s.warmup, "batch_tokens": s.batch_tokens, "row_tokens": row_tokens,
            "cut_sentences": sum(len(sentence) + 2 > row_tokens for sentence in train),
            "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
            "threads": torch.get_num_threads(), "dtype": dtype, "train_sentences": len(train),
            "train_tokens_per_epoch": sum(len(sentence) + 1 for sentence in train), "valid_sentences": len(valid),
            "seed": s.seed, **s.loss_options()}
    if s.init:
        card["init"] = s.init
    if s.whole_words:
        card["whole_words"] = True
    return card


def record_validation(card: dict, state: dict, valid_ce: float, lr: float) -> None:
    """Add the progress at a validation (loop state, validation CE, current learning rate) to the card."""
    card.update(updates=state["updates"], tokens_seen=state["tokens"], spent_minutes=state["spent"] / 60,
                epochs=state["tokens"] / card["train_tokens_per_epoch"], valid_ce=valid_ce, lr=lr)


def pretrain(settings: PretrainSettings) -> dict:
    """Train `settings.kind` on `settings.data_dir`/{train,valid}.ids.xz for its budget into `settings.out_dir`,
    resuming from the checkpoint there if there is one; returns the card of the last validation."""
    settings.check()
    with new_directory(settings.out_dir), exclusive_dir_lock(settings.out_dir, COMMAND):
        return _TrainingRun(settings).train()


def training_data(data_dir: Path, valid_sentences: int = 0) -> tuple:
    """(the tokenizer, the training sentences, the first `valid_sentences` validation sentences (0: all)) of
    `data_dir`, each corpus checked against the tokenizer (`load_corpus`)."""
    tokenizer = Tokenizer.from_dir(data_dir)
    valid = load_corpus(data_dir / "valid.ids.xz", tokenizer)
    return (tokenizer, load_corpus(data_dir / "train.ids.xz", tokenizer),
            valid[:valid_sentences] if valid_sentences else valid)


class _TrainingRun:
    """One process of a pre-training run: the model, its optimizer and data, the loop state, the budget and the card."""

    def __init__(self, settings: PretrainSettings, data: tuple | None = None):
        """`data`: (tokenizer, training sentences, validation sentences) of `settings.data_dir` when already read
        (`training_data`)."""
        s = self.settings = settings
        data_dir, self.out_dir = Path(s.data_dir), Path(s.out_dir)
        finish_interrupted(self.out_dir, COMMAND)  # an export that a kill interrupted: completed or undone
        finish_interrupted(self.out_dir / SNAPSHOTS_DIR, COMMAND)  # likewise a snapshot
        if s.threads:
            torch.set_num_threads(s.threads)
        self.device = torch.device(s.device)
        self.dtype = resolve_dtype(s.dtype, self.device)
        self.tokenizer, self.train_set, self.valid_set = data or training_data(data_dir, s.valid_sentences)
        self.word_table = torch.tensor(self.tokenizer.word_start_ids()).to(self.device) if s.whole_words else None
        self.model, self.optimizer = new_model_and_optimizer(s, self.tokenizer.vocab_size, self.device)
        self.identity = run_identity(s, self.model.config, self.tokenizer)
        checkpoint = self.out_dir / CHECKPOINT_FILE
        if checkpoint.exists():
            self.state = load_checkpoint(checkpoint, self.model, self.optimizer, self.device, self.identity)
            self.state.setdefault("curve", curve_rows(self.out_dir / CURVE_FILE, self.state["updates"]))
            self.write_curve()  # the checkpoint's rows: none written after it by a run killed before the next
        else:
            check_output_dir("--out", self.out_dir, [MODEL_DIR, SNAPSHOTS_DIR], (), COMMAND)  # of no run here
            self.state = new_loop_state()
            if s.init:
                initialise(self.model, s.init, self.tokenizer)
        if s.keep_models:  # snapshots/ a file, or not writable: refused now, not at the first validation
            check_output_dir("--keep-models", self.out_dir / SNAPSHOTS_DIR, (), (), COMMAND)
        self.row_tokens = s.row_tokens or self.model.config.max_positions
        self.rows_per_batch = s.batch_tokens // self.row_tokens
        self.train_sentences = Sentences(self.train_set, self.device)
        self.valid_rows = self.packed(Sentences(self.valid_set, self.device), None)
        self.card = training_card(s, self.model, self.device, self.dtype, self.train_set, self.valid_set,
                                  self.row_tokens)
        # the deadline counts from here, the compile included; the budget counts the updates only
        self.budget = Budget(60.0 * s.minutes, s.clock, self.state["spent"], 60.0 * s.deadline_minutes, s.updates)
        self.step_loss = self.compiled_loss() if s.compile == "on" or (s.compile == "auto" and
                                                                       self.device.type == "cuda") else self.loss
        self.loss_sum = torch.zeros((), device=self.device, dtype=torch.float64)  # since the last validation
        self.loss_tokens = 0

    def loss(self, tokens, sentences):
        """The model's training loss and its token count (tensors) on a batch of packed rows."""
        words = None if self.word_table is None else self.word_table[tokens]
        with autocast(self.device, self.dtype):
            return self.model.packed_loss(tokens, sentences, words, **self.settings.loss_options())

    def compiled_loss(self):
        """`loss` compiled whole, forward and backward (one shape: no recompilation), before the budget starts:
        the compile time goes on the card. The trial step's random draws and gradients are undone."""
        compiled = torch.compile(self.loss, fullgraph=True, dynamic=False)
        began = time.monotonic()
        cuda = [torch.cuda.current_device()] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=cuda):
            tokens, sentences = self.valid_rows[0]
            loss_sum, n = compiled(tokens, sentences)
            (loss_sum / n.clamp(min=1)).backward()
        self.optimizer.zero_grad(set_to_none=True)
        self.card["compile_seconds"] = round(time.monotonic() - began, 1)
        return compiled

    def train(self) -> dict:
        """Train until the budget (or the deadline) is spent, validating on the way; returns the card."""
        s, state = self.settings, self.state
        self.model.train()
        with progress_bar(total=s.updates or round(self.budget.seconds), unit="update" if s.updates else "s",
                          desc=s.kind if s.updates else f"{s.kind} ({s.clock} s)", mininterval=30) as bar:
            while True:
                epoch = self.epoch_rows(state["epoch"])
                while state["position"] < len(epoch):
                    fraction = self.budget.fraction(state["updates"])
                    if fraction >= 1.0 or self.budget.spent >= state["next_valid"]:
                        self.validate_and_save()
                        if fraction >= 1.0:
                            return self.card
                    self.update(epoch, state["position"])
                    if state["updates"] % PROGRESS_EVERY == 0:
                        bar.n = state["updates"] if s.updates else round(self.budget.spent)
                        bar.refresh()
                state["epoch"] += 1
                state["position"] = 0

    def packed(self, sentences: Sentences, rng: random.Random | None) -> PackedRows:
        """`sentences` packed into batches of rows, in the order drawn from `rng` (None: in order)."""
        rows = pack_rows([min(n + 2, self.row_tokens) for n in sentences.lengths], self.row_tokens, rng)
        return PackedRows(sentences, rows, self.row_tokens, self.rows_per_batch, self.tokenizer.eos_id)

    def epoch_rows(self, epoch: int) -> PackedRows:
        """The training sentences of epoch `epoch` packed into rows, in an order drawn from the seed and the epoch."""
        return self.packed(self.train_sentences, random.Random(self.settings.seed * 1000 + epoch))

    def update(self, epoch: PackedRows, batch: int) -> None:
        """One optimizer step on batch `batch` of the epoch's packed rows, its time counted by the budget. Nothing
        is read back from the device: the loss is summed there until the next validation."""
        s, state, model = self.settings, self.state, self.model
        self.budget.resume()
        for group in self.optimizer.param_groups:
            group["lr"] = learning_rate(s.peak_lr, self.budget.share(state["updates"]), s.warmup)
        loss_sum, n = self.step_loss(*epoch[batch])
        (loss_sum / n.clamp(min=1)).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.loss_sum += loss_sum.detach()
        self.budget.pause()
        state["updates"] += 1
        state["tokens"] += epoch.predicted[batch]
        state["position"] += 1
        self.loss_tokens += epoch.predicted[batch]

    def write_curve(self) -> None:
        """Write curve.tsv from the loop state's rows."""
        write_atomic(self.out_dir / CURVE_FILE, CURVE_HEADER + "".join(row + "\n" for row in self.state["curve"]))

    def validate_and_save(self) -> None:
        """Validate and add the curve's row (a run resumed at its last validation, a finished run run again,
        reuses that row); save the checkpoint, then the curve from it, then the card and the exported model
        (and, with `keep_models`, its snapshot). The card counts the seconds this process has spent so (up to the
        checkpoint): `validation_seconds`, the price of the validation cadence."""
        began = time.monotonic()
        s, state = self.settings, self.state
        rows = state["curve"]
        if rows and rows[-1].split("\t")[1] == str(state["updates"]):
            valid_ce = float(rows[-1].split("\t")[4])
        else:
            valid_ce = validation_ce(self.model, self.valid_rows, self.device, self.dtype, self.word_table)
            train_ce = float(self.loss_sum) / self.loss_tokens if self.loss_tokens else float("nan")
            self.loss_sum.zero_()
            self.loss_tokens = 0
            state["spent"] = self.budget.spent
            rows.append(f"{state['spent'] / 60:.2f}\t{state['updates']}\t{state['tokens']}\t{train_ce:.4f}\t"
                        f"{valid_ce:.4f}")
        state["next_valid"] = state["spent"] + 60.0 * s.valid_every_minutes
        save_checkpoint(self.out_dir / CHECKPOINT_FILE, self.model, self.optimizer, state,
                        rng_states(self.device), self.identity)
        self.write_curve()
        self.card["validation_seconds"] = round(self.card.get("validation_seconds", 0.0) + time.monotonic() - began, 2)
        record_validation(self.card, state, valid_ce, self.optimizer.param_groups[0]["lr"])
        install_model(self.out_dir, self.model, self.tokenizer, self.card, s.whole_words)
        if s.keep_models:
            keep_snapshot(self.out_dir, state["updates"], self.model, self.tokenizer, self.card, s.whole_words)


def install_model(out_dir, model, tokenizer: Tokenizer, card: dict, whole_words: bool = False) -> None:
    """Export into `out_dir`/model/ as a whole: a kill leaves the earlier export or this one, never a mix (the
    next run's `finish_interrupted` completes or undoes it)."""
    with staged_outputs("--out", out_dir, [MODEL_DIR], {MODEL_DIR}, COMMAND) as staging:
        export(model, tokenizer, staging / MODEL_DIR, card, whole_words)


def keep_snapshot(out_dir, updates: int, model, tokenizer: Tokenizer, card: dict, whole_words: bool = False) -> None:
    """Export into `out_dir`/snapshots/`updates`/ unless it exists (a resumed run validating again at those
    updates leaves it as it is). It appears whole or not at all: written in a hidden directory inside
    snapshots/, then renamed (a kill leaves that directory, which the next run's `finish_interrupted` removes)."""
    snapshots, name = Path(out_dir) / SNAPSHOTS_DIR, str(updates)
    if (snapshots / name).exists():
        return
    with staged_outputs("--keep-models", snapshots, [name], (), COMMAND) as staging:
        export(model, tokenizer, staging / name, card, whole_words)


def export(model, tokenizer: Tokenizer, directory, card: dict, whole_words: bool = False) -> None:
    """Write a scoring-ready directory: fp16 `model.safetensors`, config.json, tokenizer, training.json.
    A model trained on whole words is scored on whole words by default (config.json's scorer section)."""
    scorer_options = {"normalize": True, **({"whole_words": True} if whole_words else {})}
    model_dir.export(directory, model, tokenizer, scorer_options, card)


def initialise(model, spec: str, tokenizer: Tokenizer) -> None:
    """Copy the weights of a saved model (a shipped name or a model directory) into `model`.

    The tokenizer and every parameter's shape must match; the kind may differ where the parameters are
    the same (SLM, CLM, MLM and T-TA share one backbone: a CLM's or an MLM's weights can start an SLM, as
    the paper's BERT initialisation does).
    """
    from slm_lm.scoring.scorer import Scorer

    source = Scorer.from_pretrained(spec)
    if source.tokenizer.digest() != tokenizer.digest():
        raise InputError(f"--init {spec}: its tokenizer is not the one of the training data")
    theirs, ours = source.model.state_dict(), model.state_dict()
    misfits = sorted(set(theirs) ^ set(ours)) or [k for k in ours if theirs[k].shape != ours[k].shape]
    if misfits:
        raise InputError(f"--init {spec}: its {source.model.config.kind} weights do not fit this "
                         f"{model.config.kind} (first difference: {misfits[0]}); give the same shape options")
    model.load_state_dict({k: v.to(ours[k].dtype) for k, v in theirs.items()})
