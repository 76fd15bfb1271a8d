#!/usr/bin/python3
"""A stand-in for the kubelet's device manager, on grpcio (a real gRPC implementation), for
tests/integration/test_kube_plugin.c.

Usage: fake_kubelet.py DIR [--gen DIR]

It serves v1beta1.Registration/Register on DIR/kubelet.sock and, like the kubelet, dials the
plugin back inside Register (GetDevicePluginOptions) and then watches it (ListAndWatch). It
writes one JSON line per event on stdout:
  {"event": "ready"}
  {"event": "register", "version": ..., "endpoint": ..., "resource_name": ..., "options": {...},
   "plugin_options": {...}, "dial_back_ms": how long GetDevicePluginOptions took inside
   Register, "since_restart_ms": N or null, "wire": "ok" or why not}
  {"event": "devices", "gen": G, "n": N, "healthy": H, "unhealthy": U, "ids": [...], "wire": ...}
  {"event": "watch_end", "gen": G, "code": ...}
and reads one JSON command per line on stdin, answering each with {"reply": CMD, ...}:
  {"cmd": "allocate", "containers": [["gpu0-1", ...], ...]}
  {"cmd": "preferred", "requests": [{"available": [...], "must": [...], "size": N}]}
  {"cmd": "options"} / {"cmd": "prestart"}
  {"cmd": "raw", "method": "Allocate", "hex": "..."}        request bytes as they are
  {"cmd": "oversized", "method": "Allocate", "size": N}     an N-byte request
  {"cmd": "unknown_fields", "containers": [[...]]}          Allocate with fields upstream lacks
  {"cmd": "watch_cancel"}                                   a ListAndWatch closed mid-stream
  {"cmd": "half_frame"}                                     a connection cut inside a frame
  {"cmd": "remove_socket"}  the plugin's socket removed, the kubelet left as it is
  {"cmd": "restart"}   what a kubelet restart does: its server goes, the plugin's socket and
                       kubelet.sock are removed, a new server makes kubelet.sock again
Every reply of the plugin is decoded twice: with our .proto's classes (the descriptor sets) and
with kubeproto.wire_decode against upstream's field numbers ("wire")."""
import argparse
import json
import os
import socket
import sys
import threading
import time
from concurrent import futures

import grpc
from google.protobuf import json_format

import kubeproto

P = "v1beta1."
out_lock = threading.Lock()


def emit(obj):
    with out_lock:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()


def wire_check(raw, mtype):
    try:
        kubeproto.wire_decode(raw, mtype)
        return "ok"
    except ValueError as e:
        return str(e)


def as_dict(msg):
    return json_format.MessageToDict(msg, preserving_proto_field_name=True)


class Kubelet:
    def __init__(self, d, gen):
        self.dir = d
        self.m = kubeproto.load("deviceplugin_v1beta1", gen)
        self.server = None
        self.restart_at = None
        self.endpoint = None
        self.gen = 0
        self.watch = None

    # --- the plugin's side -----------------------------------------------------------------
    def channel(self):
        return grpc.insecure_channel("unix:" + os.path.join(self.dir, self.endpoint or "pos.sock"))

    def call(self, method, raw, timeout=5):
        """Calls METHOD with the request bytes RAW: (code name, reply bytes or None, details)."""
        with self.channel() as ch:
            f = ch.unary_unary("/v1beta1.DevicePlugin/" + method)
            try:
                return "OK", f(raw, timeout=timeout), ""
            except grpc.RpcError as e:
                return e.code().name, None, e.details()

    def watch_devices(self, gen):
        ch = self.channel()
        self.watch = ch
        stream = ch.unary_stream("/v1beta1.DevicePlugin/ListAndWatch")
        try:
            for raw in stream(self.m[P + "Empty"]().SerializeToString()):
                r = self.m[P + "ListAndWatchResponse"].FromString(raw)
                health = [d.health for d in r.devices]
                emit({"event": "devices", "gen": gen, "n": len(r.devices),
                      "healthy": health.count("Healthy"), "unhealthy": health.count("Unhealthy"),
                      "ids": [d.ID for d in r.devices],
                      "wire": wire_check(raw, "ListAndWatchResponse")})
            emit({"event": "watch_end", "gen": gen, "code": "OK"})
        except grpc.RpcError as e:
            emit({"event": "watch_end", "gen": gen, "code": e.code().name})

    # --- Registration ----------------------------------------------------------------------
    def register(self, raw, context):
        since = None
        if self.restart_at is not None:
            since = round((time.monotonic() - self.restart_at) * 1000, 1)
            self.restart_at = None
        req = self.m[P + "RegisterRequest"].FromString(raw)
        ev = {"event": "register", "version": req.version, "endpoint": req.endpoint,
              "resource_name": req.resource_name, "options": as_dict(req.options),
              "since_restart_ms": since, "wire": wire_check(raw, "RegisterRequest")}
        self.endpoint = req.endpoint
        # as the kubelet does: the plugin is dialled back before Register returns
        t0 = time.monotonic()
        code, rep, details = self.call("GetDevicePluginOptions",
                                       self.m[P + "Empty"]().SerializeToString())
        ev["dial_back_ms"] = round((time.monotonic() - t0) * 1000, 1)
        if code != "OK":
            ev["error"] = "GetDevicePluginOptions: %s %s" % (code, details)
            emit(ev)
            context.abort(grpc.StatusCode.UNAVAILABLE, ev["error"])
        ev["plugin_options"] = as_dict(self.m[P + "DevicePluginOptions"].FromString(rep))
        ev["plugin_options_wire"] = wire_check(rep, "DevicePluginOptions")
        emit(ev)
        self.gen += 1
        threading.Thread(target=self.watch_devices, args=(self.gen,), daemon=True).start()
        return self.m[P + "Empty"]().SerializeToString()

    def serve(self):
        h = grpc.method_handlers_generic_handler("v1beta1.Registration", {
            "Register": grpc.unary_unary_rpc_method_handler(self.register)})
        s = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        s.add_generic_rpc_handlers((h,))
        s.add_insecure_port("unix:" + os.path.join(self.dir, "kubelet.sock"))
        s.start()
        self.server = s

    def restart(self):
        if self.watch:
            self.watch.close()
            self.watch = None
        self.server.stop(0).wait()
        for name in os.listdir(self.dir):
            p = os.path.join(self.dir, name)
            if name != "kubelet.sock" and not os.path.isdir(p):
                os.unlink(p)
        try:
            os.unlink(os.path.join(self.dir, "kubelet.sock"))
        except FileNotFoundError:
            pass
        time.sleep(0.05)  # a restarting kubelet takes a moment
        self.restart_at = time.monotonic()
        self.serve()

    # --- commands --------------------------------------------------------------------------
    def allocate_bytes(self, containers):
        r = self.m[P + "AllocateRequest"]()
        for ids in containers:
            r.container_requests.add().devices_ids.extend(ids)
        return r.SerializeToString()

    def answer(self, cmd, method, raw, reply_type):
        code, rep, details = self.call(method, raw)
        out = {"reply": cmd, "code": code, "details": details}
        if rep is not None:
            out["resp"] = as_dict(self.m[P + reply_type].FromString(rep))
            out["wire"] = wire_check(rep, reply_type)
        return out

    def command(self, c):
        cmd = c["cmd"]
        if cmd == "allocate":
            return self.answer(cmd, "Allocate", self.allocate_bytes(c["containers"]),
                               "AllocateResponse")
        if cmd == "unknown_fields":
            # field 15 of AllocateRequest and field 9 of each ContainerAllocateRequest: unknown
            raw = b""
            for ids in c["containers"]:
                one = self.m[P + "ContainerAllocateRequest"](devices_ids=ids).SerializeToString()
                one += b"\x48\x2a"  # field 9, varint 42
                raw += b"\x0a" + bytes([len(one)]) + one
            raw += b"\x7a\x03abc"  # field 15, bytes "abc"
            return self.answer(cmd, "Allocate", raw, "AllocateResponse")
        if cmd == "preferred":
            r = self.m[P + "PreferredAllocationRequest"]()
            for q in c["requests"]:
                x = r.container_requests.add()
                x.available_deviceIDs.extend(q["available"])
                x.must_include_deviceIDs.extend(q.get("must", []))
                x.allocation_size = q["size"]
            return self.answer(cmd, "GetPreferredAllocation", r.SerializeToString(),
                               "PreferredAllocationResponse")
        if cmd == "options":
            return self.answer(cmd, "GetDevicePluginOptions", b"", "DevicePluginOptions")
        if cmd == "prestart":
            r = self.m[P + "PreStartContainerRequest"](devices_ids=["gpu0-0"])
            return self.answer(cmd, "PreStartContainer", r.SerializeToString(),
                               "PreStartContainerResponse")
        if cmd == "raw":
            code, _, details = self.call(c["method"], bytes.fromhex(c["hex"]))
            return {"reply": cmd, "code": code, "details": details}
        if cmd == "oversized":
            code, _, details = self.call(c["method"], b"\x0a" * c["size"], timeout=20)
            return {"reply": cmd, "code": code, "details": details}
        if cmd == "watch_cancel":
            with self.channel() as ch:
                it = ch.unary_stream("/v1beta1.DevicePlugin/ListAndWatch")(b"")
                first = next(it)
                it.cancel()
            return {"reply": cmd, "first_bytes": len(first)}
        if cmd == "half_frame":
            s = socket.socket(socket.AF_UNIX)
            s.connect(os.path.join(self.dir, self.endpoint or "pos.sock"))
            s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
                      + b"\x00\x00\x40\x01\x05\x00\x00\x00\x01\x82")  # a HEADERS frame, cut
            s.close()
            return {"reply": cmd}
        if cmd == "remove_socket":
            self.restart_at = time.monotonic()
            os.unlink(os.path.join(self.dir, self.endpoint or "pos.sock"))
            return {"reply": cmd}
        if cmd == "restart":
            self.restart()
            return {"reply": cmd}
        return {"reply": cmd, "error": "unknown command"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--gen", default=kubeproto.GEN)
    a = ap.parse_args()
    k = Kubelet(a.dir, a.gen)
    k.serve()
    emit({"event": "ready"})
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            emit(k.command(json.loads(line)))
        except Exception as e:  # a test's mistake: say so, keep serving
            emit({"reply": "error", "error": repr(e)})
    k.server.stop(0)


if __name__ == "__main__":
    sys.exit(main())
