"""slm-data: get the data sets the project uses (BLiMP, the pre-training books, the LibriSpeech N-best lists and
LM corpus) into the data directory, checking every file's checksum, or print where one is.

  slm-data get blimp books librispeech-nbest [--dir DIR] [--mirror DIR]
  slm-data path blimp                      # prints DIR/blimp (for --data "$(slm-data path blimp)")
  slm-data path                            # prints DIR

The data directory is --dir, else $SLM_LM_DATA, else ~/.cache/slm_lm. A mirror is a local folder laid out like
the data directory (for offline use); without one, files come from their public sources (GitHub, gutenberg.org,
OpenSLR). Layout, sources and checksums: slm_lm/data/datasets.py.
"""
import argparse

from slm_lm.common.errors import InputError, fail
from slm_lm.common.options import Parser
from slm_lm.common.outputs import check_output_dir
from slm_lm.data import datasets


def parse_args(argv=None):
    p = Parser(prog="slm-data", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="action", required=True)
    get = sub.add_parser("get", help="fetch data sets into the data directory and check them")
    get.add_argument("names", nargs="+", choices=datasets.ALL, metavar="NAME", help=", ".join(datasets.ALL))
    get.add_argument("--mirror", help="a local folder laid out like the data directory (default: public sources)")
    get.add_argument("--no-progress", action="store_true")
    path = sub.add_parser("path", help="print the data directory, or where a data set is (or goes) in it")
    path.add_argument("name", nargs="?", choices=datasets.ALL, metavar="NAME", help=", ".join(datasets.ALL))
    for s in (get, path):
        s.add_argument("--dir", help=f"data directory (default: ${datasets.DATA_ENV}, else ~/.cache/slm_lm)")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    if args.action == "path":
        print(datasets.dataset_path(args.name, args.dir) if args.name else datasets.data_dir(args.dir))
        return
    for name in args.names:
        try:
            check_output_dir("--dir", datasets.data_dir(args.dir), (), (), "slm-data")
            where = datasets.get(name, args.dir, args.mirror, progress=not args.no_progress)
        except (InputError, OSError) as e:
            fail("slm-data", e)
        print(f"{name}: {where}")


if __name__ == "__main__":
    main()
