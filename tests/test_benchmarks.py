"""The benchmark scripts run and print their tables (a smoke test; timings are not checked)."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_scoring_benchmark_prints_latency_table_and_ratios(tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "local" / "bench_scoring.py"), "--sizes", "tiny", "--lengths", "4,8",
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
    again = subprocess.run([sys.executable, str(ROOT / "local" / "bench_scoring.py"), "--from-json", str(out)],
                           capture_output=True, text=True, check=True, timeout=120)
    assert again.stdout.strip() == proc.stdout.strip()  # the saved run prints the same tables
