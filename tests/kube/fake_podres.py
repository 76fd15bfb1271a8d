#!/usr/bin/python3
"""A stand-in for the kubelet's pod-resources server: v1.PodResourcesLister/List on a unix
socket, on grpcio (a real gRPC implementation), answering from a JSON file.

Usage: fake_podres.py SOCKET FILE [--mode MODE] [--gen DIR]
  FILE   a ListPodResourcesResponse in protobuf's JSON form, e.g.
         {"podResources": [{"name": "p", "namespace": "ns", "containers": [{"name": "c",
           "devices": [{"resourceName": "pos.dev/gpu", "deviceIds": ["gpu0-1"]}]}]}]}
         (read at each call, so a test may rewrite it)
  MODE   good: the file's reply (default); upstream: the same with the fields the real
         kubelet sends and our .proto leaves out (cpu_ids, memory, dynamic_resources), raw on
         the wire; huge: the file's reply padded over 16 MiB with an unknown field; garbage:
         bytes that are no valid message; hang: never answers (grpcio then answers
         DEADLINE_EXCEEDED at the client's grpc-timeout); silent: no gRPC at all, a socket
         that accepts and never reads or writes; error: gRPC status UNAVAILABLE
Prints "ready" on stdout once it serves; ends on SIGTERM."""
import argparse
import json
import signal
import socket
import sys
import threading
from concurrent import futures

import grpc
from google.protobuf import json_format

import kubeproto


def varint(n):
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def field(num, payload):
    """A length-delimited field NUM of PAYLOAD."""
    return varint(num << 3 | 2) + varint(len(payload)) + payload


def upstream_bytes(r, msgs):
    """R as the real kubelet would send it: upstream's api.proto has, beyond ours, cpu_ids = 4
    and memory = 5 in PodResources, cpu_ids = 3, memory = 4 and dynamic_resources = 5 in
    ContainerResources (packed int64s and messages)."""
    Pod, Cont = msgs["v1.PodResources"], msgs["v1.ContainerResources"]
    out = b""
    for p in r.pod_resources:
        pod = Pod(name=p.name, namespace=p.namespace).SerializeToString()
        for c in p.containers:
            cb = c.SerializeToString() + field(3, b"\x02\x05") + \
                field(4, field(1, b"memory") + b"\x10\x80\x08") + field(5, field(2, b"claim"))
            pod += field(3, cb)
        pod += field(4, b"\x03\x04") + field(5, field(1, b"hugepages-2Mi"))
        out += field(1, pod)
    return out


def silent(path):
    s = socket.socket(socket.AF_UNIX)
    s.bind(path)
    s.listen(4)
    held = []
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print("ready", flush=True)
    while True:
        held.append(s.accept()[0])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("socket")
    ap.add_argument("file")
    ap.add_argument("--mode", default="good", choices=["good", "upstream", "huge", "garbage", "hang", "silent", "error"])
    ap.add_argument("--gen", default=kubeproto.GEN)
    a = ap.parse_args()
    if a.mode == "silent":
        return silent(a.socket)
    msgs = kubeproto.load("podresources_v1", a.gen)
    Response = msgs["v1.ListPodResourcesResponse"]
    stop = threading.Event()

    def list_(request, context):
        if a.mode == "hang":
            stop.wait()
            return b""
        if a.mode == "error":
            context.abort(grpc.StatusCode.UNAVAILABLE, "the fake is told to fail")
        if a.mode == "garbage":
            return b"\xff\xff\xff\xff\x0f garbage"
        with open(a.file) as f:
            r = json_format.ParseDict(json.load(f), Response())
        if a.mode == "upstream":
            return upstream_bytes(r, msgs)
        if a.mode == "huge":
            return r.SerializeToString() + b"\x7a" + varint(17 << 20) + bytes(17 << 20)
        return r.SerializeToString()

    handler = grpc.method_handlers_generic_handler("v1.PodResourcesLister", {
        "List": grpc.unary_unary_rpc_method_handler(list_),  # raw bytes both ways
    })
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4),
                         options=[("grpc.max_send_message_length", 64 << 20)])
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port("unix:" + a.socket)
    server.start()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print("ready", flush=True)
    stop.wait()
    server.stop(0)


if __name__ == "__main__":
    sys.exit(main())
