"""slm-lm-train: ESPnet LM training (same CLI as `espnet2.bin.lm_train`) with `--lm slm|clm|mlm|bilm|tta`.

`--ngpu N --multiprocessing_distributed true` trains with DistributedDataParallel on N GPUs (without
it ESPnet falls back to DataParallel); multi-node jobs go through ESPnet's launcher
(`python -m espnet2.bin.launch --num_nodes M ...`, see the recipe README). Example:
    slm-lm-train --config conf/train_lm_slm_mini.yaml --token_list tokens.txt --bpemodel bpe.model \
        --token_type bpe --train_data_path_and_name_and_type dump/train/text,text,text \
        --train_shape_file dump/train/text_shape --valid_data_path_and_name_and_type dump/dev/text,text,text \
        --valid_shape_file dump/dev/text_shape --output_dir exp/lm_slm
"""

import argparse
import io
import sys

import yaml

from slm_lm.common.errors import InputError, fail, yaml_problem
from slm_lm.common.fileio import decode_utf8, read_small_file
from slm_lm.espnet_lm.quiet_import import quiet_espnet_import


def get_parser():
    """ESPnet's LM-task argument parser, with the slm_lm kinds among `--lm` choices."""
    with quiet_espnet_import():
        from slm_lm.espnet_lm.task import SlmLMTask

    return SlmLMTask.get_parser()


def check_config(argv) -> None:
    """The `--config` of the command line, if any, is a YAML file: checked before ESPnet is imported and
    prints its log's first line (the command line), so that a bad one is the only line on stderr."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False, exit_on_error=False)
    parser.add_argument("--config")
    try:
        path = parser.parse_known_args(argv)[0].config
    except argparse.ArgumentError:  # `--config` without a value: ESPnet's parser says so
        return
    if path is not None:
        text = io.StringIO(decode_utf8(path, read_small_file(path, "ESPnet config")))
        text.name = path  # the name PyYAML's messages give
        yaml.safe_load(text)


def main(argv=None):
    """Train an LM with ESPnet's trainer; bad inputs exit with a one-line error."""
    try:
        check_config(sys.argv[1:] if argv is None else argv)
        with quiet_espnet_import():
            from slm_lm.espnet_lm.task import SlmLMTask
        SlmLMTask.main(cmd=argv)
    except (InputError, OSError) as e:
        fail("slm-lm-train", e)
    except yaml.YAMLError as e:  # --config: a Python tag, a syntax error
        fail("slm-lm-train", f"{yaml_problem(e)} (a config ESPnet reads with yaml.safe_load)")


if __name__ == "__main__":
    main()
