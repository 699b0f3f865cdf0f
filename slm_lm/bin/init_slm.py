"""slm-init-slm: initialise a sliding LM from masked-LM weights (our `mlm` model, BERT or RoBERTa).

--from takes our mlm model (a shipped name, a save_pretrained directory or an ESPnet LM experiment) or a
Hugging Face BertForMaskedLM / RobertaForMaskedLM directory saved on disk. Our model of --kind itself is
carried over as it is (e.g. `--from slm-books --format espnet`: fine-tune the shipped SLM with ESPnet's
trainer). Outputs:
  --format pretrained (default): a save_pretrained directory, scored with slm-score / slm-rescore.
  --format espnet: OUT/lm.pth with `lm.model.*` keys for ESPnet's `--init_param OUT/lm.pth`, and
    OUT/lm_conf.yaml, the `lm_conf` the training config must use so that the shapes match. From our
    models also OUT/tokens.txt and OUT/bpe.model, the model's own tokenizer, for ESPnet's --token_list
    and --bpemodel. From a Hugging Face model only the vocabulary-independent weights are written (the
    token embeddings and the output bias are left out: ESPnet trains on its own sentencepiece token list).
--out may neither be, contain nor lie inside --from (or the sentencepiece model an ESPnet experiment names),
links followed: the source model is never overwritten.
"""
import argparse
from pathlib import Path

from slm_lm.common.errors import InputError, fail
from slm_lm.common.fileio import why_not
from slm_lm.common.options import Parser
from slm_lm.common.outputs import check_no_overlap, check_output_dir

PROG = "slm-init-slm"


def parse_args(argv=None):
    p = Parser(prog="slm-init-slm", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--from", dest="source", required=True, help="our mlm model dir, or a BERT/RoBERTa MLM dir")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--format", default="pretrained", choices=["pretrained", "espnet"])
    p.add_argument("--kind", default="slm", choices=["slm", "mlm"], help="model to build (mlm: a plain copy)")
    p.add_argument("--case", default="as-is", choices=["as-is", "lower", "sentence"],
                   help="Hugging Face sources: text casing before tokenising")
    return p.parse_args(argv)


def input_paths(source: Path) -> list:
    """What reading the model in `source` reads: the directory and, for an ESPnet LM experiment, the
    sentencepiece model its config.yaml names (wherever it lies)."""
    from slm_lm.model import directory as model_dir

    inputs = [source]
    if (source / model_dir.ESPNET_CONFIG).is_file() and not (source / model_dir.CONFIG_FILE).exists():
        import yaml

        try:
            config = yaml.safe_load((source / model_dir.ESPNET_CONFIG).read_text(encoding="utf-8-sig"))
            inputs.append(model_dir.resolve_bpemodel(str(config["bpemodel"]), source))
        except (OSError, UnicodeDecodeError, yaml.YAMLError, TypeError, KeyError, InputError):
            pass  # loading the experiment names the problem
    return inputs


def main(argv=None):
    args = parse_args(argv)
    from slm_lm import pretrained
    from slm_lm.model import directory as model_dir
    from slm_lm.model.hf_tokenizer import is_hf_model_dir
    from slm_lm.pretrain.init_from_mlm import from_our_checkpoint, slm_from_hf

    source, out = Path(args.source), Path(args.out)
    try:
        if not source.is_dir() and pretrained.path(args.source) is None:
            raise InputError(f"{source}: {why_not(source, 'model directory')}, and no shipped model of that name")
        check_no_overlap("--out", out, input_paths(source if source.is_dir() else pretrained.path(args.source)))
        check_output_dir("--out", out, (), (), PROG)
        hf = is_hf_model_dir(source)
        scorer = slm_from_hf(source, args.kind, args.case) if hf else from_our_checkpoint(args.source, args.kind)
        if args.format == "pretrained":
            scorer.save_pretrained(out)
            print(f"wrote {out} ({args.kind} from {'Hugging Face' if hf else 'our'} weights in {source})")
        else:
            left_out = model_dir.save_espnet_init(out, scorer.model, None if hf else scorer.tokenizer)
            print(f"wrote {out}/lm.pth and {out}/lm_conf.yaml; train with --init_param {out}/lm.pth and that lm_conf"
                  + ("" if hf else f", --token_list {out}/tokens.txt --bpemodel {out}/bpe.model"))
            if left_out:
                print(f"left out (vocabulary-dependent, trained from scratch): {', '.join(left_out)}")
    except (InputError, OSError) as e:
        fail(PROG, e)


if __name__ == "__main__":
    main()
