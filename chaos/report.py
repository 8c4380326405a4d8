"""A chaos run's report: a table in the terminal, a small JSON summary, a PNG timeline,
and - when the run failed, or when asked - the whole recorded history.

Files written to the report directory (``braid-chaos run --out``, default
``chaos-report/``):

* ``report.json``: the summary - configuration, verdicts, errors, the fault
  schedule and the faults as injected, phase marks, operation counts, and per
  region its largest lag and the windows it did not answer.  Its size does not
  grow with the number of operations (a passing run of any length stays a few
  kilobytes per minute of faults), so it is cheap to keep and to read.
* ``history.json.gz``: every client operation, fault and sample
  (:meth:`chaos.history.History.to_json`, gzip-compressed), enough to check the
  run again or plot it again (:func:`load_history`).  Written when the run
  failed, or with ``--full-history``; otherwise not written, and a stale one
  from an earlier run in the same directory is removed so that the directory
  describes one run.  ``report.json``'s ``full_history`` names it (or is null).
* ``timeline.png``: three panels on one time axis:

  - faults: one bar per fault, on the row of the region(s) it hit (faults that
    overlap on a region share its row in lanes), coloured by kind, with a legend
    of the kinds;
  - lag: per region, how many operations it lacks of what the most advanced
    region holds, per sampling round.  A region that does not answer the
    sampler (killed, paused, restarting) has no lag to plot: its window is a
    shaded band labelled "region N down", its line stops and resumes with
    markers, and a dotted line in its colour shows how far it is behind *at
    least*: what the answering regions hold that it had not at its last answer.
    A down region is never drawn at 0.  A region that left the members (a
    membership change) is no longer sampled: its line ends with "region N left";
  - throughput: acknowledged client operations per second, and failed or
    unknown ones;

  with the heal and the convergence marked as vertical lines.  Every text is at
  least 9 pt.

A sampling round asks every member once; rounds are told apart by a region
answering twice (the sampler asks each member once per round, in order), so the
lag of a region is measured against the others of the same round, not against
a stale or a later sample.
"""

from __future__ import annotations

import gzip
import json
import os
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field

from rich.console import Console
from rich.table import Table

from .history import FAIL, INFO, OK, History

FAULT_COLOURS = {"kill": "tab:red", "pause": "tab:orange", "partition": "tab:purple", "one-way": "tab:pink",
                 "bridge": "tab:brown", "long-partition": "tab:gray", "link-faults": "tab:olive", "clock": "tab:cyan",
                 "disk-full": "tab:gray", "slow-fsync": "tab:blue", "restore": "tab:red",
                 "shard-kill": "darkred", "membership": "tab:green"}
REGION_COLOURS = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink",
                  "tab:gray", "tab:olive", "tab:cyan")
DOWN_CAUSES = {"kill": "killed", "pause": "paused", "restore": "restored from an older copy",
               "shard-kill": "a shard killed", "membership": "membership change"}
FONT_PT = 10      # every text of the timeline; the smallest is SMALL_PT
SMALL_PT = 9
LEFT_AFTER_S = 2.0  # a region the sampler stopped asking this long before the end left the members
REPORT = "report.json"
HISTORY = "history.json.gz"
TIMELINE = "timeline.png"


def summary_table(result) -> Table:
    shards = f"  shards={result.config.shards}" if result.config.shards > 1 else ""
    table = Table(title=f"braid-chaos run  seed={result.config.seed}  regions={result.config.regions}{shards}  "
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
            "faults": dict(kinds), "waits": wait_counts(history)}


def wait_counts(history: History) -> dict[str, int]:
    """The waiters' WAITs: how many were sent, answered the count wanted, answered fewer at their timeout,
    had no answer (timeout or broken connection) or were refused."""
    waits = history.select("wait")
    answered = [w for w in waits if w.outcome == OK]
    reached = sum(int(w.value) >= w.args["wanted"] for w in answered)
    return {"sent": len(waits), "reached": reached, "timed_out": len(answered) - reached,
            "unknown": sum(w.outcome == INFO for w in waits), "refused": sum(w.outcome == FAIL for w in waits)}


def wait_line(history: History) -> str | None:
    """The report's WAIT line (None: no client waited)."""
    w = wait_counts(history)
    if not w["sent"]:
        return None
    wanted = ", ".join(f"WAIT {n}×{c}" for n, c in sorted(Counter(op.args["wanted"] for op in
                                                                   history.select("wait")).items()))
    return (f"WAIT: {w['sent']} sent ({wanted}): {w['reached']} answered the count wanted, {w['timed_out']} "
            f"timed out with fewer, {w['unknown']} unanswered, {w['refused']} refused")


def numbering_line(result) -> str | None:
    """Why the regions are not numbered 1..N, said once at the top (the membership fault's
    regions take the top of the numbers, so that every region it adds dials every member)."""
    numbers = result.regions
    if not numbers or numbers == list(range(1, len(numbers) + 1)):
        return None
    return (f"the {len(numbers)} regions are numbered {numbers[0]}-{numbers[-1]} (region-{numbers[0]} .. "
            f"region-{numbers[-1]}): the membership fault adds regions under the lower numbers, so that each "
            "added region dials every member")


def print_report(result, paths: dict[str, str], console: Console | None = None) -> None:
    console = console or Console()
    if (numbering := numbering_line(result)) is not None:
        console.print(numbering)
    console.print(summary_table(result))
    s = stats(result.history)
    conv = f"{result.convergence_s:.2f} s" if result.convergence_s is not None else "never"
    console.print(f"{s['operations']} operations ({s['ok']} ok, {s['fail']} failed, {s['info']} unknown); "
                  f"faults: {', '.join(f'{k}×{n}' for k, n in sorted(s['faults'].items())) or 'none'}; "
                  f"converged {conv} after the heal")
    if (waits := wait_line(result.history)) is not None:
        console.print(waits)
    if result.membership:
        console.print(f"membership: {'; '.join(result.membership)}")
    for line in shard_lines(result):
        console.print(line)
    for name, path in paths.items():
        console.print(f"{name}: {path}")
    if "history" not in paths:
        console.print("(the run passed: its full history was not kept; --full-history keeps it)")
    first_bad = next((v for v in result.verdicts if not v.ok), None)
    if first_bad is not None:
        console.print(f"[red]{first_bad.name}[/red]:")
        for p in first_bad.problems[:10]:
            console.print(f"  - {p}")
    console.print("[bold green]PASS[/bold green]" if result.ok else "[bold red]FAIL[/bold red]")


def shard_lines(result) -> list[str]:
    """A sharded run: each shard's slots and workload keys, and what each single-shard kill did."""
    info = getattr(result, "shards", None) or {}
    if not info:
        return []
    lines = [f"shards: {info['count']} per region; " + "; ".join(
        f"shard {k} (slots {slots}): {', '.join(info['keys'].get(str(k), [])) or 'no workload key'}"
        for k, slots in enumerate(info.get("slots") or ["?"] * info["count"]))]
    from .checkers import served_meanwhile

    for f in result.history.faults:
        if f.kind == "shard-kill":
            served = f"; the region's other shards acknowledged {served_meanwhile(result.history, f)} operations " \
                     "until it answered" if f.info.get("restarted") else ""
            lines.append(f"  t={f.t0:.1f}s region {f.targets[0]}: {f.detail}{served}")
    return lines


# ------------------------------------------------------------------ lag
@dataclass
class Lag:
    """One region's lag over the run, from the sampler's version vectors."""

    points: list[tuple[float, int | None]] = field(default_factory=list)  # (t, behind); None: no answer
    down: list[tuple[float, float]] = field(default_factory=list)  # from its last answer to its next
    at_least: list[tuple[float, int]] = field(default_factory=list)  # while down: behind its last answer

    @property
    def max_behind(self) -> tuple[int, float | None]:
        """(operations behind, when) at its worst among its answers."""
        answered = [(b, t) for t, b in self.points if b is not None]
        return max(answered, key=lambda bt: (bt[0], -bt[1])) if answered else (0, None)


def _rounds(history: History) -> list[list]:
    """The samples split into sampling rounds: a round ends where a region it holds is sampled again."""
    rounds: list[list] = []
    seen: set[int] = set()
    for s in sorted(history.samples, key=lambda s: s.t):
        if not rounds or s.region in seen:
            rounds.append([])
            seen = set()
        rounds[-1].append(s)
        seen.add(s.region)
    return rounds


def _behind(best: dict[int, int], vv: dict[int, int]) -> int:
    return sum(max(0, n - vv.get(o, 0)) for o, n in best.items())


def lag_by_region(history: History) -> dict[int, Lag]:
    """Per region: its lag at every sample it answered, the windows it did not, and in them how far behind
    its last answer the answering regions of each round were."""
    lags: dict[int, Lag] = defaultdict(Lag)
    last_vv: dict[int, dict[int, int]] = {}
    for batch in _rounds(history):
        best: dict[int, int] = {}
        for s in batch:
            if s.reachable:
                last_vv[s.region] = s.vv
                for o, n in s.vv.items():
                    best[o] = max(best.get(o, 0), n)
        for s in batch:
            lag = lags[s.region]
            lag.points.append((s.t, _behind(best, s.vv) if s.reachable else None))
            if not s.reachable:
                lag.at_least.append((s.t, _behind(best, last_vv.get(s.region, {}))))
    for lag in lags.values():
        lag.down = _down_windows(lag.points)
    return dict(lags)


def _down_windows(points: list[tuple[float, int | None]]) -> list[tuple[float, float]]:
    windows, start = [], None
    for i, (t, behind) in enumerate(points):
        if behind is None and start is None:
            start = points[i - 1][0] if i else t  # the line stops at its last answer
        elif behind is not None and start is not None:
            windows.append((start, t))
            start = None
    if start is not None:
        windows.append((start, points[-1][0]))
    return windows


def down_cause(history: History, region: int, window: tuple[float, float]) -> str:
    """Why a region did not answer in a window, from the faults that hit it then ("" if none explains it)."""
    end_of_faults = history.marks.get("healed", window[1])
    causes = [_cause(f) for f in history.faults
              if f.kind in DOWN_CAUSES and region in f.targets
              and f.t0 <= window[1] and (f.t1 if f.t1 is not None else end_of_faults) >= window[0]]
    return ", ".join(dict.fromkeys(causes))


def _cause(fault) -> str:
    if fault.kind == "membership":  # "forced removal of region 12 (region-12)": killed, then removed
        return fault.detail.split(" of region")[0] or DOWN_CAUSES["membership"]
    return DOWN_CAUSES[fault.kind]


def down_label(history: History, region: int, window: tuple[float, float]) -> str:
    cause = down_cause(history, region, window)
    return f"region {region} down" + (f" ({cause})" if cause else "")


def lag_summary(history: History) -> dict[str, dict]:
    out = {}
    for region, lag in sorted(lag_by_region(history).items()):
        worst, when = lag.max_behind
        out[str(region)] = {"max_behind": worst, "max_behind_at": when,
                            "down": [{"from": t0, "to": t1, "why": down_cause(history, region, (t0, t1))}
                                     for t0, t1 in lag.down]}
    return out


def throughput_series(history: History) -> dict[str, list[tuple[int, int]]]:
    per: dict[str, Counter] = {OK: Counter(), "failed/unknown": Counter()}
    for op in history.ops:
        per[OK if op.outcome == OK else "failed/unknown"][int(op.t1)] += 1
    end = int(max((op.t1 for op in history.ops), default=0)) + 1
    return {name: [(t, c[t]) for t in range(end)] for name, c in per.items()}


# ------------------------------------------------------------------ files
def summary(result, full_history: str | None) -> dict:
    h = result.history
    return {
        "config": asdict(result.config),
        "verdict": "pass" if result.ok else "fail",
        "verdicts": [v.to_json() for v in result.verdicts],
        "errors": result.errors,
        "convergence_s": result.convergence_s,
        "schedule": [{"at": s.at, "kind": s.kind, "targets": list(s.targets), "length": s.length,
                      "params": s.params} for s in result.steps],
        "faults": [asdict(f) for f in h.faults],
        "marks": dict(h.marks),
        "stats": stats(h),
        "lag": lag_summary(h),
        "membership": result.membership,
        "shards": shard_report(result),
        "full_history": full_history,
    }


def shard_report(result) -> dict | None:
    """report.json's ``shards``: null unsharded, else the count, each shard's slots and keys, and each
    single-shard kill (region, shard, restart time, its siblings' answers)."""
    info = getattr(result, "shards", None) or {}
    if not info:
        return None
    from .checkers import served_meanwhile

    kills = [{"t": f.t0, "region": f.targets[0], **f.info, "others_acknowledged": served_meanwhile(result.history, f)}
             for f in result.history.faults if f.kind == "shard-kill" and f.info]
    return {**info, "kills": kills}


def write_json(result, path: str, full_history: bool = False) -> str:
    """Write the summary to ``path``, and the whole history beside it if the run failed or ``full_history``."""
    history_path = os.path.join(os.path.dirname(path), HISTORY)
    keep = full_history or not result.ok
    if keep:
        with gzip.open(history_path, "wt", encoding="utf-8") as f:
            json.dump(result.history.to_json(), f, default=str)
    elif os.path.exists(history_path):
        os.remove(history_path)  # an earlier run's: the directory describes this run only
    with open(path, "w") as f:
        json.dump(summary(result, HISTORY if keep else None), f, default=str, indent=1)
    return path


def load_history(path: str) -> History:
    """The history of a report directory (or of a ``history.json.gz`` file), to check or plot it again."""
    if os.path.isdir(path):
        path = os.path.join(path, HISTORY)
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return History.from_json(json.load(f))


# ------------------------------------------------------------------ timeline
def _lanes(intervals: list[tuple[float, float]]) -> list[int]:
    """A lane per interval (in the given order) such that intervals sharing a lane do not overlap."""
    ends: list[float] = []
    lanes = []
    for t0, t1 in intervals:
        lane = next((i for i, end in enumerate(ends) if end <= t0), len(ends))
        if lane == len(ends):
            ends.append(t1)
        else:
            ends[lane] = t1
        lanes.append(lane)
    return lanes


def _region_colour(regions: list[int], region: int) -> str:
    return REGION_COLOURS[regions.index(region) % len(REGION_COLOURS)]


def _draw_faults(ax, h: History, regions: list[int]) -> None:
    rows: dict[int, list] = defaultdict(list)
    for f in sorted(h.faults, key=lambda f: f.t0):
        end = f.t1 if f.t1 is not None else h.marks.get("healed", f.t0)
        for r in f.targets:
            rows[r].append((f.t0, max(end, f.t0), f.kind))
    for r, bars in rows.items():
        lanes = _lanes([(t0, t1) for t0, t1, _ in bars])
        count = max(lanes) + 1
        height = 0.7 / count
        for (t0, t1, kind), lane in zip(bars, lanes, strict=True):
            y = r - 0.35 + height * (lane + 0.5)
            ax.barh(y, t1 - t0, left=t0, height=height * 0.9, color=FAULT_COLOURS.get(kind, "black"), alpha=0.85,
                    gid=f"fault:{kind}:{r}")
    ax.set_yticks(regions, [f"region {r}" for r in regions])
    ax.set_ylim(min(regions) - 0.6, max(regions) + 0.6)
    from matplotlib.patches import Patch

    kinds = list(dict.fromkeys(f.kind for f in sorted(h.faults, key=lambda f: f.t0)))
    if kinds:
        ax.legend(handles=[Patch(color=FAULT_COLOURS.get(k, "black"), label=k) for k in kinds],
                  title="faults", loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=SMALL_PT,
                  title_fontsize=SMALL_PT)


def _place_labels(fig, ax, labels: list[tuple[float, str, str]]) -> None:
    """Labels (x, text, colour) along the top of ``ax``, each moved down a row until it overlaps no other."""
    import matplotlib.transforms as transforms

    renderer = fig.canvas.get_renderer()
    trans = transforms.blended_transform_factory(ax.transData, ax.transAxes)
    placed = []
    for x, text, colour in sorted(labels):
        row = 0
        while True:
            artist = ax.text(x, 0.97 - 0.11 * row, f" {text}", transform=trans, fontsize=SMALL_PT, color=colour,
                             va="top", ha="left", gid="down-label",
                             bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.75, "pad": 1})
            box = artist.get_window_extent(renderer)
            if not any(box.overlaps(other) for other in placed) or row >= 8:
                placed.append(box)
                break
            artist.remove()
            row += 1


def _draw_lag(ax, h: History, regions: list[int]) -> list[tuple[float, str, str]]:
    """The lag panel; returns the labels of the down windows, placed once the layout is final."""
    from matplotlib.lines import Line2D

    labels = []
    drew_at_least = False
    top = 0
    for r, lag in sorted(lag_by_region(h).items()):
        top = max([top, *(b for _, b in lag.points if b is not None), *(b for _, b in lag.at_least)])
        colour = _region_colour(regions, r)
        ax.plot([t for t, _ in lag.points], [b if b is not None else float("nan") for _, b in lag.points],
                color=colour, label=f"region {r}", marker=".", markersize=4, gid=f"lag:{r}")
        for t0, t1 in lag.down:
            ax.axvspan(t0, t1, color=colour, alpha=0.18, hatch="//", linewidth=0, gid=f"down:{r}")
            labels.append((t0, down_label(h, r, (t0, t1)), colour))
            inside = [(t, b) for t, b in lag.at_least if t0 <= t <= t1]
            if inside:
                ax.plot([t for t, _ in inside], [b for _, b in inside], color=colour, linestyle=":", linewidth=2,
                        marker="." if len(inside) == 1 else None, gid=f"at-least:{r}")
                drew_at_least = True
    lags = lag_by_region(h)
    last = max((lag.points[-1][0] for lag in lags.values() if lag.points), default=0.0)
    for r, lag in sorted(lags.items()):
        if lag.points and lag.points[-1][0] < last - LEFT_AFTER_S:  # no longer sampled: it left the members
            labels.append((lag.points[-1][0], f"region {r} left", _region_colour(regions, r)))
    handles, _ = ax.get_legend_handles_labels()
    if drew_at_least:
        handles.append(Line2D([], [], color="black", linestyle=":", linewidth=2,
                              label="down: at least this far\nbehind (since its last answer)"))
    if handles:
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=SMALL_PT)
    # symlog: the lag of regions that answer (tens) and of a region down for seconds (thousands) both show
    ax.set_yscale("symlog", linthresh=10)
    ax.set_ylim(0, 8 * max(top, 10))  # headroom above the data for the down labels
    ax.set_ylabel("operations behind\nthe most advanced region")
    return labels


def timeline_figure(result):
    """The timeline as a matplotlib figure (Agg; the caller closes it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    h = result.history
    regions = sorted({s.region for s in h.samples} | {r for f in h.faults for r in f.targets}) or [1]
    with plt.rc_context({"font.size": FONT_PT}):
        fig, (ax_f, ax_l, ax_t) = plt.subplots(3, 1, figsize=(13, 8.5), sharex=True, layout="constrained",
                                              gridspec_kw={"height_ratios": [1.2, 1.6, 1.2]})
        _draw_faults(ax_f, h, regions)
        down_labels = _draw_lag(ax_l, h, regions)
        ax_f.set_title(f"braid-chaos run seed={result.config.seed}: {'PASS' if result.ok else 'FAIL'}")
        for name, points in throughput_series(h).items():
            ax_t.plot([t for t, _ in points], [c for _, c in points], label=name)
        ax_t.set_ylabel("operations / s")
        ax_t.set_xlabel("seconds since start")
        ax_t.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=SMALL_PT)
        for name, colour in (("healed", "green"), ("converged", "black")):
            if name in h.marks:
                for ax in (ax_f, ax_l, ax_t):
                    ax.axvline(h.marks[name], color=colour, linestyle="--", linewidth=1)
                ax = ax_f if name == "healed" else ax_t
                ax.text(h.marks[name], 0.02, f" {name}", transform=ax.get_xaxis_transform(), fontsize=SMALL_PT,
                        color=colour, va="bottom")
        fig.canvas.draw()  # the final layout, so that the down labels can be kept apart
        _place_labels(fig, ax_l, down_labels)
    return fig


def write_png(result, path: str) -> str:
    import matplotlib.pyplot as plt

    fig = timeline_figure(result)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def write_all(result, directory: str, full_history: bool = False) -> dict[str, str]:
    """Write the report files; the paths written, by name (``history`` only when it was kept)."""
    os.makedirs(directory, exist_ok=True)
    paths = {"json": write_json(result, os.path.join(directory, REPORT), full_history)}
    if full_history or not result.ok:
        paths["history"] = os.path.join(directory, HISTORY)
    paths["timeline"] = write_png(result, os.path.join(directory, TIMELINE))
    return paths
