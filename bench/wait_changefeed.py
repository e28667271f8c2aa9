"""Waits for a changefeed in one process, so the wait does not compete for the cores it measures.

bench/snapshot.sh and bench/kafka.sh used to poll from the shell: every 100 ms a curl, two or three
python3 starts and an awk, about a third of a core on a 2-core machine, taken from the server and
the upstream while their time was measured (the limits measured beside them, `mariadb-dump` and
the C decoder, ran with no such poller). This polls the API every 50 ms with one connection's
worth of work and samples the server's RSS at the same time.

    wait_changefeed.py API CF SERVER_PID T0 TIMEOUT [--snapshot] [--checkpoint TS] [--rows N]

Waits until every condition given holds (`--snapshot`: the changefeed's snapshot is `finished`;
`--checkpoint TS`: its checkpoint is at or past TS), noting meanwhile when the changefeed's
`sluice_sink_rows_total` reached N (`--rows N`), and prints, from T0 (epoch seconds):
`seconds peak-rss-MiB seconds-until-rows` (`?` when `--rows` was not given). Exit 1 on timeout,
with the changefeed's last state on stderr."""

import sys
import time

from harness import http, parse_metrics, proc_mem


def main(argv):
    api, cf, pid, t0, timeout = argv[:5]
    pid, t0, timeout = int(pid), float(t0), float(timeout)
    opts = argv[5:]
    snapshot = "--snapshot" in opts
    checkpoint = int(opts[opts.index("--checkpoint") + 1]) if "--checkpoint" in opts else None
    rows = int(opts[opts.index("--rows") + 1]) if "--rows" in opts else None
    peak, rows_at, state = 0.0, None, None
    while True:
        mem = proc_mem(pid)
        if mem:
            peak = max(peak, mem[0])
        if rows is not None and rows_at is None:
            _, text = http("GET", f"http://{api}/metrics")
            counted = sum(
                v
                for name, labels, v in parse_metrics(text if isinstance(text, str) else "")
                if name == "sluice_sink_rows_total" and labels.get("changefeed") == cf
            )
            if counted >= rows:
                rows_at = time.time() - t0
        _, state = http("GET", f"http://{api}/api/v2/changefeeds/{cf}")
        done = isinstance(state, dict)
        if done and snapshot:
            done = (state.get("snapshot") or {}).get("state") == "finished"
        if done and checkpoint is not None:
            done = state.get("checkpoint_ts", 0) >= checkpoint
        if done:
            break
        if time.time() - t0 > timeout:
            print(f"gave up on {cf} after {timeout:.0f} s: {state}", file=sys.stderr)
            print(f"{time.time() - t0:.2f} {peak:.0f} ?")
            return 1
        time.sleep(0.05)
    elapsed = time.time() - t0
    mem = proc_mem(pid)
    if mem:
        peak = max(peak, mem[0])
    print(f"{elapsed:.2f} {peak:.0f} {'?' if rows_at is None else f'{rows_at:.2f}'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
