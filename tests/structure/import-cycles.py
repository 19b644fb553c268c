#!/usr/bin/env python3
"""Checks that no crate of the workspace has a cycle in its file-level import graph.

    tests/structure/import-cycles.py [--graph] [CRATE_SRC_DIR...]

A file (module) depends on another when its code, outside `#[cfg(test)]` items and comments,
names it: `use crate::a::b::{..}`, a path `crate::a::b::item`, or `super::x`. A path resolves to the
deepest module file it names (`a/b.rs` or `a/b/mod.rs`). A parent declaring its children (`mod x;`)
and re-exports are not edges, so `mod.rs` + children is not a cycle by itself; a child naming its
parent's items is an edge. Why file level: a cycle between two files means neither can be
understood, tested or moved without the other (issue 21: "no cycles, no arrows back up").

Exits 1 naming every strongly connected component and its edges. With --graph, prints the edges.
"""
import os
import re
import sys

DEFAULT = ["shared/src", "core/src", "operator/src", "webhook/src", "cli/src", "certs/src",
           "telemetry/src"]


def modules(root):
    files = {}
    for dirpath, _, names in os.walk(root):
        for name in names:
            if not name.endswith(".rs"):
                continue
            path = os.path.join(dirpath, name)
            parts = os.path.relpath(path, root)[:-3].split(os.sep)
            if parts[-1] in ("mod", "lib", "main") and len(parts) >= 1:
                parts = parts[:-1] if parts[-1] == "mod" else parts
            files["::".join(parts)] = path
    return files


def resolve(files, path):
    parts = [p for p in path.split("::") if p]
    best = None
    for i in range(1, len(parts) + 1):
        key = "::".join(parts[:i])
        if key in files:
            best = key
    return best


def split_top(body):
    """Splits a use-tree body at top-level commas."""
    out, depth, cur = [], 0, ""
    for ch in body:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


def expand(prefix, body):
    paths = []
    for item in split_top(body):
        nested = re.match(r"([\w:]*?)::\{(.*)\}$", item, re.S)
        if nested:
            paths += expand(prefix + "::" + nested.group(1), nested.group(2))
        elif item == "self":
            paths.append(prefix)
        else:
            paths.append(prefix + "::" + item.split(" as ")[0].strip())
    return paths


def strip_tests(text):
    """Drops every item under `#[cfg(test)]`: a `mod x;` line or a braced block (a test module)."""
    out, i = "", 0
    while True:
        j = text.find("#[cfg(test)]", i)
        if j < 0:
            return out + text[i:]
        out += text[i:j]
        k = j + len("#[cfg(test)]")
        semi, brace = text.find(";", k), text.find("{", k)
        if semi >= 0 and (brace < 0 or semi < brace):
            i = semi + 1
            continue
        if brace < 0:
            return out
        depth, k = 0, brace
        while k < len(text):
            if text[k] == "{":
                depth += 1
            elif text[k] == "}":
                depth -= 1
                if depth == 0:
                    break
            k += 1
        i = k + 1


def code_of(path):
    text = open(path, encoding="utf-8").read()
    text = re.sub(r"//.*", "", text)
    return strip_tests(text)


def graph(root):
    files = modules(root)
    edges = {}
    for key, path in files.items():
        src = code_of(path)
        deps = set()
        for m in re.finditer(r"use crate::([\w:]*?)::\{(.*?)\};", src, re.S):
            deps.update(filter(None, (resolve(files, p) for p in expand(m.group(1), m.group(2)))))
        for m in re.finditer(r"use crate::\{(.*?)\};", src, re.S):
            deps.update(filter(None, (resolve(files, p) for p in expand("", m.group(1)))))
        for m in re.finditer(r"crate::([\w:]+)", src):
            r = resolve(files, m.group(1))
            if r:
                deps.add(r)
        base = key.split("::")[:-1] if key else []
        if path.endswith("mod.rs"):
            base = key.split("::")[:-1]
        for m in re.finditer(r"super::(\w+)", src):
            r = resolve(files, "::".join(base + [m.group(1)]))
            if r:
                deps.add(r)
        deps.discard(key)
        edges[key] = deps
    return edges


def cycles(edges):
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
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

    sys.setrecursionlimit(10000)
    for v in list(edges):
        if v not in index:
            visit(v)
    return out


def main(argv):
    show = "--graph" in argv
    roots = [a for a in argv if a != "--graph"] or DEFAULT
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    failed = 0
    for root in roots:
        path = root if os.path.isabs(root) else os.path.join(repo, root)
        if not os.path.isdir(path):
            print(f"import-cycles: {root} is not a directory", file=sys.stderr)
            return 2
        edges = graph(path)
        if show:
            for k in sorted(edges):
                print(f"{root} {k or '(crate root)'} -> {', '.join(sorted(edges[k]))}")
        found = cycles(edges)
        for comp in found:
            failed += 1
            inside = set(comp)
            detail = "; ".join(f"{v} -> {', '.join(sorted(edges[v] & inside))}" for v in comp)
            print(f"import-cycles: {root}: cycle between {', '.join(comp)} ({detail})",
                  file=sys.stderr)
        if not found:
            print(f"import-cycles: {root}: {len(edges)} modules, no cycle", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
