"""benchmarks/nvfp4.py's data (data/nvfp4/bridge-performance.yaml: Megatron-Bridge 26.04.01's Llama rows on
GB300/GB200) loads as printed and every row replays with its own layout and precision. The errors
themselves are reported by the benchmark and docs/cost-models.md, not asserted."""
import math
import re
from pathlib import Path

import pytest
from pytest import approx

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench(bench_module):
    return bench_module("nvfp4")


@pytest.fixture(scope="module")
def rows(bench):
    return bench.load_rows()


def test_rows_match_their_printed_table_line(rows):
    # 2 models x 2 systems x 3 precisions; each row's fields are the cells of the line it quotes
    assert len(rows) == 12 and sum(r["precision"] == "NVFP4" for r in rows) == 4
    for r in rows:
        cells = [c.strip() for c in r["printed"].strip("|").split("|")]
        assert cells[0] == r["system"] and cells[2] == r["precision"], r["printed"]
        numbers = [None if c == "n/a" else int(c) for c in cells[3:]]
        fields = [r[k] for k in ("gbs", "mbs", "seq_len", "fsdp", "tp", "pp", "cp", "vp", "ep",
                                 "tokens_per_s_per_gpu", "model_tflops_per_gpu")]
        assert [int(cells[1])] + numbers == [r["gpus"]] + fields, r["printed"]
        assert r["gpus"] % (r["tp"] * r["pp"] * r["cp"]) == 0


def test_flops_per_token_agree_within_a_model(rows):
    # Model TFLOP/s over tokens/s is the FLOPs of a token, the same for every row of one model and sequence
    # length: 70B 3253e12 / 7296 = 445.9 GFLOP, 2348e12 / 5248 = 447.4; 405B 3653e12 / 1440 = 2,537 GFLOP.
    # The tokens/s column is printed in steps of 32 (every 405B value is a multiple of 32, every 70B one of 64):
    # +-16 / 800 = 2 % either way, so two rows may differ by up to ~4 %; a mistyped cell moves it by far more.
    for model in ("llama3-70b", "llama3.1-405b"):
        per_token = [r["model_tflops_per_gpu"] / r["tokens_per_s_per_gpu"] for r in rows if r["model"] == model]
        assert max(per_token) / min(per_token) < 1.04, (model, per_token)
    assert 3253e12 / 7296 == approx(445.9e9, rel=1e-3)


def test_every_row_replays_with_its_layout_and_precision(bench, rows):
    for r in rows:
        e = bench.replay(r)
        assert math.isfinite(e.model_tflops_per_gpu) and e.model_tflops_per_gpu > 0, r["printed"]
        lay = e.layout
        assert (lay["tp"], lay["pp"], lay["cp"], lay["vpp"], lay["micro_batch"]) == (
            r["tp"], r["pp"], r["cp"], r["vp"] or 1, r["mbs"]), r["printed"]
        assert lay["dp"] == r["gpus"] // (r["tp"] * r["pp"] * r["cp"])
        assert lay["zero"] == (3 if r["fsdp"] else 1)
        # mfu is against the BF16 peak (2,450 on both GPUs), mfu_fp8_peak against the peak the GEMMs run
        # at: NVFP4 14,700 (GB300) / 9,800 (GB200), FP8 and MXFP8 4,900 on both
        low = {"NVFP4": 14700 if "GB300" in r["system"] else 9800}.get(r["precision"], 4900)
        assert e.mfu / e.mfu_fp8_peak == approx(low / 2450, rel=1e-9), r["printed"]


def test_each_nvfp4_row_has_a_same_layout_partner(bench, rows):
    # the ratio the diagnosis fits needs an FP8 or MXFP8 row with the NVFP4 row's exact layout
    for r in (q for q in rows if q["precision"] == "NVFP4"):
        p = bench.partner(rows, r)
        assert p["precision"] in ("FP8", "MXFP8") and (p["tp"], p["pp"], p["cp"], p["vp"]) == (
            r["tp"], r["pp"], r["cp"], r["vp"])


def test_source_is_pinned(bench):
    import yaml
    src = yaml.safe_load(bench.DATA.read_text())["source"]
    assert re.fullmatch(r"[0-9a-f]{40}", src["commit"]) and src["commit"] in src["url"]
