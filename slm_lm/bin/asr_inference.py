"""ESPnet's `espnet2.bin.asr_inference` (same options) with the slm_lm kinds registered first.

The clm kind is a shallow-fusion LM (`--lm_train_config exp/lm_clm/config.yaml --lm_file ... --lm_weight W`).
Before decoding, the LM is checked: a bidirectional kind (slm, mlm, bilm, tta) belongs to N-best rescoring
(`slm-rescore`), and the LM's token list must be the ASR model's (the ids are added in the beam).
Example:
    python -m slm_lm.bin.asr_inference --asr_train_config exp/asr/config.yaml \
        --asr_model_file exp/asr/valid.acc.ave.pth --lm_train_config exp/lm_clm/config.yaml \
        --lm_file exp/lm_clm/valid.loss.ave.pth --lm_weight 0.3 --nbest 10 \
        --data_path_and_name_and_type data/test/wav.scp,speech,sound --output_dir exp/decode/test
"""
from slm_lm.common.errors import InputError, fail
from slm_lm.model.directory import read_espnet_config as read_config


def check_fusion_lm(lm_train_config, asr_train_config) -> None:
    """The LM can be fused in the beam: not a bidirectional slm_lm kind, same token list as the ASR."""
    from slm_lm.espnet_lm.lm import BIDIRECTIONAL_KINDS, not_for_beam_search

    lm = read_config(lm_train_config)
    if lm.get("lm") in BIDIRECTIONAL_KINDS:
        raise InputError(f"{lm_train_config}: {not_for_beam_search(lm['lm'])}")
    if asr_train_config is None:
        return
    lm_tokens, asr_tokens = lm.get("token_list"), read_config(asr_train_config).get("token_list")
    if isinstance(lm_tokens, list) and isinstance(asr_tokens, list) and lm_tokens != asr_tokens:
        index = next(i for i, (a, b) in enumerate(zip([*lm_tokens, None], [*asr_tokens, None])) if a != b)
        raise InputError(
            f"{lm_train_config}: the LM's token list ({len(lm_tokens)} tokens) is not the ASR model's "
            f"({asr_train_config}, {len(asr_tokens)} tokens) from index {index} on; shallow fusion adds the "
            "scores of equal ids: train the LM with the ASR's --token_list"
        )


def main(argv=None):
    """Register the kinds, check the fusion LM, then decode with ESPnet's asr_inference."""
    from slm_lm.espnet_lm.quiet_import import quiet_espnet_import
    from slm_lm.espnet_lm.registry import register_kinds

    with quiet_espnet_import():
        from espnet2.bin import asr_inference

    register_kinds()
    args = asr_inference.get_parser().parse_args(argv)
    if args.lm_train_config:
        try:
            check_fusion_lm(args.lm_train_config, args.asr_train_config)
        except (InputError, OSError) as e:
            fail("slm_lm.bin.asr_inference", e)
    asr_inference.main(argv)


if __name__ == "__main__":
    main()
