#!/usr/bin/python3
"""Checks deploy/kubernetes/ (tests/integration/test_deploy.c runs each check):

  parse                 every manifest parses (python3-yaml) into objects with apiVersion, kind
                        and a name; volumes, ConfigMaps, Service and ServiceMonitor refer to
                        what exists; hostPID; the Prometheus annotations name the metrics port
  images                every pos container names the image the Dockerfile builds (its
                        org.opencontainers.image.ref.name label), and the build command in the
                        Dockerfile's header tags it so
  paths INSTALL_ROOT    every program a container runs and every file it copies from the image
                        is in INSTALL_ROOT (make install DESTDIR=INSTALL_ROOT PREFIX=/usr/local),
                        and every node path the containers hand each other (the shim, posd's
                        socket, state and policy directories, the CDI directory) is the same
                        node path through their volumes
  plugin-args [HELP]    the plugin's arguments are options pos-device-plugin accepts: those its
                        --help (the file HELP) lists, else its documented CLI; values where
                        they take one; the resource is the one the example pod asks for
  extract DIR PORT      writes posd.conf and the policy ConfigMap's files into DIR as posd would
                        see them, its node paths moved into DIR (socket, state_dir, policy_dir)
                        and its metrics on 127.0.0.1:PORT; prints the number of rules

Prints 'ok' (or extract's count), else what is wrong (exit 1)."""
import os
import re
import sys

import yaml

DEPLOY = "deploy/kubernetes"
MANIFESTS = ["pos.yaml", "policy-configmap.yaml", "servicemonitor.yaml", "example-pod.yaml"]
POS_CONTAINERS = {"posd", "pos-device-plugin", "install-shim", "cdi-spec"}
# pos-device-plugin's CLI as issue 21 fixes it, for a tree without the plugin built: option ->
# takes a value
PLUGIN_CLI = {"--kubelet-dir": True, "--resource": True, "--shares": True, "--gpus": True,
              "--socket": True, "--shim": True, "--dev-dir": True, "--driver-dir": True,
              "--cdi": False, "-v": False}

problems = []


def bad(msg):
    problems.append(msg)


def load_all():
    docs = []
    for name in MANIFESTS:
        with open(os.path.join(DEPLOY, name), encoding="utf-8") as f:
            for d in yaml.safe_load_all(f):
                if d is None:
                    continue
                for k in ("apiVersion", "kind"):
                    if not isinstance(d.get(k), str):
                        bad("%s: an object without %s" % (name, k))
                if not d.get("metadata", {}).get("name"):
                    bad("%s: a %s without a name" % (name, d.get("kind")))
                d["_file"] = name
                docs.append(d)
    return docs


def one(docs, kind, name=None):
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    if len(found) != 1:
        raise SystemExit("want one %s%s, found %d" % (kind, " " + name if name else "", len(found)))
    return found[0]


def pod_spec(ds):
    return ds["spec"]["template"]["spec"]


def all_containers(spec):
    return spec.get("initContainers", []) + spec["containers"]


def container(spec, name):
    for c in all_containers(spec):
        if c["name"] == name:
            return c
    raise SystemExit("no container %s" % name)


def posd_conf(docs):
    conf = one(docs, "ConfigMap", "posd-config")["data"]["posd.conf"]
    section, keys = None, {}
    for line in conf.splitlines():
        line = line.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            section = line.strip("[]").strip()
        else:
            k, v = (x.strip() for x in line.split("=", 1))
            keys[(section, k)] = v
    return keys


def check_parse(docs):
    ds = one(docs, "DaemonSet", "pos")
    spec = pod_spec(ds)
    if spec.get("hostPID") is not True:
        bad("the DaemonSet does not set hostPID: true (posd reads /proc/PID of other pods)")
    names = {c["name"] for c in spec["containers"]}
    if names != {"posd", "pos-device-plugin"}:
        bad("the DaemonSet's containers are %s, want posd and pos-device-plugin" % sorted(names))
    volumes = {v["name"]: v for v in spec["volumes"]}
    for c in all_containers(spec):
        for m in c.get("volumeMounts", []):
            if m["name"] not in volumes:
                bad("%s mounts volume %s, which the pod does not have" % (c["name"], m["name"]))
    for v in volumes.values():
        if "configMap" in v:
            cm = [d for d in docs if d["kind"] == "ConfigMap" and
                  d["metadata"]["name"] == v["configMap"]["name"] and
                  d["metadata"].get("namespace") == ds["metadata"]["namespace"]]
            if not cm:
                bad("volume %s: no ConfigMap %s in %s" % (v["name"], v["configMap"]["name"],
                                                          ds["metadata"]["namespace"]))
    labels = ds["spec"]["template"]["metadata"]["labels"]
    if any(labels.get(k) != v for k, v in ds["spec"]["selector"]["matchLabels"].items()):
        bad("the DaemonSet's selector does not select its pods")
    ann = ds["spec"]["template"]["metadata"].get("annotations", {})
    ports = {p["containerPort"]: p.get("name") for p in container(spec, "posd").get("ports", [])}
    listen = posd_conf(docs).get(("metrics", "listen"), "")
    if ann.get("prometheus.io/scrape") != "true":
        bad("no prometheus.io/scrape annotation")
    if not ann.get("prometheus.io/port", "").isdigit() or int(ann["prometheus.io/port"]) not in ports:
        bad("prometheus.io/port is not a port of posd's container")
    elif not listen.endswith(":" + ann["prometheus.io/port"]) or not listen.startswith("0.0.0.0"):
        bad("posd.conf's [metrics] listen (%s) is not the annotated port on every address" % listen)
    svc = one(docs, "Service", "pos-metrics")
    if any(labels.get(k) != v for k, v in svc["spec"]["selector"].items()):
        bad("the Service pos-metrics does not select the DaemonSet's pods")
    svc_ports = {p["name"]: p for p in svc["spec"]["ports"]}
    for p in svc_ports.values():
        if p["targetPort"] not in ports.values():
            bad("the Service's targetPort %s is not a port of posd's container" % p["targetPort"])
    sm = one(docs, "ServiceMonitor")
    if any(svc["metadata"].get("labels", {}).get(k) != v
           for k, v in sm["spec"]["selector"]["matchLabels"].items()):
        bad("the ServiceMonitor does not select the Service pos-metrics")
    for e in sm["spec"]["endpoints"]:
        if e["port"] not in svc_ports:
            bad("the ServiceMonitor scrapes port %s, which the Service does not have" % e["port"])
        if e.get("path", "/metrics") != ann.get("prometheus.io/path"):
            bad("the ServiceMonitor and the annotation disagree on the path")


def dockerfile_image():
    with open(os.path.join(DEPLOY, "Dockerfile"), encoding="utf-8") as f:
        text = f.read()
    m = re.search(r'org\.opencontainers\.image\.ref\.name="([^"]+)"', text)
    if not m:
        raise SystemExit("the Dockerfile has no org.opencontainers.image.ref.name label")
    tags = re.findall(r"-t (\S+)", text)
    return m.group(1), tags


def check_images(docs):
    image, tags = dockerfile_image()
    if tags != [image]:
        bad("the Dockerfile's build command tags %s, its label says %s" % (tags, image))
    seen = 0
    for d in docs:
        if d["kind"] != "DaemonSet":
            continue
        for c in all_containers(pod_spec(d)):
            seen += 1
            if c["image"] != image:
                bad("container %s runs %s, not %s (the Dockerfile's)" % (c["name"], c["image"], image))
    if not seen:
        bad("no container")


def host_path(spec, c, path):
    """The node path behind PATH in container C, or None when no hostPath volume holds it."""
    volumes = {v["name"]: v for v in spec["volumes"]}
    best = None
    for m in c.get("volumeMounts", []):
        mp = m["mountPath"].rstrip("/")
        if path == mp or path.startswith(mp + "/"):
            if best is None or len(mp) > len(best[0]):
                best = (mp, m)
    if not best:
        return None
    v = volumes[best[1]["name"]]
    if "hostPath" not in v:
        return ("configMap", v["configMap"]["name"]) if "configMap" in v else None
    return v["hostPath"]["path"].rstrip("/") + path[len(best[0]):]


def arg_after(args, opt):
    if opt in args and args.index(opt) + 1 < len(args):
        return args[args.index(opt) + 1]
    return None


def check_paths(docs, root):
    spec = pod_spec(one(docs, "DaemonSet", "pos"))
    makefile = open("Makefile", encoding="utf-8").read()
    for c in all_containers(spec):
        prog = c["command"][0]
        if prog in ("/bin/sh",):
            continue  # Debian's, in every image
        if not os.path.exists(root + prog):
            if prog.endswith("/pos-device-plugin") and "pos-device-plugin" not in makefile:
                print("check_deploy: %s is not built on this branch (the kgrpc branch builds it): "
                      "not checked" % prog)
                continue
            bad("container %s runs %s, which make install does not install" % (c["name"], prog))
    # install-shim copies the image's shim to the node; the plugin and the CDI spec name it
    install = container(spec, "install-shim")
    script = " ".join(install["command"])
    src = re.search(r"install -m 0755 (\S+)", script).group(1)
    dest = re.findall(r"mv -f \S+ (\S+)", script)[0]
    if not os.path.exists(root + src):
        bad("install-shim copies %s, which make install does not install" % src)
    node_shim = host_path(spec, install, dest)
    plugin = container(spec, "pos-device-plugin")
    cdi = container(spec, "cdi-spec")
    posd = container(spec, "posd")
    conf = posd_conf(docs)
    for c in (plugin, cdi):
        shim = arg_after(c["command"], "--shim")
        if host_path(spec, c, shim) != node_shim:
            bad("%s's --shim %s is node path %s; install-shim puts it at %s" %
                (c["name"], shim, host_path(spec, c, shim), node_shim))
        sock = arg_after(c["command"], "--socket")
        want = host_path(spec, posd, conf[("daemon", "socket")])
        if host_path(spec, c, sock) != want or want is None:
            bad("%s's --socket %s is node path %s; posd listens on node path %s" %
                (c["name"], sock, host_path(spec, c, sock), want))
        dev = arg_after(c["command"], "--dev-dir")
        if dev not in (None, "none") and host_path(spec, c, dev) != dev:
            bad("%s's --dev-dir %s is not the node's %s" % (c["name"], dev, dev))
    # the node's shim path is the one posctl cdi and the plugin use by default
    if node_shim != "/usr/local/lib/pos/libposshim.so":
        bad("the shim is installed at %s on the node, not /usr/local/lib/pos/libposshim.so" % node_shim)
    if host_path(spec, cdi, arg_after(cdi["command"], "--output")) != "/var/run/cdi/pos.json":
        bad("cdi-spec does not write the node's /var/run/cdi/pos.json")
    for key in ("state_dir", "policy_dir"):
        p = conf.get(("daemon", key))
        if not p or host_path(spec, posd, p) is None:
            bad("posd.conf's %s (%s) is not a volume of posd's container" % (key, p))
    if host_path(spec, posd, conf[("daemon", "policy_dir")]) != ("configMap", "posd-policy"):
        bad("posd's policy_dir is not the ConfigMap posd-policy")
    for path in ("/var/lib/kubelet/pod-resources", "/var/log/pods", "/sys/fs/cgroup",
                 "/sys/kernel/btf", "/var/lib/kubelet/device-plugins"):
        if host_path(spec, posd, path) != path:
            bad("posd's container does not see the node's %s" % path)
    if host_path(spec, plugin, arg_after(plugin["command"], "--kubelet-dir")) != \
            "/var/lib/kubelet/device-plugins":
        bad("the plugin's --kubelet-dir is not the node's /var/lib/kubelet/device-plugins")


def plugin_options(help_file):
    if not help_file:
        return PLUGIN_CLI, "its documented CLI"
    with open(help_file, encoding="utf-8") as f:
        text = f.read()
    opts = {}
    for m in re.finditer(r"(?<![\w-])(--[a-z][a-z-]*|-[a-z])(?:[ =]([A-Z][A-Z_|]*|N))?", text):
        opts[m.group(1)] = opts.get(m.group(1), False) or bool(m.group(2))
    return opts, help_file


def check_plugin_args(docs, help_file):
    opts, source = plugin_options(help_file)
    plugin = container(pod_spec(one(docs, "DaemonSet", "pos")), "pos-device-plugin")
    args = plugin["command"][1:]
    i = 0
    while i < len(args):
        a = args[i]
        if a not in opts:
            bad("the plugin's argument %s is not an option of pos-device-plugin (%s)" % (a, source))
            i += 1
            continue
        if opts[a]:
            if i + 1 >= len(args) or args[i + 1].startswith("-"):
                bad("the plugin's %s has no value" % a)
            i += 2
        else:
            i += 1
    shares = arg_after(args, "--shares")
    if shares is not None and (not shares.isdigit() or int(shares) < 1):
        bad("--shares %s is not a whole number of 1 or more" % shares)
    resource = arg_after(args, "--resource") or "pos.dev/gpu"
    pod = one(docs, "Pod")
    for c in pod["spec"]["containers"]:
        if resource not in c.get("resources", {}).get("limits", {}):
            bad("the example pod's %s does not ask for %s" % (c["name"], resource))


def extract(docs, out, port):
    os.makedirs(os.path.join(out, "policy.d"), exist_ok=True)
    os.makedirs(os.path.join(out, "state"), exist_ok=True)
    conf = one(docs, "ConfigMap", "posd-config")["data"]["posd.conf"]
    moved = {"socket": os.path.join(out, "posd.sock"), "state_dir": os.path.join(out, "state"),
             "policy_dir": os.path.join(out, "policy.d"), "listen": "127.0.0.1:%s" % port}
    lines = []
    for line in conf.splitlines():
        k = line.split("=", 1)[0].strip()
        if "=" in line and k in moved and not line.lstrip().startswith(("#", ";")):
            line = "%s = %s" % (k, moved[k])
        lines.append(line)
    with open(os.path.join(out, "posd.conf"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    rules = 0
    for name, text in one(docs, "ConfigMap", "posd-policy")["data"].items():
        with open(os.path.join(out, "policy.d", name), "w", encoding="utf-8") as f:
            f.write(text)
        rules += len(re.findall(r"^\s*\[rule ", text, re.M))
    print(rules)


def main():
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    docs = load_all()
    what = sys.argv[1]
    if what == "parse":
        check_parse(docs)
    elif what == "images":
        check_images(docs)
    elif what == "paths":
        check_paths(docs, sys.argv[2])
    elif what == "plugin-args":
        check_plugin_args(docs, sys.argv[2] if len(sys.argv) > 2 else None)
    elif what == "extract":
        extract(docs, sys.argv[2], sys.argv[3])
        return 0
    else:
        raise SystemExit(__doc__)
    for p in problems:
        print(p)
    if problems:
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
