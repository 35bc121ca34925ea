"""The slowest units of a `cargo build --timings` report, and the build's total.

    python3 tests/tools/timings.py target/cargo-timings/cargo-timing.html [N]

Prints the N (default 10) units that took longest, with their seconds, then the total wall time.
"""
import json
import re
import sys


def main() -> None:
    path = sys.argv[1]
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    html = open(path, encoding="utf-8").read()
    found = re.search(r"const UNIT_DATA = (\[.*?\]);\n", html, re.S)
    if not found:
        sys.exit(f"{path}: no UNIT_DATA in this report (is it a cargo --timings report?)")
    units = json.loads(found.group(1))
    total = max(u["start"] + u["duration"] for u in units)
    print(f"{'seconds':>8}  unit")
    for u in sorted(units, key=lambda u: -u["duration"])[:count]:
        target = u.get("target", "").strip()
        name = f"{u['name']} v{u['version']}{(' ' + target) if target else ''}"
        print(f"{u['duration']:8.1f}  {name}")
    print(f"{total:8.1f}  in all ({total / 60:.1f} min, {len(units)} units)")


if __name__ == "__main__":
    main()
