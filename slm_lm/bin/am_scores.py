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
from slm_lm.common.fileio import read_text_lines, why_not, write_atomic
from slm_lm.common.options import Parser
from slm_lm.common.progress import progress_bar
from slm_lm.model.directory import read_espnet_config
from slm_lm.model.precision import device_option
from slm_lm.rescoring.nbest import espnet_hypothesis_dirs
from slm_lm.rescoring.transcripts import read_keyed, require_file

PROG = "slm-am-scores"


def token_ids(rank_dir: Path) -> dict[str, tuple[list[int], str]]:
    """{uttid: (token ids, "file:line")} of a `<k>best_recog/token_int`, whose ids must be those of its `score`."""
    keyed, scored = read_keyed(rank_dir / "token_int"), read_keyed(rank_dir / "score")
    for uttid in sorted(set(keyed) ^ set(scored)):
        raise InputError(f"{(keyed.get(uttid) or scored[uttid])[1]}: utterance {uttid!r} is in only one of "
                         f"{rank_dir}/token_int and score")
    ids = {}
    for uttid, (value, where) in keyed.items():
        try:
            ids[uttid] = ([int(t) for t in value.split()], where)
        except ValueError:
            raise InputError(f"{where}: token ids are not integers") from None
    return ids


def todo(nbest_dirs: list[str]) -> list[tuple[Path, dict[str, tuple[list[int], str]]]]:
    """(rank dir, its hypotheses) of every `<k>best_recog/` without `scores` in the N-best directories."""
    out = []
    for nbest_dir in nbest_dirs:
        for folder in espnet_hypothesis_dirs(nbest_dir):
            for rank_dir in sorted(folder.glob("*best_recog")):
                if rank_dir.is_dir() and not (rank_dir / "scores").exists():
                    out.append((rank_dir, token_ids(rank_dir)))
    return out


def vocabulary_size(config: dict, asr_config: str) -> int:
    """The number of tokens of the ASR model that `config` (read from `asr_config`) describes."""
    tokens = config.get("token_list")
    if isinstance(tokens, str):  # a token list file, as ESPnet also takes it
        return sum(1 for _ in read_text_lines(tokens))
    if not isinstance(tokens, list) or not tokens:
        raise InputError(f"{asr_config}: token_list is {tokens!r}: not an ESPnet ASR config (no token list)")
    return len(tokens)


def check_hypotheses(work, vocab: int, asr_config: str) -> None:
    """Every token id is one of the ASR model's `vocab` tokens (an N-best list of another model has others)."""
    for _, ids in work:
        for tokens, where in ids.values():
            bad = next((t for t in tokens if not 0 <= t < vocab), None)
            if bad is not None:
                raise InputError(f"{where}: token id {bad} is not in the vocabulary of {vocab} tokens of "
                                 f"--asr-config {asr_config} (an N-best list of another model?)")


def check_audio(work, wavs: dict[str, tuple[str, str]], wav_scp: str) -> None:
    """Every utterance to score has a `wav.scp` line naming a readable audio file (checked by its header)."""
    import soundfile

    for folder in sorted({rank_dir.parent for rank_dir, _ in work}):
        for uttid in sorted({u for rank_dir, ids in work if rank_dir.parent == folder for u in ids}):
            if uttid not in wavs:
                raise InputError(f"{wav_scp}: no line for utterance {uttid!r} (of {folder})")
            audio, where = wavs[uttid]
            if not audio:
                raise InputError(f"{where}: utterance {uttid!r} has no audio file (want 'UTTID PATH')")
            if not Path(audio).is_file():
                raise InputError(f"{where}: {audio}: {why_not(audio, 'audio file')}")
            try:
                soundfile.info(audio)
            except (RuntimeError, OSError) as e:  # soundfile.LibsndfileError is a RuntimeError
                raise InputError(f"{where}: {audio}: not an audio file soundfile can read ({_reason(e)})") from None


def _reason(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


def read_audio(audio: str, where: str):
    """The waveform (float32) of an audio file that `check_audio` accepted."""
    import soundfile

    try:
        return soundfile.read(audio, dtype="float32")[0]
    except (RuntimeError, OSError) as e:
        raise InputError(f"{where}: {audio}: cannot read the audio ({_reason(e)})") from None


def write_scores(work, scorer, wavs: dict[str, tuple[str, str]]) -> None:
    """Score the hypotheses of each utterance in one batch; write each rank dir's `scores` once all its
    utterances are scored."""
    for folder in sorted({rank_dir.parent for rank_dir, _ in work}):
        ranks = [(rank_dir, ids) for rank_dir, ids in work if rank_dir.parent == folder]
        uttids = sorted({uttid for _, ids in ranks for uttid in ids})
        lines = {rank_dir: {} for rank_dir, _ in ranks}
        with progress_bar(uttids, desc=f"{PROG} {folder}", file=sys.stderr, mininterval=30) as bar:
            for uttid in bar:
                held = [(rank_dir, ids[uttid][0]) for rank_dir, ids in ranks if uttid in ids]
                scores = scorer.scores(read_audio(*wavs[uttid]), [hypothesis for _, hypothesis in held])
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
    parser.add_argument("--device", default="cpu", type=device_option(PROG), help="torch device (default cpu)")
    args = parser.parse_args(argv)
    try:
        work = todo(args.nbest_dirs)
        if not work:
            print(f"{PROG}: every <k>best_recog has its scores already")
            return
        # everything that can be checked is, before ESPnet is imported (it may print on stderr) and the model runs
        config = read_espnet_config(args.asr_config)
        check_hypotheses(work, vocabulary_size(config, args.asr_config), args.asr_config)
        require_file(Path(args.wav_scp), "file")
        wavs = read_keyed(Path(args.wav_scp))
        check_audio(work, wavs, args.wav_scp)
        require_file(Path(args.asr_model), "file")
        from slm_lm.espnet_lm.quiet_import import quiet_espnet_import
        with quiet_espnet_import():
            from slm_lm.espnet_lm.am_scores import AmScorer

        write_scores(work, AmScorer(config, args.asr_config, args.asr_model, args.device), wavs)
    except (InputError, OSError) as e:
        fail(PROG, e)


if __name__ == "__main__":
    main()
