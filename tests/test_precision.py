"""`--dtype auto`: bf16 where the device computes it natively (CPU flags amx_bf16 / avx512_bf16), else float32."""
import json

import pytest
import torch

from slm_lm import build_lm
from slm_lm.model import precision
from slm_lm.model.bpe import train_bpe
from slm_lm.scoring.scorer import Scorer

NATIVE, AVX2_ONLY = frozenset({"avx512f", "amx_bf16", "amx_tile"}), frozenset({"avx2", "fma"})


def test_cpu_flags_reads_the_flags_line_of_cpuinfo(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: X\nflags\t\t: fpu avx2 avx512_bf16\n\nprocessor\t: 1\n"
                       "flags\t\t: fpu\n")
    assert precision.cpu_flags(str(cpuinfo)) == {"fpu", "avx2", "avx512_bf16"}
    assert precision.cpu_flags(str(tmp_path / "missing")) == frozenset()


@pytest.mark.parametrize("flags, expected", [(NATIVE, "bfloat16"), (frozenset({"avx512_bf16"}), "bfloat16"),
                                             (AVX2_ONLY, "float32"), (frozenset(), "float32")])
def test_auto_is_bfloat16_only_on_cpus_that_compute_it_natively(monkeypatch, flags, expected):
    monkeypatch.setattr(precision, "cpu_flags", lambda: flags)
    assert precision.resolve_dtype("auto", "cpu") == expected
    for name in ("float32", "bfloat16", "float16"):
        assert precision.resolve_dtype(name, "cpu") == name
    with pytest.raises(ValueError, match="int8"):
        precision.resolve_dtype("int8", "cpu")


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    d = tmp_path_factory.mktemp("precision")
    (d / "text.txt").write_text("AND GOD SAID LET THERE BE LIGHT\nAND THERE WAS LIGHT\nTHE DEEP WATERS\n" * 30)
    return train_bpe(d / "text.txt", d / "bpe", vocab_size=40)


@pytest.mark.parametrize("flags, expected", [(NATIVE, "bfloat16"), (AVX2_ONLY, "float32")])
def test_a_scorer_with_dtype_auto_scores_in_the_resolved_dtype(monkeypatch, tokenizer, flags, expected):
    monkeypatch.setattr(precision, "cpu_flags", lambda: flags)
    torch.manual_seed(0)
    model = build_lm("slm", tokenizer.vocab_size, size="tiny", max_positions=32)
    seen = []
    model.head.register_forward_hook(lambda module, args, output: seen.append(output.dtype))
    scorer = Scorer(model, tokenizer, dtype="auto")
    assert scorer.dtype == expected and scorer.name == Scorer(model, tokenizer, dtype=expected).name  # cache key
    auto = scorer.score(["AND GOD SAID LET THERE BE LIGHT", "THE DEEP"])
    assert seen == [getattr(torch, expected)]
    reference = Scorer(model, tokenizer, dtype="float32").score(["AND GOD SAID LET THERE BE LIGHT", "THE DEEP"])
    assert auto == pytest.approx(reference, abs=0.5)
    assert (auto == reference) == (expected == "float32")


@pytest.mark.parametrize("flags, expected", [(NATIVE, torch.bfloat16), (AVX2_ONLY, torch.float32)])
def test_espnet_model_conf_autocast_auto(monkeypatch, flags, expected):
    from slm_lm.espnet_lm.espnet_model import SlmESPnetLanguageModel
    from slm_lm.espnet_lm.lm import SlidingLMForESPnet

    monkeypatch.setattr(precision, "cpu_flags", lambda: flags)
    torch.manual_seed(0)
    model = SlmESPnetLanguageModel(SlidingLMForESPnet(20, size="tiny"), 20, autocast="auto")
    seen = []
    model.lm.model.head.register_forward_hook(lambda module, args, output: seen.append(output.dtype))
    loss, _, _ = model(torch.tensor([[5, 6, 7], [8, 9, 0]]), torch.tensor([3, 2]))
    assert seen == [expected] and loss.dtype == torch.float32 and torch.isfinite(loss)


def test_slm_pretrain_dtype_auto_records_the_resolved_dtype(monkeypatch, tmp_path):
    from slm_lm.bin import pretrain as pretrain_cli

    monkeypatch.setattr(precision, "cpu_flags", lambda: NATIVE)
    text = tmp_path / "text.txt"
    text.write_text("AND GOD SAID LET THERE BE LIGHT\nAND THERE WAS LIGHT\nTHE DEEP WATERS\n" * 30)
    train_bpe(text, tmp_path / "data", vocab_size=40)
    for name in ("train", "valid"):
        pretrain_cli.main(["encode", "--bpe-dir", str(tmp_path / "data"), "--text", str(text),
                           "--out", str(tmp_path / "data" / f"{name}.ids.xz")])
    pretrain_cli.main(["train", "--kind", "clm", "--data", str(tmp_path / "data"), "--out", str(tmp_path / "run"),
                       "--minutes", "0.02", "--dtype", "auto", "--n-layers", "1", "--d-model", "32", "--n-heads", "2",
                       "--d-ff", "64", "--max-positions", "32", "--batch-tokens", "128", "--threads", "1"])
    card = json.loads((tmp_path / "run" / "model" / "training.json").read_text())
    assert card["dtype"] == "bfloat16" and card["updates"] > 0


@pytest.mark.parametrize("kind", ["slm", "clm", "tta", "bilm"])
def test_cpu_attention_runs_in_float32_under_bf16_autocast(monkeypatch, kind):
    """bf16 autocast on CPU: the matmuls (here the head's) run in bf16, the attention in float32 (its bf16
    CPU backward is ~8x slower than fp32's); gradients reach every parameter."""
    import torch.nn.functional as F

    real, seen = F.scaled_dot_product_attention, []

    def spy(q, k, v, **options):
        seen.append((q.dtype, k.dtype, v.dtype))
        return real(q, k, v, **options)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    torch.manual_seed(0)
    model = build_lm(kind, 30, size="tiny", max_positions=16)
    heads = []
    model.head.register_forward_hook(lambda module, args, output: heads.append(output.dtype))
    tokens, lengths = torch.tensor([[29, 5, 6, 7, 29], [29, 8, 29, 0, 0]]), torch.tensor([5, 3])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss, n = model.loss(tokens, lengths)
    (loss / n).backward()
    assert seen and set(seen) == {(torch.float32,) * 3} and heads == [torch.bfloat16]
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters() if p.requires_grad)
    seen.clear()
    model.loss(tokens, lengths)
    assert seen and set(seen) == {(torch.float32,) * 3}  # float32 without autocast, as before
