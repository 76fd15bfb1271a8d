#!/usr/bin/python3
"""Checks a CDI spec that posctl cdi wrote: against our schema of CDI 0.6.0
(tests/kube/cdi-schema.json, Debian's python3-jsonschema), and, given EXPECTED, that it carries
exactly the container edits kube_edits_make made (tests/unit/test_cdi.c and
tests/integration/test_cdi.c write EXPECTED, one edit a line, every string in hex so that the
comparison shares no escaping with the spec it checks):

    version V
    device NAME
    env HEX(NAME=VALUE)
    mount HEX(HOST) HEX(CONTAINER) ro|rw
    node HEX(PATH) TYPE MAJOR MINOR PERMS

Usage: cdi_check.py SCHEMA SPEC [EXPECTED]. Prints 'ok', or what differs (exit 1)."""
import json
import sys

import jsonschema


def unhex(h):
    return bytes.fromhex(h).decode("utf-8")


def expected_devices(path):
    version, devices = None, []
    with open(path, encoding="ascii") as f:
        for line in f:
            w = line.split()
            if not w:
                continue
            if w[0] == "version":
                version = w[1]
            elif w[0] == "device":
                devices.append({"name": w[1], "env": [], "mounts": [], "nodes": []})
            elif w[0] == "env":
                devices[-1]["env"].append(unhex(w[1]))
            elif w[0] == "mount":
                devices[-1]["mounts"].append((unhex(w[1]), unhex(w[2]), w[3] == "ro"))
            elif w[0] == "node":
                devices[-1]["nodes"].append((unhex(w[1]), w[2], int(w[3]), int(w[4]), w[5]))
            else:
                raise SystemExit("cdi_check: bad line in %s: %r" % (path, line))
    return version, devices


def edits_of(dev):
    e = dev.get("containerEdits", {})
    mounts = []
    for m in e.get("mounts", []):
        opts = m.get("options", [])
        if "bind" not in opts and "rbind" not in opts:
            raise ValueError("%s: mount %s is not a bind mount: %s" % (dev["name"], m, opts))
        if ("ro" in opts) == ("rw" in opts):
            raise ValueError("%s: mount %s says neither or both of ro, rw" % (dev["name"], m))
        mounts.append((m["hostPath"], m["containerPath"], "ro" in opts))
    nodes = [(d["path"], d.get("type"), d.get("major"), d.get("minor"), d.get("permissions"))
             for d in e.get("deviceNodes", [])]
    if "deviceNodes" in e and not nodes:
        raise ValueError("%s: an empty deviceNodes list" % dev["name"])
    return {"name": dev["name"], "env": e.get("env", []), "mounts": mounts, "nodes": nodes}


def main():
    if len(sys.argv) not in (3, 4):
        raise SystemExit(__doc__)
    with open(sys.argv[1], encoding="utf-8") as f:
        schema = json.load(f)
    with open(sys.argv[2], "rb") as f:
        raw = f.read()
    try:
        spec = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        print("not JSON: %s" % e)
        return 1
    errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(spec), key=str)
    for e in errors:
        print("schema: %s at %s" % (e.message, "/".join(str(p) for p in e.absolute_path)))
    if errors:
        return 1
    if len(sys.argv) == 4:
        version, want = expected_devices(sys.argv[3])
        try:
            got = [edits_of(d) for d in spec["devices"]]
        except ValueError as e:
            print(e)
            return 1
        bad = 0
        if version and spec["cdiVersion"] != version:
            print("cdiVersion %s, want %s" % (spec["cdiVersion"], version))
            bad = 1
        if [d["name"] for d in got] != [d["name"] for d in want]:
            print("devices %s, want %s" % ([d["name"] for d in got], [d["name"] for d in want]))
            return 1
        for g, w in zip(got, want):
            for k in ("env", "mounts", "nodes"):
                if g[k] != w[k]:
                    print("%s %s:\n  spec  %s\n  edits %s" % (g["name"], k, g[k], w[k]))
                    bad = 1
        if bad:
            return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
