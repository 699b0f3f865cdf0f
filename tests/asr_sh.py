"""A stand-in for `egs2/librispeech/asr1/run.sh` (ESPnet's asr.sh with LibriSpeech's settings) for the tests:
its LM stages (6 collect-stats, aggregation and `text_shape.bpe`; 7 training; 8 perplexity) and decoding (12),
run as the stock ESPnet modules with asr.sh's options, in asr.sh's directory layout and names.

It takes only the asr.sh options the docs use; any other option or stage stops it (exit 2), so a command in
the docs that it cannot run exactly fails the test that runs the docs. What differs from a LibriSpeech run
is size only: CPU (`--ngpu 0`), one job per stage (`--nj 1 --inference_nj 1`), two test sets, and the training
shortened by `SHORTEN_LM_TRAINING`. As asr.sh, it runs the stock modules with the `python3` of the PATH.
"""
import argparse
import shlex
import subprocess
import sys
from pathlib import Path

# LibriSpeech's run.sh and asr.sh's settings (NBPE for the names only: the token list is the test's)
LANG, NBPE, NJ, INFERENCE_NJ = "en", 5000, 1, 1
ASR_EXP = "exp/asr_train_asr_conformer_raw_en_bpe5000_sp"
VALID_SET, TEST_SETS = "dev", ("dev_clean", "test_other")
INFERENCE_CONFIG, INFERENCE_LM, INFERENCE_ASR_MODEL = "conf/decode_asr.yaml", "valid.loss.ave.pth", "valid.acc.ave.pth"
DATA = "dump/raw"
SHORTEN_LM_TRAINING = ["--max_epoch", "1", "--num_iters_per_epoch", "2", "--batch_bins", "256"]
STAGES = {6, 7, 8, 12}


def tag_of_args(args: str, keep_slash: bool) -> str:
    """asr.sh's args tag: `--max_epoch 10` -> `_max_epoch10`."""
    drop = " |=" if keep_slash else " |=/"
    return "".join(c for c in args.replace("--", "_") if c not in drop)


def run(python: str, *args: str) -> None:
    print("+", shlex.join([python, *args]), flush=True)
    subprocess.run([python, *args], check=True)


def split_scp(key_file: Path, parts: list) -> None:
    """Kaldi's split_scp.pl: contiguous, nearly equal chunks."""
    lines = key_file.read_text().splitlines(keepends=True)
    n = len(parts)
    for i, part in enumerate(parts):
        part.write_text("".join(lines[len(lines) * i // n:len(lines) * (i + 1) // n]))


def main() -> int:
    p = argparse.ArgumentParser(prog="run.sh")
    p.add_argument("--lang", choices=[LANG], default=LANG)
    p.add_argument("--stage", type=int, required=True)
    p.add_argument("--stop_stage", type=int, required=True)
    p.add_argument("--lm_config", default="")
    p.add_argument("--lm_args", default="")
    p.add_argument("--use_lm", choices=["true", "false"], default="true")
    p.add_argument("--inference_args", default="")
    a = p.parse_args()
    stages = set(range(a.stage, a.stop_stage + 1))
    if not stages <= STAGES:
        p.error(f"stages {sorted(stages - STAGES)} are not the LM or decoding stages this stand-in runs")
    python = "python3"  # asr.sh's --python
    token_list = f"data/{LANG}_token_list/bpe_unigram{NBPE}/tokens.txt"
    bpemodel = f"data/{LANG}_token_list/bpe_unigram{NBPE}/bpe.model"
    lm_tag = (Path(a.lm_config).stem if a.lm_config else "train") + f"_{LANG}_bpe{NBPE}" + tag_of_args(a.lm_args, False)
    lm_stats, lm_exp = Path(f"exp/lm_stats_{LANG}_bpe{NBPE}"), Path(f"exp/lm_{lm_tag}")
    lm_train_text, lm_dev_text, lm_test_text = f"{DATA}/lm_train.txt", f"{DATA}/{VALID_SET}/text", f"{DATA}/{TEST_SETS[0]}/text"
    config = ["--config", a.lm_config] if a.lm_config else []
    lm_args = shlex.split(a.lm_args)
    common = ["--use_preprocessor", "true", "--bpemodel", bpemodel, "--token_type", "bpe", "--token_list", token_list,
              "--non_linguistic_symbols", "none", "--cleaner", "none", "--g2p", "none"]
    use_lm = a.use_lm == "true"
    if use_lm and 6 in stages:
        logdir = lm_stats / "logdir"
        logdir.mkdir(parents=True, exist_ok=True)
        nj = min(NJ, *(len(Path(f).read_text().splitlines()) for f in (lm_train_text, lm_dev_text)))
        split_scp(Path(lm_train_text), [logdir / f"train.{n}.scp" for n in range(1, nj + 1)])
        split_scp(Path(lm_dev_text), [logdir / f"dev.{n}.scp" for n in range(1, nj + 1)])
        for n in range(1, nj + 1):
            run(python, "-m", "espnet2.bin.lm_train", "--collect_stats", "true", *common,
                "--train_data_path_and_name_and_type", f"{lm_train_text},text,text",
                "--valid_data_path_and_name_and_type", f"{lm_dev_text},text,text",
                "--train_shape_file", f"{logdir}/train.{n}.scp", "--valid_shape_file", f"{logdir}/dev.{n}.scp",
                "--output_dir", f"{logdir}/stats.{n}", *config, *lm_args)
        inputs = [x for n in range(1, nj + 1) for x in ("--input_dir", f"{logdir}/stats.{n}")]
        run(python, "-m", "espnet2.bin.aggregate_stats_dirs", *inputs, "--output_dir", str(lm_stats))
        n_tokens = len(Path(token_list).read_text().splitlines())  # asr.sh: $(<${lm_token_list} wc -l)
        for split in ("train", "valid"):
            shapes = (lm_stats / split / "text_shape").read_text().splitlines()
            (lm_stats / split / "text_shape.bpe").write_text("".join(f"{line},{n_tokens}\n" for line in shapes))
    if use_lm and 7 in stages:
        run(python, "-m", "espnet2.bin.lm_train", "--ngpu", "0", *common,
            "--valid_data_path_and_name_and_type", f"{lm_dev_text},text,text",
            "--valid_shape_file", f"{lm_stats}/valid/text_shape.bpe", "--fold_length", "150", "--resume", "true",
            "--output_dir", str(lm_exp), *config, "--train_data_path_and_name_and_type", f"{lm_train_text},text,text",
            "--train_shape_file", f"{lm_stats}/train/text_shape.bpe", *lm_args, *SHORTEN_LM_TRAINING)
    if use_lm and 8 in stages:
        run(python, "-m", "espnet2.bin.lm_calc_perplexity", "--ngpu", "0",
            "--data_path_and_name_and_type", f"{lm_test_text},text,text", "--train_config", f"{lm_exp}/config.yaml",
            "--model_file", f"{lm_exp}/{INFERENCE_LM}", "--output_dir", f"{lm_exp}/perplexity_test")
    if 12 in stages:
        tag = Path(INFERENCE_CONFIG).stem + tag_of_args(a.inference_args, True)
        lm = []
        if use_lm:
            tag += f"_lm_{lm_exp.name}_{Path(INFERENCE_LM).stem}"
            lm = ["--lm_train_config", f"{lm_exp}/config.yaml", "--lm_file", f"{lm_exp}/{INFERENCE_LM}"]
        tag += f"_asr_model_{Path(INFERENCE_ASR_MODEL).stem}"
        for dset in TEST_SETS:
            out, logdir = Path(ASR_EXP) / tag / dset, Path(ASR_EXP) / tag / dset / "logdir"
            logdir.mkdir(parents=True, exist_ok=True)
            key_file = Path(f"{DATA}/{dset}/wav.scp")
            nj = min(INFERENCE_NJ, len(key_file.read_text().splitlines()))
            split_scp(key_file, [logdir / f"keys.{n}.scp" for n in range(1, nj + 1)])
            for n in range(1, nj + 1):
                run(python, "-m", "espnet2.bin.asr_inference", "--batch_size", "1", "--ngpu", "0",
                    "--data_path_and_name_and_type", f"{key_file},speech,sound", "--key_file", f"{logdir}/keys.{n}.scp",
                    "--asr_train_config", f"{ASR_EXP}/config.yaml", "--asr_model_file", f"{ASR_EXP}/{INFERENCE_ASR_MODEL}",
                    "--output_dir", f"{logdir}/output.{n}", "--config", INFERENCE_CONFIG, *lm,
                    *shlex.split(a.inference_args))
            for f in ("token", "token_int", "score", "text"):
                lines = [line for n in range(1, nj + 1)
                         for line in (logdir / f"output.{n}" / "1best_recog" / f).read_text().splitlines()]
                (out / f).write_text("".join(f"{line}\n" for line in sorted(lines)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
