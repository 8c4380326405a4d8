"""The chaos report as a reader meets it: built from run records made by hand (no cluster).

A region that does not answer the sampler is drawn down (a labelled band, its line
broken, a dotted "at least this far behind"), never at 0; every text of the timeline
is readable (at least 9 pt) and the down labels do not overlap; ``report.json`` stays
small for a passing run however many operations it had, while a failing run (or
``--full-history``) keeps the whole history beside it; the report directory is
ignored by git; every option of ``braid-chaos`` says what it does and its default.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
from itertools import combinations

import matplotlib
import pytest

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.text import Text  # noqa: E402
from rich.console import Console  # noqa: E402

from chaos import report  # noqa: E402
from chaos.checkers import Verdict  # noqa: E402
from chaos.cli import build_parser  # noqa: E402
from chaos.history import FAIL, OK, History, Op  # noqa: E402
from chaos.run import RunConfig, RunResult  # noqa: E402
from chaos.sim.cli import parser as sim_parser  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROUND_S = 0.5
PER_ROUND = 10  # operations each region's origin log grows by per sampling round


def record(rounds: int = 40, down: dict[int, tuple[int, int]] | None = None, ops: int = 100,
           faults: list[tuple[str, list[int], float, float]] = ()) -> History:
    """A run's history: three regions sampled every half second, in order 1, 2, 3.  Region 3 lacks
    five of origin 1's operations at every round; ``down`` maps a region to the rounds [a, b) it
    did not answer (its own log stops growing meanwhile)."""
    down = down or {}
    h = History()
    own = {1: 0, 2: 0, 3: 0}
    for k in range(rounds):
        for r in (1, 2, 3):
            a, b = down.get(r, (rounds, rounds))
            if not a <= k < b:
                own[r] = PER_ROUND * k  # each region's own log grows while it is up
        for i, r in enumerate((1, 2, 3)):
            a, b = down.get(r, (rounds, rounds))
            if a <= k < b:
                h.samples.append(_sample(k, i, r, False, {}))
            else:
                vv = dict(own)
                if r == 3:
                    vv[1] -= 5
                h.samples.append(_sample(k, i, r, True, vv))
    for kind, targets, t0, t1 in faults:
        f = h.fault(kind, targets)
        f.t0, f.t1 = t0, t1
    h.ops = [Op("w", "xadd", 1 + i % 3, "chaos:log", i * 0.001, i * 0.001 + 0.0005, OK if i % 7 else FAIL,
                f"{i}-1", {"fields": {"v": f"value {i}"}}) for i in range(ops)]
    h.marks = {"faults": 0.0, "healed": rounds * ROUND_S, "converged": rounds * ROUND_S + 0.2}
    return h


def _sample(k, i, region, reachable, vv):
    from chaos.history import Sample

    return Sample(k * ROUND_S + 0.01 * i, region, reachable, vv)


def result_of(history: History, ok: bool = True) -> RunResult:
    verdicts = [Verdict("convergence", ok, "3 regions identical" if ok else "1 violation(s); first: region 2 differs",
                        [] if ok else ["region 2 differs"])]
    return RunResult(RunConfig(3, 20.0, 7, ["kill", "pause"]), history, verdicts, 0.2, [], [])


# ------------------------------------------------------------------ a region down
def test_a_killed_region_is_measured_down_not_at_zero():
    h = record(down={2: (10, 20)}, faults=[("kill", [2], 10 * ROUND_S - 0.2, 19 * ROUND_S)])
    lags = report.lag_by_region(h)
    assert [b for _, b in lags[1].points] == [0] * 40  # measured against the others of its round
    assert [b for _, b in lags[3].points] == [5] * 40
    gap = [b for t, b in lags[2].points if 10 * ROUND_S <= t < 20 * ROUND_S]
    assert gap == [None] * 10  # no answer: no lag, and certainly not 0
    [(t0, t1)] = lags[2].down
    assert t0 == pytest.approx(9 * ROUND_S + 0.01) and t1 == pytest.approx(20 * ROUND_S + 0.01)
    # what regions 1 and 3 hold beyond region 2's last answer (round 9): their own logs' growth since then
    assert [b for _, b in lags[2].at_least] == [2 * PER_ROUND * (k - 9) for k in range(10, 20)]
    summary = report.lag_summary(h)
    assert summary["2"]["down"] == [{"from": t0, "to": t1, "why": "killed"}]
    assert summary["1"]["down"] == [] and summary["3"]["max_behind"] == 5


def test_the_timeline_draws_a_down_region_as_a_labelled_band():
    h = record(down={2: (10, 20)}, faults=[("kill", [2], 10 * ROUND_S - 0.2, 19 * ROUND_S)])
    fig = report.timeline_figure(result_of(h))
    try:
        lag_axes = fig.axes[1]
        [band] = [p for p in lag_axes.patches if p.get_gid() == "down:2"]
        x0, x1 = band.get_x(), band.get_x() + band.get_width()
        assert x0 <= 10 * ROUND_S and x1 >= 19.9 * ROUND_S  # covers every round it did not answer
        assert not [p for p in lag_axes.patches if p.get_gid() in ("down:1", "down:3")]
        [line] = [ln for ln in lag_axes.lines if ln.get_gid() == "lag:2"]
        inside = [y for x, y in zip(line.get_xdata(), line.get_ydata(), strict=True) if x0 < x < x1]
        assert inside and all(y != y for y in inside)  # NaN: the line is broken, not drawn at 0
        [dotted] = [ln for ln in lag_axes.lines if ln.get_gid() == "at-least:2"]
        assert min(dotted.get_ydata()) > 0 and dotted.get_linestyle() == ":"
        labels = [t.get_text().strip() for t in lag_axes.texts if t.get_gid() == "down-label"]
        assert labels == ["region 2 down (killed)"]
    finally:
        plt.close(fig)


def test_a_paused_region_is_labelled_paused_and_a_silent_one_just_down():
    h = record(down={1: (4, 8), 3: (20, 26)}, faults=[("pause", [1], 4 * ROUND_S - 0.1, 8 * ROUND_S)])
    summary = report.lag_summary(h)
    assert [w["why"] for w in summary["1"]["down"]] == ["paused"]
    assert [w["why"] for w in summary["3"]["down"]] == [""]  # no fault explains it: plain "down"
    fig = report.timeline_figure(result_of(h))
    try:
        labels = sorted(t.get_text().strip() for t in fig.axes[1].texts if t.get_gid() == "down-label")
        assert labels == ["region 1 down (paused)", "region 3 down"]
    finally:
        plt.close(fig)


def test_a_region_that_left_the_members_ends_with_a_label():
    h = record()
    h.samples = [s for s in h.samples if not (s.region == 3 and s.t > 8.0)]  # removed: no longer sampled
    fig = report.timeline_figure(result_of(h))
    try:
        labels = [t.get_text().strip() for t in fig.axes[1].texts if t.get_gid() == "down-label"]
        assert labels == ["region 3 left"]
    finally:
        plt.close(fig)


# ------------------------------------------------------------------ readable text
def test_every_text_is_at_least_9_pt_and_down_labels_do_not_overlap():
    # three regions down in overlapping, short windows: their labels would collide on one line
    h = record(rounds=30, down={1: (5, 7), 2: (6, 8), 3: (7, 9)},
               faults=[("kill", [1], 2.4, 3.4), ("pause", [2], 2.9, 3.9), ("partition", [1, 3], 3.0, 6.0),
                       ("clock", [3], 5.0, 7.0), ("slow-fsync", [3], 8.0, 9.0)])
    fig = report.timeline_figure(result_of(h))
    try:
        fig.canvas.draw()
        texts = [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]
        assert texts and min(t.get_fontsize() for t in texts) >= 9, \
            sorted((t.get_fontsize(), t.get_text()) for t in texts)[:5]
        renderer = fig.canvas.get_renderer()
        labels = [t for t in fig.axes[1].texts if t.get_gid() == "down-label"]
        assert len(labels) == 3
        for a, b in combinations(labels, 2):
            assert not a.get_window_extent(renderer).overlaps(b.get_window_extent(renderer)), \
                (a.get_text(), b.get_text())
        legend = fig.axes[0].get_legend()
        assert [t.get_text() for t in legend.get_texts()] == ["kill", "pause", "partition", "clock", "slow-fsync"]
        # overlapping faults on one region get lanes of their own: no bar hides another
        bars = [p for p in fig.axes[0].patches if (p.get_gid() or "").endswith(":3")]
        for a, b in combinations(bars, 2):
            same_lane = a.get_y() == b.get_y()
            overlap = a.get_x() < b.get_x() + b.get_width() and b.get_x() < a.get_x() + a.get_width()
            assert not (same_lane and overlap), (a.get_gid(), b.get_gid())
    finally:
        plt.close(fig)


# ------------------------------------------------------------------ report size
def test_report_json_is_small_for_a_passing_run_and_full_for_a_failing_one(tmp_path):
    small, large = tmp_path / "small", tmp_path / "large"
    report.write_all(result_of(record(ops=500)), str(small))
    paths = report.write_all(result_of(record(ops=20_000)), str(large))
    assert set(paths) == {"json", "timeline"} and not (large / report.HISTORY).exists()
    size = os.path.getsize(paths["json"])
    assert size < 20_000, size
    assert abs(size - os.path.getsize(small / report.REPORT)) < 200  # it does not grow with the operations
    data = json.loads((large / report.REPORT).read_text())
    assert data["verdict"] == "pass" and data["full_history"] is None
    assert data["stats"]["operations"] == 20_000 and "history" not in data

    failed = result_of(record(ops=20_000), ok=False)
    report.write_json(failed, str(large / report.REPORT))
    data = json.loads((large / report.REPORT).read_text())
    assert data["verdict"] == "fail" and data["full_history"] == report.HISTORY
    back = report.load_history(str(large))
    assert len(back.ops) == 20_000 and len(back.samples) == 120 and back.ops[-1].value == "19999-1"
    assert [f.kind for f in back.faults] == [f.kind for f in failed.history.faults]

    report.write_json(result_of(record(ops=10)), str(large / report.REPORT))  # a passing run, same directory
    assert not (large / report.HISTORY).exists()  # no history of another run beside its summary
    report.write_json(result_of(record(ops=10)), str(large / report.REPORT), full_history=True)
    assert len(report.load_history(str(large / report.HISTORY)).ops) == 10


def test_the_default_report_directory_is_ignored_by_git():
    out = build_parser().parse_args(["run"]).out
    for path in (out + "/", os.path.join(out, report.REPORT), os.path.join(out, report.HISTORY)):
        probe = subprocess.run(["git", "check-ignore", "-q", path], cwd=ROOT)
        assert probe.returncode == 0, f"{path} is not ignored by git"


# ------------------------------------------------------------------ help text
def _options(parser: argparse.ArgumentParser):
    return [a for a in parser._actions if a.option_strings and not isinstance(a, argparse._HelpAction)]


def _subcommands(parser: argparse.ArgumentParser) -> dict:
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return sub


@pytest.mark.parametrize("which", ["run", "sim"])
def test_every_option_says_what_it_does_and_its_default(which):
    parser = _subcommands(build_parser()).choices["run"] if which == "run" else sim_parser()
    options = _options(parser)
    assert len(options) >= 10
    for action in options:
        text = action.help or ""
        assert len(text) > 20 and "(default" in text, f"braid-chaos {which} {action.option_strings[0]}: {text!r}"


def test_every_subcommand_has_help(capsys):
    sub = _subcommands(build_parser())
    helps = {a.dest: a.help for a in sub._choices_actions}
    assert set(helps) == {"run", "sim"} and all(h and len(h) > 20 for h in helps.values())
    with pytest.raises(SystemExit) as exit:
        build_parser().parse_args(["--help"])
    out = capsys.readouterr().out
    assert exit.value.code == 0 and "braid-chaos sim --help" in out and "--full-history" not in out


# ------------------------------------------------------------------ the regions' numbers
def test_the_report_says_once_why_regions_are_not_numbered_from_one():
    result = result_of(record())
    result.regions = [13, 14, 15]
    out = io.StringIO()
    report.print_report(result, {}, Console(file=out, width=200))
    text = out.getvalue()
    assert text.count("numbered 13-15") == 1 and text.index("numbered 13-15") < text.index("convergence")
    result.regions = [1, 2, 3]
    assert report.numbering_line(result) is None
