#!/usr/bin/env python3
"""Fails when an #include points up the layers.

The layer order is the one list in docs/DESIGN.md, section "Layers": the folders of its code block,
top first. A file in folder F may include headers of F and of the folders listed below F; an
include of a folder listed above F points up and is reported with its file and line. Folders are
those of src/ and python/ (the Python module sits above the CLI); an include that names no listed
folder (a system or third-party header) is not a layer's.

Usage: scripts/check_layers.py [REPO]   (exit 0: clean, 1: an include points up)
Before the repository it checks a made-up tree of two layers with an upward include, so that a
check that stopped finding anything would fail too.
"""
import contextlib
import io
import pathlib
import re
import sys
import tempfile

SOURCES = {".h", ".cpp", ".inc", ".in"}


def layer_order(design: pathlib.Path) -> list:
    """The folder names of the code block under '## Layers', top first."""
    text = design.read_text(encoding="utf-8")
    section = re.search(r"^## Layers\n(.*?)^## ", text, re.S | re.M)
    if not section:
        sys.exit(f"check_layers: {design}: no '## Layers' section")
    block = re.search(r"^```\n(.*?)^```", section.group(1), re.S | re.M)
    if not block:
        sys.exit(f"check_layers: {design}: no code block in '## Layers'")
    order = re.findall(r"^([a-z_]+)/", block.group(1), re.M)
    if len(order) != len(set(order)) or not order:
        sys.exit(f"check_layers: {design}: the layer list is empty or names a folder twice")
    return order


def check(repo: pathlib.Path) -> int:
    order = layer_order(repo / "docs" / "DESIGN.md")
    rank = {name: i for i, name in enumerate(order)}  # 0 is the top
    folders = [p for p in (repo / "src").iterdir() if p.is_dir()] + [repo / "python"]
    unlisted = [f.name for f in folders if f.name not in rank and any(f.glob("*.cpp"))]
    if unlisted:
        print(f"check_layers: folders not in docs/DESIGN.md's layer list: {', '.join(unlisted)}")
        return 1
    include = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/')
    bad = 0
    for folder in folders:
        for path in sorted(folder.rglob("*")):
            if path.suffix not in SOURCES or not path.is_file():
                continue
            for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
                m = include.match(line)
                if not m or m.group(1) not in rank:
                    continue
                if rank[m.group(1)] < rank[folder.name]:
                    print(f"{path.relative_to(repo)}:{number}: {folder.name}/ includes {m.group(1)}/, "
                          f"which docs/DESIGN.md lists above it")
                    bad += 1
    if bad:
        print(f"check_layers: {bad} include(s) point up the layers")
        return 1
    print(f"check_layers: every include points down ({' > '.join(order)})")
    return 0


def self_test() -> bool:
    """A tree whose lower layer includes the upper one must be refused; the reverse accepted."""
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        (root / "docs").mkdir()
        (root / "docs" / "DESIGN.md").write_text("## Layers\n```\nupper/  u\nlower/  l\n```\n## Next\n")
        for name in ("upper", "lower", "python"):
            (root / ("src/" + name if name != "python" else name)).mkdir(parents=True)
        (root / "src/upper/u.cpp").write_text('#include "lower/l.h"\n')
        (root / "src/lower/l.cpp").write_text("#include <vector>\n")
        with contextlib.redirect_stdout(io.StringIO()):
            clean = check(root)
            (root / "src/lower/l.cpp").write_text('#include "upper/u.h"\n')
            upward = check(root)
        return clean == 0 and upward == 1


def main() -> int:
    if not self_test():
        print("check_layers: the self-test's upward include was not found")
        return 1
    repo = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).parent.parent)
    return check(repo)


if __name__ == "__main__":
    sys.exit(main())
