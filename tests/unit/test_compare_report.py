"""scripts/compare.py's pure parts: ratio table, targets, decode rate, in-process request timings."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))

from peers import report  # noqa: E402
from peers.inprocess import request_result  # noqa: E402

from trtserve.bench.workload import BenchRequest  # noqa: E402


def _pt(peer, workload, **stats):
    extra = stats.pop("extra", {})
    return {"peer": peer, "workload": workload, "precision": "float32", "stats": stats, "extra": extra}


POINTS = [
    _pt(
        "trtserve",
        "mixed",
        output_throughput=200.0,
        p99_ttft_ms=1000.0,
        completed=32,
        failed=0,
        server_metrics={"kv_cache_waste_at_peak": 0.03},  # trtserve's /metrics, as `trtserve bench` reports them
    ),
    _pt("hf-static-8", "mixed", output_throughput=25.0, p99_ttft_ms=40000.0, completed=32, failed=0),
    _pt("llama.cpp-f32", "mixed", output_throughput=80.0, p99_ttft_ms=800.0, completed=31, failed=1),
    _pt("trtserve", "decode", output_throughput=30.0, extra={"decode_tok_per_s": 45.0, "fraction_of_roofline": 0.9}),
    _pt("llama.cpp-f32", "decode", output_throughput=30.0, extra={"decode_tok_per_s": 40.0}),
    _pt("trtserve", "prefix-on", median_ttft_ms=50.0, extra={"identical_to_off": 1.0}),
    _pt("trtserve", "prefix-off", median_ttft_ms=400.0),
]


def test_ratio_handles_missing_and_zero():
    assert report.ratio(3.0, 2.0) == 1.5
    assert report.ratio(None, 2.0) is None
    assert report.ratio(3.0, None) is None
    assert report.ratio(3.0, 0.0) is None


def test_table_rows_ratio_to_trtserve_of_the_same_workload():
    rows = {(r["peer"], r["workload"]): r for r in report.table_rows(POINTS)}
    assert rows[("hf-static-8", "mixed")]["tput x trtserve"] == "0.12"  # 25 / 200 = 0.125, rounds half to even
    assert rows[("llama.cpp-f32", "mixed")]["tput x trtserve"] == "0.40"
    assert rows[("llama.cpp-f32", "mixed")]["TTFT p99 x trtserve"] == "0.80"
    assert rows[("llama.cpp-f32", "mixed")]["ok/failed"] == "31/1"
    assert rows[("trtserve", "mixed")]["tput x trtserve"] == "1.00"
    assert rows[("llama.cpp-f32", "decode")]["tput x trtserve"] == "1.00"
    assert rows[("trtserve", "prefix-on")]["out tok/s"] == "-"  # not measured -> dash, not zero


def test_table_rows_without_a_trtserve_point_have_no_ratio():
    rows = report.table_rows([_pt("hf-static-8", "mixed", output_throughput=25.0)])
    assert rows[0]["tput x trtserve"] == "-"


def test_targets_measured_values_and_verdicts():
    got = {t["target"]: t for t in report.targets(POINTS, "llama.cpp-f32")}
    assert got["batch-1 decode / bandwidth roofline"]["measured"] == 0.9
    assert got["batch-1 decode / bandwidth roofline"]["met"] is True
    assert got["batch-1 decode tok/s / llama.cpp-f32"]["measured"] == 1.125
    assert got["batch-1 decode tok/s / llama.cpp-f32"]["met"] is False  # bar 1.2
    assert got["mixed output tok/s / hf-static-8"]["measured"] == 8.0
    assert got["mixed output tok/s / hf-static-8"]["met"] is False  # bar 10
    assert got["mixed output tok/s / llama.cpp-f32"]["measured"] == 2.5
    ttft = got["mixed p99 TTFT / llama.cpp-f32's (lower is better)"]
    assert ttft["measured"] == 1.25 and ttft["met"] is False
    assert got["prefix p50 TTFT off / on"]["measured"] == 8.0
    assert got["prefix outputs identical on vs off (fraction)"]["met"] is True
    assert got["KV waste at peak (mixed)"]["met"] is True  # 0.03 < 0.04


def test_targets_of_a_mixture_of_experts_take_issue_47s_bars():
    got = {t["target"]: t for t in report.targets(POINTS, "llama.cpp-f32", report.MOE)}
    assert got["batch-1 decode / active-bytes roofline"]["bar"] == 0.6
    assert got["batch-1 decode tok/s / llama.cpp-f32"]["met"] is True  # 1.125: ahead is the bar
    assert got["mixed output tok/s / llama.cpp-f32"]["bar"] == 1.0
    assert "batch-1 decode / bandwidth roofline" not in got


def test_active_weight_bytes_leave_out_the_idle_experts_share(tmp_path):
    import torch
    from peers import roofline
    from safetensors.torch import save_file

    tensors = {
        "transformer.vocab_embedding.weight": torch.zeros(10, 4),  # one row read: left out (a head exists)
        "lm_head.weight": torch.zeros(10, 4),  # 160 bytes
        "transformer.layers.0.mlp.router.weight": torch.zeros(8, 4),  # 128 bytes, read whole
        "transformer.layers.0.mlp.experts.fc.weight": torch.zeros(8, 6, 4),  # 768 bytes, 2 of 8 experts read
    }
    save_file(tensors, str(tmp_path / "model.safetensors"))
    cfg = {"pretrained_config": {"moe": {"num_experts": 8, "top_k": 2}}}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert roofline.weight_bytes_per_token(tmp_path) == 160 + 128 + 768
    assert roofline.active_weight_bytes_per_token(tmp_path) == 160 + 128 + 768 // 4
    (tmp_path / "config.json").write_text(json.dumps({"pretrained_config": {"moe": None}}))
    assert roofline.active_weight_bytes_per_token(tmp_path) == 160 + 128 + 768  # dense: every byte


def test_targets_quant_rows_against_the_engine_dtype_and_llamacpp():
    points = [
        _pt("trtserve", "decode", extra={"decode_tok_per_s": 10.0}),
        _pt("trtserve-w8a16", "decode", extra={"decode_tok_per_s": 17.0}),
        _pt("trtserve-w4a16", "decode", extra={"decode_tok_per_s": 20.0}),
        _pt("llama.cpp-q8_0", "decode", extra={"decode_tok_per_s": 20.0}),
    ]
    got = {t["target"]: t for t in report.targets(points, None)}
    assert got["batch-1 decode tok/s, w8a16 / float32"] == {
        "target": "batch-1 decode tok/s, w8a16 / float32",
        "measured": 1.7,
        "bar": 1.6,
        "met": True,
    }
    assert got["batch-1 decode tok/s, w4a16 / float32"]["met"] is False  # 2.0 against 2.2
    assert got["batch-1 decode tok/s, w8a16 / llama.cpp-q8_0"]["measured"] == 0.85
    assert not any("q4_0" in name for name in got)  # llama.cpp q4_0 did not run: no row


def test_targets_without_llamacpp_or_measurements_say_not_measured():
    got = report.targets([POINTS[1]], None)
    assert not any("llama.cpp" in t["target"] for t in got)
    assert all(t["measured"] is None and t["met"] is None for t in got)


def test_decode_tok_per_s_leaves_out_the_first_token_and_takes_the_median():
    assert report.decode_tok_per_s([(5, 0.1, 0.5)]) == pytest.approx(10.0)  # 4 tokens in 0.4 s
    assert report.decode_tok_per_s([(3, 0.0, 1.0), (5, 0.0, 1.0)]) == pytest.approx(3.0)  # median of 2 and 4
    assert report.decode_tok_per_s([(1, 0.1, 0.2)]) is None


def test_curve_takes_mixed_points_sorted_by_throughput():
    pts = [
        _pt("trtserve", "mixed@1", output_throughput=50.0, median_ttft_ms=100.0, p99_e2el_ms=900.0),
        _pt("trtserve", "mixed", output_throughput=200.0, median_ttft_ms=900.0, p99_e2el_ms=5000.0),
        _pt("trtserve", "decode", output_throughput=30.0, median_ttft_ms=10.0),
        _pt("llama.cpp-f32", "mixed", output_throughput=80.0, median_ttft_ms=1.0),
    ]
    assert report.curve(pts, "trtserve") == [(50.0, 100.0, 900.0), (200.0, 900.0, 5000.0)]


def test_save_json_and_chart(tmp_path):
    report.save_json(tmp_path / "c.json", {"threads": 2}, POINTS, report.targets(POINTS, None))
    data = json.loads((tmp_path / "c.json").read_text())
    assert data["conditions"]["threads"] == 2 and len(data["points"]) == len(POINTS)
    pytest.importorskip("matplotlib")
    pts = POINTS + [_pt("trtserve", "mixed@1", output_throughput=50.0, median_ttft_ms=100.0, p99_e2el_ms=900.0)]
    for p in pts:
        p["stats"].setdefault("median_ttft_ms", 10.0)
    assert report.save_chart(tmp_path / "c.png", pts, "t")
    assert (tmp_path / "c.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_request_result_from_token_times():
    req = BenchRequest(prompt=[11, 12, 13], prompt_len=3, output_len=3)
    # the batch produced 5 tokens (a longer neighbour); this request's are the first 3, its response at 10.0
    res = request_result(req, t0=1.0, token_times=[2.0, 2.5, 3.5, 4.0, 4.5], done=10.0)
    assert res.success and res.output_tokens == 3
    assert res.ttft == 1.0
    assert res.itl == [0.5, 1.0]
    assert res.latency == 9.0
    missing = request_result(req, t0=1.0, token_times=[], done=2.0)
    assert not missing.success and missing.error


@pytest.mark.parametrize(
    ("cap", "build", "has", "lacks"),
    [
        ("avx2", "llama-build-avx2", "-DGGML_AVX2=ON", "-DGGML_AVX512=ON"),
        ("avx512", "llama-build-avx512", "-DGGML_AVX512_BF16=ON", "-DGGML_NATIVE=ON"),
        ("scalar", "llama-build-scalar", "-DGGML_AVX2=OFF", "-DGGML_AVX2=ON"),
    ],
)
def test_llamacpp_is_built_for_the_cpu_kind_an_isa_cap_stands_for(monkeypatch, tmp_path, cap, build, has, lacks):
    """Under a TRTSERVE_ISA cap llama.cpp's server comes from its own build dir, with the flags that CPU kind's
    native build would have: trtserve's AVX2 path is compared with an AVX2 llama.cpp, not this CPU's."""
    from peers import llamacpp

    from trtserve.kernels import isa, native

    monkeypatch.setattr(native, "isa_cap", native.isa_cap.__wrapped__)  # uncached, to read each setting
    monkeypatch.setattr(native, "hardware_flags", lambda: isa.NEEDS["amx"])  # any cap applies as asked
    monkeypatch.setenv(isa.VAR, cap)
    name, flags = llamacpp.isa_build()
    assert name == build and has in flags and lacks not in flags
    assert llamacpp.server_binary(tmp_path) == tmp_path / build / "bin" / "llama-server"
    monkeypatch.delenv(isa.VAR)
    assert llamacpp.isa_build() == ("llama-build", ("-DGGML_NATIVE=ON",))
