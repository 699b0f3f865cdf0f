"""Train a sentencepiece tokenizer on prepared text and write `bpe.model` + ESPnet `tokens.txt`.

The settings are those of ESPnet's asr.sh stage 5 for LibriSpeech (`spm_train --model_type unigram
--vocab_size 5000 --character_coverage 1.0`; `model_type="bpe"` is asr.sh's `--bpemode bpe`), except
two: training reads at most `input_sentence_size` sentences (asr.sh: 100M, i.e. all), drawn with a
fixed seed, so that it runs in minutes on a CPU and gives the same model for the same text and
settings; and the token list holds `<mask>` before `<sos/eos>` (see `train_bpe`). The file keeps
ESPnet's name `bpe.model` whatever the model type (asr.sh: `bpe_unigram5000/bpe.model`).
"""

import re
from pathlib import Path

import sentencepiece as spm

from slm_lm.common.errors import InputError, os_problem
from slm_lm.common.fileio import new_directory, read_text_lines, scratch_directory, why_not
from slm_lm.common.outputs import check_no_overlap, check_output_dir
from slm_lm.model.tokenizer import BLANK, MASK, SOS_EOS, UNK, Tokenizer

__all__ = ["train_bpe"]

_CLEAN_LINE = re.compile(r"[A-Z']+(?: [A-Z']+)*")


def _check_text(path: Path) -> None:
    """The file must be non-empty UTF-8 and every line a normalised sentence (slm-prepare-lm-text output);
    sentencepiece would otherwise skip or mangle a bad line without a word."""
    number = 0
    for number, line in read_text_lines(path):
        if not _CLEAN_LINE.fullmatch(line):
            raise InputError(f"{path}:{number}: not a normalised sentence (A-Z, apostrophes, single "
                             f"spaces): {line[:80]!r}")
    if number == 0:
        raise InputError(f"{path}: training text is empty")


OUTPUT_FILES = ("bpe.model", "tokens.txt")


def _check_out_dir(out_dir: Path, text: Path) -> None:
    """`out_dir` must be (or become) a directory whose output files are not the training text."""
    check_output_dir("--out", out_dir, (), (), "slm-train-bpe")
    for name in OUTPUT_FILES:
        check_no_overlap("--out", out_dir / name, [text])


def train_bpe(text, out_dir, vocab_size: int = 5000, input_sentence_size: int = 1_000_000, seed: int = 0,
              num_threads: int = 1, model_type: str = "bpe") -> Tokenizer:
    """Train a sentencepiece model (`model_type` "bpe" or "unigram") on `text` (one normalised sentence per
    line); write `out_dir`/bpe.model + tokens.txt.

    The token list is `<blank>`, `<unk>`, the pieces in sentencepiece order (its own `<unk>`, `<s>`,
    `</s>` left out), `<mask>`, `<sos/eos>`: vocab_size - 3 + 4 entries.
    """
    text, out_dir = Path(text), Path(out_dir)
    if model_type not in ("bpe", "unigram"):
        raise InputError(f"model_type {model_type!r}: 'unigram' or 'bpe'")
    if not text.is_file():
        raise InputError(f"{text}: {why_not(text, 'training text')}")
    _check_text(text)
    _check_out_dir(out_dir, text)
    try:
        with new_directory(out_dir):
            return _train(text, out_dir, vocab_size, input_sentence_size, seed, num_threads, model_type)
    except OSError as e:
        raise InputError(f"{out_dir}: cannot write the tokenizer: {os_problem(e, out_dir)}") from None


def _train(text: Path, out_dir: Path, vocab_size: int, input_sentence_size: int, seed: int,
           num_threads: int, model_type: str) -> Tokenizer:
    """Train in a temporary directory inside `out_dir`, then write bpe.model + tokens.txt there."""
    spm.set_random_generator_seed(seed)
    with scratch_directory(out_dir, ".bpe.") as tmp:
        prefix = tmp / "bpe"
        try:
            spm.SentencePieceTrainer.train(
                input=str(text), model_prefix=str(prefix), vocab_size=vocab_size, model_type=model_type,
                character_coverage=1.0, input_sentence_size=input_sentence_size,
                shuffle_input_sentence=True, num_threads=num_threads,
                minloglevel=2,  # no WARNING lines before the error: a failure raises, and is reported in one line
                unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
            )
        except RuntimeError as e:  # "Internal: src/trainer_interface.cc(662) [CHECK] Vocabulary size too high ..."
            reason = re.sub(r"^.*\) \[.*?\] ", "", " ".join(str(e).split()))
            raise InputError(f"{text}: sentencepiece training failed: {reason}") from None
        try:
            sp = spm.SentencePieceProcessor(model_file=str(prefix) + ".model")
        except RuntimeError:  # sentencepiece does not report a failed write (a full disk): the file is cut short
            raise InputError(f"{out_dir}: cannot write the tokenizer: sentencepiece's model file came out "
                             "unreadable (a full disk?)") from None
        pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size())
                  if not (sp.is_unknown(i) or sp.is_control(i))]
        tokenizer = Tokenizer(str(prefix) + ".model", [BLANK, UNK, *pieces, MASK, SOS_EOS])
        tokenizer.save(out_dir)
    return tokenizer
