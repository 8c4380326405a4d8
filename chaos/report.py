"""A chaos run's report: a table in the terminal, a JSON file, a PNG timeline.

The JSON holds everything a checker needs (the history, the schedule, the
verdicts), so a run can be re-checked or re-plotted later.  The PNG has three
panels on one time axis:

* faults: one bar per fault, on the row of the region(s) it hit;
* lag: per region, how many operations it lacks of what the most advanced
  region holds (from the sampled version vectors; gaps: it did not answer);
* throughput: acknowledged client operations per second, and failed or
  unknown ones;

with the heal and the convergence marked as vertical lines.
"""

from __future__ import annotations

import json
import os
from collections import Counter, defaultdict
from dataclasses import asdict

from rich.console import Console
from rich.table import Table

from .history import FAIL, INFO, OK, History

FAULT_COLOURS = {"kill": "tab:red", "pause": "tab:orange", "partition": "tab:purple", "one-way": "tab:pink",
                 "bridge": "tab:brown", "link-faults": "tab:olive", "clock": "tab:cyan",
                 "disk-full": "tab:gray", "slow-fsync": "tab:blue", "membership": "tab:green"}


def summary_table(result) -> Table:
    table = Table(title=f"braid-chaos run  seed={result.config.seed}  regions={result.config.regions}  "
                        f"duration={result.config.duration:.0f}s", show_lines=False)
    table.add_column("checker")
    table.add_column("verdict")
    table.add_column("detail", overflow="fold")
    for v in result.verdicts:
        table.add_row(v.name, "[green]PASS[/green]" if v.ok else "[red]FAIL[/red]", v.summary)
    for e in result.errors:
        table.add_row("run", "[red]FAIL[/red]", e)
    return table


def stats(history: History) -> dict:
    outcomes = Counter(op.outcome for op in history.ops)
    kinds = Counter(f.kind for f in history.faults)
    return {"operations": len(history.ops), "ok": outcomes[OK], "fail": outcomes[FAIL], "info": outcomes[INFO],
            "faults": dict(kinds)}


def print_report(result, paths: dict[str, str], console: Console | None = None) -> None:
    console = console or Console()
    console.print(summary_table(result))
    s = stats(result.history)
    conv = f"{result.convergence_s:.2f} s" if result.convergence_s is not None else "never"
    console.print(f"{s['operations']} operations ({s['ok']} ok, {s['fail']} failed, {s['info']} unknown); "
                  f"faults: {', '.join(f'{k}×{n}' for k, n in sorted(s['faults'].items())) or 'none'}; "
                  f"converged {conv} after the heal")
    if result.membership:
        console.print(f"membership: {'; '.join(result.membership)}")
    for name, path in paths.items():
        console.print(f"{name}: {path}")
    first_bad = next((v for v in result.verdicts if not v.ok), None)
    if first_bad is not None:
        console.print(f"[red]{first_bad.name}[/red]:")
        for p in first_bad.problems[:10]:
            console.print(f"  - {p}")
    console.print("[bold green]PASS[/bold green]" if result.ok else "[bold red]FAIL[/bold red]")


def write_json(result, path: str) -> str:
    data = {
        "config": asdict(result.config),
        "verdict": "pass" if result.ok else "fail",
        "verdicts": [v.to_json() for v in result.verdicts],
        "errors": result.errors,
        "convergence_s": result.convergence_s,
        "schedule": [{"at": s.at, "kind": s.kind, "targets": list(s.targets), "length": s.length,
                      "params": s.params} for s in result.steps],
        "stats": stats(result.history),
        "membership": result.membership,
        "history": result.history.to_json(),
    }
    with open(path, "w") as f:
        json.dump(data, f, default=str)
    return path


def lag_series(history: History) -> dict[int, list[tuple[float, float | None]]]:
    """Per region, (time, operations behind the most advanced region) from the samples."""
    by_time: dict[float, list] = defaultdict(list)
    for s in history.samples:
        by_time[round(s.t, 1)].append(s)
    series: dict[int, list] = defaultdict(list)
    for t in sorted(by_time):
        batch = by_time[t]
        best: dict[int, int] = {}
        for s in batch:
            for o, n in s.vv.items():
                best[o] = max(best.get(o, 0), n)
        for s in batch:
            behind = sum(n - s.vv.get(o, 0) for o, n in best.items()) if s.reachable else None
            series[s.region].append((t, behind))
    return series


def throughput_series(history: History) -> dict[str, list[tuple[int, int]]]:
    per: dict[str, Counter] = {OK: Counter(), "failed/unknown": Counter()}
    for op in history.ops:
        per[OK if op.outcome == OK else "failed/unknown"][int(op.t1)] += 1
    end = int(max((op.t1 for op in history.ops), default=0)) + 1
    return {name: [(t, c[t]) for t in range(end)] for name, c in per.items()}


def write_png(result, path: str) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    h = result.history
    regions = sorted({s.region for s in h.samples} | {r for f in h.faults for r in f.targets}) or [1]
    fig, (ax_f, ax_l, ax_t) = plt.subplots(3, 1, figsize=(12, 8), sharex=True,
                                          gridspec_kw={"height_ratios": [1.2, 1.5, 1.2]})
    for f in h.faults:
        end = f.t1 if f.t1 is not None else h.marks.get("healed", f.t0)
        for r in f.targets:
            ax_f.barh(r, end - f.t0, left=f.t0, height=0.6, color=FAULT_COLOURS.get(f.kind, "black"), alpha=0.8)
        if f.targets:
            ax_f.text(f.t0, max(f.targets) + 0.35, f.kind, fontsize=7)
    ax_f.set_yticks(regions, [f"region {r}" for r in regions])
    ax_f.set_title(f"braid-chaos run seed={result.config.seed}: {'PASS' if result.ok else 'FAIL'}")
    for r, points in sorted(lag_series(h).items()):
        ax_l.plot([t for t, _ in points], [b if b is not None else float("nan") for _, b in points],
                  label=f"region {r}")
    ax_l.set_ylabel("operations behind")
    ax_l.legend(loc="upper right", fontsize=8)
    for name, points in throughput_series(h).items():
        ax_t.plot([t for t, _ in points], [c for _, c in points], label=name)
    ax_t.set_ylabel("operations / s")
    ax_t.set_xlabel("seconds since start")
    ax_t.legend(loc="upper right", fontsize=8)
    for name, colour in (("healed", "green"), ("converged", "black")):
        if name in h.marks:
            for ax in (ax_f, ax_l, ax_t):
                ax.axvline(h.marks[name], color=colour, linestyle="--", linewidth=1)
            ax = ax_f if name == "healed" else ax_t
            ax.text(h.marks[name], ax.get_ylim()[0], f" {name}", fontsize=8, color=colour, va="bottom")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def write_all(result, directory: str) -> dict[str, str]:
    os.makedirs(directory, exist_ok=True)
    return {"json": write_json(result, os.path.join(directory, "report.json")),
            "timeline": write_png(result, os.path.join(directory, "timeline.png"))}
