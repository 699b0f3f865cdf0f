"""CI smoke test of egs/librispeech_slm: every stage on the micro mini corpus, plus the recipe's
error paths (stage out of order, unknown option, missing corpus), the offline download stage on
a fake local mirror (checksums, resume, bad archive) and resumption of a killed decode."""
import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
RECIPE = REPO / "egs" / "librispeech_slm"
sys.path.insert(0, str(RECIPE / "local"))

import data_prep  # noqa: E402
import decode_nbest  # noqa: E402
import download_librispeech  # noqa: E402

from slm_lm.errors import InputError  # noqa: E402


def run_recipe(*args, check=True, timeout=900):
    """./run.sh ARGS from the recipe directory; returns the CompletedProcess."""
    proc = subprocess.run(["bash", "run.sh", *args], cwd=RECIPE, capture_output=True, text=True,
                          timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"run.sh {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
    return proc


# ---------------------------------------------------------------------------------------------
# The whole recipe on micro data


@pytest.fixture(scope="module")
def micro(tmp_path_factory):
    """Run all stages 0-8 once with --micro true (a few minutes on 2 cores)."""
    work = tmp_path_factory.mktemp("micro")
    proc = run_recipe("--mini", "true", "--micro", "true", "--workdir", str(work))
    return work, proc


def test_micro_all_stages(micro):
    work, proc = micro
    for n in range(9):
        assert (work / "exp" / ".done" / f"stage{n}").exists(), f"stage {n} did not finish"
        if n != 5:
            assert list((work / "exp" / "logs").glob(f"stage{n}_*.log")), f"stage {n} wrote no log"
    # training logs ESPnet-style in the experiment directories
    assert "epoch results" in next((work / "exp").glob("asr_*/train.log")).read_text()
    assert (work / "exp" / "lm_slm" / "train.log").exists()
    # --ngpu N > 1 trains with DDP: both trainings get ESPnet's --multiprocessing_distributed true
    # (ESPnet turns it off by itself with 0 or 1 GPU); run_local.sh logs the command on the first line
    for log in (next((work / "exp").glob("asr_*/train.log")), work / "exp" / "lm_slm" / "train.log"):
        assert "--multiprocessing_distributed true" in log.read_text().splitlines()[0], log
    # Kaldi-style data dirs, sorted and consistent
    for s in ("train", "dev", "dev_clean", "dev_other", "test_clean", "test_other"):
        d = work / "data" / s
        keys = [line.split()[0] for line in (d / "wav.scp").read_text().splitlines()]
        assert keys == sorted(keys) and keys
        assert keys == [line.split()[0] for line in (d / "text").read_text().splitlines()]
        assert keys == [line.split()[0] for line in (d / "utt2spk").read_text().splitlines()]
    # no sentence shared between train and dev/test, and the LM text has no dev/test sentence
    def texts(s):
        return {line.split(" ", 1)[1] for line in (work / "data" / s / "text").read_text().splitlines()}
    held_out = set().union(*(texts(s) for s in ("dev_clean", "dev_other", "test_clean", "test_other")))
    assert not texts("train") & held_out
    lm_text = set((work / "data" / "lm" / "train.txt").read_text().splitlines())
    assert len(lm_text) > 10000 and not lm_text & held_out
    # N-best layout with per-scorer scores
    decode = next((work / "exp").glob("asr_*/decode_*"))
    for s in ("dev_clean", "test_other"):
        text1 = (decode / s / "1best_recog" / "text").read_text().splitlines()
        assert len(text1) == len((work / "data" / s / "text").read_text().splitlines())
        line = (decode / s / "1best_recog" / "scores").read_text().splitlines()[0]
        scores = json.loads(line.split(" ", 1)[1])
        assert {"decoder", "ctc", "length_bonus"} <= set(scores)
        assert (decode / s / "2best_recog" / "text").exists()
    # rescoring and the results table
    tuning = json.loads((work / "exp" / "rescore_slm" / "tuning.json").read_text())
    assert 0 <= tuning["best"]["lambdas"][0] <= 5
    results = (work / "RESULTS.md").read_text()
    assert "|dataset|" in results and "baseline (AM only)" in results and "oracle (10-best)" in results
    for s in ("dev_clean", "dev_other", "test_clean", "test_other"):
        assert f"|{s}|" in results
    assert "RESULTS" in proc.stdout  # the table is printed at the end


def test_micro_rerun_skips_finished_stages(micro):
    work, _ = micro
    proc = run_recipe("--mini", "true", "--micro", "true", "--workdir", str(work), timeout=120)
    assert proc.stdout.count("already done") == 9


def test_killed_decode_resumes(micro):
    """A decode killed mid-way resumes from its partial results and redoes nothing finished."""
    work, _ = micro
    decode = next((work / "exp").glob("asr_*/decode_*"))
    s = decode / "dev_clean"
    before = (s / "3best_recog" / "scores").read_text()
    # simulate a kill: final files gone, one worker's last record torn, one record missing
    partials = sorted((s / "logdir").glob("output.*/partial.jsonl"))
    lines = partials[0].read_text().splitlines()
    partials[0].write_text("\n".join(lines[:-1]) + "\n" + lines[-1][: len(lines[-1]) // 2])
    for d in s.glob("*best_recog"):
        shutil.rmtree(d)
    (work / "exp" / ".done" / "stage6").unlink()
    proc = run_recipe("--mini", "true", "--micro", "true", "--workdir", str(work),
                      "--stage", "6", "--stop_stage", "6", timeout=300)
    assert "stage 6 done" in proc.stdout
    assert (s / "3best_recog" / "scores").read_text().splitlines()[0].split()[0] == \
        before.splitlines()[0].split()[0]
    assert len((s / "1best_recog" / "text").read_text().splitlines()) == len(before.splitlines())
    log = next((work / "exp" / "logs").glob("stage6_*dev_clean.log")).read_text()
    assert "incomplete record of an interrupted run" in log


# ---------------------------------------------------------------------------------------------
# Error paths of run.sh


def test_stage_out_of_order_names_the_missing_stage(tmp_path):
    proc = run_recipe("--workdir", str(tmp_path), "--stage", "4", "--stop_stage", "4", check=False)
    assert proc.returncode != 0
    assert "run stage 2 first" in proc.stderr or "run stage 1 first" in proc.stderr
    assert not (tmp_path / "exp" / ".done" / "stage4").exists()


def test_unknown_option_is_refused(tmp_path):
    proc = run_recipe("--workdir", str(tmp_path), "--no_such_option", "1", check=False)
    assert proc.returncode != 0 and "unknown option --no_such_option" in proc.stderr


def test_missing_corpus_path(tmp_path):
    proc = run_recipe("--mini", "false", "--workdir", str(tmp_path), "--librispeech_dir",
                      str(tmp_path / "nowhere"), "--stage", "1", "--stop_stage", "1", check=False)
    assert proc.returncode != 0
    assert "nowhere/LibriSpeech is missing: run stage 0 first" in proc.stderr


# ---------------------------------------------------------------------------------------------
# Stage 0 (LibriSpeech download) against a fake local mirror


def _flac_bytes():
    import numpy as np
    import soundfile as sf
    buf = io.BytesIO()
    sf.write(buf, (0.1 * np.sin(np.arange(1600) / 5)).astype("float32"), 16000, format="FLAC")
    return buf.getvalue()


def _make_mirror(root, parts):
    """<root>/12/<part>.tar.gz in LibriSpeech's layout + md5sum.txt; <root>/11/ LM corpus."""
    (root / "12").mkdir(parents=True)
    (root / "11").mkdir()
    sums = []
    for part in parts:
        archive = root / "12" / f"{part}.tar.gz"
        with tarfile.open(archive, "w:gz") as tar:
            def add(name, data):
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            add("LibriSpeech/README.TXT", b"fake\n")
            for spk, chapter in ((19, 198), (26, 495)):
                base = f"LibriSpeech/{part}/{spk}/{chapter}"
                trans = "".join(f"{spk}-{chapter}-{i:04d} HELLO WORLD {i}\n" for i in range(2))
                add(f"{base}/{spk}-{chapter}.trans.txt", trans.encode())
                for i in range(2):
                    add(f"{base}/{spk}-{chapter}-{i:04d}.flac", _flac_bytes())
        sums.append(f"{hashlib.md5(archive.read_bytes()).hexdigest()}  {part}.tar.gz")
    (root / "12" / "md5sum.txt").write_text("\n".join(sums) + "\n")
    with gzip.open(root / "11" / "librispeech-lm-norm.txt.gz", "wt") as f:
        f.write("A SENTENCE\nANOTHER ONE\n")


def test_download_from_local_mirror_with_resume(tmp_path):
    mirror = tmp_path / "mirror"
    _make_mirror(mirror, ["dev-clean", "test-clean"])
    out = tmp_path / "downloads"
    # an interrupted earlier download left half of an archive behind
    (out / "archives").mkdir(parents=True)
    whole = (mirror / "12" / "dev-clean.tar.gz").read_bytes()
    (out / "archives" / "dev-clean.tar.gz.part").write_bytes(whole[: len(whole) // 2])
    download_librispeech.main(["--dir", str(out), "--mirror", str(mirror), "--parts", "dev-clean",
                               "test-clean", "--lm-corpus"])
    for part in ("dev-clean", "test-clean"):
        assert (out / "LibriSpeech" / part / ".complete").exists()
        assert len(list((out / "LibriSpeech" / part).glob("*/*/*.flac"))) == 4
    assert (out / "LibriSpeech" / "README.TXT").exists()
    assert (out / "librispeech-lm-norm.txt.gz").exists()
    # data preparation reads what was unpacked
    data_prep.main(["--out", str(tmp_path / "data" / "dev_clean"), str(out / "LibriSpeech" / "dev-clean")])
    text = (tmp_path / "data" / "dev_clean" / "text").read_text().splitlines()
    assert text[0] == "19-198-0000 HELLO WORLD 0" and len(text) == 4
    spk2utt = (tmp_path / "data" / "dev_clean" / "spk2utt").read_text().splitlines()
    assert spk2utt[0] == "19 19-198-0000 19-198-0001"
    # the whole recipe stage 0 + 1 on the mirror (re-running stage 0 skips the unpacked parts)
    work = tmp_path / "work"
    run_recipe("--mini", "false", "--workdir", str(work), "--librispeech_dir", str(out), "--mirror",
               str(mirror), "--train_parts", "dev-clean", "--dev_parts", "dev-clean",
               "--test_parts", "test-clean", "--stage", "0", "--stop_stage", "1")
    assert (work / "data" / "test_clean" / "wav.scp").exists()


def test_download_rejects_bad_checksum(tmp_path):
    mirror = tmp_path / "mirror"
    _make_mirror(mirror, ["dev-clean"])
    (mirror / "12" / "md5sum.txt").write_text("0" * 32 + "  dev-clean.tar.gz\n")
    with pytest.raises(InputError, match="MD5 .* differs"):
        download_librispeech.main(["--dir", str(tmp_path / "d"), "--mirror", str(mirror),
                                   "--parts", "dev-clean"])
    assert not (tmp_path / "d" / "LibriSpeech" / "dev-clean" / ".complete").exists()


def test_download_missing_part_in_mirror(tmp_path):
    mirror = tmp_path / "mirror"
    _make_mirror(mirror, ["dev-clean"])
    with pytest.raises(InputError, match="no checksum for test-other.tar.gz"):
        download_librispeech.main(["--dir", str(tmp_path / "d"), "--mirror", str(mirror),
                                   "--parts", "test-other"])


# ---------------------------------------------------------------------------------------------
# Bad input to the helper scripts


def test_data_prep_names_file_and_line(tmp_path):
    chapter = tmp_path / "dev-clean" / "19" / "198"
    chapter.mkdir(parents=True)
    (chapter / "19-198.trans.txt").write_text("19-198-0000 HELLO\n19-198-0001 WORLD\n")
    (chapter / "19-198-0000.flac").write_bytes(_flac_bytes())
    with pytest.raises(InputError, match=r"19-198.trans.txt, line 2: audio .*19-198-0001.flac is missing"):
        data_prep.read_subset(tmp_path / "dev-clean")
    (chapter / "19-198.trans.txt").write_text("19-198-0000\n")
    with pytest.raises(InputError, match="line 1: expected 'UTTID TEXT'"):
        data_prep.read_subset(tmp_path / "dev-clean")


def test_read_partial_drops_only_a_torn_last_line(tmp_path, capsys):
    p = tmp_path / "partial.jsonl"
    p.write_text('{"uttid": "a", "hyps": []}\n{"uttid": "b", "hy')
    assert list(decode_nbest.read_partial(p)) == ["a"]
    assert "incomplete record" in capsys.readouterr().err
    p.write_text('{"uttid": "a", "hy\n{"uttid": "b", "hyps": []}\n')
    with pytest.raises(InputError, match="line 1: not a JSON record"):
        decode_nbest.read_partial(p)


def test_cmd_backends_are_valid_shell():
    for script in ("run.sh", "path.sh", "cmd.sh", "local/parse_options.sh", "local/run_local.sh",
                   "local/run_slurm.sh", "local/setup_mini.sh"):
        subprocess.run(["bash", "-n", script], cwd=RECIPE, check=True)
    env = dict(os.environ, cmd_backend="slurm")
    out = subprocess.run(["bash", "-c", ". ./cmd.sh && echo $train_cmd"], cwd=RECIPE, env=env,
                         capture_output=True, text=True, check=True).stdout
    assert out.startswith("local/run_slurm.sh")
