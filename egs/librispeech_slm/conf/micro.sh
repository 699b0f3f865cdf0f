# The micro setting (run.sh --micro true): a few-minute smoke run (CI), read over conf/mini.sh. Its own sizes
# are not in the experiment names ("micro" is the work dir).
workdir=micro
corpus_sizes="--train 60 --dev 6 --test 6"
decode_config=conf/decode_asr_micro.yaml
lm_init=""
bpe_size=100
asr_fixed_args="--max_epoch 1 --num_iters_per_epoch none --batch_bins 400000 --encoder_conf num_blocks=1 --decoder_conf num_blocks=1"
# validation in batches of 4096 tokens: the training's batches of 128 make it take most of the LM stage
lm_fixed_args="--use_tensorboard false --max_epoch 1 --num_iters_per_epoch 10 --valid_batch_bins 4096"
mwer_fixed_args="--updates 2 --batch-tokens 512 --valid-every 1 --lambda 0.5"   # --mwer_utts N: a few updates
