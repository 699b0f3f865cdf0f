"""slm-am-scores: write the per-scorer `scores` file of N-best lists that have only ESPnet's total `score`.

    slm-am-scores --asr-config exp/asr_<tag>/config.yaml --asr-model exp/asr_<tag>/valid.acc.ave.pth \\
        --wav-scp dump/raw/test_clean/wav.scp exp/asr_<tag>/decode_asr_nbest10_asr_model_valid.acc.ave/test_clean

Each N-best directory is laid out as `slm-rescore` reads it (asr.sh's `<set>/logdir/output.*/`, or
`<k>best_recog/` directories); every `<k>best_recog/` gets `scores` beside its `token_int`: per hypothesis
the decoder and CTC log-likelihoods recomputed with the ASR model by teacher forcing, and the length bonus
(`{"decoder": ..., "ctc": ..., "length_bonus": <tokens incl. eos>}`), which `slm-rescore --am-weights
decoder=0.7,ctc=0.3` then reads. A `<k>best_recog/` that already has `scores` is left as it is, so a killed
run resumes; each file is written whole once its directory is done.
"""
import json
import sys
from pathlib import Path

from slm_lm.common.errors import InputError, fail
from slm_lm.common.fileio import write_atomic
from slm_lm.rescoring.nbest import espnet_hypothesis_dirs
from slm_lm.common.progress import progress_bar
from slm_lm.rescoring.transcripts import read_keyed, read_table, require_file
from slm_lm.common.options import Parser

PROG = "slm-am-scores"


def token_ids(rank_dir: Path) -> dict[str, list[int]]:
    """{uttid: token ids} of a `<k>best_recog/token_int`, whose ids must be those of its `score`."""
    keyed, scored = read_keyed(rank_dir / "token_int"), read_keyed(rank_dir / "score")
    for uttid in sorted(set(keyed) ^ set(scored)):
        raise InputError(f"{(keyed.get(uttid) or scored[uttid])[1]}: utterance {uttid!r} is in only one of "
                         f"{rank_dir}/token_int and score")
    ids = {}
    for uttid, (value, where) in keyed.items():
        try:
            ids[uttid] = [int(t) for t in value.split()]
        except ValueError:
            raise InputError(f"{where}: token ids are not integers") from None
    return ids


def todo(nbest_dirs: list[str]) -> list[tuple[Path, dict[str, list[int]]]]:
    """(rank dir, its hypotheses) of every `<k>best_recog/` without `scores` in the N-best directories."""
    out = []
    for nbest_dir in nbest_dirs:
        for folder in espnet_hypothesis_dirs(nbest_dir):
            for rank_dir in sorted(folder.glob("*best_recog")):
                if rank_dir.is_dir() and not (rank_dir / "scores").exists():
                    out.append((rank_dir, token_ids(rank_dir)))
    return out


def write_scores(work, scorer, wavs: dict[str, str], wav_scp: str) -> None:
    """Score the hypotheses of each utterance in one batch; write each rank dir's `scores` once all its
    utterances are scored."""
    from espnet2.fileio.sound_scp import SoundScpReader

    reader = SoundScpReader(wav_scp, dtype="float32")
    for folder in sorted({rank_dir.parent for rank_dir, _ in work}):
        ranks = [(rank_dir, ids) for rank_dir, ids in work if rank_dir.parent == folder]
        uttids = sorted({uttid for _, ids in ranks for uttid in ids})
        lines = {rank_dir: {} for rank_dir, _ in ranks}
        with progress_bar(uttids, desc=f"{PROG} {folder}", file=sys.stderr, mininterval=30) as bar:
            for uttid in bar:
                if uttid not in wavs:
                    raise InputError(f"{wav_scp}: no line for utterance {uttid!r} (of {folder})")
                held = [(rank_dir, ids[uttid]) for rank_dir, ids in ranks if uttid in ids]
                scores = scorer.scores(reader[uttid][1], [hypothesis for _, hypothesis in held])
                for (rank_dir, _), score in zip(held, scores):
                    lines[rank_dir][uttid] = f"{uttid} {json.dumps(score)}\n"
        for rank_dir, by_uttid in lines.items():
            write_atomic(rank_dir / "scores", "".join(by_uttid[u] for u in sorted(by_uttid)))


def main(argv=None) -> None:
    """Entry point of ``slm-am-scores``."""
    parser = Parser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("nbest_dirs", nargs="+", metavar="NBEST_DIR", help="asr.sh's <decode dir>/<set>, or ours")
    parser.add_argument("--asr-config", required=True, help="the ASR experiment's config.yaml")
    parser.add_argument("--asr-model", required=True, help="its checkpoint, e.g. valid.acc.ave.pth")
    parser.add_argument("--wav-scp", required=True, help="the set's wav.scp (asr.sh: dump/raw/<set>/wav.scp)")
    parser.add_argument("--device", default="cpu", help="torch device (default cpu)")
    args = parser.parse_args(argv)
    try:
        work = todo(args.nbest_dirs)
        if not work:
            print(f"{PROG}: every <k>best_recog has its scores already")
            return
        wavs = read_table(args.wav_scp)
        for path in (args.asr_config, args.asr_model):  # before ESPnet is imported (it may print on stderr)
            require_file(path, "file")
        from slm_lm.espnet_lm.quiet_import import quiet_espnet_import
        with quiet_espnet_import():
            from slm_lm.espnet_lm.am_scores import AmScorer

        write_scores(work, AmScorer(args.asr_config, args.asr_model, args.device), wavs, args.wav_scp)
    except (InputError, OSError) as e:
        fail(PROG, e)


if __name__ == "__main__":
    main()
