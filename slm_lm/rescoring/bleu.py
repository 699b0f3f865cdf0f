"""Corpus BLEU by sacrebleu (an optional dependency: ``pip install slm_lm[mt]``), in the form the weight
search needs: sacrebleu's sufficient statistics per hypothesis (lengths and n-gram matches and totals),
which add up over the sentences, and sacrebleu's corpus BLEU of summed statistics. Also the N-best oracle
and sacrebleu's paired significance test.
"""

import numpy as np

from slm_lm.common.errors import InputError


def bleu_metric(tokenize: str = "13a", lowercase: bool = False):
    """sacrebleu's BLEU with the given tokenizer (13a, none, intl, zh, char, ...) and case handling."""
    try:
        from sacrebleu.metrics import BLEU
    except ImportError:
        raise InputError("BLEU needs sacrebleu, an optional dependency: pip install 'slm_lm[mt]'") from None
    try:
        return BLEU(tokenize=tokenize, lowercase=lowercase)
    except (AssertionError, KeyError, RuntimeError) as err:
        raise InputError(f"--bleu-tokenize {tokenize!r}: sacrebleu refuses it ({err})") from None


def hyp_stats(metric, refs: list[str], hyps: list[str]) -> np.ndarray:
    """sacrebleu's BLEU statistics of each hypothesis against its reference, [pairs, 2 + 2 * 4]."""
    return np.asarray(metric._extract_corpus_statistics(hyps, [refs]), dtype=np.int64).reshape(len(hyps), -1)


def corpus_bleu(metric, stats: np.ndarray):
    """sacrebleu's corpus BLEU score object (``.score``, ``.format()``) of the summed statistics."""
    return metric._compute_score_from_stats(np.asarray(stats).astype(int).tolist())


def bleu_loss(metric):
    """The weight search's loss of pooled statistics: -BLEU."""
    return lambda pooled: -corpus_bleu(metric, pooled).score


def oracle_choice(metric, refs: list[str], nbest: list[list[str]]) -> list[int]:
    """Per sentence, the index of the hypothesis with the highest sentence BLEU (sacrebleu's, with its
    smoothing; the first on ties): the usual approximation of the N-best oracle, since the exact corpus
    oracle is a search over all combinations."""
    sentence = type(metric)(tokenize=metric.tokenizer_signature, lowercase=metric.lowercase,
                            effective_order=True)
    return [max(range(len(hyps)), key=lambda i: (sentence.sentence_score(hyps[i], [ref]).score, -i))
            for ref, hyps in zip(refs, nbest)]


MAX_BOOTSTRAP_DRAWS = 20_000_000  # resamples x sentences: sacrebleu holds them all at once, ~50 bytes each


def check_bootstrap(samples: int, sentences: int, set_name: str) -> None:
    """InputError when `samples` bootstrap resamples of `sentences` sentences exceed MAX_BOOTSTRAP_DRAWS."""
    if samples * sentences > MAX_BOOTSTRAP_DRAWS:
        raise InputError(f"--bootstrap-samples {samples:,}: {samples:,} resamples of the {sentences:,} sentences of "
                         f"set {set_name} are {samples * sentences:,} draws, above the ceiling of "
                         f"{MAX_BOOTSTRAP_DRAWS:,} (sacrebleu holds them all in memory); give fewer resamples")


def paired_test(metric, refs: list[str], systems: list[tuple[str, list[str]]], samples: int = 1000):
    """sacrebleu's paired bootstrap resampling (``sacrebleu --paired-bs``, its fixed seed) of every system
    against the first, the baseline: (signature, [(name, BLEU, bootstrap mean, 95 % interval half-width,
    p-value; None for the baseline)])."""
    from sacrebleu.significance import PairedTest

    signatures, scores = PairedTest(systems, {"BLEU": metric}, [refs], test_type="bs", n_samples=samples)()
    rows = [(name, r.score, r.mean, r.ci, r.p_value) for name, r in zip(scores["System"], scores["BLEU"])]
    return signatures["BLEU"].format(), rows
