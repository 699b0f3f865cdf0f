"""Unmodified ESPnet entry points know the slm_lm kinds in an environment where slm_lm is installed.

The package is installed (`pip install --prefix`, as a user's `pip install slm_lm` would) into a fresh
virtual environment whose other packages are this test environment's; every command then runs in
that environment with no PYTHONPATH, exactly as ESPnet's `asr.sh` runs it: LM collect-stats,
aggregation and `text_shape.bpe`, `espnet2.bin.lm_train` with `--fold_length 150 --resume true`,
`lm_calc_perplexity`, and `asr_inference` with the clm as `--lm_train_config` (shallow fusion).
"""
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
import yaml

from test_espnet_lm import REPO, TINY, data  # noqa: F401 (fixture)
from test_espnet_tools import UTTERANCES, asr_exp  # noqa: F401 (fixture)

KINDS_CHECK = """
import sys
from espnet2.tasks.lm import lm_choices, model_choices
assert {'slm', 'clm', 'mlm', 'bilm', 'tta'} <= set(lm_choices.classes), sorted(lm_choices.classes)
assert 'slm_lm' in model_choices.classes, sorted(model_choices.classes)
"""


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The python of a fresh venv holding an installed slm_lm (this checkout) and, through a path
    .pth, this environment's packages (torch, ESPnet)."""
    root = tmp_path_factory.mktemp("installed")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root / "venv")], check=True)
    python = root / "venv" / "bin" / "python"
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               check=True, capture_output=True, text=True).stdout.strip())
    (site / "base_env.pth").write_text(sysconfig.get_path("purelib") + "\n")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--ignore-installed",
                    "--prefix", str(root / "venv"), str(REPO)], check=True)
    assert (site / "slm_lm_espnet_hook.pth").is_file()
    return python


def test_editable_install_ships_the_hook(tmp_path):
    """`pip install -e` (PEP 660) puts the .pth beside setuptools' own editable .pth, after it by name
    (so slm_lm_espnet_hook is importable when site runs it)."""
    code = "import sys; from setuptools import build_meta; print(build_meta.build_editable(sys.argv[1]))"
    result = subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    names = zipfile.ZipFile(tmp_path / result.stdout.split()[-1]).namelist()
    pths = sorted(name for name in names if name.endswith(".pth"))
    assert pths[-1] == "slm_lm_espnet_hook.pth" and len(pths) == 2, names


def start(python: Path, *args, cwd: Path, **env) -> subprocess.CompletedProcess:
    """A command of the installed environment, without PYTHONPATH unless `env` gives one."""
    env = {"PATH": f"{python.parent}:/usr/bin:/bin", "OMP_NUM_THREADS": "1", "HOME": os.environ.get("HOME", "/tmp"),
           **env}
    return subprocess.run([str(python), *args], cwd=cwd, env=env, capture_output=True, text=True)


def run(python: Path, *args, cwd: Path, **env):
    """A command of the installed environment that must succeed (stdout returned)."""
    result = start(python, *args, cwd=cwd, **env)
    assert result.returncode == 0, f"{args[:3]}: rc={result.returncode}\n{result.stderr[-3000:]}"
    return result.stdout


def test_hook_registers_on_espnet_lm_import_and_costs_nothing_before(installed, tmp_path):
    """A program that never imports `espnet2.tasks.lm` imports neither slm_lm nor ESPnet, and the hook's
    .pth adds no module to a start-up but the hook itself; a fresh `import espnet2.tasks.lm` has the kinds."""
    loaded = run(installed, "-c", "import json, sys; print(sorted(m for m in sys.modules if m.split('.')[0] in "
                 "('slm_lm', 'espnet2', 'torch')))", cwd=tmp_path)
    assert loaded.strip() == "[]"
    modules = "import sys; print(' '.join(sorted(sys.modules)))"
    with_hook = set(run(installed, "-c", modules, cwd=tmp_path).split())
    pth = next(installed.parent.parent.glob("lib/python*/site-packages/slm_lm_espnet_hook.pth"))
    pth.rename(tmp_path / pth.name)
    try:
        without_hook = set(run(installed, "-c", modules, cwd=tmp_path).split())
    finally:
        (tmp_path / pth.name).rename(pth)
    assert with_hook - without_hook == {"slm_lm_espnet_hook"}
    run(installed, "-c", KINDS_CHECK, cwd=tmp_path)
    run(installed, "-c", "import espnet2.bin.lm_train, espnet2.bin.asr_inference\n" + KINDS_CHECK, cwd=tmp_path)


# slm_lm's and ESPnet's modules that take part in the registration: the hook registers while the import that
# first runs `espnet2.tasks.lm` is under way, so importing each first (the others after it) is each order
# in which a module can be half-initialised at that moment.
IMPORT_ORDER = ["slm_lm.espnet_lm.registry", "slm_lm.espnet_lm.task", "slm_lm.espnet_lm.espnet_model",
                "slm_lm.espnet_lm.lm", "slm_lm.espnet_lm.checks", "slm_lm.bin.lm_train", "slm_lm.bin.asr_inference",
                "espnet2.tasks.lm", "espnet2.bin.lm_train", "espnet2.bin.asr_inference"]


@pytest.mark.parametrize("first", IMPORT_ORDER)
def test_any_import_order_registers_the_kinds(installed, tmp_path, first):
    """In a fresh interpreter of the installed environment, `first` and then the other modules import, the
    hook has registered the kinds, and the documented `register_kinds()` (not needed there) works too."""
    order = [first, *(name for name in IMPORT_ORDER if name != first)]
    code = (f"import importlib\nfor name in {order!r}:\n    importlib.import_module(name)\n{KINDS_CHECK}\n"
            "from slm_lm.espnet_lm.registry import register_kinds; register_kinds()\n" + KINDS_CHECK)
    result = start(installed, "-c", code, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "slm_lm: warning" not in result.stderr


def broken_slm_lm(root: Path, how: str) -> Path:
    """A copy of this checkout's slm_lm under `root` with one module missing or raising at import (for
    PYTHONPATH, ahead of the installed one)."""
    shutil.copytree(REPO / "slm_lm", root / "slm_lm", ignore=shutil.ignore_patterns("*.safetensors", "__pycache__"))
    if how == "missing":
        (root / "slm_lm" / "espnet_lm" / "lm.py").unlink()
    else:
        registry = root / "slm_lm" / "espnet_lm" / "registry.py"
        registry.write_text("raise RuntimeError('half-installed on purpose')\n" + registry.read_text())
    return root


def warnings_of(stderr: str) -> list:
    return [line for line in stderr.splitlines() if "slm_lm" in line]


@pytest.mark.parametrize("how, problem", [("missing", "ModuleNotFoundError: No module named 'slm_lm.espnet_lm.lm'"),
                                          ("raising", "RuntimeError: half-installed on purpose")])
def test_broken_slm_lm_leaves_stock_espnet_working(installed, tmp_path, how, problem):
    """With an slm_lm that cannot register, stock ESPnet imports and its tools run as without slm_lm, with
    one warning line naming the problem; `--lm slm` is then ESPnet's own invalid choice."""
    path = str(broken_slm_lm(tmp_path / "broken", how))
    result = start(installed, "-c", "import espnet2.tasks.lm", cwd=tmp_path, PYTHONPATH=path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert warnings_of(result.stderr) == [
        f"slm_lm: warning: ESPnet runs without the slm_lm LM kinds ({problem}); "
        "SLM_LM_NO_ESPNET_HOOK=1 turns this registration off"]
    if how == "missing":
        for tool in ("lm_train", "asr_inference"):
            result = start(installed, "-m", f"espnet2.bin.{tool}", "--help", cwd=tmp_path, PYTHONPATH=path)
            assert result.returncode == 0 and "usage:" in result.stdout, result.stderr[-3000:]
            assert len(warnings_of(result.stderr)) == 1
        result = start(installed, "-m", "espnet2.bin.lm_train", "--lm", "slm", cwd=tmp_path, PYTHONPATH=path)
        assert result.returncode == 2 and "invalid choice: 'slm'" in result.stderr, result.stderr[-3000:]
        assert len(warnings_of(result.stderr)) == 1
        quiet = start(installed, "-c", "import espnet2.tasks.lm", cwd=tmp_path, PYTHONPATH=path,
                      SLM_LM_NO_ESPNET_HOOK="1")
        assert quiet.returncode == 0 and warnings_of(quiet.stderr) == [], quiet.stderr[-3000:]


def test_tuning_config_trains_in_stock_lm_train_without_tensorboard(installed, data, tmp_path):  # noqa: F811
    """`--lm_config conf/train_lm_clm_small.yaml` as asr.sh hands it to stock `lm_train`, in an environment
    without tensorboard (as the package's extras build it): one update of the small clm (the config as it is
    but for the number and size of batches)."""
    assert start(installed, "-c", "import tensorboard", cwd=tmp_path).returncode != 0, "tensorboard is installed"
    sentences = (data["root"] / "train.txt").read_text().splitlines()[:8]
    text, shape = tmp_path / "text", tmp_path / "text_shape"
    text.write_text("".join(f"lm{i:04d} {s}\n" for i, s in enumerate(sentences)))
    shape.write_text("".join(f"lm{i:04d} {len(s.split())}\n" for i, s in enumerate(sentences)))
    config = REPO / "egs" / "librispeech_slm" / "conf" / "tuning" / "train_lm_clm_small.yaml"
    data_options = [f"--{split}_{option}" for split in ("train", "valid") for option in ("data_path_and_name_and_type",
                                                                                          "shape_file")]
    values = [f"{text},text,text", str(shape)] * 2
    run(installed, "-m", "espnet2.bin.lm_train", "--config", str(config), "--ngpu", "0", "--use_preprocessor", "true",
        "--token_type", "bpe", "--bpemodel", str(data["root"] / "tok" / "bpe.model"),
        "--token_list", str(data["root"] / "tok" / "tokens.txt"), *(x for pair in zip(data_options, values) for x in pair),
        "--max_epoch", "1", "--num_iters_per_epoch", "1", "--batch_bins", "64", "--num_workers", "0",
        "--output_dir", str(tmp_path / "lm"), cwd=tmp_path)
    assert yaml.safe_load((tmp_path / "lm" / "config.yaml").read_text())["use_tensorboard"] is False
    assert (tmp_path / "lm" / "1epoch.pth").is_file()


def asr_sh_lm_stages(installed, asr_exp, data, tmp_path, kind: str) -> Path:
    """asr.sh's stages 6-8 with `--lm_config` a tiny config of `kind` and asr.sh's token list, as stock
    ESPnet modules: collect-stats, aggregation, text_shape.bpe, training (resumed: a second run does
    nothing more), perplexity. Returns the LM experiment directory."""
    token_list = asr_exp / "tokens.txt"
    bpemodel = data["root"] / "tok" / "bpe.model"
    lm_train_text = tmp_path / "lm_train.txt"
    sentences = (data["root"] / "train.txt").read_text().splitlines()[:300]
    lm_train_text.write_text("".join(f"lm{i:04d} {s}\n" for i, s in enumerate(sentences)))
    lm_dev_text = asr_exp / "text"
    config = {**TINY, "lm": kind, "model": "slm_lm", "max_epoch": 1, "num_iters_per_epoch": 5,
              "batch_type": "folded", "batch_size": 16, "optim": "adam", "optim_conf": {"lr": 1.0e-3},
              "scheduler": None, "keep_nbest_models": 1,
              "best_model_criterion": [["valid", "loss", "min"]]}
    del config["batch_bins"], config["scheduler_conf"]
    lm_config = tmp_path / f"train_lm_{kind}_tiny.yaml"
    lm_config.write_text(yaml.safe_dump(config))
    common = ["--use_preprocessor", "true", "--bpemodel", str(bpemodel), "--token_type", "bpe",
              "--token_list", str(token_list), "--non_linguistic_symbols", "none", "--cleaner", "none", "--g2p", "none"]
    stats, lm_exp = tmp_path / "lm_stats_bpe", tmp_path / f"lm_train_lm_{kind}_tiny_bpe"
    logdir = stats / "logdir"
    logdir.mkdir(parents=True)
    (logdir / "train.1.scp").write_text(lm_train_text.read_text())
    (logdir / "dev.1.scp").write_text(lm_dev_text.read_text())
    run(installed, "-m", "espnet2.bin.lm_train", "--collect_stats", "true", *common,
        "--train_data_path_and_name_and_type", f"{lm_train_text},text,text",
        "--valid_data_path_and_name_and_type", f"{lm_dev_text},text,text",
        "--train_shape_file", str(logdir / "train.1.scp"), "--valid_shape_file", str(logdir / "dev.1.scp"),
        "--output_dir", str(logdir / "stats.1"), "--config", str(lm_config), cwd=tmp_path)
    run(installed, "-m", "espnet2.bin.aggregate_stats_dirs", "--input_dir", str(logdir / "stats.1"),
        "--output_dir", str(stats), cwd=tmp_path)
    n_tokens = len(token_list.read_text().splitlines())
    for split in ("train", "valid"):
        shapes = (stats / split / "text_shape").read_text().splitlines()
        (stats / split / "text_shape.bpe").write_text("".join(f"{line},{n_tokens}\n" for line in shapes))
    train = ["-m", "espnet2.bin.lm_train", "--ngpu", "0", *common,
             "--valid_data_path_and_name_and_type", f"{lm_dev_text},text,text",
             "--valid_shape_file", str(stats / "valid" / "text_shape.bpe"), "--fold_length", "150",
             "--resume", "true", "--output_dir", str(lm_exp), "--config", str(lm_config),
             "--train_data_path_and_name_and_type", f"{lm_train_text},text,text",
             "--train_shape_file", str(stats / "train" / "text_shape.bpe")]
    run(installed, *train, cwd=tmp_path)
    trained = yaml.safe_load((lm_exp / "config.yaml").read_text())
    assert (trained["lm"], trained["model"]) == (kind, "slm_lm")
    checkpoint = (lm_exp / "checkpoint.pth").stat().st_mtime_ns
    run(installed, *train, cwd=tmp_path)  # --resume true: the finished training is not redone
    assert (lm_exp / "checkpoint.pth").stat().st_mtime_ns == checkpoint

    run(installed, "-m", "espnet2.bin.lm_calc_perplexity", "--ngpu", "0",
        "--data_path_and_name_and_type", f"{lm_dev_text},text,text", "--train_config", str(lm_exp / "config.yaml"),
        "--model_file", str(lm_exp / "valid.loss.ave.pth"), "--output_dir", str(lm_exp / "perplexity_test"),
        cwd=tmp_path)
    assert float((lm_exp / "perplexity_test" / "ppl").read_text()) > 1
    return lm_exp


def test_stock_espnet_lm_stages_as_asr_sh_runs_them(installed, asr_exp, data, tmp_path):  # noqa: F811
    """asr.sh's stages 6-8 and 12 with `--lm_config` a clm config; the clm keeps asr.sh's token list as it
    is (shallow fusion needs the ASR's ids) and is fused in stock `asr_inference`."""
    lm_exp = asr_sh_lm_stages(installed, asr_exp, data, tmp_path, "clm")
    token_list = (asr_exp / "tokens.txt").read_text().split()
    assert yaml.safe_load((lm_exp / "config.yaml").read_text())["token_list"] == token_list

    decode = tmp_path / "decode" / "output.1"
    (tmp_path / "keys.1.scp").write_text((asr_exp / "wav.scp").read_text())
    run(installed, "-m", "espnet2.bin.asr_inference", "--batch_size", "1", "--ngpu", "0",
        "--data_path_and_name_and_type", f"{asr_exp / 'wav.scp'},speech,sound",
        "--key_file", str(tmp_path / "keys.1.scp"), "--asr_train_config", str(asr_exp / "asr" / "config.yaml"),
        "--asr_model_file", str(asr_exp / "asr" / "model.pth"),
        "--output_dir", str(decode), "--lm_train_config", str(lm_exp / "config.yaml"),
        "--lm_file", str(lm_exp / "valid.loss.ave.pth"), "--lm_weight", "0.3", "--ctc_weight", "0.3",
        "--beam_size", "3", "--nbest", "3", cwd=tmp_path)
    ids = [line.split(maxsplit=1)[0] for line in (decode / "1best_recog" / "text").read_text().splitlines()]
    assert sorted(ids) == sorted(UTTERANCES)


def test_stock_lm_stages_train_an_slm_on_asr_sh_token_list(installed, asr_exp, data, tmp_path):  # noqa: F811
    """asr.sh's stages 6-8 with an slm config and asr.sh's token list (no <mask>): stock ESPnet trains the
    slm with <mask> inserted before <sos/eos>, as `slm_lm.bin.lm_train` does (config.yaml records that list,
    the one of the slm our entry point trained on the same list), and stock perplexity loads it."""
    lm_exp = asr_sh_lm_stages(installed, asr_exp, data, tmp_path, "slm")
    ours = yaml.safe_load((asr_exp / "lm_slm" / "config.yaml").read_text())["token_list"]
    assert ours[-2] == "<mask>"
    assert yaml.safe_load((lm_exp / "config.yaml").read_text())["token_list"] == ours
