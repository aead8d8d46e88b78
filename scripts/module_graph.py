#!/usr/bin/env python3
"""The daemon's module dependency graph, from its `use` lines.

Prints the graph's floors (layers of the condensed graph, bottom first),
its cycles (strongly connected components of more than one module), and
the imports from one plugin to another: a module under collectors/ or
probes/ reaching into a registered collector or probe (the `registry!`
lists) other than its own. Test modules (`#[cfg(test)]` onwards) do not
count: a test may reach anywhere.

    scripts/module_graph.py [exporter/src]

Exits 1 when there is a cycle or a collector imports another: the test
command runs it, so the layers stay as ARCHITECTURE.md draws them.
"""

import re
import sys
from pathlib import Path

SRC = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent / "exporter/src")


def module_of(path):
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] in ("mod", "lib", "main"):
        parts.pop()
    return "::".join(parts) or "crate"


def production_text(path):
    text = path.read_text()
    cut = re.search(r"^#\[cfg\(test\)\]\s*\n\s*(pub(\(crate\))?\s+)?mod \w+", text, re.M)
    text = text[: cut.start()] if cut else text
    # Comments name modules without depending on them.
    return re.sub(r"//[^\n]*", "", text)


def expand(prefix, body):
    """`a::{b, c::{d}}` -> [a::b, a::c::d] (one brace level is enough here)."""
    out = []
    for item in re.split(r",(?![^{]*})", body):
        item = item.strip()
        if not item:
            continue
        m = re.match(r"([\w:]+)::\{(.*)\}$", item, re.S)
        if m:
            out += expand(f"{prefix}::{m.group(1)}", m.group(2))
        else:
            out.append(f"{prefix}::{item.split(' as ')[0].strip()}")
    return out


def references(mod, text):
    paths = []
    for m in re.finditer(r"\b(crate|super)::\{([^;]*?)\}\s*;", text, re.S):
        paths += expand(m.group(1), m.group(2))
    for m in re.finditer(r"\b((?:crate|super)(?:::\w+)+)(::\{([^;]*?)\})?", text, re.S):
        paths += expand(m.group(1), m.group(3)) if m.group(2) else [m.group(1)]
    here = mod.split("::") if mod != "crate" else []
    for p in paths:
        parts = p.split("::")
        if parts[0] == "crate":
            yield parts[1:]
        else:
            base = list(here)
            while parts and parts[0] == "super":
                parts.pop(0)
                base = base[:-1]
            yield base + parts


def main():
    files = sorted(SRC.rglob("*.rs"))
    mods = {module_of(f): f for f in files}
    graph = {m: set() for m in mods}
    for mod, f in mods.items():
        for parts in references(mod, production_text(f)):
            # The longest prefix that is a module of the crate.
            while parts and "::".join(parts) not in mods:
                parts = parts[:-1]
            target = "::".join(parts) if parts else "crate"
            if target != mod and target in mods and not mod.startswith(target + "::"):
                graph[mod].add(target)

    def registered(layer):
        # Older trees had no probe registry: no plugins there.
        registry = re.search(r"registry!\s*\{([^}]*)\}", production_text(mods[layer]))
        names = registry.group(1).split(",") if registry else []
        return {f"{layer}::{n.strip()}" for n in names if n.strip()}

    # The plugins: every registered collector and probe.
    collectors = registered("collectors") | registered("probes")

    def owner(m):  # collectors::cgroup::read belongs to collectors::cgroup
        for c in collectors:
            if m == c or m.startswith(c + "::"):
                return c
        return None

    # A module of the plugin layers (but the registries) that reaches into
    # a plugin other than its own: a collector or probe building on another.
    in_plugin_layer = lambda m: m.startswith(("collectors::", "probes::"))
    cross = sorted(
        (a, b) for a, outs in graph.items() for b in outs
        if in_plugin_layer(a) and owner(b) and owner(a) != owner(b)
    )

    # Tarjan's strongly connected components.
    index, low, stack, on, sccs = {}, {}, [], set(), []
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
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
            sccs.append(comp)

    for v in graph:
        if v not in index:
            visit(v)
    comp_of = {m: i for i, c in enumerate(sccs) for m in c}
    floor = {}

    def height(i):  # 0 for a component that depends on nothing
        if i not in floor:
            floor[i] = 0
            deps = {comp_of[w] for m in sccs[i] for w in graph[m]} - {i}
            floor[i] = max((height(d) + 1 for d in deps), default=0)
        return floor[i]

    floors = max(height(i) for i in range(len(sccs))) + 1
    cycles = [sorted(c) for c in sccs if len(c) > 1]
    # Floors among the collectors alone: the longest chain of collectors
    # importing collectors, 1 when none builds on another.
    up = {}
    for a, b in cross:
        up.setdefault(owner(a), set()).add(owner(b))

    def chain(c, seen=()):
        return 1 + max((chain(d, seen + (c,)) for d in up.get(c, ()) if d not in seen), default=0)

    collector_floors = max(chain(c) for c in collectors)

    print(f"modules: {len(mods)}, edges: {sum(map(len, graph.values()))}")
    print(f"floors: {floors} (among plugins: {collector_floors})")
    print(f"cycles: {len(cycles)}")
    for c in cycles:
        print("  " + " <-> ".join(c))
    print(f"plugin-to-plugin imports (collectors, probes): {len(cross)}")
    for a, b in cross:
        print(f"  {a} -> {b}")
    if cycles or cross:
        print("module_graph: a cycle, or a plugin importing another; move what they share to kernel/")
        sys.exit(1)


if __name__ == "__main__":
    main()
