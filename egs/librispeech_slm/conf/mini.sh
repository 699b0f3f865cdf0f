# The mini setting (run.sh --mini true, the default), read over run.sh's settings; options on the command line
# win over both. The offline mini corpus (local/mini_corpus.py: KJV verses spoken by espeak-ng), every stage
# on 2 CPU cores. Pinned to what its published figures (RESULTS.md, "The mini recipe") were made with, so
# that the main job prints the same table and an existing mini/ work dir is reused.
workdir=mini
train_parts=train-mini
corpus_sizes="--train 6000 --dev 100 --test 100"   # utterances of the mini corpus (stage 0)
lm_corpus=bible                                    # or gutenberg: the shipped models' books (slm-data get books)
asr_config=conf/train_asr_mini.yaml
decode_config=conf/decode_asr_mini.yaml
lm_init="slm=slm-books clm=clm-books"              # stage 5 fine-tunes these kinds from the shipped models
bpe_size=300
bpemode=bpe                          # a BPE tokenizer, in data/token_list/bpe<N>/
max_wav_duration=none                # its longest utterance is ~10 s
speed_perturb_factors=""             # none (see conf/train_asr_mini.yaml)
asr_text_shape=text_shape            # ASR batches count the text's token count (not asr.sh's text_shape.bpe)
lm_fixed_args="--use_tensorboard false"   # no tensorboard (its configs say so too)
