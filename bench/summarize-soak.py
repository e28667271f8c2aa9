#!/usr/bin/env python3
"""Totals of an exploration soak report (bench/explore-soak.sh output): seeds, failures, events,
simulated and wall time, faults by kind and the coverage matrix, summed over all chunks."""
import re
import sys
from collections import Counter, OrderedDict

path = sys.argv[1] if len(sys.argv) > 1 else "docs/figures/explore-soak.txt"
seeds = failed = events = sim_s = 0
wall = 0.0
faults = Counter()
cov = OrderedDict()
section = None
header = ""
for line in open(path):
    line = line.rstrip("\n")
    if line.startswith("# sluice-sim"):
        header = line[2:]
    m = re.match(r"seeds: (\d+), events: (\d+), simulated s: (\d+), wall s: ([\d.]+)", line)
    if m:
        seeds += int(m[1]); events += int(m[2]); sim_s += int(m[3]); wall += float(m[4])
        continue
    m = re.match(r"(\d+) passed, (\d+) failed", line)
    if m:
        failed += int(m[2])
        section = None
        continue
    if line.startswith("faults injected"):
        section = "faults"; continue
    if line.startswith("coverage ("):
        section = "cov"; continue
    if section == "faults":
        m = re.match(r"\s+(\S+)\s+(\d+)$", line)
        if m:
            faults[m[1]] += int(m[2])
    elif section == "cov":
        # Four columns (crash, partition, drop, stale epoch), or five with sink_error.
        m = re.match(r"\s+(\S+:\S+)((?:\s+\d+){4,5})$", line)
        if m:
            vals = [int(x) for x in m[2].split()]
            row = cov.setdefault(m[1], [0, 0, 0, 0, 0])
            for i, v in enumerate(vals):
                row[i] += v
print(header)
print(f"seeds: {seeds}, failed: {failed}, events: {events}, simulated s: {sim_s}, wall s (sum of chunks): {wall:.0f}")
if wall:
    print(f"rate: {seeds * 60 / wall:.0f} seeds/min, {events / wall:.0f} events/s")
print("faults: " + ", ".join(f"{k} {v}" for k, v in sorted(faults.items())))
sink = any(v[4] for v in cov.values())
print("| operator | crash | partition | drop | stale epoch |" + (" sink error |" if sink else ""))
print("|---|---|---|---|---|" + ("---|" if sink else ""))
for k, v in cov.items():
    print(f"| {k} | " + " | ".join(str(x) for x in (v if sink else v[:4])) + " |")
