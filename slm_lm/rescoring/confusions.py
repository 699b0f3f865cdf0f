"""The word confusions of an ASR, mined from its N-best lists, and N-best lists simulated with them on text.

A confusion is one word edit of a hypothesis against its reference: ``("S", ref, hyp)``, ``("D", ref, "")`` or
``("I", "", hyp)`` (jiwer's alignment). Each hypothesis counts each of its distinct edits once. A simulated list of
a sentence is the sentence itself and `n_variants` distinct variants, each with one to three edits drawn from the
confusions that apply to its words (an edit's weight: its count to the power 0.75, so the rare ones are drawn
too), in a random order; every hypothesis gets the score 0. Such lists teach an LM, by minimum WER, to tell
a sentence from the errors the ASR makes, on text that is not the lists' own.
"""
import random
from collections import Counter, defaultdict

import jiwer

from slm_lm.rescoring.nbest import NbestSet

EDITS_PER_VARIANT = (1, 2, 3)
EDITS_PER_VARIANT_WEIGHTS = (0.6, 0.3, 0.1)
COUNT_POWER = 0.75
INSERT_SHARE = 0.5  # an edit is an insertion with half the insertions' share of the weight: they are easy to tell
TRIES_PER_VARIANT = 8


def word_edits(ref: str, hyp: str) -> list[tuple[str, str, str]]:
    """The edits that turn `ref` into `hyp`, in order."""
    result = jiwer.process_words(ref, hyp)
    r, h = result.references[0], result.hypotheses[0]
    out = []
    for chunk in result.alignments[0]:
        if chunk.type == "substitute":
            out += [("S", r[chunk.ref_start_idx + k], h[chunk.hyp_start_idx + k])
                    for k in range(chunk.ref_end_idx - chunk.ref_start_idx)]
        elif chunk.type == "delete":
            out += [("D", r[k], "") for k in range(chunk.ref_start_idx, chunk.ref_end_idx)]
        elif chunk.type == "insert":
            out += [("I", "", h[k]) for k in range(chunk.hyp_start_idx, chunk.hyp_end_idx)]
    return out


def mine_confusions(sets: list[NbestSet]) -> Counter:
    """{edit: number of hypotheses with it} over every hypothesis of `sets` that differs from its reference."""
    counts = Counter()
    for nbest in sets:
        for uttid, hyps in nbest.hyps.items():
            ref = nbest.refs[uttid]
            for hyp in hyps:
                if hyp.text != ref and ref.strip() and hyp.text.strip():
                    counts.update(set(word_edits(ref, hyp.text)))
                elif hyp.text != ref:  # an empty side: every word of the other is one edit
                    counts.update({("D", w, "") for w in ref.split()} | {("I", "", w) for w in hyp.text.split()})
    return counts


class Simulator:
    """Simulated N-best lists of sentences, with the confusions `counts` (:func:`mine_confusions`)."""

    def __init__(self, counts: Counter, seed: int):
        self.rng = random.Random(seed)
        self.by_word = defaultdict(list)  # reference word -> [(edit, weight)]
        inserted = []
        for edit, count in sorted(counts.items()):
            (inserted if edit[0] == "I" else self.by_word[edit[1]]).append((edit, count ** COUNT_POWER))
        self.insert_words = [edit[2] for edit, _ in inserted]
        self.insert_weights = [w for _, w in inserted]
        self.insert_total = sum(self.insert_weights)

    def variant(self, words: list[str], sites: list, weights: list, insert_share: float) -> str:
        """One variant of `words`: one to three edits (a word is edited at most once), each an insertion with
        probability `insert_share`."""
        edited = list(words)
        inserts = []
        edits = self.rng.choices(EDITS_PER_VARIANT, EDITS_PER_VARIANT_WEIGHTS)[0]
        for _ in range(edits):
            if self.rng.random() < insert_share:
                inserts.append(self.rng.choices(self.insert_words, self.insert_weights)[0])
                continue
            position, (op, _, hyp) = self.rng.choices(sites, weights)[0]
            if edited[position] == words[position]:
                edited[position] = hyp if op == "S" else ""
        edited = [w for w in edited if w]
        for word in inserts:
            edited.insert(self.rng.randrange(len(edited) + 1), word)
        return " ".join(edited)

    def nbest(self, sentence: str, n_variants: int) -> list[str] | None:
        """The sentence and `n_variants` distinct variants of it, shuffled; None when the confusions do not give
        that many (no word of the sentence has a confusion, or too few different ones)."""
        words = sentence.split()
        pairs = [((i, edit), weight) for i, word in enumerate(words) for edit, weight in self.by_word.get(word, ())]
        if not pairs:
            return None
        sites, weights = [p for p, _ in pairs], [w for _, w in pairs]
        insert_share = INSERT_SHARE * self.insert_total / (self.insert_total + sum(weights))
        variants = set()
        for _ in range(TRIES_PER_VARIANT * n_variants):
            text = self.variant(words, sites, weights, insert_share)
            if text and text != sentence:
                variants.add(text)
            if len(variants) == n_variants:
                hyps = sorted(variants) + [sentence]
                self.rng.shuffle(hyps)
                return hyps
        return None
