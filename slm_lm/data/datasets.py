"""The data sets the project uses, where they live on disk, and how to get them (`slm-data get NAME`).

The data directory is `--dir`, else `$SLM_LM_DATA`, else `$XDG_CACHE_HOME/slm_lm` (`~/.cache/slm_lm`). In it:

  blimp/                BLiMP's 67 paradigms, `<paradigm>.jsonl` (alexwarstadt/blimp, CC-BY)
  text/gutenberg/       the 892 Project Gutenberg books the shipped models were trained on, `pg<ebook>.txt.gz`,
                        the Gutenberg header, licence and footer removed; text/gutenberg_manifest.tsv lists them
  librispeech_nbest/    ESPnet 30-best lists of LibriSpeech dev_clean and dev_other (a HuBERT-Conformer system,
                        waynewu6250/ASRwL2R-new), `<set>/raw_hypotheses/<k>best_recog/{text,score,scores}` and
                        `<set>/references/ref_wer.trn`
  librispeech_lm/       LibriSpeech's normalised LM corpus, librispeech-lm-norm.txt.gz (OpenSLR 11)

A mirror (`--mirror DIR`) is a local folder laid out like the data directory, so another data directory is a
mirror; without one, each file comes from its public source. Every file is checked against the SHA-256 listed in
slm_lm/data/manifests/ (the LM corpus: against the MD5 of the source's md5sum.txt when it has one). A book is stored
as its text without Gutenberg's boilerplate: a mirror may hold it so (`pg<ebook>.txt.gz`) or as Gutenberg serves
it (`pg<ebook>.txt`, as gutenberg.org does), and then `strip_gutenberg` removes the boilerplate. Files already in
the data directory are checked and kept; a file that differs from its checksum is an error, never replaced.
"""
import gzip
import hashlib
import os
import re
import tempfile
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Callable

from slm_lm.common.errors import InputError
from slm_lm.common.fileio import write_atomic
from slm_lm.common.progress import progress_bar
from slm_lm.data.download import fetch, get_verified, is_url, local_path, read_md5sums

DATA_ENV = "SLM_LM_DATA"
NBEST_SYSTEM = ("data/espnet/simpleoier_librispeech_asr_train_asr_conformer7_hubert_ll60k_large_raw_en_bpe5000_sp/"
                "decode_asr_lm_lm_train_lm_transformer2_en_bpe5000_valid.loss.ave_asr_model_valid.acc.ave")
LM_CORPUS = "librispeech-lm-norm.txt.gz"
BOOKS_MANIFEST = "gutenberg_manifest.tsv"


def data_dir(explicit=None) -> Path:
    """The data directory: `explicit`, else $SLM_LM_DATA, else the user's cache directory."""
    if explicit:
        return Path(explicit)
    if os.environ.get(DATA_ENV):
        return Path(os.environ[DATA_ENV])
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "slm_lm"


def _manifest(name: str) -> str:
    return resources.files("slm_lm.data").joinpath("manifests", name).read_text(encoding="utf-8")


def _sha256_list(name: str) -> dict:
    """{relative path: sha256} from a `sha256sum`-style manifest."""
    return {path: digest for digest, path in (line.split("  ", 1) for line in _manifest(name).splitlines())}


def gutenberg_books() -> list[dict]:
    """The books' manifest rows: file, gutenberg_id, title, author, words, sha256."""
    header, *rows = _manifest("gutenberg.tsv").splitlines()
    return [dict(zip(header.split("\t"), row.split("\t"))) for row in rows]


_START = re.compile(r"^\*\*\* ?START OF (THE|THIS) PROJECT GUTENBERG E-?BOOK", re.IGNORECASE)
_END = re.compile(r"^\*\*\* ?END OF (THE|THIS) PROJECT GUTENBERG E-?BOOK", re.IGNORECASE)
_END_LINE = re.compile(r"^End of (the )?Project Gutenberg'?s? ", re.IGNORECASE)


def strip_gutenberg(raw: bytes, where: str) -> bytes:
    """A book as Gutenberg serves it -> its text: the lines between the `*** START OF` and `*** END OF` markers,
    without a closing "End of the Project Gutenberg EBook ..." line or surrounding blank lines; LF line ends."""
    lines = raw.decode("utf-8-sig").replace("\r\n", "\n").split("\n")
    start = next((i for i, line in enumerate(lines) if _START.match(line)), None)
    end = next((i for i, line in enumerate(lines) if _END.match(line)), None)
    if start is None or end is None or end < start:
        raise InputError(f"{where}: no '*** START OF THE PROJECT GUTENBERG EBOOK' ... '*** END OF' markers")
    body = lines[start + 1:end]
    while body and (not body[-1].strip() or _END_LINE.match(body[-1])):
        body.pop()
    while body and not body[0].strip():
        body.pop(0)
    return ("\n".join(body) + "\n").encode("utf-8")


@dataclass(frozen=True)
class Item:
    """One file of a data set: where it goes in the data directory (and is in a mirror), its public source
    (URL base, resource, name as `download.fetch` takes them) and the SHA-256 of its stored (uncompressed) bytes."""
    dest: str
    source: tuple
    sha256: str


def _blimp() -> list[Item]:
    base = "https://raw.githubusercontent.com/alexwarstadt/blimp/d07303a7662f1942d70c5e2bbac7aa021c6cdbd0"
    return [Item(f"blimp/{name}", (base, "data", name), digest)
            for name, digest in _sha256_list("blimp.sha256").items()]


def _nbest() -> list[Item]:
    base = "https://raw.githubusercontent.com/waynewu6250/ASRwL2R-new/21b8885a20a652f3b8af55205c6c7f8416fc314d"
    return [Item(f"librispeech_nbest/{path}", (base, f"{NBEST_SYSTEM}/{os.path.dirname(path)}", os.path.basename(path)), digest)
            for path, digest in _sha256_list("librispeech_nbest.sha256").items()]


def _books() -> list[Item]:
    base = "https://www.gutenberg.org/cache/epub"
    return [Item(f"text/gutenberg/{row['file']}", (base, row["gutenberg_id"], f"pg{row['gutenberg_id']}.txt"),
                 row["sha256"])
            for row in gutenberg_books()]


DATASETS: dict[str, Callable[[], list[Item]]] = {"blimp": _blimp, "books": _books, "librispeech-nbest": _nbest}
ALL = [*DATASETS, "librispeech-lm"]
PATHS = {"blimp": "blimp", "books": "text/gutenberg", "librispeech-nbest": "librispeech_nbest",
         "librispeech-lm": f"librispeech_lm/{LM_CORPUS}"}


def dataset_path(name: str, root=None) -> Path:
    """Where data set `name` is in the data directory `root` (default `data_dir()`)."""
    return data_dir(root) / PATHS[name]


def require(name: str, root=None) -> Path:
    """The path of data set `name`; an InputError saying how to get it when it is not there."""
    path = dataset_path(name, root)
    if not path.exists():
        raise InputError(f"{path}: not there; get it with `slm-data get {name}` (data directory: --dir, "
                         f"${DATA_ENV} or {data_dir()})")
    return path


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _fetched(item: Item, mirror) -> tuple[bytes, bytes, str]:
    """The bytes to store for `item`, their uncompressed text, and where they came from: the mirror's copy
    (a raw book stripped and compressed) or the public source's."""
    if mirror is not None:
        path = Path(mirror) / item.dest
        if path.is_file():
            data = path.read_bytes()
            return data, _text_of(path, data), str(path)
        raw_book = path.with_suffix("") if path.suffix == ".gz" else None
        if raw_book is None or not raw_book.is_file():
            raise InputError(f"{path}: not in the mirror")
        data, where = raw_book.read_bytes(), str(raw_book)
    else:
        base, resource, name = item.source
        with tempfile.TemporaryDirectory() as tmp:
            fetch(base, resource, name, Path(tmp) / name, progress=False)
            data = (Path(tmp) / name).read_bytes()
        where = f"{base}/{resource}/{name}"
    if item.dest.endswith(".gz"):
        text = strip_gutenberg(data, where)
        return gzip.compress(text, mtime=0), text, where
    return data, data, where


def _text_of(path: Path, data: bytes | None = None) -> bytes:
    """A file's bytes, decompressed when it is gzip."""
    data = path.read_bytes() if data is None else data
    try:
        return gzip.decompress(data) if path.suffix == ".gz" else data
    except (OSError, EOFError) as e:
        raise InputError(f"{path}: not a readable gzip file ({e})") from None


def get(name: str, root=None, mirror=None, progress: bool = True) -> Path:
    """Fetch data set `name` into the data directory `root` from `mirror` (a local folder) or its public source,
    checking every file's checksum; files already there are checked and kept. Returns the data set's path."""
    root = data_dir(root)
    if mirror is not None and not Path(mirror).is_dir():
        raise InputError(f"{mirror}: mirror folder not found")
    if name == "librispeech-lm":
        return _get_lm_corpus(root, mirror)
    items = DATASETS[name]()
    with progress_bar(items, desc=f"slm-data {name}", unit="file", disable=not progress) as bar:
        for item in bar:
            dest = root / item.dest
            if dest.exists():
                if _sha256(_text_of(dest)) != item.sha256:
                    raise InputError(f"{dest}: is there and differs from its SHA-256 in the manifest "
                                     "(move it away to fetch it again)")
                continue
            data, text, where = _fetched(item, mirror)
            if _sha256(text) != item.sha256:
                revised = "; Gutenberg may have revised the book" if name == "books" else ""
                raise InputError(f"{where}: SHA-256 {_sha256(text)} differs from {item.sha256} in "
                                 f"slm_lm/data/manifests (not the data the project uses{revised})")
            write_atomic(dest, data)
    if name == "books":
        _write_books_manifest(root / "text" / BOOKS_MANIFEST)
    return dataset_path(name, root)


def _write_books_manifest(path: Path) -> None:
    """text/gutenberg_manifest.tsv (file, gutenberg_id, title, author, words), unless it is there already."""
    fields = ("file", "gutenberg_id", "title", "author", "words")
    text = "".join("\t".join(row[k] for k in fields) + "\n" for row in [dict(zip(fields, fields)), *gutenberg_books()])
    if not path.exists():
        write_atomic(path, text)
    elif path.read_text(encoding="utf-8") != text:
        raise InputError(f"{path}: is there and differs from the books' manifest (move it away to write it again)")


def _get_lm_corpus(root: Path, mirror) -> Path:
    """librispeech-lm-norm.txt.gz from `mirror`/librispeech_lm/ or OpenSLR 11, checked against the MD5 of the
    source's md5sum.txt (the size the server announced when it has none); a copy already there is checked too."""
    dest = dataset_path("librispeech-lm", root)
    base, resource = (str(mirror), "librispeech_lm") if mirror is not None else \
        ("https://www.openslr.org/resources", "11")
    if not dest.exists() and not is_url(base) and not local_path(base, resource, LM_CORPUS).is_file():
        raise InputError(f"{local_path(base, resource, LM_CORPUS)}: not in the mirror")
    dest.parent.mkdir(parents=True, exist_ok=True)
    get_verified(base, resource, LM_CORPUS, dest, read_md5sums(base, resource, required=False), required=False)
    return dest
