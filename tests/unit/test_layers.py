"""The house's layers, read from the source (every import, those inside functions too): models/ and context/ import
nothing of engine/, training/ nothing of bench/, and the packages import each other without a circle."""

import ast
from pathlib import Path

import asymspec_agents

ROOT = Path(asymspec_agents.__file__).parent
# packages (and top-level modules) that may import nothing of another
FORBIDDEN = {("models", "engine"), ("context", "engine"), ("training", "bench")}


def part_of(module: str) -> str:
    return module.split(".")[1] if module.count(".") else module


def imports() -> dict[str, set[str]]:
    """asymspec_agents' first-level part (a package or a module) -> the parts it imports."""
    found: dict[str, set[str]] = {}
    for path in ROOT.rglob("*.py"):
        relative = path.relative_to(ROOT.parent).with_suffix("")
        module = ".".join(relative.parts).removesuffix(".__init__")
        package = module if path.name != "__init__.py" else module + ".__init__"
        targets = found.setdefault(part_of(module), set())
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[:-node.level]
                    name = ".".join(base + ([node.module] if node.module else []))
                else:
                    name = node.module or ""
                names = [name] + ([f"{name}.{a.name}" for a in node.names] if name == "asymspec_agents" else [])
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            targets.update(part_of(n) for n in names if n.startswith("asymspec_agents."))
    return {part: targets - {part} for part, targets in found.items()}


def test_no_arrow_runs_back_up():
    graph = imports()
    assert {(a, b) for a, b in FORBIDDEN if b in graph.get(a, set())} == set()


def test_the_packages_import_each_other_without_a_circle():
    graph = {part: targets for part, targets in imports().items()}
    done, path = set(), []

    def visit(part):
        assert part not in path, " -> ".join(path[path.index(part):] + [part])
        if part in done:
            return
        path.append(part)
        for target in sorted(graph.get(part, ())):
            visit(target)
        path.pop()
        done.add(part)

    for part in sorted(graph):
        visit(part)
