"""bench/run's outputs from its results: the markdown table and the PNG charts (matplotlib; the
charts are skipped, and the markdown says so, when it cannot be imported)."""

import subprocess
import sys


def fmt(v, unit=""):
    if v is None:
        return "—"
    if isinstance(v, float):
        a = abs(v)
        v = f"{v:,.0f}" if a >= 1000 else f"{v:.1f}" if a >= 10 else f"{v:.2f}" if a >= 1 else f"{v:.3f}"
    elif isinstance(v, int):
        v = f"{v:,}"
    return f"{v} {unit}".strip()


def status(f):
    return {True: "**MET**", False: "**MISSED**"}.get(f.get("met"), "")


def markdown(run, charts):
    m = run["machine"]
    lines = [
        f"# Sluice benchmark: {run['date']}, commit {run['commit']}"
        + (" (QUICK: small sizes, checks the harness; not the issue's figures)" if run["quick"] else ""),
        "",
        f"`{run['command']}`; binary `{run['binary']}` built from {run.get('binary_commit', run['commit'])}"
        f"{' (crates/ had uncommitted changes: the binary may hold them)' if run.get('dirty') else ''}. Machine: {m['cores']} cores ({m['cpu']}), "
        f"{m['mem_gib']} GiB, load average before the run {m['load_before']}. "
        "**Upstream MariaDB, downstream MariaDB (or moto, etcd) and Sluice run on these same "
        f"{m['cores']} cores**, so absolute figures drift with whatever else runs; each ratio is to "
        "a limit measured in the same run on the same machine, which is why the targets are "
        "ratios where a limit exists."
        + (" At quick sizes fixed latencies (changefeed creation, checkpoint and flush intervals) "
           "dominate the catch-up times: those ratios say nothing about the issue's targets."
           if run["quick"] else ""),
        "",
        "| case | what | measured | same-run limit | ratio | target | result |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in run["cases"]:
        figs = c.get("figures") or []
        if c.get("error"):
            lines.append(f"| {c['case']} | not measured: {c['error']} | | | | | |")
        for f in figs:
            lim = f.get("limit")
            lim_s = f"{fmt(lim['value'], lim.get('unit', ''))}: {lim['what']}" if lim else ""
            ratio = f"{f['ratio']:.2f}x" if f.get("ratio") is not None else ""
            what = f["what"] + (f" ({f['note']})" if f.get("note") else "")
            lines.append(f"| {c['case']} | {what} | {fmt(f.get('value'), f.get('unit', ''))} | "
                         f"{lim_s} | {ratio} | {f.get('target') or ''} | {status(f)} |")
    lines += ["", "Per case: the Sluice server process(es) and the machine while it ran.", "",
              "| case | wall s | Sluice peak RSS | Sluice CPU s | load before (1/5/15 min) | "
              "load during (mean / max) | parameters |", "|---|---|---|---|---|---|---|"]
    for c in run["cases"]:
        s = c.get("sluice") or {}
        ld = c.get("load_during") or {}
        params = ", ".join(f"{k}={v}" for k, v in (c.get("params") or {}).items())
        lines.append(f"| {c['case']} | {fmt(c.get('seconds'))} | {fmt(s.get('peak_rss_mib'), 'MiB')} | "
                     f"{fmt(s.get('cpu_s'))} | {' / '.join(str(x) for x in c.get('load_before', []))} | "
                     f"{fmt(ld.get('mean'))} / {fmt(ld.get('max'))} | {params} |")
    notes = [(c["case"], n) for c in run["cases"] for n in c.get("notes", [])]
    if notes:
        lines += ["", "Notes:", ""] + [f"- {case}: {n}" for case, n in notes]
    lines += [""]
    if charts:
        lines += ["Charts (each case's time axis starts at its own start; shaded: the phases "
                  "named in the legend):", ""] + [f"![{k}]({v})" for k, v in charts.items()]
    else:
        lines += [f"Charts skipped: {run.get('charts_skipped', 'no data')}."]
    return "\n".join(lines) + "\n"


def load_matplotlib():
    try:
        import matplotlib
    except ImportError:
        print("matplotlib missing: python3 -m pip install -q matplotlib", file=sys.stderr)
        r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "matplotlib"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            return None
        try:
            import matplotlib
        except ImportError:
            return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def throughput(samples):
    s = [x for x in samples if x.get("rows_per_s") is not None]
    return [x["t"] for x in s], [x["rows_per_s"] for x in s]


def charts(run, stem, out_dir):
    """Writes <stem>-lag.png, -throughput.png, -rss.png; returns {title: file name}."""
    plt = load_matplotlib()
    if plt is None:
        run["charts_skipped"] = "matplotlib could not be imported or installed"
        return {}
    cases = [c for c in run["cases"] if c.get("samples")]
    if not cases:
        run["charts_skipped"] = "no case produced samples"
        return {}
    out = {}

    def draw(kind, title, ylabel, series_of):
        fig, axes = plt.subplots(len(cases), 1, figsize=(10, 2.6 * len(cases)), squeeze=False)
        for ax, c in zip(axes[:, 0], cases):
            for i, p in enumerate(c.get("phases", [])):
                ax.axvspan(p["t0"], p["t1"], alpha=0.12, color=f"C{i % 10}", label=p["name"])
            for label, (xs, ys) in series_of(c).items():
                if xs:
                    ax.plot(xs, ys, label=label, linewidth=1)
            ax.set_title(c["case"] + (" (quick)" if run["quick"] else ""), fontsize=9)
            ax.set_ylabel(ylabel, fontsize=8)
            ax.tick_params(labelsize=7)
            ax.legend(fontsize=6, loc="upper right", ncol=3)
        axes[-1, 0].set_xlabel("seconds since the case started", fontsize=8)
        fig.suptitle(f"{title}: {run['date']} {run['commit']}; upstream, downstream and Sluice "
                     f"share {run['machine']['cores']} cores", fontsize=9)
        fig.tight_layout(rect=(0, 0, 1, 1 - 0.35 / (2.6 * len(cases))))
        name = f"{stem}-{kind}.png"
        fig.savefig(out_dir / name, dpi=80)
        plt.close(fig)
        out[title] = name

    def lag(c):
        s = [x for x in c["samples"] if x["lag_s"] is not None]
        res = {"checkpoint lag metric, s": ([x["t"] for x in s], [x["lag_s"] for x in s])}
        for rl in c.get("row_lag", []):
            per = " p99 per second" if rl.get("per_second") else ""
            res[f"{rl['label']}{per}, s"] = (rl["t"], rl["p99"])
        return res

    draw("lag", "Lag over time", "seconds", lag)
    draw("throughput", "Sink throughput over time (sluice_sink_rows_total)", "rows/s",
         lambda c: {"rows/s, all changefeeds": throughput(c["samples"])})
    draw("rss", "RSS of the Sluice server(s) over time", "MiB",
         lambda c: {"RSS, MiB (sum of nodes)": ([x["t"] for x in c["samples"]],
                                               [x["rss_mib"] for x in c["samples"]])})
    return out
