"""The gateway's import structure, as ARCHITECTURE.md writes it: its layers, each importing
only its own package's modules and the layers below, and no circle of modules. Imports are
read from the source with `ast` (nothing is imported), counting those under TYPE_CHECKING
and inside functions: each is an arrow a reader and the type checker follow."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GATEWAY = ROOT / "services" / "gateway"
PACKAGE = "services.gateway"
LAYERS_MARK = "<!-- gateway layers: tests/unit/test_gateway_imports.py -->"


def written_layers(text: str) -> list[list[str]]:
    """The units (a subpackage or a top-level module of the gateway) of each layer, top
    first: the fenced block under the mark, a layer a line, units before the description
    (which is two spaces or more away)."""
    after = text.split(LAYERS_MARK, 1)[1]
    block = after.split("```text\n", 1)[1].split("```", 1)[0]
    return [re.split(r"\s{2,}", line.strip())[0].split() for line in block.splitlines()]


def gateway_modules() -> dict[str, Path]:
    modules = {}
    for path in GATEWAY.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def imported(module: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The gateway modules `module` imports (a package's face counts for a name it hands on
    only when no module of that name exists)."""
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names if alias.name in modules)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                if f"{source}.{alias.name}" in modules:
                    out.add(f"{source}.{alias.name}")
                elif source in modules:
                    out.add(source)
    out.discard(module)
    # A module's own package face is imported by Python anyway, not an arrow of the code.
    return {m for m in out if not module.startswith(m + ".")}


def unit_of(module: str) -> str:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 else "__init__"


def arrows() -> dict[str, set[str]]:
    modules = gateway_modules()
    return {m: imported(m, p, modules) for m, p in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            advanced = False
            for nxt in successors:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
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
    return found


def test_the_written_layers_name_every_part_of_the_gateway_once():
    layers = written_layers((ROOT / "ARCHITECTURE.md").read_text())
    written = [unit for layer in layers for unit in layer]
    assert len(written) == len(set(written)), written
    units = {unit_of(m) for m in gateway_modules()} - {"__init__"}
    assert set(written) == units, (
        f"not placed in ARCHITECTURE.md's layers: {sorted(units - set(written))}; "
        f"placed but absent: {sorted(set(written) - units)}"
    )


def test_every_import_runs_down_the_written_layers():
    layers = written_layers((ROOT / "ARCHITECTURE.md").read_text())
    depth = {unit: i for i, layer in enumerate(layers) for unit in layer}
    against = [
        f"{module} -> {target}"
        for module, targets in sorted(arrows().items())
        for target in sorted(targets)
        if unit_of(module) != unit_of(target)
        and unit_of(module) in depth
        and depth[unit_of(target)] <= depth[unit_of(module)]
    ]
    assert not against, "imports against ARCHITECTURE.md's layers:\n" + "\n".join(against)


def test_no_gateway_modules_import_each_other_in_a_circle():
    found = cycles(arrows())
    assert not found, "circles of imports:\n" + "\n".join(" ".join(c) for c in found)


def test_the_checks_see_a_circle_and_an_arrow_up():
    """The checks themselves: a made-up circle is found, and the real arrows include the
    ones the layers rest on (kafka/ importing the planes, server.py importing kafka/)."""
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    graph = arrows()
    assert f"{PACKAGE}.kafka.apis" in graph[f"{PACKAGE}.server"]
    assert f"{PACKAGE}.cluster.registry" in graph[f"{PACKAGE}.kafka.core"]
