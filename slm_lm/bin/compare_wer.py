"""slm-compare-wer: is one system's WER really lower than another's? Paired bootstrap over utterances.

Usage:
    slm-compare-wer --ref REF --hyp NAME=TEXT --hyp NAME=TEXT [--hyp ...] [--samples 10000]

REF: a Kaldi ``text`` file or an sclite ``.trn`` file; TEXT: a Kaldi ``text`` file of 1-best hypotheses
(e.g. slm-rescore's OUT/<set>/1best_recog/text). Every system must cover exactly the utterances of REF.
References and hypotheses are normalised LibriSpeech-style as slm-rescore does (``--no-normalize`` to
score the texts as they are). Each system after the first is compared with the first
(:func:`slm_lm.rescoring.wer.paired_bootstrap`); prints a markdown table: WER, the difference to the first system
with its 95 % interval, and the share of resamples in which the system is better.
"""


from slm_lm.common.errors import InputError, fail
from slm_lm.common.options import Parser, number
from slm_lm.data.text_norm import normalize_librispeech
from slm_lm.rescoring.transcripts import read_refs, read_text
from slm_lm.rescoring.wer import paired_bootstrap, word_errors

MAX_SAMPLES = 1_000_000  # resamples: time and memory grow with them


def _system(spec: str) -> tuple[str, str]:
    name, sep, path = spec.partition("=")
    if not sep or not name or not path:
        raise InputError(f"--hyp {spec!r}: want NAME=TEXT_FILE")
    return name, path


def compare(ref_path: str, systems: list[tuple[str, str]], samples: int, seed: int, normalize: bool = True) -> str:
    """The markdown table comparing each system with the first one."""
    if len(systems) < 2:
        raise InputError("--hyp: give at least two systems to compare")
    norm = normalize_librispeech if normalize else (lambda text: text)
    refs = {u: norm(t) for u, t in read_refs(ref_path).items()}
    uttids = sorted(refs)
    ref_words = [len(refs[u].split()) for u in uttids]
    if not sum(ref_words):
        raise InputError(f"{ref_path}: the references have no words ({len(uttids)} utterances): no WER to compare")
    errors = []
    for name, path in systems:
        hyps = {u: norm(t) for u, t in read_text(path).items()}
        missing, extra = sorted(set(refs) - set(hyps)), sorted(set(hyps) - set(refs))
        if missing or extra:
            what = f"no hypothesis for {missing[0]!r}" if missing else f"{extra[0]!r} is not in {ref_path}"
            raise InputError(f"{path}: {what} ({len(missing)} missing, {len(extra)} extra ids)")
        errors.append(word_errors([refs[u] for u in uttids], [hyps[u] for u in uttids]))
    base = systems[0][0]
    lines = [f"| system | WER % | vs {base}, WER points (95 % interval) | P(better than {base}) |",
             "|---|---:|---|---:|"]
    words = sum(ref_words)
    lines.append(f"| {base} | {100.0 * errors[0].sum() / words:.3f} | | |")
    for (name, _), errs in zip(systems[1:], errors[1:]):
        r = paired_bootstrap(errors[0], errs, ref_words, samples=samples, seed=seed)
        lines.append(f"| {name} | {r.wer_b:.3f} | {r.delta:+.3f} ({r.ci_low:+.3f} .. {r.ci_high:+.3f}) "
                     f"| {r.p_b_better:.3f} |")
    lines.append(f"\n{len(uttids)} utterances, {words} reference words; paired bootstrap, {samples} resamples "
                 f"of the utterances, seed {seed}.")
    return "\n".join(lines)


def main(argv=None) -> None:
    """Entry point of ``slm-compare-wer``."""
    p = Parser(prog="slm-compare-wer", description=__doc__.split("\n")[0])
    p.add_argument("--ref", required=True, help="references: Kaldi text or .trn")
    p.add_argument("--hyp", action="append", required=True, type=str, help="NAME=TEXT, at least twice")
    p.add_argument("--samples", type=number(int, 1, MAX_SAMPLES), default=10_000)
    p.add_argument("--seed", type=number(int, 0), default=0)
    p.add_argument("--no-normalize", action="store_true", help="compare the texts as they are")
    args = p.parse_args(argv)
    try:
        print(compare(args.ref, [_system(s) for s in args.hyp], args.samples, args.seed, not args.no_normalize))
    except (InputError, OSError) as e:
        fail("slm-compare-wer", e)


if __name__ == "__main__":
    main()
