"""ESPnet's `espnet2.bin.lm_calc_perplexity` (same options) with the slm_lm kinds registered first.

Per-token perplexity with the end of sentence counted, as ESPnet computes it: exact for slm, clm, bilm
and tta; for mlm from the pseudo-log-likelihood. Example:
    python -m slm_lm.bin.lm_calc_perplexity --train_config exp/lm_slm/config.yaml \
        --model_file exp/lm_slm/valid.loss.ave.pth --data_path_and_name_and_type data/dev/text,text,text \
        --output_dir exp/lm_slm/perplexity_dev      # writes ppl, base, utt2ppl, utt2ntokens
"""
from slm_lm.common.errors import InputError, fail
from slm_lm.model.config import KINDS
from slm_lm.model.directory import read_espnet_config


def check_train_config(path) -> None:
    """A readable ESPnet config (`read_espnet_config`); an slm_lm experiment must say `model: slm_lm` (the
    model whose `nll` scores its kind)."""
    config = read_espnet_config(path)
    if config.get("lm") in KINDS and config.get("model") != "slm_lm":
        raise InputError(f"{path}: an slm_lm {config['lm']} LM with model {config.get('model')!r} (trained before "
                         "slm_lm registered its own model): set 'model: slm_lm' in this file")


def main(argv=None):
    """Register the kinds, check the LM's config, then run ESPnet's perplexity tool."""
    from slm_lm.espnet_lm.quiet_import import quiet_espnet_import
    from slm_lm.espnet_lm.registry import register_kinds

    with quiet_espnet_import():
        from espnet2.bin import lm_calc_perplexity

    register_kinds()
    args = lm_calc_perplexity.get_parser().parse_args(argv)
    if args.train_config:
        try:
            check_train_config(args.train_config)
        except (InputError, OSError) as e:
            fail("slm_lm.bin.lm_calc_perplexity", e)
    lm_calc_perplexity.main(argv)


if __name__ == "__main__":
    main()
