"""Draw the house from the code's own imports: rooms on floors, arrows, circles, arrows up.

A *room* is a folder of a package (``skyrl_rewards/rewards/boxes``), the modules directly
in a package's folder other than its top (``skyrl_rewards/rewards``), or one module at a
package's top (``skyrl_rewards/suggest.py``). An *arrow* is a room importing another (lazy
imports included; the count is of module-to-module imports). A room's *floor* is the
longest chain of arrows below it (0: it imports no other room). A *circle* is a group of
modules that import each other (``tests/test_layers.py``'s check); an *arrow up* is an
arrow between two rooms that import each other, however indirectly (no floor order holds
for them). Also printed: the rewards family check's offences and the largest modules.

    PYTHONPATH=$PWD python scripts/dev/draw_imports.py              # this checkout
    PYTHONPATH=$PWD python scripts/dev/draw_imports.py --root DIR   # another one (a worktree)
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests"))

from test_layers import family_offences, import_circles, import_graph  # noqa: E402

PACKAGES = ("skyrl_rewards", "tau_bench_env")


def module_files(root: Path) -> dict[str, Path]:
    """Dotted module name -> its file, for every module of the packages under ``root``."""
    files = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            files[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return files


def room_of(module: str, path: Path, root: Path) -> str:
    """The room of a module (see the module docstring)."""
    folder = path.parent.relative_to(root).as_posix()
    if folder in PACKAGES and path.name != "__init__.py":
        return f"{folder}/{path.name}"
    return f"{folder}/"


def strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """Groups of more than one node that reach each other (the rooms' circles)."""
    groups = import_circles(graph)
    return [set(group) for group in groups]


def draw(root: Path) -> str:
    """The drawing of the checkout at ``root`` as text."""
    files = module_files(root)
    graph = import_graph([root / package for package in PACKAGES])
    rooms = {module: room_of(module, path, root) for module, path in files.items()}
    lines_of = {module: len(path.read_text().splitlines()) for module, path in files.items()}
    arrows: Counter[tuple[str, str]] = Counter()
    for module, targets in graph.items():
        for target in targets:
            if rooms[module] != rooms[target]:
                arrows[(rooms[module], rooms[target])] += 1
    room_graph: dict[str, set[str]] = {room: set() for room in set(rooms.values())}
    for source, target in arrows:
        room_graph[source].add(target)
    room_circles = strongly_connected(room_graph)
    in_circle = {room: i for i, group in enumerate(room_circles) for room in group}
    up = sorted(
        (s, t) for s, t in arrows if s in in_circle and in_circle[s] == in_circle.get(t, -1)
    )
    floor: dict[str, int] = {}

    def height(room: str, seen: frozenset[str] = frozenset()) -> int:
        if room not in floor:
            below = [t for t in room_graph[room] if t not in seen and (room, t) not in up]
            floor[room] = 1 + max((height(t, seen | {room}) for t in below), default=-1)
        return floor[room]

    for room in room_graph:
        height(room)
    out = []
    size = Counter()
    count = Counter()
    for module, room in rooms.items():
        size[room] += lines_of[module]
        count[room] += 1
    for level in sorted(set(floor.values()), reverse=True):
        out.append(f"floor {level}")
        for room in sorted(r for r in floor if floor[r] == level):
            targets = ", ".join(
                f"{t}{'(UP)' if (room, t) in up else ''} x{n}"
                for (s, t), n in sorted(arrows.items())
                if s == room
            )
            out.append(f"  {room:<42} {count[room]:>3} modules {size[room]:>6} lines")
            if targets:
                out.append(f"      -> {targets}")
    circles = import_circles(graph)
    offences = family_offences(root / "skyrl_rewards")
    largest = sorted(lines_of.items(), key=lambda kv: -kv[1])[:8]
    out += [
        "",
        f"rooms {len(room_graph)}, floors {len(set(floor.values()))}, "
        f"arrows between rooms {len(arrows)} ({sum(arrows.values())} module imports), "
        f"module circles {len(circles)}, arrows up {len(up)}, "
        f"rewards family offences {len(offences)}",
        "arrows up: " + (", ".join(f"{s} -> {t}" for s, t in up) or "none"),
        "module circles: " + ("; ".join(" <-> ".join(c) for c in circles) or "none"),
        "largest modules: " + ", ".join(f"{m} {n}" for m, n in largest),
        f"modules over 600 lines: {sum(n > 600 for n in lines_of.values())}",
    ]
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=REPO, help="the checkout to draw")
    print(draw(parser.parse_args().root.resolve()))


if __name__ == "__main__":
    main()
