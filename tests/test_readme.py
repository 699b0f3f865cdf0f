"""The README's how-tos, run as the README writes them: each bash block is taken from README.md and run with the
console scripts of setup.cfg on PATH, on small inputs made from the test data (the data directory filled from
the mirror), so that the README and what runs cannot drift apart. Only the sizes named in SHRINK change."""
import configparser
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import MIRROR

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
# what each test changes in its block, so that it runs in seconds: (README text, test text)
SHRINK = {
    "own text": [("--vocab-size 5000", "--vocab-size 300"), ("--size mini --minutes 60", "--size tiny --updates 3")],
}


def howto(title: str) -> str:
    """The bash block under the README paragraph that starts with **title**."""
    match = re.search(r"\*\*" + re.escape(title) + r"\*\*.*?```bash\n(.*?)```", README, re.DOTALL)
    assert match, f"README.md: no how-to '{title}'"
    return match.group(1)


def shrunk(block: str, key: str) -> str:
    for old, new in SHRINK.get(key, []):
        assert old in block, f"README.md no longer has {old!r}: update SHRINK"
        block = block.replace(old, new)
    return block


@pytest.fixture(scope="module")
def console_scripts(tmp_path_factory) -> Path:
    """A bin/ with every console script of setup.cfg, running this checkout's package with this python."""
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    bin_dir = tmp_path_factory.mktemp("bin")
    for line in cfg["options.entry_points"]["console_scripts"].strip().splitlines():
        name, target = (part.strip() for part in line.split("="))
        module, func = target.split(":")
        script = bin_dir / name
        script.write_text(f"#!{sys.executable}\nimport sys\nsys.argv[0] = {name!r}\n"
                          f"from {module} import {func}\nsys.exit({func}())\n")
        script.chmod(0o755)
    return bin_dir


def run_block(block: str, cwd: Path, console_scripts: Path, **env) -> subprocess.CompletedProcess:
    environ = dict(os.environ, PATH=f"{console_scripts}:{os.environ['PATH']}",
                   PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]), **env)
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", block], cwd=cwd, env=environ, capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def asr_sh_decode_set(nbest: Path, out: Path, keep: int) -> None:
    """The first `keep` utterances of a set of N-best lists, laid out as asr.sh writes a decoded set:
    logdir/output.1/<k>best_recog/{text,score} and score_wer/ref.trn."""
    refs = (nbest / "references" / "ref_wer.trn").read_text().splitlines()[:keep]
    ids = {line.rsplit("(", 1)[1].rstrip(")").split("-", 2)[-1] for line in refs}
    for rank in range(1, 11):
        for name in ("text", "score"):
            lines = (nbest / "raw_hypotheses" / f"{rank}best_recog" / name).read_text().splitlines()
            target = out / "logdir" / "output.1" / f"{rank}best_recog" / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text("".join(line + "\n" for line in lines if line.split(maxsplit=1)[0] in ids))
    (out / "score_wer").mkdir()
    (out / "score_wer" / "ref.trn").write_text("\n".join(refs) + "\n")


def test_rescore_your_own_espnet_nbest_lists(console_scripts, fetched_data, tmp_path):
    block = howto("Rescore your own ESPnet N-best lists")
    decode = re.search(r"^DECODE=(\S+)", block, re.MULTILINE).group(1)
    for name, source in (("dev", "dev_other"), ("test", "dev_clean")):
        asr_sh_decode_set(fetched_data / "librispeech_nbest" / source, tmp_path / decode / name, keep=30)
    run_block(block, tmp_path, console_scripts)
    results = (tmp_path / "exp/rescore_slm/RESULTS.md").read_text()
    assert "| dev | dev | 30 | 300 |" in results and "| test | test | 30 | 300 |" in results


def test_train_an_slm_on_your_own_text(console_scripts, tmp_path):
    block = shrunk(howto("Train an SLM on your own text"), "own text")
    (tmp_path / "my_books").mkdir()
    shutil.copy(MIRROR / "text/gutenberg/pg10150.txt.gz", tmp_path / "my_books")
    trn = (MIRROR / "librispeech_nbest/dev_clean/references/ref_wer.trn").read_text().splitlines()
    for name, lines in (("dev_text", trn[:50]), ("test_text", trn[50:100])):  # Kaldi text: uttid WORDS
        (tmp_path / name).write_text("".join(f"u{i} {line.split(chr(9))[0]}\n" for i, line in enumerate(lines)))
    (tmp_path / "sentences.txt").write_text("THE CAT SAT ON THE MAT\nTHE CAT SAT ON THE MATH\n")
    run_block(block, tmp_path, console_scripts)
    rows = (tmp_path / "scores.tsv").read_text().splitlines()
    assert [row.split("\t")[0] for row in rows] == ["1", "2"]
    assert (tmp_path / "exp/slm/model/training.json").is_file()


def test_use_our_lms_in_your_asr_sh(console_scripts, tmp_path):
    """The config is copied from the checkout, and stock ESPnet's lm_train (which asr.sh's LM stages run; the
    stages themselves: test_espnet_stock.py) accepts it with our kinds registered. ./run.sh stands for
    ESPnet's recipe and passes --lm_config on to lm_train."""
    block = howto("Use our LMs in your asr.sh")
    (tmp_path / "conf").mkdir()
    (tmp_path / "run.sh").write_text(
        '#!/bin/bash\nwhile [ $# -gt 0 ]; do [ "$1" = --lm_config ] && config=$2; shift 2; done\n'
        f'exec {sys.executable} -m espnet2.bin.lm_train --config "$config" --print_config\n')
    (tmp_path / "run.sh").chmod(0o755)
    done = run_block(block, tmp_path, console_scripts, SLM_LM=str(ROOT))
    assert re.search(r"^lm: clm$", done.stdout, re.MULTILINE) and re.search(r"^model: slm_lm$", done.stdout,
                                                                             re.MULTILINE)


def test_rerank_a_translation_systems_nbest_lists(console_scripts, tmp_path):
    """fairseq-generate output whose MT 1-best is scrambled: the shipped SLM prefers the references."""
    from test_mt_zero_shot import FAIRSEQ, REFS

    block = howto("Rerank a translation system's N-best lists for BLEU")
    for gen, ref in (("gen_valid.txt", "valid.en"), ("gen_test.txt", "test.en")):
        (tmp_path / gen).write_text(FAIRSEQ)
        (tmp_path / ref).write_text("".join(line + "\n" for line in REFS[:2]))
    done = run_block(block, tmp_path, console_scripts)
    assert "sacrebleu" in done.stdout
    assert (tmp_path / "exp/mt_rerank/gen_test/rescored.txt").read_text().splitlines() == REFS[:2]


def test_classify_texts_zero_shot_by_ranking(console_scripts, tmp_path):
    block = howto("Classify texts zero-shot by ranking")
    (tmp_path / "sst2_dev.tsv").write_text("sentence\tlabel\na wonderful , moving film\t1\n"
                                           "a dull and tedious mess\t0\n")
    done = run_block(block, tmp_path, console_scripts)
    rows = (tmp_path / "exp/sst2_predictions.tsv").read_text().splitlines()
    assert len(rows) == 1 + 2 * 2 and "%" in done.stdout  # a header, two texts under each of the two patterns
