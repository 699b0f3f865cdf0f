"""BPE training, ESPnet token list, Tokenizer encode/decode and their errors."""
from collections import Counter
from pathlib import Path

import pytest

from conftest import MIRROR
from slm_lm.bin import train_bpe as cli
from slm_lm.model.bpe import train_bpe
from slm_lm.common.errors import InputError
from slm_lm.data.text_cleanup import book_sentences
from slm_lm.data.text_norm import normalize_librispeech
from slm_lm.model.tokenizer import Tokenizer, read_token_list

VOCAB = 300


@pytest.fixture(scope="module")
def text_file(tmp_path_factory):
    book = MIRROR / "text/gutenberg/pg10124.txt.gz"
    sentences = [normalize_librispeech(s) for _, s in book_sentences(book, Counter(), [])]
    path = tmp_path_factory.mktemp("text") / "train.txt"
    path.write_text("\n".join(s for s in sentences if s) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def bpe_dir(text_file, tmp_path_factory):
    out = tmp_path_factory.mktemp("bpe")
    train_bpe(text_file, out, vocab_size=VOCAB)
    return out


def test_token_list_layout(bpe_dir):
    tokens = read_token_list(bpe_dir / "tokens.txt")
    assert len(tokens) == VOCAB - 3 + 4
    assert tokens[:2] == ["<blank>", "<unk>"] and tokens[-2:] == ["<mask>", "<sos/eos>"]
    assert not {"<s>", "</s>"} & set(tokens)
    tok = Tokenizer.from_dir(bpe_dir)
    assert (tok.vocab_size, tok.pad_id, tok.unk_id, tok.mask_id, tok.bos_id, tok.eos_id) == (
        len(tokens), 0, 1, len(tokens) - 2, len(tokens) - 1, len(tokens) - 1)
    assert tok.id_to_piece(tok.mask_id) == "<mask>"


def test_encode_decode(bpe_dir, text_file):
    tok = Tokenizer.from_dir(bpe_dir)
    for line in text_file.read_text().splitlines()[:500]:
        ids = tok.encode(line)
        assert ids and all(2 <= i < tok.mask_id for i in ids)
        assert [tok.id_to_piece(i) for i in ids] == tok.pieces(line)
        assert tok.decode([tok.bos_id, *ids, tok.eos_id, tok.pad_id]) == line
    assert tok.encode("") == []
    assert tok.decode([tok.unk_id]).strip() == "\u2047"
    with pytest.raises(InputError, match="token id 99999 at position 1"):
        tok.decode([5, 99999])


def test_unknown_characters(bpe_dir):
    tok = Tokenizer.from_dir(bpe_dir)
    with pytest.raises(InputError, match="unknown character.*'é'"):
        tok.encode("HELLO é THERE")
    ids = tok.encode("HELLO é THERE", unknown="unk")
    assert ids.count(tok.unk_id) == 1 and tok.encode("HELLO") == ids[:len(tok.encode("HELLO"))]
    with pytest.raises(ValueError):
        tok.encode("HELLO", unknown="ignore")


def test_save_round_trip_and_determinism(bpe_dir, text_file, tmp_path):
    tok = Tokenizer.from_dir(bpe_dir)
    tok.save(tmp_path / "copy")
    assert (tmp_path / "copy/bpe.model").read_bytes() == (bpe_dir / "bpe.model").read_bytes()
    assert (tmp_path / "copy/tokens.txt").read_text() == (bpe_dir / "tokens.txt").read_text()
    again = train_bpe(text_file, tmp_path / "again", vocab_size=VOCAB)
    # same pieces and scores (the model file also records its temporary training path)
    assert again.token_list == tok.token_list
    assert [again.sp.get_score(i) for i in range(VOCAB)] == [tok.sp.get_score(i) for i in range(VOCAB)]
    assert sorted(p.name for p in (tmp_path / "again").iterdir()) == ["bpe.model", "tokens.txt"]


def test_token_list_errors(bpe_dir, tmp_path):
    tokens = read_token_list(bpe_dir / "tokens.txt")

    def write(lines):
        path = tmp_path / "tokens.txt"
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return path

    with pytest.raises(InputError, match=r"tokens.txt:\d+: expected '<sos/eos>' here.*missing"):
        read_token_list(write(tokens[:-1]))
    with pytest.raises(InputError, match=r"tokens.txt:3: <mask> must be second to last"):
        read_token_list(write(tokens[:2] + ["<mask>"] + tokens[2:-2] + tokens[-1:]))
    # ESPnet asr.sh's layout, without <mask>, is valid: no mask id, and the last piece is a piece
    no_mask = Tokenizer(bpe_dir / "bpe.model", read_token_list(write(tokens[:-2] + tokens[-1:])))
    assert no_mask.mask_id is None and no_mask.eos_id == len(tokens) - 2
    last_piece = len(tokens) - 3
    assert no_mask.decode([last_piece]) == tokens[last_piece].replace("\u2581", " ").strip() != ""
    dup = tokens[:5] + [tokens[3]] + tokens[5:]
    with pytest.raises(InputError, match=r"tokens.txt:6: duplicate token .* \(first on line 4\)"):
        read_token_list(write(dup))
    with pytest.raises(InputError, match=r"tokens.txt:3: empty token"):
        read_token_list(write(tokens[:2] + [""] + tokens[2:]))
    with pytest.raises(InputError, match="nothere.txt: cannot read the token list"):
        read_token_list(tmp_path / "nothere.txt")
    # a token list that does not belong to the model
    with pytest.raises(InputError, match="pieces of the sentencepiece model are not in the token list"):
        Tokenizer(bpe_dir / "bpe.model", tokens[:3] + tokens[4:])
    with pytest.raises(InputError, match="tokens of the token list are not pieces"):
        Tokenizer(bpe_dir / "bpe.model", tokens[:-2] + ["XYZZY"] + tokens[-2:])
    with pytest.raises(InputError, match="missing.model: cannot read the sentencepiece model"):
        Tokenizer(tmp_path / "missing.model", tokens)
    with pytest.raises(InputError, match="not a sentencepiece model"):
        Tokenizer(write(tokens), tokens)


def test_train_bpe_bad_input(tmp_path, capsys, text_file):
    with pytest.raises(InputError, match="nothere.txt: training text not found"):
        train_bpe(tmp_path / "nothere.txt", tmp_path / "out")
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    with pytest.raises(InputError, match="empty.txt: training text is empty"):
        train_bpe(empty, tmp_path / "out")
    raw = tmp_path / "raw.txt"
    raw.write_text("GOOD LINE\nNot normalised, this one.\n")
    with pytest.raises(InputError, match=r"raw.txt:2: not a normalised sentence"):
        train_bpe(raw, tmp_path / "out")
    with pytest.raises(InputError, match="sentencepiece training failed"):
        train_bpe(text_file, tmp_path / "out", vocab_size=100000)
    with pytest.raises(SystemExit, match="error: .*raw.txt:2"):
        cli.main(["--text", str(raw), "--out", str(tmp_path / "out")])
    cli.main(["--text", str(text_file), "--vocab-size", "200", "--out", str(tmp_path / "cli")])
    assert "201 tokens (<mask> 199, <sos/eos> 200)" in capsys.readouterr().out
    assert len(read_token_list(tmp_path / "cli/tokens.txt")) == 201


@pytest.mark.parametrize("bad,problem", [(b"AND GOD SAW THE L\xffIGHT\n", "not UTF-8 text"),
                                         (b"and god saw the light\n", "not a normalised sentence")])
def test_train_bpe_checks_every_line_of_its_text(tmp_path, bad, problem):
    """A bad line deep in the text (line 25,001) is named, not passed to sentencepiece, which would skip or mangle
    it without a word (only the first 1,000 lines were checked)."""
    text = tmp_path / "text.txt"
    text.write_bytes(b"AND GOD SAW THE LIGHT\n" * 25_000 + bad)
    with pytest.raises(InputError, match=f"text.txt:25001: {problem}"):
        train_bpe(text, tmp_path / "out", vocab_size=40)
    assert not (tmp_path / "out").exists()
