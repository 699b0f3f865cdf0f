"""ESPnet's own tools with slm_lm LMs: the clm as a shallow-fusion LM in ESPnet's beam search
(`Speech2Text`, `python -m slm_lm.bin.asr_inference`), perplexity through ESPnet's
`lm_calc_perplexity` (`python -m slm_lm.bin.lm_calc_perplexity`), the bidirectional kinds refused in
beam search, and the flow of docs/espnet-and-clusters.md ("Our LMs in an existing ESPnet asr.sh experiment"): an asr.sh-style token
list (no <mask>), N-best decoding with ESPnet's inference, our LMs trained on that token list, and
`slm-rescore` on the N-best lists.

The ASR model is a randomly initialised tiny ESPnet Transformer (its hypotheses are noise, which is
all the LM-score checks need); the LMs train for 10 updates.
"""
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile
import torch
import yaml

from test_espnet_lm import REPO, data, tiny_config, train, train_args  # noqa: F401 (fixture)

ASR_CONFIG = {
    "frontend": "default", "frontend_conf": {"n_fft": 256, "hop_length": 160, "n_mels": 20},
    "normalize": "utterance_mvn",
    "encoder": "transformer",
    "encoder_conf": {"output_size": 32, "attention_heads": 2, "linear_units": 64, "num_blocks": 1},
    "decoder": "transformer", "decoder_conf": {"attention_heads": 2, "linear_units": 64, "num_blocks": 1},
    "model_conf": {"ctc_weight": 0.3},
}
UTTERANCES = {"spk1-utt1": "THE MAN WENT HOME", "spk1-utt2": "AND HE SAID UNTO THEM"}


def token_logprobs(model, yseq: torch.Tensor) -> torch.Tensor:
    """Our model's log-probabilities of yseq[1:] (yseq = <sos/eos> tokens ... <sos/eos>)."""
    with torch.no_grad():
        return model.token_logprobs(yseq[None], torch.tensor([len(yseq)]))[0, 1:]


@pytest.fixture(scope="module")
def asr_exp(data, tmp_path_factory):  # noqa: F811
    """An asr.sh-like experiment: token list without <mask>, a tiny random ASR model, two utterances
    of noise (wav.scp, text), and a clm and an slm trained 10 updates on the ASR's token list."""
    from espnet2.tasks.asr import ASRTask
    from espnet2.utils.yaml_no_alias_safe_dump import yaml_no_alias_safe_dump

    root = tmp_path_factory.mktemp("asr_exp")
    tokens = (data["root"] / "tok" / "tokens.txt").read_text().splitlines()
    token_list = root / "tokens.txt"
    token_list.write_text("\n".join(tokens[:-2] + tokens[-1:]) + "\n")  # <blank> <unk> pieces <sos/eos>
    bpe = data["root"] / "tok" / "bpe.model"

    (root / "asr.yaml").write_text(yaml.safe_dump(ASR_CONFIG))
    args = ASRTask.get_parser().parse_args([
        "--config", str(root / "asr.yaml"), "--token_list", str(token_list), "--bpemodel", str(bpe),
        "--token_type", "bpe", "--output_dir", str(root / "asr")])
    torch.manual_seed(0)
    model = ASRTask.build_model(args)
    (root / "asr").mkdir()
    with open(root / "asr" / "config.yaml", "w") as f:
        yaml_no_alias_safe_dump(vars(args), f)
    torch.save(model.state_dict(), root / "asr" / "model.pth")

    rng = np.random.default_rng(0)
    with open(root / "wav.scp", "w") as scp, open(root / "text", "w") as text:
        for uttid, words in UTTERANCES.items():
            soundfile.write(root / f"{uttid}.wav", rng.normal(0, 0.1, 16000).astype(np.float32), 16000)
            scp.write(f"{uttid} {root / uttid}.wav\n")
            text.write(f"{uttid} {words}\n")

    for kind in ("clm", "slm"):
        lm_args = train_args(data, root / f"lm_{kind}", kind=kind, max_epoch=1,
                             extra=["--num_iters_per_epoch", "10"], config=tiny_config(root, kind))
        lm_args[lm_args.index("--token_list") + 1] = str(token_list)
        train(lm_args)
    return root


def load_lm(exp: Path):
    from slm_lm.model.directory import find_checkpoint, load_espnet_experiment

    return find_checkpoint(exp), load_espnet_experiment(exp)[0]


def test_clm_scores_in_espnet_beam_search_equal_its_token_logprobs():
    """ESPnet's BatchBeamSearch and BeamSearch with only the clm: every hypothesis's "lm" score is the
    sum of our model's log-probs of its tokens (the end of sentence excluded where ESPnet appended it
    unscored at maxlen), within 1e-4. ESPnet's ESPnetLanguageModel.nll (via the clm's forward) equals
    our SlmESPnetLanguageModel.nll."""
    from espnet2.lm.espnet_model import ESPnetLanguageModel
    from espnet.nets.batch_beam_search import BatchBeamSearch
    from espnet.nets.beam_search import BeamSearch

    from slm_lm.espnet_lm.espnet_model import SlmESPnetLanguageModel
    from slm_lm.espnet_lm.lm import CausalLMForESPnet

    torch.manual_seed(0)
    vocab, maxlen = 20, 12
    lm = CausalLMForESPnet(vocab_size=vocab, size="tiny", dropout=0.0).eval()
    compared = 0
    for search in (BatchBeamSearch, BeamSearch):
        beam = search(scorers={"lm": lm}, weights={"lm": 1.0}, beam_size=4, vocab_size=vocab,
                      sos=vocab - 1, eos=vocab - 1, pre_beam_score_key="full")
        with torch.no_grad():
            hyps = beam(torch.zeros(maxlen, 1), maxlenratio=0.0, minlenratio=0.0)
        assert {len(h.yseq) <= maxlen + 1 for h in hyps} == {True, False}  # both kinds of ending occur
        for h in hyps:
            logprobs = token_logprobs(lm.model, h.yseq)
            expected = logprobs.sum() if len(h.yseq) <= maxlen + 1 else logprobs[:-1].sum()
            assert float(h.scores["lm"]) == pytest.approx(float(expected), abs=1e-4), h.yseq.tolist()
            compared += 1
    assert compared >= 8

    text = torch.tensor([[3, 4, 5, 6], [7, 8, 0, 0]])
    lengths = torch.tensor([4, 2])
    ours, our_lengths = SlmESPnetLanguageModel(lm, vocab).nll(text, lengths)
    espnet, espnet_lengths = ESPnetLanguageModel(lm, vocab).nll(text, lengths)
    torch.testing.assert_close(ours, espnet, rtol=1e-5, atol=1e-5)
    assert our_lengths.tolist() == espnet_lengths.tolist() == [5, 3]


@pytest.mark.parametrize("kind", ["slm", "mlm", "bilm", "tta"])
def test_bidirectional_kinds_refuse_beam_search(kind):
    from espnet.nets.batch_beam_search import BatchBeamSearch

    from slm_lm.espnet_lm.lm import LM_CLASSES, BidirectionalLMError

    lm = LM_CLASSES[kind](vocab_size=20, size="tiny").eval()
    beam = BatchBeamSearch(scorers={"lm": lm}, weights={"lm": 1.0}, beam_size=2, vocab_size=20, sos=19, eos=19)
    with pytest.raises(BidirectionalLMError, match=f"'{kind}' LM is bidirectional.*N-best rescoring"):
        beam(torch.zeros(5, 1))


def test_speech2text_with_clm_shallow_fusion(asr_exp):
    """ESPnet's Speech2Text(lm_train_config=..., lm_file=...) after register_kinds(): the fused LM holds
    the experiment's weights, and each N-best hypothesis's "lm" score is our model's log-probability
    of its tokens; the total is ESPnet's weighted sum with lm_weight 0.5."""
    from espnet2.bin.asr_inference import Speech2Text

    from slm_lm.espnet_lm.registry import register_kinds

    register_kinds()
    checkpoint, model = load_lm(asr_exp / "lm_clm")
    s2t = Speech2Text(asr_train_config=asr_exp / "asr" / "config.yaml", asr_model_file=asr_exp / "asr" / "model.pth",
                      lm_train_config=asr_exp / "lm_clm" / "config.yaml", lm_file=checkpoint,
                      lm_weight=0.5, ctc_weight=0.3, beam_size=3, nbest=3, maxlenratio=0.0, device="cpu")
    fused = s2t.beam_search.full_scorers["lm"]
    for name, value in model.state_dict().items():
        torch.testing.assert_close(fused.model.state_dict()[name], value)
    speech = torch.tensor(soundfile.read(asr_exp / "spk1-utt1.wav", dtype="float32")[0])
    maxlen = s2t.asr_model.encode(speech[None], torch.tensor([len(speech)]))[0].shape[1]
    results = s2t(speech)
    assert len(results) == 3
    for _, _, _, hyp in results:
        logprobs = token_logprobs(model, hyp.yseq)
        expected = logprobs.sum() if len(hyp.yseq) <= maxlen + 1 else logprobs[:-1].sum()
        assert float(hyp.scores["lm"]) == pytest.approx(float(expected), abs=1e-4)
        weighted = sum(float(hyp.scores[k]) * w for k, w in s2t.beam_search.weights.items() if k in hyp.scores)
        assert float(hyp.score) == pytest.approx(weighted, abs=1e-3)
        assert s2t.beam_search.weights["lm"] == 0.5


def test_asr_sh_flow_decode_then_rescore(asr_exp, tmp_path):
    """The README's commands on the tiny experiment: `python -m slm_lm.bin.asr_inference` (a fresh
    process: ESPnet's asr_inference + our kinds) decodes 3-best lists with the clm fused, and
    `slm-rescore` rescores them with the slm trained on the same (asr.sh) token list."""
    from slm_lm.bin.rescore import main as rescore

    checkpoint, _ = load_lm(asr_exp / "lm_clm")
    decode = tmp_path / "decode"
    subprocess.run([
        sys.executable, "-m", "slm_lm.bin.asr_inference", "--asr_train_config", str(asr_exp / "asr" / "config.yaml"),
        "--asr_model_file", str(asr_exp / "asr" / "model.pth"),
        "--lm_train_config", str(asr_exp / "lm_clm" / "config.yaml"), "--lm_file", str(checkpoint),
        "--lm_weight", "0.3", "--ctc_weight", "0.3", "--beam_size", "3", "--nbest", "3",
        "--data_path_and_name_and_type", f"{asr_exp / 'wav.scp'},speech,sound", "--output_dir", str(decode),
    ], check=True, cwd=tmp_path, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"})
    for k in (1, 2, 3):
        assert (decode / f"{k}best_recog" / "score").exists(), k
    ids = [line.split(maxsplit=1)[0] for line in (decode / "1best_recog" / "text").read_text().splitlines()]
    assert sorted(ids) == sorted(UTTERANCES)
    rescore(["--dev", str(decode), "--dev-ref", str(asr_exp / "text"), "--lm", str(asr_exp / "lm_slm"),
             "--nbest", "3", "--lambda-range", "0:1:0.5", "--no-progress", "--out", str(tmp_path / "rescore")])
    assert (tmp_path / "rescore" / "RESULTS.md").exists()


def test_asr_inference_refuses_bidirectional_and_foreign_token_list(asr_exp, tmp_path):
    from slm_lm.bin.asr_inference import main

    common = ["--asr_train_config", str(asr_exp / "asr" / "config.yaml"), "--asr_model_file",
              str(asr_exp / "asr" / "model.pth"), "--data_path_and_name_and_type",
              f"{asr_exp / 'wav.scp'},speech,sound", "--output_dir", str(tmp_path / "out")]
    slm_config = asr_exp / "lm_slm" / "config.yaml"
    with pytest.raises(SystemExit) as info:
        main([*common, "--lm_train_config", str(slm_config), "--lm_file", str(load_lm(asr_exp / "lm_slm")[0])])
    message = str(info.value)
    assert info.value.code == 2
    assert message.startswith(f"slm_lm.bin.asr_inference: error: {slm_config}: the slm_lm 'slm' LM is bidirectional")
    assert "N-best rescoring" in message and "\n" not in message

    config = yaml.safe_load((asr_exp / "lm_clm" / "config.yaml").read_text())
    config["token_list"] = [*config["token_list"][:-1], "<mask>", "<sos/eos>"]  # the recipe's layout
    foreign = tmp_path / "config.yaml"
    foreign.write_text(yaml.safe_dump(config))
    with pytest.raises(SystemExit) as info:
        main([*common, "--lm_train_config", str(foreign), "--lm_file", str(load_lm(asr_exp / "lm_clm")[0])])
    n = len(config["token_list"])
    assert info.value.code == 2 and str(info.value) == (
        f"slm_lm.bin.asr_inference: error: {foreign}: the LM's token list ({n} tokens) is not the ASR model's "
        f"({asr_exp / 'asr' / 'config.yaml'}, {n - 1} tokens) from index {n - 2} on; shallow fusion adds the "
        "scores of equal ids: train the LM with the ASR's --token_list")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("kind", ["clm", "slm"])
def test_lm_calc_perplexity_matches_scorer(asr_exp, tmp_path, kind):
    """ESPnet's perplexity tool through our wrapper equals exp(-sum of Scorer log-probs / tokens with
    </s>) on the two references, within 1e-4 relative."""
    from slm_lm.bin.lm_calc_perplexity import main
    from slm_lm.scoring.scorer import Scorer

    exp = asr_exp / f"lm_{kind}"
    checkpoint, _ = load_lm(exp)
    out = tmp_path / "ppl"
    main(["--train_config", str(exp / "config.yaml"), "--model_file", str(checkpoint),
          "--data_path_and_name_and_type", f"{asr_exp / 'text'},text,text", "--output_dir", str(out)])
    scorer = Scorer.from_pretrained(exp)
    sentences = list(UTTERANCES.values())
    n_tokens = sum(len(scorer.tokenizer.encode(s)) + 1 for s in sentences)
    expected = math.exp(-sum(scorer.score(sentences)) / n_tokens)
    assert float((out / "ppl").read_text()) == pytest.approx(expected, rel=1e-4)
    ntokens = dict(line.split() for line in (out / "utt2ntokens").read_text().splitlines())
    assert sum(int(v) for v in ntokens.values()) == n_tokens


def test_lm_calc_perplexity_explains_a_config_from_before_model_slm_lm(asr_exp, tmp_path):
    from slm_lm.bin.lm_calc_perplexity import main

    config = yaml.safe_load((asr_exp / "lm_slm" / "config.yaml").read_text())
    old = tmp_path / "config.yaml"
    old.write_text(yaml.safe_dump({**config, "model": "lm"}))
    with pytest.raises(SystemExit) as info:
        main(["--train_config", str(old), "--model_file", "x.pth", "--data_path_and_name_and_type",
              f"{asr_exp / 'text'},text,text", "--output_dir", str(tmp_path / "ppl")])
    assert info.value.code == 2 and str(info.value) == (
        f"slm_lm.bin.lm_calc_perplexity: error: {old}: an slm_lm slm LM with model 'lm' (trained before "
        "slm_lm registered its own model): set 'model: slm_lm' in this file")


def test_recipe_decoding_checks_the_fusion_lm(asr_exp, tmp_path):
    """The recipe's decode_nbest.py (./run.sh --fusion_lm KIND) refuses, before decoding: a
    bidirectional LM, and a decode config whose lm_weight is 0 (the LM would be ignored)."""
    sys.path.insert(0, str(REPO / "egs" / "librispeech_slm" / "local"))
    import decode_nbest

    from slm_lm.common.errors import InputError

    (tmp_path / "data").mkdir()
    for name in ("wav.scp", "text"):
        (tmp_path / "data" / name).write_text((asr_exp / name).read_text())
    conf = REPO / "egs" / "librispeech_slm" / "conf"
    common = ["--asr-config", str(asr_exp / "asr" / "config.yaml"), "--asr-model", str(asr_exp / "asr" / "model.pth"),
              "--data", str(tmp_path / "data"), "--out", str(tmp_path / "out")]
    slm_checkpoint, _ = load_lm(asr_exp / "lm_slm")
    with pytest.raises(InputError, match="'slm' LM is bidirectional"):
        decode_nbest.main([*common, "--decode-config", str(conf / "decode_asr_lm.yaml"),
                           "--lm-config", str(asr_exp / "lm_slm" / "config.yaml"), "--lm-file", str(slm_checkpoint)])
    clm_checkpoint, _ = load_lm(asr_exp / "lm_clm")
    with pytest.raises(InputError, match="decode_asr_beam10.yaml: lm_weight is 0"):
        decode_nbest.main([*common, "--decode-config", str(conf / "decode_asr_beam10.yaml"),
                           "--lm-config", str(asr_exp / "lm_clm" / "config.yaml"), "--lm-file", str(clm_checkpoint)])
    assert not (tmp_path / "out").exists()


def test_am_scores_recompute_the_beam_search_scores_of_stock_nbest(asr_exp, tmp_path):
    """`slm-am-scores` on N-best lists in asr.sh's layout with only the total `score` (as stock asr_inference
    writes them): each hypothesis's recomputed decoder and CTC log-likelihoods equal the scores ESPnet's
    beam search gave it within 1e-3 (hypotheses cut at maxlen, whose end of sentence the beam search does
    not score, left out), `slm-rescore`'s reader takes them for --am-weights, a second run leaves the files
    as they are, and an utterance missing from wav.scp is one error line."""
    from espnet2.bin.asr_inference import Speech2Text

    from slm_lm.bin.am_scores import main
    from slm_lm.rescoring.nbest import read_espnet_nbest
    from slm_lm.rescoring.scored_set import am_score

    s2t = Speech2Text(asr_train_config=asr_exp / "asr" / "config.yaml", asr_model_file=asr_exp / "asr" / "model.pth",
                      ctc_weight=0.3, beam_size=3, nbest=3, maxlenratio=0.0, device="cpu")
    decode = tmp_path / "decode_asr" / "test"
    expected, compared = {}, 0
    for uttid in sorted(UTTERANCES):
        speech = torch.tensor(soundfile.read(asr_exp / f"{uttid}.wav", dtype="float32")[0])
        maxlen = s2t.asr_model.encode(speech[None], torch.tensor([len(speech)]))[0].shape[1]
        for k, (text, token, token_int, hyp) in enumerate(s2t(speech), 1):
            rank_dir = decode / "logdir" / "output.1" / f"{k}best_recog"
            rank_dir.mkdir(parents=True, exist_ok=True)
            for name, value in (("text", text), ("token", " ".join(token)), ("token_int", " ".join(map(str, token_int))),
                                ("score", str(float(hyp.score)))):
                with open(rank_dir / name, "a") as f:
                    f.write(f"{uttid} {value}\n")
            if len(hyp.yseq) <= maxlen + 1:
                expected[uttid, k] = {name: float(hyp.scores[name]) for name in ("decoder", "ctc")}
                expected[uttid, k]["length_bonus"] = len(hyp.yseq) - 1
    assert len(expected) >= 2, expected
    wav_scp = asr_exp / "wav.scp"
    common = ["--asr-config", str(asr_exp / "asr" / "config.yaml"), "--asr-model", str(asr_exp / "asr" / "model.pth")]
    main([*common, "--wav-scp", str(wav_scp), str(decode)])
    nbest = read_espnet_nbest(decode)
    for (uttid, k), scores in expected.items():
        hyp = nbest[uttid][k - 1]
        for name, value in scores.items():
            assert hyp.scores[name] == pytest.approx(value, abs=1e-3), (uttid, k, name)
        compared += 1
        assert am_score(hyp, {"decoder": 0.7, "ctc": 0.3}) == pytest.approx(
            0.7 * scores["decoder"] + 0.3 * scores["ctc"], abs=1e-3)
    assert compared == len(expected)
    written = {p: p.stat().st_mtime_ns for p in decode.rglob("scores")}
    assert len(written) == 3
    again = subprocess.run(  # as the console script runs: exit 0, nothing on stderr
        [sys.executable, "-c", "import sys; sys.argv[0] = 'slm-am-scores'; from slm_lm.bin.am_scores import main; "
         "sys.exit(main())", *common, "--wav-scp", str(wav_scp), str(decode)], capture_output=True, text=True)
    assert again.returncode == 0 and not again.stderr.strip(), again.stderr
    assert again.stdout == "slm-am-scores: every <k>best_recog has its scores already\n"
    assert {p: p.stat().st_mtime_ns for p in decode.rglob("scores")} == written

    for p in written:
        p.unlink()
    partial = tmp_path / "wav.scp"
    partial.write_text(wav_scp.read_text().splitlines()[0] + "\n")
    with pytest.raises(SystemExit) as info:
        main([*common, "--wav-scp", str(partial), str(decode)])
    assert info.value.code == 2 and str(info.value) == (
        f"slm-am-scores: error: {partial}: no line for utterance 'spk1-utt2' (of {decode / 'logdir' / 'output.1'})")
    assert not list(decode.rglob("scores"))
