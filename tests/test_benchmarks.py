"""The benchmark scripts run and print their tables (a smoke test; timings are not checked)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import MIRROR

BENCHMARKS = Path(__file__).resolve().parents[1] / "local" / "benchmarks"


def test_scoring_benchmark_prints_latency_table_and_ratios(tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, str(BENCHMARKS / "bench_scoring.py"), "--sizes", "tiny", "--lengths", "4,8",
         "--repeats", "1", "--threads", "1", "--vocab", "50", "--mlm-sample-chunks", "1",
         "--mlm-max-tokens", "20", "--json", str(out)],
        capture_output=True, text=True, check=True, timeout=300,
    )
    assert "| tiny | slm |" in proc.stdout and "| tiny | bilm |" in proc.stdout and "| tiny | tta |" in proc.stdout
    assert "MLM/SLM" in proc.stdout and "Throughput" in proc.stdout
    rows = json.loads(out.read_text())["results"]
    assert len(rows) == 5 * 2 * 2  # kinds x lengths x modes
    # TTA's cost per sentence relative to SLM and CLM, printed from the measured times
    get = {(r["kind"], r["n"], r["mode"]): r["seconds"] / r["batch"] for r in rows}
    ratio_rows = [line.split("|")[1:-1] for line in proc.stdout.splitlines() if line.startswith("| tiny | throughput |")]
    assert len(ratio_rows) == 2
    for cells in ratio_rows:
        n = int(cells[2])
        tta_slm, tta_clm = float(cells[6]), float(cells[7])
        assert tta_slm == pytest.approx(get[("tta", n, "throughput")] / get[("slm", n, "throughput")], abs=0.0051)
        assert tta_clm == pytest.approx(get[("tta", n, "throughput")] / get[("clm", n, "throughput")], abs=0.0051)
    # n=8 with a 20-token chunk budget needs several PLL chunks: only one is timed, the cell is marked
    assert any(not r["exact"] for r in rows if r["kind"] == "mlm")
    assert all(r["exact"] for r in rows if r["kind"] != "mlm")
    again = subprocess.run([sys.executable, str(BENCHMARKS / "bench_scoring.py"), "--from-json", str(out)],
                           capture_output=True, text=True, check=True, timeout=120)
    assert again.stdout.strip() == proc.stdout.strip()  # the saved run prints the same tables


@pytest.mark.parametrize("dtype, kinds", [("float32", ["slm", "clm"]), ("bfloat16", ["clm"])])
def test_real_path_benchmark_prints_ratio_table(tmp_path, dtype, kinds):
    """bench_train_real.py on a tiny model and one shared book: for each kind, the bare step, the bare step
    on the real batches and ESPnet's trainer (slm-lm-train's path) are timed; the printed real/bare ratios
    and MFU follow from the printed tokens/s and the matmul peaks (bf16's too with --dtype bfloat16),
    real batches hold about --tokens real tokens and carry padding (mixed lengths), and ESPnet's reporter
    breakdown is printed. bf16 runs for correctness only (this CPU may lack fast bf16)."""
    out = tmp_path / "real.json"
    proc = subprocess.run(
        [sys.executable, str(BENCHMARKS / "bench_train_real.py"), "--kinds", ",".join(kinds), "--size", "tiny",
         "--tokens", "256", "--length", "16", "--epochs", "1", "--iters", "2", "--books", "1", "--threads", "1",
         "--matmul-size", "64", "--dtype", dtype, "--work-dir", str(tmp_path / "work"), "--json", str(out)],
        capture_output=True, text=True, check=True, timeout=300, env=dict(os.environ, SLM_LM_DATA=str(MIRROR)),
    )
    result = json.loads(out.read_text())
    peaks = result["matmul_peaks_tflops"]
    assert list(peaks) == (["fp32", "bf16"] if dtype == "bfloat16" else ["fp32"]) and min(peaks.values()) > 0
    paths = ("bare", "bare, real batches", "real")
    table = [line.split("|")[1:-1] for line in proc.stdout.splitlines() if line.startswith("| ")]
    assert [(c[0].strip(), c[1].strip()) for c in table[1 : 1 + 3 * len(kinds)]] == [
        (kind, path) for kind in kinds for path in paths]
    for kind in kinds:
        rows = {r["path"]: r for r in result["rows"] if r["kind"] == kind}
        printed = {c[1].strip(): c for c in table[1 : 1 + 3 * len(kinds)] if c[0].strip() == kind}
        for path, row in rows.items():
            ratio = row["tokens_per_s"] / rows["bare"]["tokens_per_s"]
            assert float(printed[path][6]) == pytest.approx(ratio, abs=0.0051)
            assert float(printed[path][5]) == pytest.approx(row["tokens_per_s"], abs=0.51)
            for column, peak in enumerate(peaks.values(), start=8):
                mfu = 6 * row["params_m"] * 1e6 * row["tokens_per_s"] / 1e12 / peak
                assert float(printed[path][column].strip(" %")) == pytest.approx(100 * mfu, rel=0.01, abs=0.051)
        assert rows["bare"]["pad"] == 0 and rows["real"]["pad"] > 0  # real sentences differ in length
        assert rows["real"]["tokens_per_batch"] == pytest.approx(256, rel=0.2)
        assert rows["real"]["tokens_per_batch"] == rows["bare, real batches"]["tokens_per_batch"]
    breakdown = [line for line in proc.stdout.splitlines() if line.startswith(tuple(f"| {k} | 0." for k in kinds))]
    assert len(breakdown) == len(kinds), proc.stdout
    assert "load average" in proc.stdout


def test_train_speed_benchmark_interleaves_dtypes_and_prints_the_speedup(tmp_path):
    """bench_train_speed.py --dtype float32,bfloat16: every kind in both dtypes in one run; "vs float32" is
    the printed tokens/s over the same kind's float32 tokens/s, MFU is against each dtype's own matmul peak."""
    out = tmp_path / "speed.json"
    proc = subprocess.run(
        [sys.executable, str(BENCHMARKS / "bench_train_speed.py"), "--kinds", "slm,clm", "--size", "tiny",
         "--tokens", "128", "--length", "16", "--steps", "1", "--threads", "1", "--matmul-size", "32",
         "--dtype", "float32,bfloat16", "--json", str(out)],
        capture_output=True, text=True, check=True, timeout=300,
    )
    saved = json.loads(out.read_text())
    peaks = saved["matmul_peaks_tflops"]
    assert list(peaks) == ["float32", "bfloat16"] and saved["matmul_peak_tflops"] == peaks["float32"]
    table = [[c.strip() for c in line.split("|")[1:-1]] for line in proc.stdout.splitlines() if line.startswith("| ")]
    assert table[0][1] == "dtype" and table[0][-1] == "vs float32"
    rows = {(c[0], c[1]): c for c in table[1:]}
    assert list(rows) == [(k, d) for k in ("slm", "clm") for d in ("float32", "bfloat16")]
    params = {r["kind"]: r["params_m"] for r in saved["results"]}
    for (kind, dtype), cells in rows.items():
        ratio = float(cells[4]) / float(rows[kind, "float32"][4])
        assert float(cells[-1]) == pytest.approx(ratio, abs=0.011)
        mfu = 6 * params[kind] * 1e6 * float(cells[4]) / 1e12 / peaks[dtype]
        assert float(cells[7].strip(" %")) == pytest.approx(100 * mfu, rel=0.05, abs=0.1)
    for bad in ("float16", "float32,float32"):
        proc = subprocess.run([sys.executable, str(BENCHMARKS / "bench_train_speed.py"), "--dtype", bad],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2 and "--dtype" in proc.stderr


def test_attention_benchmark_compares_sdpa_and_flex_scores_on_cpu(tmp_path):
    """bench_attention.py on CPU: both attentions score the same padded batch (equal scores), their timings
    are in the table and the JSON, and training is said to be unmeasured (no FlexAttention backward on CPU)."""
    out = tmp_path / "attention.json"
    proc = subprocess.run(
        [sys.executable, str(BENCHMARKS / "bench_attention.py"), "--size", "tiny", "--rows", "6", "--length", "12",
         "--repeats", "1", "--threads", "1", "--json", str(out)],
        capture_output=True, text=True, check=True, timeout=300,
    )
    saved = json.loads(out.read_text())
    assert saved["scoring"]["max_abs_diff_nats"] < 1e-5 and 6 * 3 <= saved["scoring"]["tokens"] <= 6 * 12
    rows = [[c.strip() for c in line.split("|")[1:-1]] for line in proc.stdout.splitlines() if line.startswith("| s")]
    assert [r[:2] for r in rows] == [["scoring", "sdpa"], ["scoring", "flex"]]
    assert float(rows[1][3]) == pytest.approx(saved["scoring"]["flex"]["median_s"], abs=1e-4)
    assert saved["training"].startswith("not measured") and "training: not measured" in proc.stdout


def test_profile_train_step_prints_the_pass_time_and_top_operators(tmp_path):
    from slm_lm.bin import pretrain as pretrain_cli
    from slm_lm.model.bpe import train_bpe

    text = tmp_path / "text.txt"
    text.write_text("AND GOD SAID LET THERE BE LIGHT\nAND THERE WAS LIGHT\nTHE DEEP WATERS OF THE EARTH\n" * 20)
    train_bpe(text, tmp_path / "bpe", vocab_size=40)
    pretrain_cli.main(["encode", "--bpe-dir", str(tmp_path / "bpe"), "--text", str(text),
                       "--out", str(tmp_path / "c.ids.xz")])
    proc = subprocess.run(
        [sys.executable, str(BENCHMARKS / "profile_train_step.py"), "--corpus", str(tmp_path / "c.ids.xz"),
         "--kind", "slm", "--dtype", "bfloat16", "--vocab", "43", "--n-layers", "1", "--d-model", "32",
         "--n-heads", "2", "--d-ff", "64", "--batch-tokens", "64", "--row-tokens", "32", "--batches", "3",
         "--top", "5"],
        capture_output=True, text=True, check=True, timeout=300,
    )
    assert "slm, bfloat16" in proc.stdout and "3 batches of rows of 32 tokens, 64 a batch" in proc.stdout
    assert "Self CPU" in proc.stdout and "aten::" in proc.stdout


def test_hook_startup_benchmark_installs_and_reports():
    """bench_hook_startup.py installs this checkout into a fresh environment and prints the hook's import
    time and the start-up wall times (no figure is checked: it is a measurement, not a test of speed)."""
    result = subprocess.run([sys.executable, str(BENCHMARKS / "bench_hook_startup.py"), "--runs", "2"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    assert lines[1].startswith("hook import (-X importtime, cumulative): median ") and lines[2].startswith(
        "wall time: median "), result.stdout


def test_command_start_benchmark_reports_each_call_and_whether_it_imported_torch():
    """bench_command_start.py times the calls of this checkout (and of --repo, here the same one) and says which
    imported torch: none of its calls do (an N-best set that does not exist is reported before any model)."""
    repo = BENCHMARKS.parents[1]
    result = subprocess.run([sys.executable, str(BENCHMARKS / "bench_command_start.py"), "--runs", "1",
                             "--repo", str(repo)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    rows = [line.split(" | ") for line in result.stdout.splitlines() if line.startswith("| slm-")]
    assert [row[0] for row in rows] == ["| slm-rescore --help", "| slm-score --help", "| slm-rescore-mt --help",
                                        "| slm-pretrain --help", "| slm-rescore, missing N-best set"], result.stdout
    for row in rows:
        assert float(row[1]) > 0 and row[3] == "no" and row[6].startswith("no"), row
    assert [row[2] for row in rows] == ["0", "0", "0", "0", "2"]


def test_window_shape_trains_twenty_tokens_a_parameter_unless_the_corpus_binds(tmp_path):
    """window_shape.py: from a measured rate R (model FLOP/s) a window of M minutes trains N = sqrt(R 60 M / 120)
    parameters on 20 N tokens; a corpus too small for that makes the model larger, at its 4 passes; the padded
    step is not what slm-pretrain runs and is not read."""
    rows = [dict(kind="clm", path="padded", params=12_900_000, model_tflops=900.0),
            dict(kind="clm", path="compiled", params=12_900_000, model_tflops=60.0)]
    speed = tmp_path / "step.json"
    speed.write_text(json.dumps({"results": rows, "corpus_tokens": 60_000_000}))

    def window(*extra):
        proc = subprocess.run([sys.executable, str(BENCHMARKS / "window_shape.py"), "--speed", str(speed), *extra],
                              capture_output=True, text=True, timeout=120)
        return proc, [[c.strip() for c in line.split("|")[1:-1]] for line in proc.stdout.splitlines()[3:]]

    proc, table = window("--minutes", "3")  # the corpus of the measured run: 60M tokens
    wanted = (60e12 * 180 / 120) ** 0.5  # 9.5M parameters on 190M tokens: under 4 passes
    assert proc.returncode == 0 and table[0][:5] == ["clm", "12.9M, compiled", "60", f"{wanted / 1e6:.3g}M",
                                                     "tokens per parameter"], proc.stdout + proc.stderr
    layers, d = (int(x) for x in table[0][5].split(" x "))
    assert d == 64 * layers and 0.5 < float(table[0][6].rstrip("M")) * 1e6 / wanted < 2
    _, table = window("--minutes", "3", "--corpus-tokens", "30000000")  # 190M tokens would be 6 passes
    assert table[0][3:5] == [f"{60e12 * 180 / (6 * 4 * 30e6) / 1e6:.3g}M", "4 passes over the corpus"]
    speed.write_text("{}")
    proc, _ = window("--minutes", "3")
    assert proc.returncode == 2 and proc.stderr.strip() == (f"window_shape: error: {speed}: not the JSON of "
                                                            "bench_pretrain_step.py: 'results'")
