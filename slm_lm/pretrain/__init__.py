"""Pre-training on a tokenised corpus under a time (or update) budget: the trainer of the shipped models.

ESPnet's trainer (`slm-lm-train`) is the recipe's path. This one is for pre-training where ESPnet is
not installed (a lent GPU machine) or where a fixed *time* budget is the unit of comparison: the
learning rate follows the fraction of the budget spent (linear warm-up, then linear decay to zero), so
kinds given the same minutes get the same schedule. A batch is rows of one length, each packed with whole
sentences (shuffled every epoch), so every step has one shape and can be compiled; nothing in a step is read
back to the host. bf16/fp16 autocast with the loss in float32.

- `corpus`: the encoded corpus (`NAME.ids.xz`) and its sentences packed into rows;
- `schedule`: the budget (minutes of a clock, or updates) and the learning rate along it;
- `trainer`: `PretrainSettings`, the training loop `pretrain`, validation, checkpoint, card and export;
- `mwer`, `mwer_trainer`: discriminative fine-tuning on N-best lists (`slm-mwer-train`), the minimum word
  error rate loss and its training loop.
"""
from slm_lm.pretrain.corpus import PackedRows, Sentences, encode_corpus, load_corpus, pack_rows
from slm_lm.pretrain.schedule import Budget, learning_rate
from slm_lm.pretrain.trainer import PretrainSettings, export, initialise, pretrain, validation_ce

__all__ = [
    "Budget", "PackedRows", "PretrainSettings", "Sentences", "encode_corpus", "export", "initialise", "learning_rate",
    "load_corpus", "pack_rows", "pretrain", "validation_ce",
]
