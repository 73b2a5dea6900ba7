#!/usr/bin/env python3
"""Fails when files of crates/kopper/src import each other in a circle, or when anything
under runtime/ names controllers::.

A file imports another when it names a path into it: `use crate::a::b::…`, `use super::…`,
`use self::…`, or such a path written out in code (`super::x::f()`). A parent `mod.rs`
declaring its children (`mod x;`) is not an import; neither is a path inside a comment,
nor a `#[cfg(test)]` module's `use super::*` of its own file. Stdlib only, so that the
lint phase of scripts/test.sh runs it without set-up.

Usage: scripts/check-module-cycles.py [SRC_DIR]   (default crates/kopper/src)
"""

import re
import sys
from pathlib import Path

PATH = re.compile(r"\b(crate|super|self)((?:::\w+)*)(::\{[^;]*)?")
INLINE_MOD = re.compile(r"^(\s*)(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*\{")


def module_of(src: Path, file: Path) -> tuple:
    """The module path of `file`: src/a/b.rs and src/a/b/mod.rs are ("a", "b")."""
    parts = list(file.relative_to(src).with_suffix("").parts)
    if parts[-1] in ("mod", "lib", "main"):
        parts.pop()
    return tuple(parts)


def strip_comment(line: str) -> str:
    """The code of `line`, without a trailing `//` comment (strings are rare in paths)."""
    code, quoted, i = [], False, 0
    while i < len(line):
        c = line[i]
        if c == '"' and (i == 0 or line[i - 1] != "\\"):
            quoted = not quoted
        if not quoted and line.startswith("//", i):
            break
        code.append(c)
        i += 1
    return "".join(code)


def named_paths(text: str):
    """Each (inline-module nesting, path segments) a file's code names, `{…}` groups
    expanded one level (enough for rustfmt's `use a::{b, c::d}`)."""
    stack = []  # (indent, name) of the inline modules the line is in
    statement = ""
    for raw in text.splitlines():
        while stack and re.match(r"^%s\}" % re.escape(stack[-1][0]), raw):
            stack.pop()
        match = INLINE_MOD.match(raw)
        if match:
            stack.append((match.group(1), match.group(2)))
            continue
        line = strip_comment(raw)
        if re.match(r"\s*(pub(\([^)]*\))?\s+)?use ", line) or statement:
            statement += " " + line.strip()
            if not statement.rstrip().endswith(";"):
                continue
            line, statement = statement, ""
        reexport = bool(re.match(r"\s*pub(\([^)]*\))?\s+use ", line))
        for found in PATH.finditer(line):
            head, rest, group = found.group(1), found.group(2), found.group(3)
            if not rest and not group:
                continue  # `pub(super)`, `&self`: no path
            base = [head] + [s for s in rest.split("::") if s]
            if group:
                inner = group[3:]
                depth, item, items = 0, "", []
                for c in inner:
                    if c == "{":
                        depth += 1
                    elif c == "}":
                        if depth == 0:
                            break
                        depth -= 1
                    if c == "," and depth == 0:
                        items.append(item)
                        item = ""
                    else:
                        item += c
                items.append(item)
                for item in items:
                    segs = [s.strip() for s in re.split(r"::|\{|,|\}", item) if s.strip()]
                    segs = [s for s in segs if re.fullmatch(r"\w+", s)]
                    yield tuple(n for _, n in stack), (base + segs[:1] if segs else base), reexport
            else:
                yield tuple(n for _, n in stack), base, reexport


def resolve(module: tuple, nesting: tuple, segments: list, modules: dict, reexports: dict):
    """The file a path names from `module` (inside inline modules `nesting`): the longest
    known module prefix, or the file a name re-exported there comes from; None for paths
    outside the crate."""
    head, rest = segments[0], segments[1:]
    here = list(module) + list(nesting)
    if head == "crate":
        base = []
    elif head == "self":
        base = here
    else:
        base = here
        while rest is not None and head == "super":
            if not base:
                return None
            base = base[:-1]
            head, rest = (rest[0], rest[1:]) if rest else ("", [])
        rest = ([head] if head else []) + rest
    path = list(base) + list(rest)
    for end in range(len(path), -1, -1):
        target = modules.get(tuple(path[:end]))
        if target is not None:
            if end < len(path) and (tuple(path[:end]), path[end]) in reexports:
                return reexports[(tuple(path[:end]), path[end])]
            return target
    return None


def find_cycles(graph: dict):
    """Strongly connected components with more than one file (Tarjan)."""
    index, low, on_stack, stack, found, counter = {}, {}, set(), [], [], [0]

    def visit(node):
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph.get(node, ())):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10000)
    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def main() -> int:
    src = Path(sys.argv[1] if len(sys.argv) > 1 else "crates/kopper/src")
    files = sorted(src.rglob("*.rs"))
    modules = {module_of(src, f): f for f in files}
    # A `pub use` makes its module a facade: a path through the facade names the file the
    # item comes from, and the facade itself depends on nothing by re-exporting.
    reexports = {}
    for file in files:
        module = module_of(src, file)
        for nesting, segments, reexport in named_paths(file.read_text()):
            if reexport and not nesting:
                target = resolve(module, nesting, segments, modules, {})
                if target is not None:
                    reexports[(module, segments[-1])] = target
    graph, problems = {}, []
    for file in files:
        module = module_of(src, file)
        rel = str(file.relative_to(src))
        text = file.read_text()
        edges = graph.setdefault(rel, set())
        for nesting, segments, reexport in named_paths(text):
            if reexport:
                continue
            target = resolve(module, nesting, segments, modules, reexports)
            if target is None or target == file:
                continue
            edges.add(str(target.relative_to(src)))
        if rel.startswith("runtime/"):
            for number, line in enumerate(text.splitlines(), 1):
                if "controllers::" in strip_comment(line):
                    problems.append(f"{rel}:{number}: runtime/ names controllers::")
    for cycle in find_cycles(graph):
        members = set(cycle)
        edges = [f"  {a} -> {b}" for a in cycle for b in sorted(graph[a]) if b in members]
        problems.append("files that import each other in a circle:\n" + "\n".join(edges))
    for problem in problems:
        print(problem)
    if problems:
        print(f"check-module-cycles: {len(problems)} problem(s) in {src}")
        return 1
    print(f"check-module-cycles: {len(files)} files, no circle of imports, runtime/ names no controller")
    return 0


if __name__ == "__main__":
    sys.exit(main())
