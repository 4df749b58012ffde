"""Side by side: trtserve vs HF transformers (static batches, continuous batching) vs llama.cpp's server.

    .venv/bin/python scripts/compare.py [--model smollm2|tinyllama|shape:FAMILY[@N]|HF_DIR|FILE.gguf] [--quick]
        [--peers trtserve,hf-static,hf-continuous,llama.cpp] [--workloads decode,mixed,prefix,sweep]

The same requests (token ids; fixed output lengths via ignore_eos; greedy), the same weights, the same
thread count and OpenMP wait policy, one run. Workloads (issue 6):
  decode   batch-1 decode tok/s of each peer next to the bandwidth roofline measured in this run (for a
           mixture of experts, over the active bytes a token reads: issue 47's targets then)
  mixed    prompts 32-512, outputs 16-256 tokens, all sent at once, at most 32 in flight
  sweep    the mixed workload again at a few Poisson request rates (for the latency-throughput chart)
  prefix   K shared prefixes x M short questions, trtserve with prefix caching on vs off
shape:FAMILY is a random checkpoint shaped like the family's smallest real model (peers/shapes.py);
shape:FAMILY@N keeps only its first N layers (widths, vocabulary and per-layer pattern as the real model's),
so a 3-8 GB family runs in minutes, e.g. `--model shape:smollm3@4 --peers trtserve,llama.cpp --workloads
decode --quick --no-build-llama`; the report names the real model and "N of M layers".
Writes table.txt, compare.json and compare.png to --out (default bench-results/compare-MODEL-TIME/).
llama.cpp is built from the llama-cpp-python sdist into --cache on first use (several minutes) and
skipped with a message when it cannot be built; nothing of it is committed.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from trtserve.engine.options import KV_CACHE_DTYPES  # no torch: the ISA caps still apply

ROOT = Path(__file__).resolve().parents[1]
PEERS = ("trtserve", "hf-static", "hf-continuous", "llama.cpp")
WORKLOADS = ("decode", "mixed", "sweep", "prefix")


def _length(text: str) -> int | tuple[int, int]:
    lo, _, hi = text.partition(":")
    return (int(lo), int(hi)) if hi else int(lo)


def _csv(choices):
    def parse(text: str) -> list[str]:
        items = [t for t in text.split(",") if t]
        if bad := [t for t in items if t not in choices]:
            raise argparse.ArgumentTypeError(f"unknown {', '.join(bad)}; choose from {', '.join(choices)}")
        return items

    return parse


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--model",
        default="smollm2",
        help="smollm2 | tinyllama | shape:FAMILY[@N] (random, shaped like the family's smallest real model: "
        "peers/shapes.py; @N: only its first N layers) | an HF checkpoint dir | a GGUF file [smollm2]",
    )
    ap.add_argument("--hf-dir", type=Path, help="TinyLlama-shaped HF dir [/tmp/tl-src, else made in --cache]")
    ap.add_argument(
        "--dtype",
        choices=("auto", "float32", "bfloat16", "float16"),
        default="auto",
        help="precision of every peer [float32 for smollm2, bfloat16 for tinyllama]",
    )
    ap.add_argument("--peers", type=_csv(PEERS), default=list(PEERS))
    ap.add_argument("--workloads", type=_csv(WORKLOADS), default=list(WORKLOADS))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument(
        "--omp-wait-policy",
        choices=("passive", "active", "unset"),
        default="unset",
        help="OMP_WAIT_POLICY for every peer [unset: each runtime's default, as deployed; passive makes "
        "every OpenMP region wait on a futex wake (~80 us here), which costs per-op engines (torch, HF) "
        "far more than llama.cpp's one region per graph]",
    )
    ap.add_argument("--num-requests", type=int, default=32)
    ap.add_argument("--input-len", type=_length, default=(32, 512), help="N or LO:HI [32:512]")
    ap.add_argument("--output-len", type=_length, default=(16, 256), help="N or LO:HI [16:256]")
    ap.add_argument("--concurrency", type=int, default=32, help="requests in flight (and llama.cpp slots) [32]")
    ap.add_argument("--hf-batch-sizes", default="8,32")
    ap.add_argument("--decode-requests", type=int, default=3)
    ap.add_argument("--decode-len", type=_length, default=(128, 128), help="PROMPT:OUTPUT of batch-1 decode")
    ap.add_argument("--rates", default="0.5,1", help="request rates (req/s) of the sweep [0.5,1]")
    ap.add_argument("--prefixes", type=int, default=4, help="shared prefixes K [4]")
    ap.add_argument("--questions", type=int, default=8, help="questions per prefix M [8]")
    ap.add_argument("--prefix-len", type=int, default=448)
    ap.add_argument("--prefix-concurrency", type=int, default=4)
    ap.add_argument(
        "--llama-types", default="", help="extra GGUF types besides the matching one, e.g. q8_0,q4_0 (decode, mixed)"
    )
    ap.add_argument(
        "--trt-quants",
        default="",
        help="trtserve engines of these --quant formats too, e.g. w8a16,w4a16 (batch-1 decode only); "
        "w4a16+int8act: the w4a16 engine served with int8_activations",
    )
    ap.add_argument("--no-build-llama", action="store_true", help="use llama.cpp only if already built")
    ap.add_argument("--kv-cache-memory", default="2GiB")
    ap.add_argument("--kv-cache-dtype", default="auto", choices=KV_CACHE_DTYPES, help="trtserve's KV cache [auto]")
    ap.add_argument(
        "--tokens-per-block",
        type=int,
        default=16,
        help="trtserve's KV block size [16: vLLM's; trtserve build's default, TensorRT-LLM's 32, leaves ~2x the tail waste]",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cache", type=Path, default=ROOT / ".compare-cache", help="engines, GGUFs, llama.cpp build")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run of every peer and workload")
    args = ap.parse_args(argv)
    if args.quick:
        args.num_requests, args.input_len, args.output_len, args.concurrency = 8, (16, 64), (8, 32), 8
        args.decode_requests, args.decode_len, args.rates = 1, (32, 16), "2"
        args.prefixes, args.questions, args.prefix_len, args.prefix_concurrency = 2, 4, 128, 2
    args.hf_batch_sizes = [int(b) for b in args.hf_batch_sizes.split(",") if b]
    args.rates = [float(r) for r in args.rates.split(",") if r]
    return args


def set_threads(threads: int, wait_policy: str) -> dict:
    """Thread env for this process and every peer it starts (set before torch is imported)."""
    os.environ["OMP_NUM_THREADS"] = str(threads)
    if wait_policy == "unset":
        os.environ.pop("OMP_WAIT_POLICY", None)
    else:
        os.environ["OMP_WAIT_POLICY"] = wait_policy.upper()
    import torch

    torch.set_num_threads(threads)
    return {"threads": threads, "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "unset (GNU OpenMP default)")}


def workloads(args, vocab: int) -> dict[str, dict]:
    """name -> {requests, max_concurrency, request_rate}; the same lists go to every peer."""
    from trtserve.bench.workload import random_requests, shared_prefix

    p, o = args.decode_len if isinstance(args.decode_len, tuple) else (args.decode_len, args.decode_len)
    inf = float("inf")
    out = {}
    if "decode" in args.workloads:
        out["decode"] = dict(
            requests=random_requests(args.decode_requests, p, o, vocab, args.seed + 1),
            max_concurrency=1,
            request_rate=inf,
        )
    mixed = random_requests(args.num_requests, args.input_len, args.output_len, vocab, args.seed)
    if "mixed" in args.workloads or "sweep" in args.workloads:
        out["mixed"] = dict(requests=mixed, max_concurrency=args.concurrency, request_rate=inf)
    if "sweep" in args.workloads:
        for i, rate in enumerate(args.rates):
            # fresh prompts of the same lengths: resending the mixed ones would hit every prefix cache
            again = random_requests(args.num_requests, args.input_len, args.output_len, vocab, args.seed + 100 + i)
            out[f"mixed@{rate:g}"] = dict(requests=again, max_concurrency=args.concurrency, request_rate=rate)
    if "prefix" in args.workloads:
        q = shared_prefix(args.prefixes, args.questions, args.prefix_len, (16, 32), (16, 32), vocab, args.seed + 2)
        out["prefix"] = dict(requests=q, max_concurrency=args.prefix_concurrency, request_rate=inf)
    return out


def point(peer: str, workload: str, precision: str, run, extra: dict | None = None) -> dict:
    from peers.report import decode_tok_per_s

    from trtserve.bench.stats import summarize

    stats = summarize(run)
    extra = dict(extra or {})
    if workload == "decode":
        extra["decode_tok_per_s"] = decode_tok_per_s(
            [(r.output_tokens, r.ttft, r.latency) for r in run.results if r.success]
        )
    if stats.get("server_metrics"):
        extra["server_metrics"] = stats["server_metrics"]
    for key in ("input_lens", "output_lens", "errors"):
        stats.pop(key, None)
    return {
        "peer": peer,
        "workload": workload,
        "precision": precision,
        "request_rate": run.request_rate,
        "stats": stats,
        "extra": extra,
    }


def run_trtserve(args, spec, dtype, engine, work, log_dir, say) -> list[dict]:
    from peers import trtserve_peer

    points = []
    main = [dict(name=k, **v) for k, v in work.items() if k != "prefix"]
    if "prefix" in work:
        main.append(dict(name="prefix-on", **work["prefix"]))
    say(f"trtserve: {', '.join(r['name'] for r in main)}")
    runs = trtserve_peer.serve_and_run(
        engine,
        main,
        prefix_caching=True,
        kv_cache_memory=args.kv_cache_memory,
        log=log_dir / "trtserve.log",
        seed=args.seed,
        engine_options=_kv_dtype(args),
    )
    for name, run in runs.items():
        points.append(point("trtserve", name, dtype, run))
    if "prefix" in work:
        say("trtserve: prefix-off (a second server, prefix caching off)")
        off = trtserve_peer.serve_and_run(
            engine,
            [dict(name="prefix-off", **work["prefix"])],
            prefix_caching=False,
            kv_cache_memory=args.kv_cache_memory,
            log=log_dir / "trtserve-off.log",
            seed=args.seed,
            engine_options=_kv_dtype(args),
        )["prefix-off"]
        points.append(point("trtserve", "prefix-off", dtype, off))
        on_texts = [r.text for r in runs["prefix-on"].results]
        same = sum(a == b.text for a, b in zip(on_texts, off.results, strict=True)) / len(on_texts)
        next(p for p in points if p["workload"] == "prefix-on")["extra"]["identical_to_off"] = same
    return points


def _kv_dtype(args) -> dict | None:
    """The kv_cache_dtype engine option where --kv-cache-dtype asks for one."""
    return None if args.kv_cache_dtype == "auto" else {"kv_cache_dtype": args.kv_cache_dtype}


def run_trtserve_quants(args, spec, dtype, work, log_dir, say) -> list[dict]:
    """Batch-1 decode of a trtserve engine per --trt-quants format (built once into the cache)."""
    from peers import trtserve_peer

    points = []
    for name in [q for q in args.trt_quants.split(",") if q]:
        quant, _, variant = name.partition("+")
        if variant not in ("", "int8act"):
            say(f"trtserve {name}: unknown variant {variant!r} (known: int8act); skipped")
            continue
        say(f"trtserve {name}: building unless cached, then decode")
        try:
            engine = trtserve_peer.build_engine(
                spec.build_source,
                args.cache / "engines" / f"{spec.name}-{dtype}-{quant}-tpb{args.tokens_per_block}",
                dtype,
                args.tokens_per_block,
                log_dir / f"build-{quant}.log",
                quant=quant,
            )
            runs = trtserve_peer.serve_and_run(
                engine,
                [dict(name="decode", **work["decode"])],
                prefix_caching=True,
                kv_cache_memory=args.kv_cache_memory,
                log=log_dir / f"trtserve-{name}.log",
                seed=args.seed,
                engine_options={"int8_activations": True} if variant else None,
            )
        except RuntimeError as err:
            say(f"trtserve {name} failed: {err}")
            continue
        points.append(point(f"trtserve-{name}", "decode", name, runs["decode"]))
    return points


def run_hf(args, spec, dtype, work, say, points: list[dict], checkpoint) -> None:
    """Appends the HF points to `points`, calling `checkpoint` after each (so a crash keeps what was measured)."""
    from peers import hf_continuous, hf_static
    from peers.models import load_hf

    model = load_hf(spec, dtype)
    hf_static.warm_up(model)
    if "hf-static" in args.peers:
        if "decode" in work:
            say("hf-static: decode (batch 1)")
            run = hf_static.run(model, work["decode"]["requests"], 1)
            points.append(point("hf-static-1", "decode", dtype, run))
            checkpoint()
        if "mixed" in work:
            for b in args.hf_batch_sizes:
                say(f"hf-static: mixed, batches of {b}")
                points.append(
                    point(f"hf-static-{b}", "mixed", dtype, hf_static.run(model, work["mixed"]["requests"], b))
                )
                checkpoint()
    if "hf-continuous" in args.peers and "mixed" in work:
        say("hf-continuous: mixed")
        try:
            points.append(point("hf-continuous", "mixed", dtype, hf_continuous.run(model, work["mixed"]["requests"])))
        except Exception as err:  # a peer's failure is reported, not fatal to the comparison
            say(f"hf-continuous failed: {type(err).__name__}: {err}")
        checkpoint()


def run_llamacpp(args, spec, dtype, work, log_dir, say) -> tuple[list[dict], str | None, list[str]]:
    """llama.cpp's points, the name of its peer at trtserve's precision, and why any type did not run (for the
    report: a family its converter or llama-server cannot take is said so, not fatal)."""
    from peers import llamacpp
    from peers.models import GGUF_TYPE, hf_dir_for_conversion

    say(
        f"llama.cpp: looking for llama-server in {llamacpp.build_dir(args.cache).name}"
        + ("" if args.no_build_llama else " (building it when missing)")
    )
    try:
        binary = llamacpp.ensure_server(
            args.cache, not args.no_build_llama, log_dir / "llama-build.log", jobs=args.threads
        )
    except RuntimeError as err:
        binary, why = None, str(err)
    else:
        why = "not built (--no-build-llama)"
    if binary is None:
        say(f"llama.cpp skipped: {why}")
        return [], None, [f"llama.cpp skipped: {why}"]
    match = "gguf" if spec.llama_gguf else GGUF_TYPE[dtype]  # a user's GGUF: that very file
    types = [match] + [t for t in args.llama_types.split(",") if t and t != match]
    hf_dir = None if spec.llama_gguf and len(types) == 1 else hf_dir_for_conversion(spec, args.cache)
    runs = [dict(name=k, **v) for k, v in work.items() if k != "prefix"]
    points, failures = [], []
    ctx = max(r.prompt_len + r.output_len for v in work.values() for r in v["requests"]) + 16
    for t in types:
        say(f"llama.cpp {t}: converting, then {', '.join(r['name'] for r in runs)}")
        try:
            gguf = (
                spec.llama_gguf
                if t == "gguf"
                else llamacpp.convert(
                    args.cache, hf_dir, t, args.cache / "gguf" / f"{spec.name}-{t}.gguf", log_dir / "llama-convert.log"
                )
            )
            slots = max(v["max_concurrency"] or 1 for v in work.values())
            got = llamacpp.serve_and_run(
                binary,
                gguf,
                runs,
                threads=args.threads,
                slots=slots,
                ctx_per_slot=ctx,
                log=log_dir / f"llama-server-{t}.log",
                seed=args.seed,
            )
        except RuntimeError as err:
            say(f"llama.cpp {t} failed: {err}")
            failures.append(f"llama.cpp {t} failed: {err}")
            continue
        points += [point(f"llama.cpp-{t}", name, t, run) for name, run in got.items()]
    return points, f"llama.cpp-{match}", failures


def add_floor(engine: Path, requests, conditions: dict, points: list[dict]) -> None:
    """The mixed workload's compute floor (trtserve/bench/floor.py) at the GEMM rate measured now, in
    this run and with its threads; each peer's mixed point gets the fraction of it reached."""
    from trtserve.bench import floor
    from trtserve.engine.layout import read_engine_config

    cfg = read_engine_config(engine).pretrained_config
    f = floor.Floor(
        floor.workload_flops(cfg, [(r.prompt_len, r.output_len) for r in requests]),
        floor.measure_gemm_rate(cfg),
        sum(r.output_len for r in requests),  # ignore_eos: every peer serves exactly these
        0.0,
    )
    conditions["floor"] = f.as_dict() | {"line": f.line().split("; served")[0]}
    for p in points:
        if p["workload"] == "mixed":
            p["extra"]["fraction_of_floor"] = p["stats"]["output_throughput"] / f.floor_tok_s if f.floor_tok_s else None


def main(argv=None) -> int:
    args = parse_args(argv)
    conditions = set_threads(args.threads, args.omp_wait_policy)
    sys.path.insert(0, str(ROOT))  # this checkout's trtserve, whatever is installed, here and in subprocesses
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    import torch
    from peers import models, report, roofline, trtserve_peer
    from rich.console import Console

    from trtserve.kernels.native import cpu_model

    console = Console(width=max(Console().width, 160))

    def say(msg: str) -> None:
        console.print(f"[dim]{time.strftime('%H:%M:%S')}[/dim] {msg}")

    spec = models.resolve(args.model, args.hf_dir, args.cache)
    dtype = spec.default_dtype if args.dtype == "auto" else args.dtype
    out = args.out or ROOT / "bench-results" / f"compare-{spec.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    out.mkdir(parents=True, exist_ok=True)
    args.cache.mkdir(parents=True, exist_ok=True)
    say(f"building the trtserve engine ({spec.build_source}, {dtype}) unless cached")
    engine = trtserve_peer.build_engine(
        spec.build_source,
        args.cache / "engines" / f"{spec.name}-{dtype}-tpb{args.tokens_per_block}",
        dtype,
        args.tokens_per_block,
        out / "build.log",
    )
    import json

    pretrained = json.loads((engine / "config.json").read_text())["pretrained_config"]
    moe = pretrained.get("moe")  # {num_experts, top_k, ...} for a mixture of experts, else None
    bars = report.MOE if moe else report.DENSE
    work = workloads(args, pretrained["vocab_size"])
    conditions.update(
        model=spec.name,
        model_note=spec.note,
        dtype=dtype,
        moe=moe,
        cpu=cpu_model(),
        tokens_per_block=args.tokens_per_block,
        cpu_count=os.cpu_count(),
        torch=torch.__version__,
        load_before=os.getloadavg(),
        workloads={
            k: {
                "requests": len(v["requests"]),
                "max_concurrency": v["max_concurrency"],
                "request_rate": v["request_rate"],
                "prompt_tokens": sum(r.prompt_len for r in v["requests"]),
                "output_tokens": sum(r.output_len for r in v["requests"]),
            }
            for k, v in work.items()
        },
        started=time.strftime("%Y-%m-%d %H:%M:%S"),
    )
    points: list[dict] = []
    if "decode" in work:
        say("measuring the bandwidth roofline (STREAM-like and GEMV reads)")
        conditions["roofline"] = roofline.measure(engine, models.DTYPES[dtype])
    if "trtserve" in args.peers:
        points += run_trtserve(args, spec, dtype, engine, work, out, say)
        if args.trt_quants and "decode" in work:
            points += run_trtserve_quants(args, spec, dtype, work, out, say)
        report.save_json(out / "compare.json", conditions, points, [])  # partial results survive a later crash
    if {"hf-static", "hf-continuous"} & set(args.peers):
        run_hf(
            args, spec, dtype, work, say, points, lambda: report.save_json(out / "compare.json", conditions, points, [])
        )
    llama_peer = None
    if "llama.cpp" in args.peers:
        got, llama_peer, failures = run_llamacpp(args, spec, dtype, work, out, say)
        points += got
        if failures:
            conditions["not_measured"] = failures
        llama_peer = llama_peer if any(p["peer"] == llama_peer for p in got) else None
    if "roofline" in conditions:
        for p in points:
            if p["workload"] == "decode":
                p["extra"]["fraction_of_roofline"] = report.ratio(
                    p["extra"].get("decode_tok_per_s"), conditions["roofline"]["roofline_tok_per_s"]
                )
    if "mixed" in work and moe:
        say("no compute floor: trtserve/bench/floor.py counts a dense MLP, not the routed experts")
    elif "mixed" in work:
        say("measuring the GEMM rate for the compute floor")
        add_floor(engine, work["mixed"]["requests"], conditions, points)
    conditions["load_after"] = os.getloadavg()
    target_rows = report.targets(points, llama_peer, bars)
    title = f"{spec.name} {dtype}, {conditions['threads']} threads, OMP_WAIT_POLICY={conditions['omp_wait_policy']}"
    title += f"\n{spec.note}" if spec.note else ""
    table = report.render_table(points, title)
    console.print(table)
    console.print(report.render_targets(target_rows, bars))
    for why in conditions.get("not_measured", []):
        console.print(f"not measured: {why}")
    if "roofline" in conditions:
        console.print(f"roofline: {conditions['roofline']}")
    if "floor" in conditions:
        fractions = {p["peer"]: p["extra"].get("fraction_of_floor") for p in points if p["workload"] == "mixed"}
        console.print(conditions["floor"]["line"] + "; " + ", ".join(f"{k} {v:.2f}" for k, v in fractions.items() if v))
    with open(out / "table.txt", "w") as f:
        lines = [f"not measured: {why}" for why in conditions.get("not_measured", [])]
        Console(file=f, width=200).print(
            table, report.render_targets(target_rows, bars), *lines, f"conditions: {conditions}"
        )
    report.save_json(out / "compare.json", conditions, points, target_rows)
    charted = report.save_chart(out / "compare.png", points, title)
    say(
        f"wrote {out}/table.txt, compare.json"
        + (", compare.png" if charted else " (no chart: it needs matplotlib and the sweep workload)")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
