#!/usr/bin/env python3
"""LM scores of N-best hypotheses, one key-file shard per job, merged into slm-rescore's score cache.

    score_nbest_lm.py --lm exp/lm_x --nbest 10 --keys logdir/keys.3 --cache logdir/cache.3 \
        exp/decode/dev_clean exp/decode/test_clean
    score_nbest_lm.py --merge 4 --cache exp/lm_cache logdir

A scoring job scores the texts of the hypotheses (ranks 1..nbest) of the utterances listed in
``--keys`` (first column; utterance ids are unique across the N-best sets) and keeps them in its own
cache directory, so a killed job resumes. ``--merge N`` adds the scores of ``<logdir>/cache.1`` ..
``cache.N`` to ``--cache``, the cache that ``slm-rescore --cache`` reads: rescoring then scores
nothing itself and its outputs are those of an unsharded run.
"""
import argparse
import json
from pathlib import Path

from slm_lm.common.errors import InputError, fail, os_problem
from slm_lm.data.text_norm import normalize_librispeech
from slm_lm.rescoring.nbest import load_nbest, normalize_nbest
from slm_lm.scoring.cache import LMScoreCache, lm_scores


def read_keys(path):
    """Utterance ids of a key file (first column of each line)."""
    try:
        return {line.split()[0] for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()}
    except OSError as e:
        raise InputError(f"{path}: cannot read the key file: {os_problem(e, path)}") from None


def score_shard(args):
    """Score the hypotheses of the shard's utterances into args.cache."""
    from slm_lm.scoring.scorer import load_scorer

    keys = read_keys(args.keys)
    texts, found = [], set()
    for d in args.nbest_dirs:
        s, _ = normalize_nbest(load_nbest(d, None, args.nbest), normalize_librispeech)  # as slm-rescore scores
        for uttid, hyps in s.hyps.items():
            if uttid in keys:
                found.add(uttid)
                texts += [h.text for h in hyps]
    missing = sorted(keys - found)
    if missing:
        raise InputError(f"{args.keys}: {len(missing)} keys are in none of the N-best sets, e.g. {missing[:3]}")
    scorer = load_scorer(args.lm, **({"device": args.device} if args.device else {}))
    scores = lm_scores(scorer, texts, args.cache, progress=False)
    print(f"{args.cache}: {len(scores)} distinct hypotheses of {len(keys)} utterances scored by {scorer.name}")


def merge(args):
    """Add the scores of <logdir>/cache.1..N to args.cache (one file per model)."""
    logdir = Path(args.nbest_dirs[0])
    per_model = {}
    for n in range(1, args.merge + 1):
        files = sorted((logdir / f"cache.{n}").glob("*.jsonl"))
        if not files:
            raise InputError(f"{logdir}/cache.{n}: no scores (did scoring job {n} run?)")
        for path in files:
            try:
                model = json.loads(path.read_text(encoding="utf-8").split("\n", 1)[0])["model"]
            except (json.JSONDecodeError, KeyError, TypeError, UnicodeDecodeError):
                raise InputError(f"{path}:1: not an LM score cache") from None
            per_model.setdefault(model, {}).update(LMScoreCache(path.parent, model).scores)
    for model, scores in per_model.items():
        cache = LMScoreCache(args.cache, model)
        cache.add({t: v for t, v in scores.items() if t not in cache.scores})
        print(f"{cache.path}: {len(cache.scores)} scores of {model} ({args.merge} shards)")


def main(argv=None):
    """Command line: score one shard, or merge the shards' caches."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--lm", help="LM spec (as slm-rescore --lm)")
    p.add_argument("--nbest", type=int, default=None, help="use ranks 1..N (default: all)")
    p.add_argument("--keys", help="key file of the shard")
    p.add_argument("--device", default=None)
    p.add_argument("--cache", required=True, help="score cache directory to write")
    p.add_argument("--merge", type=int, metavar="N", help="merge <logdir>/cache.1..N into --cache")
    p.add_argument("nbest_dirs", nargs="+", help="N-best directories (with --merge: the logdir)")
    args = p.parse_args(argv)
    if args.merge:
        merge(args)
    elif not (args.lm and args.keys):
        p.error("--lm and --keys are needed to score a shard")
    else:
        score_shard(args)


if __name__ == "__main__":
    try:
        main()
    except InputError as e:
        fail("score_nbest_lm.py", e)
