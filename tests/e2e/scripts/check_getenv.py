#!/usr/bin/env python3
"""check_getenv.py SOURCE_DIR: the environment is read in one place, engine/core/env.cpp
(engine/core/env.h); any other getenv in the library and program sources is reported."""
import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1])
allowed = {root / "engine" / "core" / "env.cpp"}
found = []
for folder in ("engine", "layers", "data", "parallel", "train", "apps"):
    for path in sorted((root / folder).rglob("*")):
        if path.suffix not in (".cpp", ".h", ".cu", ".cuh") or path in allowed:
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"\bgetenv\s*\(", line.split("//", 1)[0]):
                found.append(f"{path.relative_to(root)}:{n}: {line.strip()}")
for f in found:
    print("FAIL: getenv outside engine/core/env.cpp:", f)
print(f"getenv: {len(found)} calls outside engine/core/env.cpp")
sys.exit(1 if found else 0)
