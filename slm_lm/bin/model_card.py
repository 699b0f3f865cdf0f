"""slm-model-card: ship a trained model into slm_lm/pretrained/NAME with its model card, or re-measure a
card's checks.

  make:  copy an `slm-pretrain` model directory into the package (atomically: temp dir + rename, an
         older version of NAME is replaced), measure the check figures, and write card.json + README.md
         from training.json, the full BLiMP run (slm-blimp) and the two dev rescoring runs (slm-rescore).
  check: print the check figures of a model (a shipped NAME or a directory) as JSON. The checks are
         cheap and fixed: BLiMP's first 10 pairs of every paradigm, and the first 200 dev_clean
         utterances' 10-best lists rescored (AM = 0.6*decoder + 0.4*ctc) with the card's lambda tuned
         on dev_other, from the data directory (`slm-data get blimp librispeech-nbest`).
         tests/test_pretrained.py compares them with card.json.

  slm-model-card make --model exp/pretrain/cpu95/slm/model --name slm-books-cpu \
      --blimp exp/pretrain/eval/slm/blimp --rescore exp/pretrain/eval/slm/tune_clean exp/pretrain/eval/slm/tune_other \
      --command "bash local/analyses/pretrain_equal.sh ..."
  slm-model-card check slm-books-cpu
"""
import argparse
import json
import re
import shutil
from pathlib import Path

from slm_lm import pretrained
from slm_lm.common.errors import InputError, fail
from slm_lm.common.fileio import read_json, write_atomic
from slm_lm.common.options import Parser, number
from slm_lm.common.outputs import check_no_overlap, check_output_dir, finish_interrupted, staged_outputs
from slm_lm.data import datasets
from slm_lm.evaluation.blimp import load_blimp, score_blimp
from slm_lm.model import directory as model_dir
from slm_lm.rescoring.nbest import NbestSet, load_nbest
from slm_lm.rescoring.report import set_report
from slm_lm.rescoring.scored_set import build_scored_set
from slm_lm.rescoring.weight_search import Weights
from slm_lm.scoring.cache import lm_scores
from slm_lm.scoring.scorer import load_scorer

CARD_FILE = "card.json"  # the card's figures; README.md is the card
COMMAND = "slm-model-card"
MODEL_FILES = (model_dir.SAFETENSORS_FILE, model_dir.CONFIG_FILE, *model_dir.TOKENIZER_FILES, model_dir.TRAINING_FILE)
AM_WEIGHTS = {"decoder": 0.6, "ctc": 0.4}
CHECK_BLIMP_PAIRS, CHECK_UTTS = 10, 200


def check_figures(spec: str, lam: float, data=None) -> dict:
    """The fixed cheap measurements of a model that its card records (see module docstring), on BLiMP and the
    LibriSpeech N-best lists of the data directory `data` (default: `datasets.data_dir()`)."""
    blimp_dir, nbest_dir = datasets.require("blimp", data), datasets.require("librispeech-nbest", data)
    scorer = load_scorer(spec)
    blimp = score_blimp(scorer, load_blimp(blimp_dir, limit=CHECK_BLIMP_PAIRS), progress=False)
    full = load_nbest(nbest_dir / "dev_clean", nbest=10)
    keep = sorted(full.hyps)[:CHECK_UTTS]
    subset = NbestSet(full.name, full.source, {u: full.hyps[u] for u in keep}, {u: full.refs[u] for u in keep})
    table = lm_scores(scorer, [h.text for u in keep for h in subset.hyps[u]], progress=False)
    report = set_report(build_scored_set(subset, [table], AM_WEIGHTS), Weights((lam,), 0.0), "check")
    return {
        "blimp_pairs": blimp["pairs"],
        "blimp_accuracy": round(blimp["overall"], 4),
        "dev_clean_utts": len(keep),
        "lambda": lam,
        "wer_am": round(report.wer_am, 4),
        "wer_rescored": round(report.wer_rescored, 4),
        "mean_lm_score": round(sum(table.values()) / len(table), 4),
    }


def started_from(training: dict) -> list:
    """The records (name, machine, command, training) of the shipped models a run started from, oldest first.

    Taken before NAME is replaced, since the start is usually the shipped model of the same name. A start that
    is not a shipped model has no card to copy: that is an error, or the card would understate the compute.
    """
    init = training.get("init")
    if not init:
        return []
    if init not in pretrained.names():
        raise InputError(f"training.json: started from {init!r}, which is not a shipped model with a card; "
                         "ship it first or train without --init")
    start = read_json(pretrained.ROOT / init / CARD_FILE)
    return start.get("started_from", []) + [{k: start[k] for k in ("name", "machine", "command", "training")}]


def card_markdown(name: str, card: dict) -> str:
    """The model card (README.md) from card.json's fields."""
    t, b = card["training"], card["blimp"]
    lines = [
        f"# {name}",
        "",
        f"A {t['kind'].upper()} ({'sliding LM, Transcormer' if t['kind'] == 'slm' else t['kind']}) shipped with slm_lm: "
        f"`Scorer.from_pretrained(\"{name}\")`, `slm-score --model {name}`, `slm-rescore --lm {name}`.",
        "",
        "| | |",
        "|---|---|",
        f"| shape | {card['shape']} ({t['parameters']:,} parameters, fp16 safetensors) |",
        f"| data | {card['data']} |",
        f"| tokens seen | {t['tokens_seen']:,} ({t['epochs']:.3f} epochs) in {t['updates']:,} updates of {t['batch_tokens']} padded tokens |",
        f"| compute | {t['spent_minutes']:.1f} minutes of {t['clock']} time, {t['threads']} thread(s), {t['device']} ({card['machine']}) |",
        f"| schedule | AdamW (0.9, 0.98, eps 1e-6, wd 0.01), peak lr {t['peak_lr']:g}, linear warm-up over {t['warmup']:.0%} of the budget, linear decay to 0 |",
        f"| held-out CE | {t['valid_ce']:.3f} nats/token on the first {t['valid_sentences']} sentences of valid.txt"
        + (" (whole words: each piece without the later pieces of its word) |" if t.get("whole_words") else " |"),
        *(["| scoring | whole words (PLL-word-l2r), as trained; `whole_words=False` scores pieces |"]
          if t.get("whole_words") else []),
        f"| BLiMP (all {b['pairs']:,} pairs) | {b['overall']:.1f} % |",
    ]
    for r in card["rescoring"]:
        lines.append(f"| {r['test']} WER, lambda {r['lambda']:g} tuned on {r['dev']} | AM only {r['wer_am']:.2f} -> "
                     f"{r['wer_rescored']:.2f} (first-pass LM in the file: {r['wer_file']:.2f}; 10-best oracle {r['wer_oracle']:.2f}) |")
    for parent in card.get("started_from", []):
        pt = parent["training"]
        lines.append(f"| started from | the weights of {parent['name']} as shipped then: {pt['tokens_seen']:,} tokens in "
                     f"{pt['updates']:,} updates, {pt['spent_minutes']:.1f} minutes of {pt['clock']} time ({parent['machine']}) |")
    if card.get("started_from"):
        total = t["spent_minutes"] + sum(p["training"]["spent_minutes"] for p in card["started_from"])
        tokens = t["tokens_seen"] + sum(p["training"]["tokens_seen"] for p in card["started_from"])
        lines.append(f"| compute in all | {total:.1f} minutes of one core, {tokens:,} tokens seen |")
    lines += [
        "",
        "BLiMP by phenomenon: " + ", ".join(f"{k} {v:.1f}" for k, v in b["phenomena"].items()) + ".",
        "",
        "Trained with:",
        "",
        "```bash",
        *[parent["command"] for parent in card.get("started_from", [])],
        card["command"],
        "```",
        "",
        "Check figures (`slm-model-card check " + name + "`, re-measured by tests/test_pretrained.py):",
        "",
        "```json",
        json.dumps(card["check"], indent=1),
        "```",
        "",
    ]
    return "\n".join(lines)


def _fields(path: Path, what: str, take):
    """`take` applied to the JSON object in `path`; InputError naming `path` when it lacks what `take` reads
    (`what` wrote it)."""
    data = read_json(path)
    try:
        return take(data)
    except (KeyError, IndexError, TypeError, AttributeError) as e:
        raise InputError(f"{path}: not a {what} output: {type(e).__name__} {e} reading it") from None


def _rescoring(tuning: dict) -> dict:
    """The card's entry for one slm-rescore run (its tuning.json): its dev and test sets and figures."""
    dev = [s for s in tuning["sets"] if s["role"] == "dev"][0]
    test = [s for s in tuning["sets"] if s["role"] == "test"][0]
    return {"dev": dev["name"], "test": test["name"], "lambda": tuning["best"]["lambdas"][0],
            **{k: test[k] for k in ("wer_am", "wer_rescored", "wer_file", "wer_oracle")}}


def make(args) -> None:
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", args.name):
        raise InputError(f"--name {args.name!r}: want a model name (letters, digits, '.', '_', '-')")
    model, dest = Path(args.model), pretrained.ROOT / args.name
    names = (*MODEL_FILES, CARD_FILE, "README.md")
    check_no_overlap("--name", dest, [model, args.blimp, *args.rescore])
    finish_interrupted(dest, COMMAND)
    own = names if (dest / CARD_FILE).is_file() else ()  # an earlier card of this name: replaced
    check_output_dir("--name", dest, names, own, COMMAND)  # before the check figures are measured
    training = read_json(model / model_dir.TRAINING_FILE)
    blimp = _fields(Path(args.blimp) / "blimp_results.json", "slm-blimp",
                    lambda b: {k: b[k] for k in ("pairs", "overall", "phenomena")})
    rescoring = [_fields(Path(run) / "tuning.json", "slm-rescore", _rescoring) for run in args.rescore]
    lam = next((r["lambda"] for r in rescoring if r["dev"] == "dev_other"), None)
    if lam is None:
        raise InputError(f"--rescore: no run tuned on dev_other among {', '.join(args.rescore)} (the card's "
                         "check uses its lambda)")
    cfg = _fields(model / model_dir.CONFIG_FILE, "slm-pretrain", lambda c: {
        k: c["model"][k] for k in ("n_layers", "d_model", "n_heads", "d_ff", "vocab_size", "max_positions")})
    card = {
        "name": args.name,
        "shape": f"{cfg['n_layers']} layers, d {cfg['d_model']}, {cfg['n_heads']} heads, FFN {cfg['d_ff']}, "
                 f"vocab {cfg['vocab_size']}, {cfg['max_positions']} positions",
        "data": args.data,
        "machine": args.machine,
        "command": args.command,
        "training": training,
        "started_from": started_from(training),
        "blimp": blimp,
        "rescoring": rescoring,
        "check": check_figures(str(model), lam, args.dir),
    }
    with staged_outputs("--name", dest, names, own, COMMAND) as tmp:
        for name in MODEL_FILES:
            shutil.copy2(model / name, tmp / name)
        write_atomic(tmp / CARD_FILE, json.dumps(card, indent=1))
        write_atomic(tmp / "README.md", card_markdown(args.name, card))
        for path in tmp.iterdir():
            path.chmod(0o644)  # readable by every user of an installed package (temp files are 0600)
    print(f"wrote {dest}: {json.dumps(card['check'])}")


def main(argv=None):
    parser = Parser(prog="slm-model-card", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="action", required=True)
    mk = sub.add_parser("make")
    mk.add_argument("--model", required=True, help="slm-pretrain model directory (OUT/model)")
    mk.add_argument("--name", required=True)
    mk.add_argument("--blimp", required=True, help="slm-blimp output directory (full BLiMP)")
    mk.add_argument("--rescore", required=True, nargs="+", help="slm-rescore output directories (tuning.json)")
    mk.add_argument("--command", required=True, help="the command that trained it (for the card)")
    mk.add_argument("--data", default="the 892 Gutenberg books of `slm-data get books`, decontaminated against "
                    "LibriSpeech dev and the mini corpus dev/test books (slm-prepare-lm-text --exclude), BPE 5000")
    mk.add_argument("--machine", default="2-core AMD EPYC (AVX2, no AVX-512), fp32")
    ck = sub.add_parser("check")
    ck.add_argument("model", help="a shipped name or a model directory")
    ck.add_argument("--lambda", dest="lam", type=number(float, 0), help="LM weight (default: the card's)")
    for s in (mk, ck):
        s.add_argument("--dir", help="data directory with blimp/ and librispeech_nbest/ (`slm-data get blimp "
                       "librispeech-nbest`; default $SLM_LM_DATA, else ~/.cache/slm_lm)")
    args = parser.parse_args(argv)
    try:
        if args.action == "make":
            make(args)
        else:
            lam = args.lam
            if lam is None:
                lam = read_json(model_dir.resolve(args.model) / CARD_FILE)["check"]["lambda"]
            print(json.dumps(check_figures(args.model, lam, args.dir)))
    except (InputError, OSError) as e:
        fail(COMMAND, e)


if __name__ == "__main__":
    main()
