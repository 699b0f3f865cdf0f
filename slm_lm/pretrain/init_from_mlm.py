"""Initialise a sliding LM from masked-LM weights: our own `mlm` checkpoint, or BERT / RoBERTa (or carry
our own model of the same kind over as it is, `from_our_checkpoint`).

SlidingLM and MaskedLM have the same parameters (the paper's "+ BERT Init"), so our checkpoint loads
as is. A Hugging Face `BertForMaskedLM` / `RobertaForMaskedLM` directory is mapped tensor by tensor:
- q, k, v projections -> the fused `qkv` (rows q | k | v);
- token_type_embeddings[0] (every token is segment 0 when scoring) is folded into the positions;
- RoBERTa numbers positions from padding_idx + 1: our position i is its row i + padding_idx + 1, so
  max_positions = max_position_embeddings - padding_idx - 1;
- layer_norm_eps, sizes and dropout from the Hugging Face config;
- LM head: transform dense / LayerNorm, decoder tied to the word embeddings, decoder bias.
The result scores with the model's own tokenizer (`slm_lm.model.hf_tokenizer.HFTokenizer`), text passed through as
is (`case` to change that); LibriSpeech normalisation is off.
"""
from pathlib import Path

import torch

from slm_lm.common.errors import InputError
from slm_lm.model.config import LMConfig
from slm_lm.model.kinds import model_from_config
from slm_lm.scoring.scorer import Scorer

HF_PREFIXES = {"bert": ("bert.", "cls.predictions."), "roberta": ("roberta.", "lm_head.")}
# Our LM head parameters <- the Hugging Face head's, per model type.
HF_HEAD = {
    "bert": {"dense": "transform.dense", "norm": "transform.LayerNorm"},
    "roberta": {"dense": "dense", "norm": "layer_norm"},
}


def from_our_checkpoint(directory, kind: str = "slm") -> Scorer:
    """A `kind` model (default SLM) carrying the weights of our model in `directory` (a shipped name, a
    save_pretrained directory or an ESPnet LM experiment): an `mlm` converted, or a `kind` model as it is
    (to fine-tune it through ESPnet); tokenizer and options kept."""
    source = Scorer.from_pretrained(directory)
    if source.model.config.kind not in ("mlm", kind):
        raise InputError(f"{directory}: holds a {source.model.config.kind!r} model: a {kind!r} model starts "
                         f"from an 'mlm' or a {kind!r} one")
    return _converted(source.model.config, source.model.state_dict(), source.tokenizer, kind,
                      normalize=source.normalize)


def hf_to_slm_lm(hf_config, hf_state: dict) -> tuple:
    """(LMConfig fields, our state dict) from a BERT/RoBERTa masked-LM config and state dict."""
    model_type = hf_config.model_type
    if model_type not in HF_PREFIXES:
        raise InputError(f"model_type {model_type!r}: only BERT and RoBERTa masked LMs can be mapped")
    if hf_config.hidden_act != "gelu":
        raise InputError(f"hidden_act {hf_config.hidden_act!r}: our layers use exact GELU ('gelu')")
    if getattr(hf_config, "position_embedding_type", "absolute") not in (None, "absolute"):
        raise InputError(f"position_embedding_type {hf_config.position_embedding_type!r}: only absolute")
    body, head = HF_PREFIXES[model_type]
    s = lambda name: hf_state[body + name]  # noqa: E731
    offset = hf_config.pad_token_id + 1 if model_type == "roberta" else 0
    words = s("embeddings.word_embeddings.weight")
    decoder = hf_state.get(head + "decoder.weight", words)
    if not torch.equal(decoder, words):
        raise InputError("the LM head's decoder is not tied to the word embeddings (ours is tied)")
    positions = s("embeddings.position_embeddings.weight")[offset:] + s("embeddings.token_type_embeddings.weight")[0]
    ours = {
        "embed.tokens.weight": words,
        "head.embedding.weight": words,  # tied: the same tensor under the head's name
        "embed.positions.weight": positions,
        "embed.norm.weight": s("embeddings.LayerNorm.weight"),
        "embed.norm.bias": s("embeddings.LayerNorm.bias"),
        "head.bias": hf_state[head + "bias"],
    }
    for ours_name, theirs in HF_HEAD[model_type].items():
        for kind in ("weight", "bias"):
            ours[f"head.{ours_name}.{kind}"] = hf_state[f"{head}{theirs}.{kind}"]
    for i in range(hf_config.num_hidden_layers):
        layer = f"encoder.layer.{i}."
        for kind in ("weight", "bias"):
            ours[f"layers.{i}.qkv.{kind}"] = torch.cat([s(f"{layer}attention.self.{p}.{kind}") for p in ("query", "key", "value")])
            ours[f"layers.{i}.out.{kind}"] = s(f"{layer}attention.output.dense.{kind}")
            ours[f"layers.{i}.attn_norm.{kind}"] = s(f"{layer}attention.output.LayerNorm.{kind}")
            ours[f"layers.{i}.ff.0.{kind}"] = s(f"{layer}intermediate.dense.{kind}")
            ours[f"layers.{i}.ff.2.{kind}"] = s(f"{layer}output.dense.{kind}")
            ours[f"layers.{i}.ff_norm.{kind}"] = s(f"{layer}output.LayerNorm.{kind}")
    fields = dict(
        vocab_size=hf_config.vocab_size,
        n_layers=hf_config.num_hidden_layers,
        d_model=hf_config.hidden_size,
        n_heads=hf_config.num_attention_heads,
        d_ff=hf_config.intermediate_size,
        max_positions=hf_config.max_position_embeddings - offset,
        dropout=hf_config.hidden_dropout_prob,
        layer_norm_eps=hf_config.layer_norm_eps,
    )
    return fields, {k: v.detach().clone() for k, v in ours.items()}


def slm_from_hf(directory, kind: str = "slm", case: str = "as-is") -> Scorer:
    """A `kind` model (default SLM) initialised from the BertForMaskedLM / RobertaForMaskedLM saved in
    `directory` (no download), with the model's own tokenizer."""
    from transformers import AutoConfig, AutoModelForMaskedLM

    from slm_lm.model.hf_tokenizer import HFTokenizer

    directory = Path(directory)
    tokenizer = HFTokenizer.from_dir(directory, case=case)
    try:
        hf_config = AutoConfig.from_pretrained(directory, local_files_only=True)
        hf_model = AutoModelForMaskedLM.from_pretrained(directory, local_files_only=True)
    except (OSError, ValueError) as e:
        raise InputError(f"{directory}: cannot load a masked LM: {e}") from None
    try:
        fields, state = hf_to_slm_lm(hf_config, hf_model.state_dict())
    except InputError as e:
        raise InputError(f"{directory}: {e}") from None
    if fields["vocab_size"] != tokenizer.vocab_size:
        raise InputError(f"{directory}: the model has {fields['vocab_size']} tokens, its tokenizer {tokenizer.vocab_size}")
    config = LMConfig(kind="mlm", mask_id=tokenizer.mask_id, **fields)
    return _converted(config, state, tokenizer, kind, normalize=False)


def _converted(config: LMConfig, state: dict, tokenizer, kind: str, **options) -> Scorer:
    """A Scorer for a fresh `kind` model of `config`'s shape loaded with `state` (strict)."""
    model = model_from_config(LMConfig.from_dict({**config.to_dict(), "kind": kind}))
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected or missing:
        raise InputError(f"cannot initialise a {kind!r} model from masked-LM weights: "
                         f"missing {sorted(missing)[:4]}, unexpected {sorted(unexpected)[:4]}")
    return Scorer(model, tokenizer, **options)
