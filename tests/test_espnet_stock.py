"""Unmodified ESPnet entry points know the slm_lm kinds in an environment where slm_lm is installed.

The package is installed (`pip install --prefix`, as a user's `pip install slm_lm` would) into a fresh
virtual environment whose other packages are this test environment's (no tensorboard); every command then
runs in that environment with no PYTHONPATH, exactly as ESPnet's `asr.sh` runs it. The docs' asr.sh command
block runs there as it is written, with `tests/asr_sh.py` standing in for asr.sh's LM and decoding stages.
"""
import gzip
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from fork_server import forked, started as fork_server
from test_espnet_lm import OLD_EXPERIMENT, REPO, data  # noqa: F401 (fixture)
from test_espnet_tools import UTTERANCES, asr_exp  # noqa: F401 (fixture)

KINDS_CHECK = """
import sys
from espnet2.tasks.lm import lm_choices, model_choices
assert {'slm', 'clm', 'mlm', 'bilm', 'tta'} <= set(lm_choices.classes), sorted(lm_choices.classes)
assert 'slm_lm' in model_choices.classes, sorted(model_choices.classes)
"""


def test_editable_install_ships_the_hook(tmp_path):
    """`pip install -e` (PEP 660) puts the .pth beside setuptools' own editable .pth, after it by name
    (so slm_lm_espnet_hook is importable when site runs it)."""
    code = "import sys; from setuptools import build_meta; print(build_meta.build_editable(sys.argv[1]))"
    result = subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    names = zipfile.ZipFile(tmp_path / result.stdout.split()[-1]).namelist()
    pths = sorted(name for name in names if name.endswith(".pth"))
    assert pths[-1] == "slm_lm_espnet_hook.pth" and len(pths) == 2, names


def installed_env(python: Path, **env) -> dict:
    """The environment of the installed environment's commands (no PYTHONPATH unless `env` gives one)."""
    return {"PATH": f"{python.parent}:/usr/bin:/bin", "OMP_NUM_THREADS": "1", "HOME": os.environ.get("HOME", "/tmp"),
            **env}


def start(python: Path, *args, cwd: Path, **env) -> subprocess.CompletedProcess:
    """A command of the installed environment, without PYTHONPATH unless `env` gives one."""
    return subprocess.run([str(python), *args], cwd=cwd, env=installed_env(python, **env), capture_output=True, text=True)


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


@pytest.fixture(scope="module")
def forker(installed, tmp_path_factory):
    """run(code) -> (exit status, stderr) of `python -c code` in a child of a fork server of the installed
    environment (its tests are one work unit of the test workers: tests/conftest.py, GROUPS)."""
    with fork_server(installed, IMPORT_ORDER, installed_env(installed)) as server:
        def run(code: str) -> tuple:
            stderr = tmp_path_factory.mktemp("child") / "stderr"
            with open(os.devnull, "r+") as null, open(stderr, "w") as err:
                status = forked(server.socket, ["-c", code], fds=(null.fileno(), null.fileno(), err.fileno()))
            return status, stderr.read_text()

        yield run


@pytest.mark.parametrize("first", IMPORT_ORDER)
def test_any_import_order_registers_the_kinds(forker, first):
    """In a fresh child of the installed environment's interpreter (FORKER), `first` and then the other modules
    import, the hook has registered the kinds, and the documented `register_kinds()` (not needed there) works too."""
    order = [first, *(name for name in IMPORT_ORDER if name != first)]
    code = (f"import importlib\nfor name in {order!r}:\n    importlib.import_module(name)\n{KINDS_CHECK}\n"
            "from slm_lm.espnet_lm.registry import register_kinds; register_kinds()\n" + KINDS_CHECK)
    status, stderr = forker(code)
    assert status == 0, stderr[-3000:]
    assert "slm_lm: warning" not in stderr


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
    """slm_lm's lines in `stderr` (its messages start with `slm_lm:`); a traceback is never one of them. Other
    lines may name slm_lm through a path (ESPnet echoes its command line, which holds where ESPnet lies)."""
    assert "Traceback" not in stderr, stderr[-3000:]
    return [line for line in stderr.splitlines() if line.startswith("slm_lm:")]


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


@pytest.mark.parametrize("config", ["tuning/train_lm_clm_small.yaml", "train_lm_clm_mini.yaml"])
def test_lm_config_trains_the_kinds_objective_in_stock_lm_train_without_tensorboard(installed, data, tmp_path,  # noqa: F811
                                                                                      config):
    """`--lm_config` a shipped clm config as asr.sh hands it to stock `lm_train`, in an environment without
    tensorboard (as the package's extras build it): one update (the config as it is but for the number and
    size of batches), as `--model slm_lm`, also from the mini config, which has no `model:` (ESPnet's default
    `lm` would train ESPnet's own causal objective)."""
    assert start(installed, "-c", "import tensorboard", cwd=tmp_path).returncode != 0, "tensorboard is installed"
    sentences = (data["root"] / "train.txt").read_text().splitlines()[:8]
    text, shape = tmp_path / "text", tmp_path / "text_shape"
    text.write_text("".join(f"lm{i:04d} {s}\n" for i, s in enumerate(sentences)))
    shape.write_text("".join(f"lm{i:04d} {len(s.split())}\n" for i, s in enumerate(sentences)))
    config = REPO / "egs" / "librispeech_slm" / "conf" / config
    data_options = [f"--{split}_{option}" for split in ("train", "valid") for option in ("data_path_and_name_and_type",
                                                                                          "shape_file")]
    values = [f"{text},text,text", str(shape)] * 2
    run(installed, "-m", "espnet2.bin.lm_train", "--config", str(config), "--ngpu", "0", "--use_preprocessor", "true",
        "--token_type", "bpe", "--bpemodel", str(data["root"] / "tok" / "bpe.model"),
        "--token_list", str(data["root"] / "tok" / "tokens.txt"), *(x for pair in zip(data_options, values) for x in pair),
        "--max_epoch", "1", "--num_iters_per_epoch", "1", "--batch_bins", "64", "--num_workers", "0",
        "--output_dir", str(tmp_path / "lm"), cwd=tmp_path)
    trained = yaml.safe_load((tmp_path / "lm" / "config.yaml").read_text())
    assert (trained["use_tensorboard"], trained["lm"], trained["model"]) == (False, "clm", "slm_lm")
    assert (tmp_path / "lm" / "1epoch.pth").is_file()


DOCS = REPO / "docs" / "espnet-and-clusters.md"
DOCS_SECTION = "## Our LMs in an existing ESPnet asr.sh experiment"


def docs_asr_sh_block() -> str:
    """The command block of the docs' asr.sh section: its one fenced block that runs `./run.sh`."""
    section = DOCS.read_text().split(DOCS_SECTION, 1)[1].split("\n## ", 1)[0]
    blocks = [b.split("\n", 1)[1] for b in section.split("```")[1::2] if "\n./run.sh " in b.split("\n", 1)[1]]
    assert len(blocks) == 1, f"{DOCS}: the asr.sh section has {len(blocks)} blocks of asr.sh commands, not one"
    return blocks[0]


def test_asr_sh_commands_are_on_one_page():
    """The recipe README's asr.sh section links to the docs' one command block and has no asr.sh command
    of its own (an asr.sh option: --lm_config, --use_lm, --inference_args, --lang)."""
    readme = (REPO / "egs" / "librispeech_slm" / "README.md").read_text()
    section = readme.split("## Our LMs in an ESPnet asr.sh experiment", 1)[1]
    assert "../../docs/espnet-and-clusters.md#our-lms-in-an-existing-espnet-asrsh-experiment" in section
    for option in ("--lm_config", "--use_lm", "--inference_args", "--lang", "egs2/librispeech/asr1\n"):
        assert option not in readme, option
    assert "./run.sh" in docs_asr_sh_block()


def asr_sh_experiment(root: Path, asr_exp: Path, data) -> Path:  # noqa: F811
    """`egs2/librispeech/asr1` under root as asr.sh's stages 1-5 and 10-11 leave it (asr.sh's data of the
    test's two utterances for every set, its token list and BPE, the tiny ASR model as the experiment), with
    `tests/asr_sh.py` as its run.sh, a decode config of beam 10 and an LM corpus of 300 sentences."""
    recipe = root / "espnet" / "egs2" / "librispeech" / "asr1"
    exp = recipe / "exp" / "asr_train_asr_conformer_raw_en_bpe5000_sp"
    exp.mkdir(parents=True)
    shutil.copy(asr_exp / "asr" / "config.yaml", exp / "config.yaml")
    shutil.copy(asr_exp / "asr" / "model.pth", exp / "valid.acc.ave.pth")
    tok = recipe / "data" / "en_token_list" / "bpe_unigram5000"
    tok.mkdir(parents=True)
    shutil.copy(asr_exp / "tokens.txt", tok / "tokens.txt")
    shutil.copy(data["root"] / "tok" / "bpe.model", tok / "bpe.model")
    for dset in ("dev", "dev_clean", "dev_other", "test_clean", "test_other"):
        (recipe / "dump" / "raw" / dset).mkdir(parents=True)
        for name in ("wav.scp", "text"):
            shutil.copy(asr_exp / name, recipe / "dump" / "raw" / dset / name)
    (recipe / "conf").mkdir()
    (recipe / "conf" / "decode_asr.yaml").write_text(yaml.safe_dump(
        {"beam_size": 10, "ctc_weight": 0.3, "lm_weight": 0.6, "maxlenratio": 0.0, "minlenratio": 0.0}))
    (recipe / "downloads").mkdir()
    with gzip.open(recipe / "downloads" / "librispeech-lm-norm.txt.gz", "wt") as corpus:
        corpus.writelines((data["root"] / "train.txt").read_text().splitlines(keepends=True)[:300])
    (recipe / "run.sh").write_text(f'#!/bin/sh\nexec python {REPO / "tests" / "asr_sh.py"} "$@"\n')
    (recipe / "run.sh").chmod(0o755)
    return recipe


ASR_SH_MODULES = ["espnet2.bin.lm_train", "espnet2.bin.aggregate_stats_dirs", "espnet2.bin.lm_calc_perplexity",
                  "espnet2.bin.asr_inference"]  # what tests/asr_sh.py runs


def test_docs_asr_sh_commands_run_as_written(installed, asr_exp, data, tmp_path):  # noqa: F811
    """The docs' asr.sh command block, run as it is written (`/path/to/slm_lm` this checkout) by bash in the
    installed environment, with `tests/asr_sh.py` as asr.sh (the `python` first on the PATH runs each command in a
    child of a fork server of that environment, `tests/fork_server.py`, importing slm_lm and ESPnet afresh): the clm
    and the slm train in stock `lm_train` on asr.sh's token list (the slm with `<mask>`, the list our
    `slm_lm.bin.lm_train` records), stock decoding fuses the clm, and the 10-best lists get their AM scores and are
    rescored. The clm's training (its command with stage 7 only) run again, in a fresh interpreter, finds it
    finished (`--resume true`)."""
    recipe = asr_sh_experiment(tmp_path, asr_exp, data)
    script = docs_asr_sh_block().replace("/path/to/slm_lm", str(REPO))
    (tmp_path / "commands.sh").write_text("set -eu\n" + script)
    env = installed_env(installed)
    with fork_server(installed, ASR_SH_MODULES, env) as server:
        result = subprocess.run(["bash", str(tmp_path / "commands.sh")], cwd=tmp_path,
                                env={**env, "PATH": f"{server.bin}:{env['PATH']}"}, capture_output=True, text=True)
    assert result.returncode == 0, f"{result.stdout[-3000:]}\n{result.stderr[-5000:]}"

    exp = recipe / "exp"
    asr_tokens = (asr_exp / "tokens.txt").read_text().split()
    ours = yaml.safe_load((asr_exp / "lm_slm" / "config.yaml").read_text())["token_list"]
    for kind, tokens in (("clm", asr_tokens), ("slm", ours)):
        trained = yaml.safe_load((exp / f"lm_train_lm_{kind}_small_en_bpe5000" / "config.yaml").read_text())
        assert (trained["lm"], trained["model"], trained["token_list"]) == (kind, "slm_lm", tokens)
        assert float((exp / f"lm_train_lm_{kind}_small_en_bpe5000" / "perplexity_test" / "ppl").read_text()) > 1
    assert ours[-2] == "<mask>"
    decodes = exp / "asr_train_asr_conformer_raw_en_bpe5000_sp"
    fused = decodes / "decode_asr_lm_lm_train_lm_clm_small_en_bpe5000_valid.loss.ave_asr_model_valid.acc.ave"
    nbest = decodes / "decode_asr_nbest10_asr_model_valid.acc.ave"
    for dset in ("dev_clean", "test_other"):
        for decode in (fused, nbest):
            ids = [line.split(maxsplit=1)[0] for line in (decode / dset / "text").read_text().splitlines()]
            assert ids == sorted(UTTERANCES), decode / dset
        assert sorted(nbest.glob(f"{dset}/logdir/output.*/*best_recog/scores"))
    assert (exp / "rescore_slm" / "RESULTS.md").is_file()

    clm = exp / "lm_train_lm_clm_small_en_bpe5000"
    checkpoint = (clm / "checkpoint.pth").stat().st_mtime_ns
    again = next(line for line in script.splitlines() if "train_lm_clm_small.yaml" in line and "--stage 6" in line)
    again = again.replace("--stage 6 --stop_stage 8", "--stage 7 --stop_stage 7")
    result = subprocess.run(["bash", "-c", f"cd {recipe.relative_to(tmp_path)} && {again}"], cwd=tmp_path, env=env,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (clm / "checkpoint.pth").stat().st_mtime_ns == checkpoint


def test_text_shape_token_dimension_changes_no_batch_of_our_configs(tmp_path):
    """asr.sh's text_shape.bpe says `L,V` with V its token list's length, one less than an slm's outputs
    (`<mask>`): ESPnet's batch sampler of the LM configs' batch_type (`length`, every shipped config) makes the
    same batches from `L,V` and `L,V+1`; with `numel`, which reads V, they differ (what this test would see)."""
    from espnet2.samplers.build_batch_sampler import build_batch_sampler

    conf = REPO / "egs" / "librispeech_slm" / "conf"
    configs = sorted(conf.glob("*_lm_*.yaml")) + sorted((conf / "tuning").glob("train_lm_*.yaml"))
    batch_types = {yaml.safe_load(path.read_text()).get("batch_type", "folded") for path in configs}
    assert batch_types == {"length"}, batch_types
    lengths = [(i * 7919) % 97 + 3 for i in range(400)]

    def batches(batch_type: str, vocab: int) -> list:
        shape = tmp_path / f"text_shape.{vocab}"
        shape.write_text("".join(f"lm_{i:04d} {n},{vocab}\n" for i, n in enumerate(lengths)))
        return list(build_batch_sampler(batch_type, batch_size=1, batch_bins=90000 if batch_type == "numel" else 300,
                                        shape_files=[str(shape)], fold_lengths=[150], min_batch_size=1))

    assert batches("length", 300) == batches("length", 301)
    assert batches("numel", 300) != batches("numel", 301)


LOAD_EXPERIMENT = """
import sys, torch
from espnet2.tasks.lm import LMTask
model, _ = LMTask.build_model_from_file(sys.argv[1], sys.argv[2], "cpu")
state = torch.load(sys.argv[2], map_location="cpu")
assert sorted(state) == sorted(model.state_dict())
assert all(torch.equal(value, state[name]) for name, value in model.state_dict().items())
print(type(model).__module__, type(model.lm).__module__)
"""


def test_stock_espnet_loads_an_experiment_written_before_the_wings(installed):
    """ESPnet's own LMTask builds the model of an experiment slm_lm 0.1.0 wrote before its modules moved into
    wings (config.yaml records `lm: slm`, `model: slm_lm`) with the checkpoint's weights, as our classes."""
    exp = OLD_EXPERIMENT / "exp" / "lm_slm"
    out = run(installed, "-c", LOAD_EXPERIMENT, str(exp / "config.yaml"), str(exp / "valid.loss.ave.pth"),
              cwd=OLD_EXPERIMENT)
    assert out.splitlines()[-1].split() == ["slm_lm.espnet_lm.espnet_model", "slm_lm.espnet_lm.bidirectional_lm"]
