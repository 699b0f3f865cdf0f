"""Discriminative fine-tuning of an LM on N-best lists with the MWER loss (:mod:`slm_lm.pretrain.mwer`): the data, the
held-out split, the training loop, its checkpoint, curve and card, and the rescoring that follows.

The training sets' utterances are split by speaker (the id up to its first ``-``, as LibriSpeech's
``spk-chapter-utt``): a seeded ``held_out`` share of the speakers is never trained on. At every validation the
held-out lists are rescored with the current weights: their WER at the lambda (and word bonus, from ``beta_grid``)
tuned on them and at the loss's lambda form the curve; the model with the lowest held-out WER is exported to
``out_dir``/model/ (early stopping: ``patience`` validations without a better one end the run). Without ``lam`` the
loss's lambda is the one tuned on the held-out lists with the starting model. Test sets, if any, are then rescored
by :func:`slm_lm.rescoring.rescore.rescore` with every weight tuned on the held-out lists only
(``out_dir``/rescore/).

``out_dir`` holds checkpoint.pt (the model, the optimizer, the loop state, every random-number state; a run
killed at any moment resumes from its last validation to the very weights of an unbroken run), curve.tsv,
model/ (replaced as a whole) with its card training.json, and rescore/.
"""
import json
import math
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from slm_lm.common.errors import InputError
from slm_lm.common.fileio import exclusive_dir_lock, new_directory, read_json, write_atomic
from slm_lm.common.outputs import check_output_dir, finish_interrupted, staged_outputs
from slm_lm.common.progress import progress_bar
from slm_lm.model import directory as model_dir
from slm_lm.model.precision import autocast
from slm_lm.pretrain.mwer import mixed_loss, mwer_per_utterance
from slm_lm.pretrain.schedule import learning_rate
from slm_lm.pretrain.trainer import rng_states, set_rng_states
from slm_lm.rescoring.nbest import NbestSet
from slm_lm.rescoring.scored_set import ScoreColumn, ScoredSet, build_scored_set
from slm_lm.rescoring.weight_search import tune
from slm_lm.scoring.interface import length_batches

COMMAND = "slm-mwer-train"
CHECKPOINT_FILE, CURVE_FILE, MODEL_DIR = "checkpoint.pt", "curve.tsv", "model"
RESCORE_DIR, CACHE_DIR = "rescore", "lm_cache"
CURVE_HEADER = ("updates\ttrain_mwer\ttrain_ce\theldout_mwer\theldout_wer\theldout_lambda\theldout_wer_at_loss_lambda"
                "\theldout_beta\n")
ONE_PASS_KINDS = ("slm", "clm", "bilm", "tta")  # an MLM needs one pass per token for a sentence's score
# --trainable: what it trains, and which parameters (by name and tensor) that is
TRAINABLE = {"all": ("every parameter", lambda name, p: True),
             "bitfit": ("the biases and LayerNorm parameters only (BitFit, Ben Zaken et al. 2022)",
                        lambda name, p: p.dim() == 1),
             "head-bias": ("the output layer's bias only: a per-token (unigram) correction of the LM's scores",
                           lambda name, p: name == "head.bias")}


@dataclass
class MwerSettings:
    """What `mwer_train` fine-tunes (`model`, a spec), on which loss and how. ``fixed``: score columns and
    their weights in the totals; ``lam``: the LM's weight in the loss (None: tuned on the held-out lists at
    the start); ``scale``: the score scale of the softmax; ``lm_weight``: the weight of the LM's own loss on
    the references. The budget is ``updates`` (0: ``epochs`` passes over the training utterances)."""

    model: str
    out_dir: Path
    am_weights: dict | None = None
    fixed: dict = field(default_factory=dict)  # score column -> weight
    lam: float | None = None
    scale: float = 1.0
    lm_weight: float = 0.5
    lr: float = 3e-5
    warmup: float = 0.1
    epochs: float = 1.0
    updates: int = 0
    batch_tokens: int = 4096
    held_out: float = 0.1
    valid_every: int = 50
    patience: int = 3
    lambda_grid: list = field(default_factory=lambda: [round(0.1 * i, 10) for i in range(51)])
    beta_grid: list = field(default_factory=lambda: [0.0])  # word bonus of the tunings, never in the loss
    seed: int = 0
    device: str = "cpu"
    dtype: str = "float32"
    trainable: str = "all"  # one of TRAINABLE

    def identity(self) -> dict:
        """What a checkpoint must share with the run that resumes it: all but where it runs, and the word-bonus
        grid when it is the default (no bonus), so that checkpoints written before the option existed resume."""
        return {k: v for k, v in asdict(self).items()
                if k not in ("out_dir", "device") and not (k == "beta_grid" and v == [0.0])}


@dataclass
class Utterance:
    """One utterance's N-best as training sees it: encoded hypotheses, the fixed part of their totals, their
    word errors and word counts, the encoded reference."""

    uttid: str
    speaker: str
    hyps: list  # token ids per hypothesis, <s> .. </s>
    fixed: list
    errors: list
    n_words: list
    ref: list
    ref_words: int
    texts: list


def batches(lengths: list, max_tokens: int, rng: random.Random, pool: int = 100):
    """Index lists of utterances of similar cost; each batch holds at most `max_tokens` tokens.

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



def speaker_of(uttid: str) -> str:
    """The speaker of an utterance id: the id up to its first ``-`` (the whole id when it has none)."""
    return uttid.split("-", 1)[0]


def encode_all(scorer, texts: list, places: list) -> list:
    """``scorer.encode`` of `texts`; an error names the place (``places[i]``) of the text it is about."""
    try:
        return scorer.encode(texts)
    except InputError as err:
        if err.index is None:
            raise
        raise InputError(f"{places[err.index]}: {str(err).partition(': ')[2]}") from None


def training_utterances(sets: list[NbestSet], scorer, am_weights, fixed: dict) -> list[Utterance]:
    """The utterances of the training `sets` (their ids unique over the sets), each hypothesis encoded and
    scored AM + sum of the `fixed` columns times their weights."""
    columns = [ScoreColumn(name) for name in fixed]
    seen, out = {}, []
    for nbest in sets:
        scored = build_scored_set(nbest, columns, am_weights)
        fixed_totals = scored.am + sum(w * scored.lm[j] for j, w in enumerate(fixed.values()))
        texts, places = [], []
        for u, uttid in enumerate(scored.uttids):
            if uttid in seen:
                raise InputError(f"{nbest.hyps[uttid][0].where}: utterance {uttid!r} is also in {seen[uttid]}")
            seen[uttid] = nbest.source
            texts += scored.texts[u] + [nbest.refs[uttid]]
            places += [h.where for h in nbest.hyps[uttid]] + [f"{nbest.source}: reference of {uttid!r}"]
        encoded = iter(encode_all(scorer, texts, places))
        for u, uttid in enumerate(scored.uttids):
            n = len(scored.texts[u])
            out.append(Utterance(uttid, speaker_of(uttid), [next(encoded) for _ in range(n)],
                                 fixed_totals[u, :n].tolist(), scored.errors[u, :n].tolist(),
                                 scored.n_words[u, :n].tolist(), next(encoded), int(scored.ref_words[u]),
                                 scored.texts[u]))
    return out


def held_out_speakers(utterances: list[Utterance], share: float, seed: int) -> set:
    """A seeded draw of speakers holding at least `share` of the utterances (none for share 0); InputError
    when that leaves no speaker to train on."""
    if share <= 0:
        return set()
    speakers = sorted({u.speaker for u in utterances})
    random.Random(seed).shuffle(speakers)
    count = {s: 0 for s in speakers}
    for u in utterances:
        count[u.speaker] += 1
    chosen, held = set(), 0
    for speaker in speakers:
        if held >= share * len(utterances):
            break
        chosen.add(speaker)
        held += count[speaker]
    if len(chosen) == len(speakers):
        raise InputError(f"--held-out {share}: the {len(speakers)} speaker(s) of the training lists would all be "
                         "held out; give more lists or a smaller share")
    return chosen


def trainable_parameters(model: torch.nn.Module, which: str) -> list:
    """The parameters of `model` that `which` (a key of TRAINABLE) trains; the others stop taking gradients."""
    chosen = TRAINABLE[which][1]
    for name, parameter in model.named_parameters():
        parameter.requires_grad_(chosen(name, parameter))
    return [parameter for parameter in model.parameters() if parameter.requires_grad]


def padded(rows: list, pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(tokens [R, T], lengths [R]) of token-id rows, right-padded with `pad_id`."""
    lengths = torch.tensor([len(r) for r in rows])
    tokens = torch.full((len(rows), int(lengths.max())), pad_id, dtype=torch.long)
    for i, row in enumerate(rows):
        tokens[i, : len(row)] = torch.tensor(row)
    return tokens, lengths


def as_matrix(utterances: list[Utterance], values: list, fill: float) -> torch.Tensor:
    """[U, N] of the per-hypothesis `values` (one list per utterance), padded with `fill`."""
    width = max(len(u.hyps) for u in utterances)
    out = torch.full((len(utterances), width), fill, dtype=torch.float64)
    for i, row in enumerate(values):
        out[i, : len(row)] = torch.tensor(row, dtype=torch.float64)
    return out


def hypothesis_grid(utterances: list[Utterance]) -> tuple[torch.Tensor, torch.Tensor]:
    """(utterance index, rank index) of every hypothesis, in the order of the utterances' hypotheses."""
    pairs = [(i, r) for i, u in enumerate(utterances) for r in range(len(u.hyps))]
    return torch.tensor([p[0] for p in pairs]), torch.tensor([p[1] for p in pairs])


class MwerRun:
    """One process of an MWER fine-tuning run: the model, its optimizer, the data, the loop state, the card."""

    def __init__(self, settings: MwerSettings, scorer, train_sets: list[NbestSet], progress: bool = True):
        s = self.settings = settings
        self.scorer, self.model, self.progress = scorer, scorer.model, progress
        self.out_dir = Path(s.out_dir)
        self.device = torch.device(s.device)
        self.train_sets = train_sets
        utterances = training_utterances(train_sets, scorer, s.am_weights, s.fixed)
        held = held_out_speakers(utterances, s.held_out, s.seed)
        self.heldout = [u for u in utterances if u.speaker in held]
        self.train = [u for u in utterances if u.speaker not in held]
        if s.lam is None and not self.heldout:
            raise InputError("--lambda: needed when nothing is held out (--held-out 0)")
        self.costs = [len(u.hyps) * max(len(h) for h in u.hyps) for u in self.train]
        per_epoch = len(batches(self.costs, s.batch_tokens, random.Random(0)))
        self.total_updates = s.updates or math.ceil(s.epochs * per_epoch)  # 0: the starting model, evaluated
        trained = trainable_parameters(self.model, s.trainable)
        decay = [p for p in trained if p.dim() >= 2]
        rest = [p for p in trained if p.dim() < 2]
        self.optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                                            {"params": rest, "weight_decay": 0.0}], lr=s.lr)
        self.card = self.new_card(s, held, per_epoch, trained)

    def new_card(self, s: MwerSettings, held, per_epoch, trained: list) -> dict:
        """The settings part of the model card (training.json); `validate` adds the progress."""
        start = model_dir.resolve(s.model) / model_dir.TRAINING_FILE
        card = {"kind": self.model.config.kind, "parameters": sum(p.numel() for p in self.model.parameters()),
                "training": "discriminative: minimum word error rate (MWER) on N-best lists",
                "init": s.model,
                "loss": {"total": "AM + lambda * LM + sum of the fixed columns times their weights",
                         "mwer": "per utterance, the expected word errors under softmax(scale * total) over its "
                                 "hypotheses minus their mean errors; mean over the utterances of a batch",
                         "am_weights": s.am_weights, "fixed": s.fixed, "lambda": s.lam, "scale": s.scale,
                         "lm_weight": s.lm_weight, "lm_loss": "the LM's own loss per token on the references"},
                "train_sets": [{"name": n.name, "source": n.source, "utterances": len(n.hyps)}
                               for n in self.train_sets],
                "train_utterances": len(self.train), "train_hypotheses": sum(len(u.hyps) for u in self.train),
                "held_out": {"share": s.held_out, "speakers": len(held), "utterances": len(self.heldout),
                             "rule": "speaker = utterance id up to its first '-', a seeded draw"},
                "trainable": {"parameters": s.trainable, "count": sum(p.numel() for p in trained),
                              "rule": TRAINABLE[s.trainable][0]},
                "lr": s.lr, "warmup": s.warmup, "batch_tokens": s.batch_tokens, "updates_per_epoch": per_epoch,
                "budget_updates": self.total_updates, "valid_every": s.valid_every, "patience": s.patience,
                "seed": s.seed, "device": str(self.device), "threads": torch.get_num_threads(), "dtype": s.dtype}
        if start.is_file():
            card["init_card"] = read_json(start)
        return card

    # --- the loop ---------------------------------------------------------------------------------------

    def run(self) -> dict:
        """Train from the checkpoint (or the start), validating and exporting on the way; returns the card."""
        s = self.settings
        checkpoint = self.out_dir / CHECKPOINT_FILE
        if checkpoint.exists():
            self.state = self.load_checkpoint(checkpoint)
        else:
            check_output_dir("--out", self.out_dir, [MODEL_DIR, RESCORE_DIR], (), COMMAND)
            torch.manual_seed(s.seed)  # dropout's draws
            self.state = {"updates": 0, "epoch": 0, "position": 0, "lam": s.lam, "curve": [], "best": None,
                          "since_best": 0, "stopped": "", "sums": [0.0, 0.0, 0]}
        self.card["loss"]["lambda"] = self.state["lam"]
        state = self.state
        with progress_bar(total=self.total_updates, initial=state["updates"], unit="update", desc="mwer",
                          disable=not self.progress) as bar:
            while not state["stopped"]:
                order = batches(self.costs, s.batch_tokens, random.Random(s.seed * 1000 + state["epoch"]))
                while state["position"] < len(order) and not state["stopped"]:
                    if state["updates"] % s.valid_every == 0 and self.curve_updates() != state["updates"]:
                        self.validate()
                        if state["stopped"]:
                            break
                    if state["updates"] >= self.total_updates:
                        state["stopped"] = "budget"
                        break
                    self.update([self.train[i] for i in order[state["position"]]])
                    bar.update(1)
                if not state["stopped"]:
                    state["epoch"] += 1
                    state["position"] = 0
        if self.curve_updates() != state["updates"]:  # the budget ended between validations
            self.validate()
        self.card.update(best=state["best"], updates=state["updates"], stopped=state["stopped"])
        return self.card

    def curve_updates(self) -> int:
        """The updates of the curve's last row (-1: none)."""
        return int(self.state["curve"][-1].split("\t")[0]) if self.state["curve"] else -1

    def update(self, batch: list[Utterance]) -> None:
        """One optimizer step on the utterances `batch`."""
        s, state, model = self.settings, self.state, self.model
        model.train()
        for group in self.optimizer.param_groups:
            group["lr"] = learning_rate(s.lr, state["updates"] / self.total_updates, s.warmup)
        tokens, lengths = padded([h for u in batch for h in u.hyps], self.scorer.tokenizer.pad_id)
        with autocast(self.device, s.dtype):
            rows = model.token_logprobs(tokens.to(self.device), lengths.to(self.device)).sum(1)
            ce_sum, ce_tokens = None, 0
            if s.lm_weight:
                ref_tokens, ref_lengths = padded([u.ref for u in batch], self.scorer.tokenizer.pad_id)
                ce_sum, ce_tokens = model.loss(ref_tokens.to(self.device), ref_lengths.to(self.device))
        fixed, errors, real = self.fixed_parts(batch)
        mwer = mwer_per_utterance(fixed, self.hypothesis_matrix(batch, rows), errors, real, state["lam"], s.scale)
        loss = mixed_loss(mwer, ce_sum, ce_tokens, s.lm_weight)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        state["updates"] += 1
        state["position"] += 1
        sums = state["sums"]
        sums[0] += float(mwer.detach().mean())
        sums[1] += float(ce_sum.detach()) / max(1, ce_tokens) if ce_sum is not None else 0.0
        sums[2] += 1

    def hypothesis_matrix(self, utterances: list[Utterance], rows: torch.Tensor) -> torch.Tensor:
        """[U, N] of the per-hypothesis `rows` (float64, 0 at padding), differentiable."""
        utt, rank = hypothesis_grid(utterances)
        width = max(len(u.hyps) for u in utterances)
        out = torch.zeros(len(utterances), width, dtype=torch.float64, device=rows.device)
        return out.index_put((utt.to(rows.device), rank.to(rows.device)), rows.double())

    def fixed_parts(self, utterances: list[Utterance]) -> tuple:
        """(fixed totals, word errors, real) [U, N] of `utterances` on the device."""
        fixed = as_matrix(utterances, [u.fixed for u in utterances], 0.0)
        errors = as_matrix(utterances, [u.errors for u in utterances], 0.0)
        real = as_matrix(utterances, [[1.0] * len(u.hyps) for u in utterances], 0.0) > 0
        return fixed.to(self.device), errors.to(self.device), real.to(self.device)

    # --- validation -------------------------------------------------------------------------------------

    @torch.no_grad()
    def sentence_scores(self, utterances: list[Utterance]) -> list:
        """The current model's log-prob of every hypothesis, per utterance (eval mode)."""
        self.model.eval()
        rows = [h for u in utterances for h in u.hyps]
        scores = [0.0] * len(rows)
        with progress_bar(total=len(rows), desc="held-out", unit="sent", disable=not self.progress) as bar:
            for index in length_batches([len(r) for r in rows], self.settings.batch_tokens):
                tokens, lengths = padded([rows[i] for i in index], self.scorer.tokenizer.pad_id)
                with autocast(self.device, self.settings.dtype):
                    out = self.model.token_logprobs(tokens.to(self.device), lengths.to(self.device)).sum(1)
                for i, value in zip(index, out.double().cpu().tolist()):
                    scores[i] = value
                bar.update(len(index))
        self.model.train()
        flat = iter(scores)
        return [[next(flat) for _ in u.hyps] for u in utterances]

    def heldout_set(self, scores: list) -> ScoredSet:
        """The held-out lists as a :class:`ScoredSet` whose AM is the fixed part of the totals and whose one
        LM is `scores`."""
        hs = self.heldout
        return ScoredSet("held-out", [u.uttid for u in hs], [u.texts for u in hs],
                         as_matrix(hs, [u.fixed for u in hs], -math.inf).numpy(),
                         as_matrix(hs, scores, 0.0).numpy()[None],
                         as_matrix(hs, [u.n_words for u in hs], 0.0).numpy(),
                         as_matrix(hs, [u.errors for u in hs], 0.0).numpy().astype(np.int64),
                         np.array([u.ref_words for u in hs], dtype=np.int64))

    def validate(self) -> None:
        """Rescore the held-out lists, add the curve's row, keep the best model (early stopping), save the
        checkpoint, the curve and the card."""
        s, state = self.settings, self.state
        sums = state["sums"]
        train_mwer = sums[0] / sums[2] if sums[2] else float("nan")
        train_ce = sums[1] / sums[2] if sums[2] and s.lm_weight else float("nan")
        state["sums"] = [0.0, 0.0, 0]
        if self.heldout:
            scored = self.heldout_set(self.sentence_scores(self.heldout))
            tuned = tune([scored], [s.lambda_grid], s.beta_grid)
            best_lam, best_beta, wer = tuned.best.lambdas[0], tuned.best.beta, tuned.dev_wer
            if state["lam"] is None:
                if best_lam == 0:
                    raise InputError("--lambda: the held-out lists tune the starting model's weight to 0, where the "
                                     "loss has no gradient; give --lambda")
                state["lam"] = best_lam
                self.card["loss"]["lambda"] = best_lam
            at_lam = 100.0 * scored.errors_of(scored.choose((state["lam"],), 0.0)) / max(1, int(scored.ref_words.sum()))
            fixed, errors, real = (t.cpu() for t in self.fixed_parts(self.heldout))
            lm = torch.from_numpy(scored.lm[0])
            heldout_mwer = float(mwer_per_utterance(fixed, lm, errors, real, state["lam"], s.scale).mean())
        else:
            best_lam, best_beta, wer, at_lam, heldout_mwer = (float("nan"),) * 5
        state["curve"].append(f"{state['updates']}\t{train_mwer:.4f}\t{train_ce:.4f}\t{heldout_mwer:.4f}\t"
                              f"{wer:.3f}\t{best_lam:g}\t{at_lam:.3f}\t{best_beta:g}")
        improved = not self.heldout or state["best"] is None or wer < state["best"]["heldout_wer"]
        if improved:
            state["best"] = {"updates": state["updates"], "heldout_wer": wer, "heldout_lambda": best_lam,
                             "heldout_beta": best_beta}
            state["since_best"] = 0
        else:
            state["since_best"] += 1
            if s.patience and state["since_best"] >= s.patience:
                state["stopped"] = "patience"
        self.card.update(best=state["best"], updates=state["updates"], curve=CURVE_FILE)
        self.save_checkpoint()
        write_atomic(self.out_dir / CURVE_FILE, CURVE_HEADER + "".join(r + "\n" for r in state["curve"]))
        if improved:
            self.install_model()

    def install_model(self) -> None:
        """Export the current weights into `out_dir`/model/ as a whole (fp16, with the card)."""
        with staged_outputs("--out", self.out_dir, [MODEL_DIR], {MODEL_DIR}, COMMAND) as staging:
            model_dir.export(staging / MODEL_DIR, self.model, self.scorer.tokenizer,
                             {"normalize": self.scorer.normalize}, self.card)

    # --- checkpoint -------------------------------------------------------------------------------------

    def identity(self) -> dict:
        """The settings (`MwerSettings.identity`) and the training lists (name, source, utterances) of the run."""
        return {**self.settings.identity(), "train": [[n.name, n.source, len(n.hyps)] for n in self.train_sets]}

    def save_checkpoint(self) -> None:
        """Write the model, the optimizer, the loop state, the random-number states and the run's identity."""
        saved = {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                 "state": json.dumps(self.state), "rng": rng_states(self.device),
                 "identity": json.dumps(self.identity(), sort_keys=True)}
        write_atomic(self.out_dir / CHECKPOINT_FILE, model_dir.torch_bytes(saved))

    def load_checkpoint(self, path: Path) -> dict:
        """Restore what `save_checkpoint` wrote; a checkpoint of other settings is refused."""
        try:
            saved = torch.load(path, map_location=self.device, weights_only=True)
        except (OSError, EOFError, RuntimeError, ValueError) as err:
            raise InputError(f"{path}: cannot read the checkpoint ({str(err).splitlines()[0][:200]})") from None
        if not isinstance(saved, dict) or not {"model", "optimizer", "state", "rng", "identity"} <= set(saved):
            raise InputError(f"{path}: not a checkpoint of {COMMAND}")
        theirs, ours = json.loads(saved["identity"]), self.identity()
        differ = [k for k in ours if theirs.get(k) != json.loads(json.dumps(ours[k]))]
        if differ:
            raise InputError(f"{path}: a checkpoint of other settings ({', '.join(differ)} differ); resume it with "
                             "its options or give another --out")
        self.model.load_state_dict(saved["model"])
        self.optimizer.load_state_dict(saved["optimizer"])
        set_rng_states(saved["rng"], self.device)
        return json.loads(saved["state"])

    # --- the test sets ----------------------------------------------------------------------------------

    def heldout_nbest(self) -> list[NbestSet]:
        """The held-out utterances of each training set, as N-best sets of their own."""
        held = {u.uttid for u in self.heldout}
        out = []
        for nbest in self.train_sets:
            ids = [k for k in nbest.hyps if k in held]
            if ids:
                out.append(NbestSet(f"{nbest.name}_heldout", nbest.source, {k: nbest.hyps[k] for k in ids},
                                    {k: nbest.refs[k] for k in ids}))
        return out


def check_unseen(train_sets: list[NbestSet], test_sets: list[NbestSet]) -> None:
    """InputError when a test set holds an utterance (by id) of the training sets."""
    trained = {k: n.source for n in train_sets for k in n.hyps}
    for nbest in test_sets:
        both = [k for k in nbest.hyps if k in trained]
        if both:
            raise InputError(f"{nbest.hyps[both[0]][0].where}: test utterance {both[0]!r} is in the training lists "
                             f"({trained[both[0]]}; {len(both)} of {len(nbest.hyps)} are); WER is never reported on "
                             "utterances trained or tuned on")


def mwer_train(settings: MwerSettings, scorer, train_sets: list[NbestSet], test_sets: list[NbestSet] = (),
               inputs: list = (), progress: bool = True, scorer_options: dict | None = None) -> tuple[dict, object]:
    """Fine-tune `scorer`'s model on `train_sets` into `settings.out_dir` (resuming its checkpoint), then rescore
    `test_sets` with the best model (loaded with `scorer_options`), every weight tuned on the held-out lists;
    returns (the card, the rescoring's (TuneResult, reports) or None). `inputs`: other files read (references,
    the model)."""
    from slm_lm.rescoring.rescore import rescore
    from slm_lm.scoring.scorer import Scorer

    check_unseen(train_sets, test_sets)
    out = Path(settings.out_dir)
    with new_directory(out), exclusive_dir_lock(out, COMMAND):
        finish_interrupted(out, COMMAND)
        run = MwerRun(settings, scorer, train_sets, progress)
        card = run.run()
        rescored = None
        if test_sets:
            if not run.heldout:
                raise InputError("--test: the weights are tuned on the held-out lists; give --held-out above 0")
            best = Scorer.from_pretrained(out / MODEL_DIR, **{"device": settings.device, "dtype": settings.dtype,
                                                              **(scorer_options or {})})
            lms = [best] + [ScoreColumn(name) for name in settings.fixed]
            rescored = rescore(run.heldout_nbest(), list(test_sets), lms, out / RESCORE_DIR, settings.am_weights,
                               lambda_grid=settings.lambda_grid, beta_grid=settings.beta_grid,
                               cache_dir=out / CACHE_DIR, progress=progress,
                               inputs=list(inputs), settings={"command": COMMAND, "model": str(out / MODEL_DIR)})
    return card, rescored
