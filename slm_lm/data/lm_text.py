"""LM training text: books -> normalised sentences, length filters, decontamination, train/valid split.

The resumable driver `prepare_lm_text`.  Per input file, in order:

1. Book clean-up and sentence split (`slm_lm.data.text_cleanup.book_sentences`).
2. `normalize_librispeech` on each sentence (numbers spelt out, see `slm_lm.data.text_norm`).
3. Decontamination (`slm_lm.data.decontaminate`): a sentence is dropped when a word n-gram (n=10) of the
   book's running word stream that overlaps it equals an n-gram of an excluded transcript.
4. Length filter on words: `min_words` (3: drops fragments such as "YES SIR") and `max_words` (100:
   very long sentences, mostly lists and run-on 18th-century prose, cost a lot to train on).
   A sentence is counted under the first failing check in the order empty, contaminated, too_short,
   too_long.

With ``normalized=True`` the input is already one normalised sentence per line (e.g.
``librispeech-lm-norm.txt``): step 1 is skipped and each line is a sentence (a line that is not
clean is normalised again).  Kept sentences are numbered over the whole corpus (files sorted by path);
every `valid_every`-th goes to the validation file.  Each input file is processed into a part file
under ``<out>.parts/`` first, so an interrupted run resumes at the first unfinished file.
"""

import hashlib
import json
import shutil
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterator

from slm_lm.common import fileio
from slm_lm.common.errors import InputError
from slm_lm.common.fileio import atomic_open, new_directory, read_text_lines
from slm_lm.common.outputs import check_no_overlap, check_output_file
from slm_lm.common.progress import progress_bar
from slm_lm.data.decontaminate import ExclusionSet, NgramFilter, load_exclusion
from slm_lm.data.text_cleanup import book_sentences
from slm_lm.data.text_norm import normalize_librispeech

__all__ = ["PrepConfig", "prepare_lm_text"]


@dataclass
class PrepConfig:
    """Settings of the text preparation; they are part of the resume fingerprint."""

    ngram: int = 10
    min_words: int = 3
    max_words: int = 100
    valid_every: int = 1000

    def check(self) -> None:
        """Raise InputError on settings that cannot work."""
        if self.ngram < 1:
            raise InputError(f"ngram must be >= 1, got {self.ngram}")
        if not 1 <= self.min_words <= self.max_words:
            raise InputError(f"need 1 <= min_words <= max_words, got {self.min_words}, {self.max_words}")
        if self.valid_every < 0:
            raise InputError(f"valid_every must be >= 0 (0: no validation set), got {self.valid_every}")


# ----------------------------------------------------------------------------------- one file
def _normalized_sentences(path: Path, stats: Counter) -> Iterator[tuple[int, str]]:
    for number, line in read_text_lines(path):
        stats["words_in"] += len(line.split())
        yield number, line


def _process_file(path: Path, normalized: bool, exclusion: ExclusionSet, config: PrepConfig,
                  part: Path) -> dict:
    """Prepare one input file into `part` (one sentence a line); returns its statistics."""
    stats, problems, matches = Counter(), [], []
    ngram_filter = NgramFilter(exclusion)

    def keep(released, handle):
        for (number, sentence, n_words), match in released:
            if match is not None:
                reason = "contaminated"
                matches.append([str(path), number, match[1], match[2], match[0], sentence])
            elif n_words < config.min_words:
                reason = "too_short"
            elif n_words > config.max_words:
                reason = "too_long"
            else:
                handle.write(sentence + "\n")
                stats["sentences_out"] += 1
                stats["words_out"] += n_words
                continue
            stats[f"sentences_dropped_{reason}"] += 1
            stats[f"words_dropped_{reason}"] += n_words

    source = (_normalized_sentences(path, stats) if normalized else book_sentences(path, stats, problems))
    with atomic_open(part) as handle:
        for number, raw in source:
            sentence = normalize_librispeech(raw)
            stats["sentences_in"] += 1
            if normalized and sentence != raw:
                stats["lines_renormalized"] += 1
            if not sentence:
                stats["sentences_dropped_empty"] += 1
                continue
            words = sentence.split(" ")
            stats["sentence_words_in"] += len(words)
            keep(ngram_filter.feed((number, sentence, len(words)), words), handle)
        keep(ngram_filter.flush(), handle)
    return {"stats": dict(stats), "problems": problems, "matches": matches}


# --------------------------------------------------------------------------------- whole corpus
def _input_files(inputs: list[Path]) -> list[Path]:
    files = []
    for item in inputs:
        item = Path(item)
        if item.is_dir():
            found = [p for p in item.iterdir() if p.name.endswith((".txt", ".txt.gz")) and p.is_file()]
            if not found:
                raise InputError(f"{item}: no .txt or .txt.gz files in this directory")
            files.extend(found)
        elif item.is_file():
            files.append(item)
        else:
            raise InputError(f"{item}: no such file or directory")
    return sorted(files, key=str)


def _read_part_meta(meta: Path) -> dict:
    """The saved result of one input file (the resumable state): InputError naming `meta` if it is not the
    JSON this driver writes."""
    redo = f"delete it (or {meta.parent}) to prepare that file again"
    try:
        saved = json.loads(meta.read_bytes().decode("utf-8"))
    except OSError as e:
        raise InputError(f"{meta}: cannot read the saved state of an earlier run: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise InputError(f"{meta}: corrupt saved state of an earlier run (not UTF-8: {e.reason}); {redo}") from None
    except json.JSONDecodeError as e:
        raise InputError(f"{meta}:{e.lineno}: corrupt saved state of an earlier run ({e.msg}); {redo}") from None
    shapes = {"key": dict, "stats": dict, "problems": list, "matches": list}
    if not isinstance(saved, dict) or any(not isinstance(saved.get(k), t) for k, t in shapes.items()):
        raise InputError(f"{meta}: corrupt saved state of an earlier run (want an object with "
                         f"{', '.join(shapes)}); {redo}")
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in saved["stats"].values()):
        raise InputError(f"{meta}: corrupt saved state of an earlier run (stats must be counts); {redo}")
    return saved


def _checked_lines(handle, part: Path):
    """The lines of a part file; one that is not UTF-8 (a corrupt state) raises InputError naming it."""
    number = 0
    try:
        for number, line in enumerate(handle, 1):
            yield line
    except UnicodeDecodeError as e:
        raise InputError(f"{part}:{number + 1}: corrupt saved state of an earlier run (not UTF-8: {e.reason}); "
                         f"delete {part.parent} to prepare the files again") from None


def _code_digest() -> str:
    """Digest of the code that decides the output: this driver, clean-up, decontamination, normalisation
    and the reader of the input files."""
    sources = [Path(__file__).with_name(name) for name in ("lm_text.py", "text_cleanup.py", "decontaminate.py",
                                                           "text_norm.py")] + [Path(fileio.__file__)]
    return hashlib.sha1(b"".join(p.read_bytes() for p in sources)).hexdigest()


def prepare_lm_text(inputs: list[Path], out: Path, exclude: list[Path] = (), config: PrepConfig = None,
                    normalized: bool = False, valid_out: Path = None, report: Path = None,
                    keep_parts: bool = False) -> dict:
    """Prepare LM training text from books (or normalised text) into `out` and `valid_out`.

    Writes `out`, `valid_out` (default: valid.txt next to `out`), a JSON report (default:
    <out stem>.report.json) and the contaminated sentences as TSV (<out stem>.contaminated.tsv), all
    atomically; returns the report.
    """
    started = time.time()
    config = config or PrepConfig()
    config.check()
    out = Path(out)
    valid_out = Path(valid_out) if valid_out else out.with_name("valid.txt")
    report = Path(report) if report else out.with_name(out.stem + ".report.json")
    contaminated_tsv = out.with_name(out.stem + ".contaminated.tsv")
    if len({out.resolve(), valid_out.resolve(), report.resolve(), contaminated_tsv.resolve()}) < 4:
        raise InputError(f"output, validation and report paths must differ: {out}, {valid_out}, {report}")
    for option, output in (("--out", out), ("--valid-out", valid_out), ("--report", report),
                           ("--out", contaminated_tsv)):
        check_no_overlap(option, output, [*inputs, *exclude])
        check_output_file(option, output)
    files = _input_files(inputs)
    exclusion = load_exclusion(list(exclude), config.ngram)
    fingerprint = {"config": asdict(config), "normalized": normalized, "exclusion": exclusion.digest,
                   "code": _code_digest()}
    parts_dir = out.with_name(out.name + ".parts")
    with new_directory(parts_dir):  # removed again if the first file fails
        # The state of an earlier run, checked before any work (a corrupt one stops with one message).
        saved_states = {}
        for index in range(len(files)):
            meta = parts_dir / f"{index:06d}.json"
            if meta.is_file() and (parts_dir / f"{index:06d}.txt").is_file():
                saved_states[index] = _read_part_meta(meta)

        results, resumed = [], 0
        totals = Counter()
        with progress_bar(files, desc="prepare LM text", unit="file") as progress:
            for index, path in enumerate(progress):
                part = parts_dir / f"{index:06d}.txt"
                meta = parts_dir / f"{index:06d}.json"
                stat = path.stat()
                key = {**fingerprint, "file": str(path), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
                result = None
                saved = saved_states.pop(index, None)
                if saved is not None and saved["key"] == key:
                    result, resumed = saved, resumed + 1
                if result is None:
                    result = {"key": key, **_process_file(path, normalized, exclusion, config, part)}
                    with atomic_open(meta) as handle:
                        json.dump(result, handle)
                results.append(result)
                totals.update(result["stats"])
                progress.set_postfix(sentences=totals["sentences_out"],
                                     contaminated=totals["sentences_dropped_contaminated"])

    counts = Counter()
    with atomic_open(out) as train, atomic_open(valid_out) as valid, \
            progress_bar(results, desc="merge parts", unit="file") as merging:
        for index, _ in enumerate(merging):
            part = parts_dir / f"{index:06d}.txt"
            with open(part, encoding="utf-8") as handle:
                for sentence in _checked_lines(handle, part):
                    counts["kept"] += 1
                    if config.valid_every and counts["kept"] % config.valid_every == 0:
                        valid.write(sentence)
                        counts["valid_sentences"] += 1
                        counts["valid_words"] += sentence.count(" ") + 1
                    else:
                        train.write(sentence)
                        counts["train_sentences"] += 1
                        counts["train_words"] += sentence.count(" ") + 1
    with atomic_open(contaminated_tsv) as handle:
        handle.write("file\tline\ttranscript_file\tutterance_id\tngram\tsentence\n")
        for result in results:
            for row in result["matches"]:
                handle.write("\t".join(str(x) for x in row) + "\n")

    summary = {
        "inputs": [str(p) for p in files],
        "normalized_input": normalized,
        "config": asdict(config),
        "outputs": {"train": str(out), "valid": str(valid_out), "contaminated": str(contaminated_tsv)},
        "totals": dict(sorted(totals.items())),
        "split": dict(counts),
        "exclusion": {"n": exclusion.n, "files": exclusion.files, "distinct_ngrams": len(exclusion.ngrams)},
        "contaminated_per_file": {r["key"]["file"]: r["stats"].get("sentences_dropped_contaminated", 0)
                                  for r in results if r["stats"].get("sentences_dropped_contaminated")},
        "per_file": {r["key"]["file"]: r["stats"] for r in results},
        "problems": [p for r in results for p in r["problems"]],
        "files_resumed": resumed,
        "seconds": round(time.time() - started, 1),
    }
    with atomic_open(report) as handle:
        json.dump(summary, handle, indent=1)
    if not keep_parts:
        shutil.rmtree(parts_dir)
    return summary
