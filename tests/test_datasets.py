"""slm-data: the data sets fetched from a mirror with their checksums checked, Gutenberg's boilerplate removed
from raw books, the data directory chosen by option or environment, and no default path outside the package."""
import gzip
import hashlib
import json
import re
import subprocess
from pathlib import Path

import pytest

from conftest import MIRROR
from slm_lm.data import datasets
from slm_lm.bin import blimp as blimp_cli
from slm_lm.bin import data as data_cli

PACKAGE = Path(datasets.__file__).parent


def test_blimp_and_nbest_from_the_mirror_are_its_files(fetched_data):
    for sub in ("blimp", "librispeech_nbest"):
        got = sorted(p.relative_to(fetched_data / sub) for p in (fetched_data / sub).rglob("*") if p.is_file())
        want = sorted(p.relative_to(MIRROR / sub) for p in (MIRROR / sub).rglob("*") if p.is_file())
        assert got == want and len(got) in (67, 182)
    for rel in ("blimp/passive_1.jsonl", "librispeech_nbest/dev_other/raw_hypotheses/10best_recog/scores"):
        assert (fetched_data / rel).read_bytes() == (MIRROR / rel).read_bytes()


def raw_gutenberg(text: bytes, title: str) -> bytes:
    """A book as gutenberg.org serves it: BOM, CRLF, header, licence and footer around the text."""
    body = text.decode().replace("\n", "\r\n")
    return ("\ufeffThe Project Gutenberg eBook of " + title + "\r\n\r\nThis eBook is for the use of anyone...\r\n\r\n"
            "*** START OF THE PROJECT GUTENBERG EBOOK " + title.upper() + " ***\r\n\r\n\r\n" + body +
            "\r\n\r\n\r\nEnd of the Project Gutenberg EBook of " + title + "\r\n\r\n"
            "*** END OF THE PROJECT GUTENBERG EBOOK " + title.upper() + " ***\r\n\r\nSection 1. General Terms\r\n"
            ).encode("utf-8")


def test_books_from_a_mirror_of_raw_gutenberg_files_lose_the_boilerplate(tmp_path):
    """Two books of the mirror as Gutenberg serves them, the rest prepared: every book matches its checksum, and
    the stripped ones are byte for byte the prepared text."""
    mirror = tmp_path / "mirror" / "text" / "gutenberg"
    mirror.mkdir(parents=True)
    raw = {"pg10150.txt.gz": "Dracula's Guest", "pg1028.txt.gz": "The Professor"}
    for row in datasets.gutenberg_books():
        name = row["file"]
        if name in raw:
            (mirror / name[:-3]).write_bytes(raw_gutenberg(gzip.open(MIRROR / "text/gutenberg" / name).read(), raw[name]))
        else:
            (mirror / name).symlink_to(MIRROR / "text/gutenberg" / name)
    data_cli.main(["get", "books", "--dir", str(tmp_path / "d"), "--mirror", str(tmp_path / "mirror"), "--no-progress"])
    for name in raw:
        assert gzip.open(tmp_path / "d/text/gutenberg" / name).read() == gzip.open(MIRROR / "text/gutenberg" / name).read()
    assert len(list((tmp_path / "d/text/gutenberg").iterdir())) == 892
    assert (tmp_path / "d/text/gutenberg_manifest.tsv").read_bytes() == (MIRROR / "text/gutenberg_manifest.tsv").read_bytes()
    data_cli.main(["get", "books", "--dir", str(tmp_path / "d"), "--no-progress"])  # all there: checked, kept


def test_strip_gutenberg_needs_its_markers():
    with pytest.raises(datasets.InputError, match=r"book.txt: no '\*\*\* START OF"):
        datasets.strip_gutenberg(b"just text\n", "book.txt")


def blimp_mirror(tmp_path, changed=None) -> Path:
    mirror = tmp_path / "mirror"
    (mirror / "blimp").mkdir(parents=True)
    for path in (MIRROR / "blimp").glob("*.jsonl"):
        if path.name == changed:
            lines = path.read_text().splitlines(keepends=True)
            (mirror / "blimp" / path.name).write_text("".join(lines[:-1]))
        else:
            (mirror / "blimp" / path.name).symlink_to(path)
    return mirror


def test_a_file_that_differs_from_its_checksum_is_an_error_and_is_not_kept(tmp_path, capsys):
    mirror = blimp_mirror(tmp_path, changed="wh_island.jsonl")
    with pytest.raises(SystemExit) as e:
        data_cli.main(["get", "blimp", "--dir", str(tmp_path / "d"), "--mirror", str(mirror), "--no-progress"])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and re.match(r"slm-data: error: .*/mirror/blimp/wh_island\.jsonl: SHA-256 [0-9a-f]{64} "
                                      r"differs from [0-9a-f]{64} in slm_lm/data/manifests", err[0])
    assert not (tmp_path / "d/blimp/wh_island.jsonl").exists()


def test_a_file_already_there_is_checked_and_never_replaced(tmp_path, capsys):
    target = tmp_path / "d" / "blimp" / "passive_1.jsonl"
    target.parent.mkdir(parents=True)
    target.write_text("mine\n")
    with pytest.raises(SystemExit):
        data_cli.main(["get", "blimp", "--dir", str(tmp_path / "d"), "--mirror", str(MIRROR), "--no-progress"])
    assert "passive_1.jsonl: is there and differs from its SHA-256" in capsys.readouterr().err
    assert target.read_text() == "mine\n"


def test_a_file_missing_from_the_mirror_is_named(tmp_path, capsys):
    with pytest.raises(SystemExit):
        data_cli.main(["get", "librispeech-nbest", "--dir", str(tmp_path / "d"), "--mirror", str(tmp_path)])
    assert re.search(r"slm-data: error: .*/librispeech_nbest/dev_clean/\S+: not in the mirror", capsys.readouterr().err)
    with pytest.raises(SystemExit):
        data_cli.main(["get", "blimp", "--dir", str(tmp_path / "d"), "--mirror", str(tmp_path / "none")])
    assert capsys.readouterr().err == f"slm-data: error: {tmp_path / 'none'}: mirror folder not found\n"


def test_lm_corpus_from_a_mirror_is_checked_against_its_md5sum(tmp_path, capsys):
    src = tmp_path / "mirror" / "librispeech_lm"
    src.mkdir(parents=True)
    corpus = gzip.compress(b"THE FIRST SENTENCE\nTHE SECOND ONE\n")
    (src / datasets.LM_CORPUS).write_bytes(corpus)
    (src / "md5sum.txt").write_text(f"{hashlib.md5(corpus).hexdigest()}  {datasets.LM_CORPUS}\n")
    data_cli.main(["get", "librispeech-lm", "--dir", str(tmp_path / "d"), "--mirror", str(tmp_path / "mirror")])
    assert (tmp_path / "d/librispeech_lm" / datasets.LM_CORPUS).read_bytes() == corpus
    (src / "md5sum.txt").write_text(f"{'0' * 32}  {datasets.LM_CORPUS}\n")
    with pytest.raises(SystemExit):
        data_cli.main(["get", "librispeech-lm", "--dir", str(tmp_path / "e"), "--mirror", str(tmp_path / "mirror")])
    assert "differs from 00000000000000000000000000000000" in capsys.readouterr().err


def test_the_data_directory_is_the_option_else_the_environment_else_the_cache(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv(datasets.DATA_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert datasets.data_dir() == tmp_path / "cache" / "slm_lm"
    monkeypatch.setenv(datasets.DATA_ENV, str(tmp_path / "env"))
    assert datasets.data_dir() == tmp_path / "env"
    assert datasets.data_dir(tmp_path / "opt") == tmp_path / "opt"
    data_cli.main(["path", "blimp"])
    data_cli.main(["path"])
    assert capsys.readouterr().out.split() == [str(tmp_path / "env" / "blimp"), str(tmp_path / "env")]


def test_slm_blimp_reads_the_data_directory_and_says_how_to_fill_it(fetched_data, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(datasets.DATA_ENV, str(tmp_path / "empty"))
    args = ["--model", "slm-books", "--out", str(tmp_path / "out"), "--paradigms", "passive_1", "--limit", "5",
            "--no-progress"]
    with pytest.raises(SystemExit) as e:
        blimp_cli.main(args)
    assert e.value.code == 2
    assert f"slm-blimp: error: {tmp_path / 'empty' / 'blimp'}: not there; get it with `slm-data get blimp`" \
        in capsys.readouterr().err
    monkeypatch.setenv(datasets.DATA_ENV, str(fetched_data))
    blimp_cli.main(args)
    assert json.loads((tmp_path / "out" / "blimp_results.json").read_text())["pairs"] == 5


def test_no_default_path_of_the_package_points_beside_the_checkout():
    """Data is found through the data directory, never through a folder next to the repository."""
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text()
        assert not re.search(r"""["']shared["']|\.\./shared|parents\[\d\]\.parent""", text), path


def test_an_installed_package_gets_its_data_and_reads_it_by_default(installed, tmp_path):
    """pip-installed (its own python: the scripts of a --prefix install name pip's), run from a folder with
    nothing beside it: `slm-data get` fills the user's cache directory
    from the mirror and `slm-blimp` finds BLiMP there without --data."""
    env = {"PATH": f"{installed.parent}:/usr/bin:/bin", "HOME": str(tmp_path / "home"), "OMP_NUM_THREADS": "1"}
    work = tmp_path / "work"
    work.mkdir()
    for args in (["slm_lm.bin.data", "get", "blimp", "--mirror", str(MIRROR), "--no-progress"],
                 ["slm_lm.bin.blimp", "--model", "slm-books", "--paradigms", "passive_1", "--limit", "5", "--out",
                  "out", "--no-progress"]):
        done = subprocess.run([str(installed), "-m", *args], cwd=work, env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-2000:]
    assert len(list((tmp_path / "home/.cache/slm_lm/blimp").glob("*.jsonl"))) == 67
    assert "over 5 pairs in 1 paradigms" in done.stdout
