"""slm-lm-combination: AM only / AM + each LM / AM + all LMs, in one markdown table.

slm-rescore runs for every combination of the given LMs, the weights tuned on one dev set and applied to
the other (both directions).

Usage (the options are slm-rescore's; --dev takes exactly two sets, each tuned on and tested in turn;
NBEST=$(slm-data path librispeech-nbest), the lists of `slm-data get librispeech-nbest`):
    slm-lm-combination --dev "$NBEST/dev_clean,$NBEST/dev_other" \\
        --lm exp/compare/models/slm --lm score:lm --nbest 10 --am-weights decoder=0.6,ctc=0.4 \\
        --lambda-range 0:5:0.1 --out exp/combination

Writes OUT/<combination>/tune_<dev set>/ (slm-rescore's outputs) and OUT/combination.md; prints the table.
Each model scores each unique text once (the cache OUT/lm_cache, or --cache, is shared by all runs).
"""
import itertools
import re
import sys
from pathlib import Path

from slm_lm.common.errors import InputError, fail
from slm_lm.common.outputs import check_no_overlap, check_output_dir, finish_interrupted, staged_outputs
from slm_lm.rescoring.inputs import (
    comma_list,
    lm_specs,
    load_lms,
    load_nbest_sets,
    normalized_sets,
    rescore_parser,
    scorer_options,
    tuning_options,
)
from slm_lm.rescoring.rescore import rescore


def combinations(n_lms: int) -> list[tuple[int, ...]]:
    """Indices of the LMs of each row: every LM alone in --lm order, then the larger combinations."""
    return [c for size in range(1, n_lms + 1) for c in itertools.combinations(range(n_lms), size)]


def _cell(report, best) -> str:
    text = f"{report.wer_rescored:.2f} (λ = {' / '.join(f'{x:g}' for x in best.lambdas)}"
    if best.beta:
        text += f", β = {best.beta:g}"
    if any(best.alphas):
        text += f", α = {' / '.join(f'{x:g}' for x in best.alphas)}"
    return text + ")"


COMMAND = "slm-lm-combination"
TABLE_FILE = "combination.md"


def _earlier_table(out: Path) -> set:
    """{TABLE_FILE} when OUT holds the table of an earlier run (its last line is the command), else none."""
    try:
        last = (out / TABLE_FILE).read_text(encoding="utf-8").rstrip("\n").rsplit("\n", 1)[-1]
    except (OSError, UnicodeDecodeError):
        return set()
    return {TABLE_FILE} if last.startswith(f"`{COMMAND} ") else set()


def main(argv=None) -> None:
    """Entry point of ``slm-lm-combination``: writes OUT/combination.md and prints the table."""
    args = rescore_parser(COMMAND, __doc__.split("\n\n")[0]).parse_args(argv)
    try:
        paths = comma_list(args.dev)
        if len(paths) != 2 or args.test:
            raise InputError("--dev: give exactly two sets (each is tuned on and tested in turn) and no --test")
        specs = lm_specs(args.lm)
        tuning = tuning_options(args, len(specs))
        kinds = tuning.pop("length_norm")
        sets = load_nbest_sets(paths, comma_list(args.dev_ref), "--dev", args.nbest)
        if not args.no_normalize:  # WER and LMs on the same normalised text, as slm-rescore
            sets = normalized_sets(sets)
        out = Path(args.out)
        refs = [r for r in comma_list(args.dev_ref) if r != "-"]
        check_no_overlap("--out", out, [s.source for s in sets] + refs + [p for p in specs if Path(p).exists()])
        finish_interrupted(out, COMMAND)
        own = _earlier_table(out)
        check_output_dir("--out", out, [TABLE_FILE], own, COMMAND)
        lms = load_lms(specs, **scorer_options(args))
        command = f"{COMMAND} " + " ".join(sys.argv[1:] if argv is None else argv)
        labels, cells, baseline = [], {}, {}
        for combo in combinations(len(lms)):
            label = "AM + " + " + ".join(specs[j] for j in combo)
            labels.append(label)
            slug = "am+" + "+".join(re.sub(r"[^A-Za-z0-9._-]+", "_", specs[j]).strip("_")[-40:] for j in combo)
            for dev, test in ((sets[0], sets[1]), (sets[1], sets[0])):
                result, reports = rescore(
                    [dev], [test], [lms[j] for j in combo], out / slug / f"tune_{dev.name}",
                    cache_dir=args.cache or out / "lm_cache", progress=not args.no_progress,
                    settings={"command": command}, length_norm=[kinds[j] for j in combo], **tuning,
                )
                cells[label, test.name] = _cell(reports[1], result.best)
                baseline[test.name] = reports[1]
    except (InputError, OSError) as err:
        fail(COMMAND, err)
    a, b = sets[1].name, sets[0].name  # the test sets of the two directions
    lines = [f"| system | {a} WER (weights tuned on {b}) | {b} WER (weights tuned on {a}) |", "|---|---|---|",
             f"| AM only | {baseline[a].wer_am:.2f} | {baseline[b].wer_am:.2f} |"]
    lines += [f"| {label} | {cells[label, a]} | {cells[label, b]} |" for label in labels]
    lines += ["", f"WER % (jiwer). AM = {args.am_weights or 'the file score'}; the file's own 1-best: "
              f"{a} {baseline[a].wer_file:.2f}, {b} {baseline[b].wer_file:.2f}; oracle: "
              f"{a} {baseline[a].wer_oracle:.2f}, {b} {baseline[b].wer_oracle:.2f}.", "", f"`{command}`"]
    table = "\n".join(lines) + "\n"
    try:
        with staged_outputs("--out", out, [TABLE_FILE], own, COMMAND) as staging:
            (staging / TABLE_FILE).write_text(table, encoding="utf-8")
    except (InputError, OSError) as err:
        fail(COMMAND, err)
    print(table, end="")


if __name__ == "__main__":
    main()
