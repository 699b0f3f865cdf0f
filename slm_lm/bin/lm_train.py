"""slm-lm-train: ESPnet LM training (same CLI as `espnet2.bin.lm_train`) with `--lm slm|clm|mlm|bilm|tta`.

`--ngpu N --multiprocessing_distributed true` trains with DistributedDataParallel on N GPUs (without
it ESPnet falls back to DataParallel); multi-node jobs go through ESPnet's launcher
(`python -m espnet2.bin.launch --num_nodes M ...`, see the recipe README). Example:
    slm-lm-train --config conf/train_lm_slm_mini.yaml --token_list tokens.txt --bpemodel bpe.model \
        --token_type bpe --train_data_path_and_name_and_type dump/train/text,text,text \
        --train_shape_file dump/train/text_shape --valid_data_path_and_name_and_type dump/dev/text,text,text \
        --valid_shape_file dump/dev/text_shape --output_dir exp/lm_slm
"""

import yaml

from slm_lm.errors import InputError, fail, yaml_problem


def get_parser():
    """ESPnet's LM-task argument parser, with the slm_lm kinds among `--lm` choices."""
    from slm_lm.espnet_lm.task import SlmLMTask

    return SlmLMTask.get_parser()


def main(argv=None):
    """Train an LM with ESPnet's trainer; bad inputs exit with a one-line error."""
    from slm_lm.espnet_lm.task import SlmLMTask

    try:
        SlmLMTask.main(cmd=argv)
    except (InputError, OSError) as e:
        fail("slm-lm-train", e)
    except yaml.YAMLError as e:  # --config: a Python tag, a syntax error
        fail("slm-lm-train", f"{yaml_problem(e)} (a config ESPnet reads with yaml.safe_load)")


if __name__ == "__main__":
    main()
