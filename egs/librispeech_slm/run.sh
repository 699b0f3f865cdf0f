#!/usr/bin/env bash
# LibriSpeech ASR + Sliding-LM (Transcormer) N-best rescoring, ESPnet-style recipe: the settings of the
# LibriSpeech-960 setting, then the stages (local/stages.sh, which takes every option: ./run.sh --help).
#
#   ./run.sh --mini true          # the default: offline mini corpus (KJV + espeak-ng), conf/mini.sh over
#                                 # these settings, every stage on 2 CPU cores, prints the WER table
#   ./run.sh --micro true         # the few-minute smoke run (CI): conf/micro.sh over conf/mini.sh
#   ./run.sh --mini false --ngpu 4 --librispeech_dir /data   # the paper's LibriSpeech-960 setting, as set here
#   ./run.sh --stage 6 --stop_stage 8                         # run some stages again
set -euo pipefail
cd "$(dirname "$0")"

mini=true              # true: the mini corpus, conf/mini.sh (and conf/micro.sh with --micro true) over the below
workdir=.              # where downloads/ data/ exp/ go
train_parts="train-clean-100 train-clean-360 train-other-500"
dev_parts="dev-clean dev-other"
test_parts="test-clean test-other"
lm_corpus=librispeech  # stage 3's LM text: librispeech (librispeech-lm-norm, OpenSLR 11), bible or gutenberg (mini)
asr_config=conf/train_asr.yaml
decode_config=conf/decode_asr_beam10.yaml
lm_kinds=slm           # LMs to train and compare, e.g. "slm clm mlm bilm"
lm_size=small          # conf/tuning/train_lm_<kind>_<lm_size>.yaml
lm_init=               # KIND=MODEL pairs: stage 5 fine-tunes KIND from our model MODEL (mini: slm-books, clm-books)
bpe_size=5000
bpemode=unigram        # sentencepiece model type, unigram | bpe (ESPnet's --bpemode)
max_wav_duration=30    # training/validation utterances of this many seconds or more are left out (none: keep all)
speed_perturb_factors="0.9 1.0 1.1"   # ESPnet's: train on data/train_sp, one copy per factor ("": none)

. ./local/stages.sh
