#!/usr/bin/python3
"""Circles of files: within each folder of the products (sched, sched/policy, shim,
sim/driver, sim, tools), file A uses file B when A's object refers to a symbol that B's
object defines (a function or a variable: nm's undefined and defined symbols, so the graph is
what the compiler saw, not a list kept by hand). A circle is a set of two or more files that
use each other round (a strongly connected component). make check-static runs this after the
build; it fails on a circle that scripts/circles.known does not list (circles the house-keeping
of issue 23 has still to break; each line: FOLDER: FILE FILE ...), and says when a known one
has been broken, so that the list only shrinks.

  scripts/circles.py [BUILD]        (BUILD: the build folder, default build)
"""
import os
import subprocess
import sys

FOLDERS = ["sched", "sched/policy", "shim", "sim/driver", "sim", "tools"]


def symbols(obj):
    out = subprocess.run(["nm", obj], capture_output=True, text=True, check=True).stdout
    defined, used = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == "U":
            used.add(parts[1])
        elif len(parts) == 3 and parts[1] in "TDBRGSV":  # global definitions only
            defined.add(parts[2])
    return defined, used


def circles(graph):
    """Tarjan's strongly connected components of GRAPH (node -> set of nodes), size >= 2."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    known = {}
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "circles.known")
    if os.path.exists(path):
        for line in open(path):
            line = line.split("#", 1)[0].strip()
            if line:
                folder, files = line.split(":", 1)
                known.setdefault(folder.strip(), []).append(set(files.split()))
    bad, broken, seen = 0, [], 0
    for folder in FOLDERS:
        objdir = os.path.join(build, "obj", folder)
        if not os.path.isdir(objdir):
            continue
        objs = sorted(f for f in os.listdir(objdir) if f.endswith(".o"))
        syms = {o[:-2] + ".c": symbols(os.path.join(objdir, o)) for o in objs}
        seen += len(syms)
        owner = {}
        for f, (defined, _) in syms.items():
            for s in defined:
                owner.setdefault(s, f)
        graph = {f: {owner[s] for s in used if s in owner and owner[s] != f}
                 for f, (_, used) in syms.items()}
        found = circles(graph)
        for comp in found:
            ok = any(set(comp) <= k for k in known.get(folder, []))
            edges = ", ".join("%s->%s" % (a, b) for a in comp for b in sorted(graph[a])
                              if b in comp)
            print("circles: %s: %s%s" % (folder, " ".join(comp),
                                          "" if ok else "   NEW (not in scripts/circles.known)"))
            if not ok:
                print("circles:   uses among them: " + edges)
                bad += 1
        for k in known.get(folder, []):
            if not any(set(c) >= k for c in found):
                broken.append("%s: %s" % (folder, " ".join(sorted(k))))
    if seen == 0:
        print("circles: no objects under %s/obj: build first (make)" % build)
        return 2
    for b in broken:
        print("circles: known circle %s is no longer whole: shrink scripts/circles.known" % b)
    if bad:
        print("circles: %d new circle(s) of files: make the calls go one way, downward "
              "(scripts/circles.known says which)" % bad)
        return 1
    print("circles: %d files, no new circle" % seen)
    return 0


if __name__ == "__main__":
    sys.exit(main())
