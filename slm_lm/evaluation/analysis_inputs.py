"""Inputs of the repository's LM analysis scripts (local/analyses/), and of nothing else in the package: held-out
sentences read from a text or sclite .trn file, the sentences that have exactly N pieces under every model, and
`LABEL=SPEC` model arguments."""
from pathlib import Path

from slm_lm.common.errors import InputError
from slm_lm.rescoring.transcripts import read_trn


def read_sentences(path) -> list:
    """Sentences of a text file (line i = sentence i - 1) or of a .trn file."""
    path = Path(path)
    if path.suffix == ".trn":
        return list(read_trn(path).values())
    try:
        return [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"{path}: cannot read: {e}") from None


def exact_length(scorers, sentences: list, length: int, limit: int | None = None) -> list:
    """The sentences (at most `limit`, in input order) with exactly `length` pieces under every scorer."""
    keep = set(range(len(sentences)))
    for scorer in scorers:
        try:
            encoded = scorer.encode(sentences)
        except InputError as e:
            if e.index is None:
                raise
            raise InputError(f"line {e.index + 1}: {str(e).removeprefix(f'sentence {e.index}: ')}", e.index) from None
        keep &= {i for i, ids in enumerate(encoded) if len(ids) - 2 == length}
    chosen = [sentences[i] for i in sorted(keep)]
    return chosen[:limit] if limit else chosen


def parse_models(specs: list) -> list:
    """[(label, spec)] from LABEL=SPEC arguments."""
    out = []
    for item in specs:
        label, sep, spec = item.partition("=")
        if not sep or not label or not spec:
            raise InputError(f"--model {item!r}: expected LABEL=SPEC")
        out.append((label, spec))
    return out
