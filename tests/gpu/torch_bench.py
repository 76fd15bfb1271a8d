# PyTorch inference client for tests/gpu/run.sh: one model with random weights (nothing is
# downloaded), a closed loop of forward passes, one JSON line on stdout with the same keys as
# posapp's (model, batch, requests, p50_ms, p90_ms, p99_ms, mean_ms, throughput_rps) plus
# items_per_s, t_start/t_end (time.time() of the measured window), checksum (of the first
# output, to compare runs with and without the shim) and, with --profile, kernels: the CUDA
# kernels the PyTorch profiler (CUPTI) saw in the whole process, the independent count the
# shim's trace is checked against.
#
#   python3 tests/gpu/torch_bench.py --model resnet50 --batch 1,32 --seconds 2
#   python3 tests/gpu/torch_bench.py --model resnet50 --iters 5 --profile
#   --ready FILE / --go FILE: after warm-up touch READY, wait until GO exists, then measure
#   (run.sh starts several processes and measures them over the same window)
#
# Models: resnet18/34/50 (torchvision constructors, weights=None), bert (a BERT-base encoder:
# 12 layers, d_model 768, 12 heads, FFN 3072, sequence 128, built from torch.nn layers), convnet
# (a small conv net that needs no torchvision). Exit 3 when torchvision is missing for a resnet.
import argparse
import json
import os
import signal
import sys
import time

import torch

p = argparse.ArgumentParser()
p.add_argument("--model", default="resnet50")
p.add_argument("--batch", default="1", help="batch, or a list: 1,32 (one JSON line each)")
p.add_argument("--seconds", type=float, default=0.0, help="measure this long (0: --iters)")
p.add_argument("--iters", type=int, default=20)
p.add_argument("--warmup", type=int, default=5)
p.add_argument("--seq", type=int, default=128, help="bert: sequence length")
p.add_argument("--profile", action="store_true")
p.add_argument("--ready")
p.add_argument("--go")
p.add_argument("--fp16", action="store_true")
a = p.parse_args()

torch.manual_seed(0)
torch.backends.cudnn.benchmark = False
torch.backends.cudnn.deterministic = True
dev = "cuda"


batches = [int(b) for b in a.batch.split(",")]


def build(name):
    if name.startswith("resnet"):
        try:
            import torchvision
        except ImportError:
            print("torch_bench: torchvision is not installed", file=sys.stderr)
            sys.exit(3)
        return getattr(torchvision.models, name)(weights=None)
    if name == "bert":
        layer = torch.nn.TransformerEncoderLayer(768, 12, 3072, dropout=0.0, activation="gelu",
                                                 batch_first=True)
        return torch.nn.TransformerEncoder(layer, 12, enable_nested_tensor=False)
    if name == "convnet":
        return torch.nn.Sequential(
            torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.ReLU(),
            torch.nn.Conv2d(32, 64, 3, stride=2, padding=1), torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(64, 10))
    print("torch_bench: unknown model %s" % name, file=sys.stderr)
    sys.exit(2)


def input_shape(batch):
    if a.model.startswith("resnet"):
        return (batch, 3, 224, 224)
    if a.model == "bert":
        return (batch, a.seq, 768)
    return (batch, 3, 64, 64)


stop = False


def on_term(*_):
    global stop
    stop = True


signal.signal(signal.SIGTERM, on_term)


def run():
    net = build(a.model)
    net = net.to(dev).eval()
    if a.fp16:
        net = net.half()
    out = []
    for batch in batches:
        shape = input_shape(batch)
        g = torch.Generator(device="cpu").manual_seed(1)
        x = torch.randn(*shape, generator=g).to(dev)
        if a.fp16:
            x = x.half()
        lat = []
        with torch.inference_mode():
            y = net(x)
            checksum = float(y.double().sum().item())
            for _ in range(a.warmup):
                net(x)
            torch.cuda.synchronize()
            if a.ready:
                open(a.ready, "w").close()
            if a.go:
                while not os.path.exists(a.go) and not stop:
                    time.sleep(0.002)
            t0 = time.time()
            end = t0 + a.seconds if a.seconds > 0 else None
            n = 0
            while not stop:
                s = time.perf_counter()
                net(x)
                torch.cuda.synchronize()
                lat.append((time.perf_counter() - s) * 1e3)
                n += 1
                if (end is not None and time.time() >= end) or (end is None and n >= a.iters):
                    break
            t1 = time.time()
        out.append((batch, checksum, lat, t0, t1))
    return out


if a.profile:
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        results = run()
        torch.cuda.synchronize()
    kernels = 0
    for e in prof.events():
        dt = str(getattr(e, "device_type", ""))
        if dt.endswith("CUDA") and not e.name.startswith(("Memcpy", "Memset")):
            kernels += 1
else:
    results = run()
    kernels = None

for batch, checksum, lat, t0, t1 in results:
    lat_sorted = sorted(lat)

    def pct(q):
        if not lat_sorted:
            return None
        k = max(1, min(len(lat_sorted), -(-len(lat_sorted) * q // 100)))
        return round(lat_sorted[int(k) - 1], 6)

    wall = max(t1 - t0, 1e-9)
    print(json.dumps({
        "model": a.model, "batch": batch, "requests": len(lat),
        "p50_ms": pct(50), "p90_ms": pct(90), "p99_ms": pct(99),
        "mean_ms": round(sum(lat) / len(lat), 6) if lat else None,
        "throughput_rps": round(len(lat) / wall, 3),
        "items_per_s": round(len(lat) * batch / wall, 3),
        "t_start": t0, "t_end": t1, "checksum": "%.17g" % checksum, "kernels": kernels,
        "torch": torch.__version__, "cuda": torch.version.cuda}, separators=(",", ":")),
        flush=True)
