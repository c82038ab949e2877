#!/usr/bin/env python3
"""Print dependency cycles between the root crate's top-level modules.

Parses `use crate::X`, `crate::X::` and (in top-level files) `super::X` references in
src/**/*.rs, builds the graph of top-level modules (src/X.rs or src/X/) and prints every
strongly connected component of size > 1 with the edges inside it. Exits 1 on a cycle.
Test code (`#[cfg(test)]` items and the files of `#[cfg(test)] mod x;`) is left out: a unit
test may use any layer. `--graph` also prints every module's dependencies.
"""
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def strip_strings(text):
    """Blank out string and char literals (their braces would confuse the scanners)."""
    text = re.sub(r'r(#*)"(?:.|\n)*?"\1', '""', text)
    text = re.sub(r'"(?:\\.|[^"\\])*"', '""', text, flags=re.S)
    return re.sub(r"'(?:\\.|[^'\\])'", "' '", text)


def strip_cfg_test(text):
    """Drop `#[cfg(test)]` items (test code may use any layer). Returns the text and the
    names of `#[cfg(test)] mod NAME;` files declared out of line."""
    out, skipped, pos = [], [], 0
    for m in re.finditer(r"#\[cfg\(test\)\]", text):
        if m.start() < pos:
            continue
        out.append(text[pos : m.start()])
        i = m.end()
        while i < len(text) and text[i] not in "{;":
            i += 1
        item = text[m.end() : i]
        decl = re.search(r"\bmod\s+([A-Za-z_][A-Za-z0-9_]*)\s*$", item)
        if i < len(text) and text[i] == ";":
            if decl:
                skipped.append(decl.group(1))
            pos = i + 1
            continue
        depth = 0
        while i < len(text):
            if text[i] == "{":
                depth += 1
            elif text[i] == "}":
                depth -= 1
                if depth == 0:
                    break
            i += 1
        pos = i + 1
    out.append(text[pos:])
    return "".join(out), skipped


def brace_group(text, start):
    """Names at depth 1 of the `{...}` group opening at text[start]."""
    depth, names, cur = 0, [], ""
    for ch in text[start:]:
        if ch == "{":
            depth += 1
            if depth == 1:
                continue
        elif ch == "}":
            depth -= 1
            if depth == 0:
                break
        if depth == 1 and ch == ",":
            names.append(cur)
            cur = ""
        elif depth >= 1:
            cur += ch
    names.append(cur)
    out = []
    for n in names:
        m = re.match(r"\s*([A-Za-z_][A-Za-z0-9_]*)", n)
        if m:
            out.append(m.group(1))
    return out


def refs(text, prefix):
    """Top-level names referenced as `prefix::name` or `prefix::{a, b::c}`."""
    out = set()
    for m in re.finditer(r"\b" + prefix + r"\s*::\s*(\{|[A-Za-z_][A-Za-z0-9_]*)", text):
        if m.group(1) == "{":
            out.update(brace_group(text, m.start(1)))
        else:
            out.add(m.group(1))
    return out


def module_of(rel):
    parts = rel.split(os.sep)
    if len(parts) == 1:
        name = parts[0][:-3]
        return None if name == "lib" else name
    return parts[0]


def graph(root=ROOT):
    files = {}
    for dirpath, _, names in os.walk(root):
        for n in names:
            if n.endswith(".rs"):
                path = os.path.join(dirpath, n)
                files[os.path.relpath(path, root)] = path
    modules = {module_of(r) for r in files} - {None}
    # `pub use graph::fused;` in lib.rs: `crate::fused::` is a path into `graph`.
    alias = {}
    with open(os.path.join(root, "lib.rs"), encoding="utf-8") as f:
        for m in re.finditer(r"^pub use ([a-z_][a-z0-9_]*)::([a-z_][a-z0-9_]*);", f.read(), re.M):
            if m.group(1) in modules:
                alias[m.group(2)] = m.group(1)
    edges = {m: {} for m in modules}
    texts, test_only = {}, set()
    for rel, path in files.items():
        with open(path, encoding="utf-8") as f:
            text, skipped = strip_cfg_test(strip_strings(strip_comments(f.read())))
        texts[rel] = text
        # `#[cfg(test)] mod x;` in a/b.rs or a/mod.rs names a/b/x.rs or a/x.rs (or x/mod.rs).
        d = os.path.dirname(rel)
        stem = os.path.basename(rel)[:-3]
        base = d if stem in ("mod", "lib") else os.path.join(d, stem)
        for name in skipped:
            test_only.add(os.path.join(base, name + ".rs"))
            test_only.add(os.path.join(base, name, "mod.rs"))
    for rel in sorted(files):
        src = module_of(rel)
        if src is None or rel in test_only:
            continue
        text = texts[rel]
        targets = refs(text, "crate")
        # In a top-level file (src/X.rs, or src/X/mod.rs) `super::` is the crate root.
        if os.sep not in rel or rel == os.path.join(src, "mod.rs"):
            targets |= refs(text, "super")
        for t in targets:
            t = alias.get(t, t)
            if t in modules and t != src:
                edges[src].setdefault(t, set()).add(rel)
    return edges


def sccs(edges):
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
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
            out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def main():
    edges = graph()
    cycles = [c for c in sccs(edges) if len(c) > 1]
    if "--graph" in sys.argv:
        for m in sorted(edges):
            print(f"{m} -> {', '.join(sorted(edges[m])) or '(none)'}")
    for comp in cycles:
        print("cycle: " + ", ".join(comp))
        for a in comp:
            for b in sorted(edges[a]):
                if b in comp:
                    print(f"  {a} -> {b}  ({', '.join(sorted(edges[a][b]))})")
    return 1 if cycles else 0


if __name__ == "__main__":
    sys.exit(main())
