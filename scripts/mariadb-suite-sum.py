#!/usr/bin/env python3
"""Adds up the reports of a MariaDB-suite replay run in parts (scripts/mariadb-suite.sh with
FROM and MINUTES, through capture or, with `sink`, through the MySQL sink): the counts, the
share of accepted DDL the history understood and followed with an equal schema, the share of
table comparisons that were equal, and the failures by class (largest first, one example each).

Refuses parts that overlap or leave a gap, and says whether the corpus is covered to its end.
Usage: scripts/mariadb-suite-sum.py report-1.txt report-2.txt ...
"""
import re
import sys
from collections import OrderedDict

HEAD = re.compile(r"^files replayed (\d+) of (\d+) \(from (\d+); next part FROM=(\d+)")
FAILURE = re.compile(r"^\[(.*)\] (\S+)$")


def read(path):
    lines = open(path, encoding="utf-8").read().split("\n")
    head = HEAD.match(lines[0]) if lines else None
    if not head:
        sys.exit(f"{path}: not a suite report of a run in parts (first line: {lines[:1]})")
    counts = next((l for l in lines if l.startswith("counts ")), None)
    if counts is None:
        sys.exit(f"{path}: no counts line")
    values = OrderedDict((k, int(v)) for k, v in (kv.split("=") for kv in counts.split()[1:]))
    failures = []
    for i, line in enumerate(lines):
        m = FAILURE.match(line)
        if m and i + 1 < len(lines):
            failures.append((m.group(1), m.group(2), lines[i + 1].strip()))
    _, total, start, nxt = (int(g) for g in head.groups())
    return {"path": path, "total": total, "from": start, "next": nxt,
            "counts": values, "failures": failures}


def main(paths):
    if not paths:
        sys.exit(__doc__)
    parts = sorted((read(p) for p in paths), key=lambda r: r["from"])
    totals = {r["total"] for r in parts}
    if len(totals) != 1:
        sys.exit(f"the parts replayed different corpora (file counts {sorted(totals)})")
    at = 0
    for r in parts:
        if r["from"] != at and at == 0:
            sys.exit(f"{r['path']} starts at file {r['from']}: the first part must start at 0")
        if r["from"] != at:
            sys.exit(f"{r['path']} starts at file {r['from']}, the parts before it end at {at}")
        at = r["next"]
    total = totals.pop()
    sums = OrderedDict()
    for r in parts:
        for k, v in r["counts"].items():
            sums[k] = sums.get(k, 0) + v
    print(f"parts {len(parts)}, files replayed {at} of {total}"
          + ("" if at == total else f" (not covered: files {at}..{total - 1})"))
    print(" ".join(f"{k}={v}" for k, v in sums.items()))
    accepted = sums.get("ddl_accepted", 0)
    if accepted:
        for k in ("ddl_understood", "ddl_all_equal"):
            print(f"{k}: {sums.get(k, 0)} of {accepted} accepted ({100 * sums.get(k, 0) / accepted:.1f}%)")
    checks = sums.get("table_checks", 0)
    if checks:
        print(f"tables_equal: {sums.get('tables_equal', 0)} of {checks} table comparisons "
              f"({100 * sums.get('tables_equal', 0) / checks:.1f}%)")
    classes = OrderedDict()
    for r in parts:
        for cls, where, sql in r["failures"]:
            classes.setdefault(cls, []).append((where, sql))
    failures = sum(len(v) for v in classes.values())
    print(f"{failures} failures in {len(classes)} classes:")
    for cls, items in sorted(classes.items(), key=lambda kv: -len(kv[1])):
        where, sql = items[0]
        print(f"{len(items):5} {cls}\n      e.g. {where}: {sql[:200]}")


if __name__ == "__main__":
    main(sys.argv[1:])
