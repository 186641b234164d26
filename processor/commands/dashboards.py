"""``ivm dashboards render``: the Grafana dashboards of ``monitoring/`` drawn from a live Prometheus.

Grafana cannot run everywhere; this command evaluates every panel's PromQL over
a time range with Prometheus' HTTP API (``/api/v1/query_range``) and draws the
panels with matplotlib, laid out as in Grafana (its 24-column grid), one PNG per
dashboard.  Template variables take their "All" value (a ``query`` variable
becomes ``.+``), so each panel shows every query.

The tests use :func:`dashboard_queries` too: every expression drawn here is one
that ``tests/integration/test_prometheus.py`` evaluates against a live Prometheus.
"""

from __future__ import annotations

import argparse
import json
import re
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from ivm.resources import monitoring_dir

DASHBOARDS_DIR = monitoring_dir() / "grafana" / "dashboards"  # the shipped dashboards (ivm.resources)
_UNITS = {"s": "seconds", "bytes": "bytes", "ops": "per second"}


@dataclass(frozen=True)
class PanelQuery:
    """One target of one panel, with the dashboard's variables substituted."""

    dashboard: str
    panel: str
    expr: str  # as written in the dashboard
    promql: str  # ready to evaluate
    legend: str


def load_dashboards(directory: Path = DASHBOARDS_DIR) -> list[dict[str, Any]]:
    """Every dashboard JSON of ``directory``, sorted by file name."""
    return [json.loads(p.read_text()) for p in sorted(directory.glob("*.json"))]


def expand(expr: str, dashboard: dict[str, Any]) -> str:
    """``expr`` with each template variable (``$name``, ``${name}``) replaced by its "All" value."""
    for var in dashboard.get("templating", {}).get("list", []):
        value = var.get("allValue") or ".+"
        expr = re.sub(r"\$\{" + re.escape(var["name"]) + r"\}|\$" + re.escape(var["name"]) + r"\b", value, expr)
    return expr


def dashboard_queries(directory: Path = DASHBOARDS_DIR) -> list[PanelQuery]:
    """Every panel target of every dashboard."""
    out = []
    for dashboard in load_dashboards(directory):
        for panel in dashboard["panels"]:
            for target in panel.get("targets", []):
                out.append(
                    PanelQuery(
                        dashboard["uid"],
                        panel["title"],
                        target["expr"],
                        expand(target["expr"], dashboard),
                        target.get("legendFormat", ""),
                    )
                )
    return out


def query_range(prometheus: str, promql: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
    """The range vector (``data.result``: metric labels and [time, value] pairs) of ``promql``."""
    params = urllib.parse.urlencode({"query": promql, "start": start, "end": end, "step": step})
    with urllib.request.urlopen(f"{prometheus.rstrip('/')}/api/v1/query_range?{params}", timeout=30) as resp:
        body = json.load(resp)
    if body.get("status") != "success":
        raise RuntimeError(f"PromQL {promql!r} failed: {body}")
    return body["data"]["result"]


def legend(fmt: str, labels: dict[str, str]) -> str:
    """Grafana's ``{{label}}`` legend format; the series' labels when there is none."""
    if fmt:
        return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), fmt).strip()
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()) if k not in ("__name__", "job", "instance"))


def _number(value: float) -> str:
    if value != value:  # NaN
        return "NaN"
    if abs(value) >= 1e4 or value == int(value):
        return f"{value:,.0f}"
    return f"{value:.3g}"


def render_dashboard(
    dashboard: dict[str, Any], prometheus: str, out: Path, range_seconds: float, end: float | None = None
) -> Path:
    """Draw one dashboard's panels over ``[end - range_seconds, end]`` to ``out/<uid>.png``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    end = time.time() if end is None else end
    start = end - range_seconds
    step = max(1.0, range_seconds / 240)
    panels = dashboard["panels"]
    rows = max(p["gridPos"]["y"] + p["gridPos"]["h"] for p in panels)
    unit, header = 0.42, 0.8  # inches per grid row, title band
    height = rows * unit + header
    fig = plt.figure(figsize=(16, height), dpi=72)
    grid = fig.add_gridspec(rows + 1, 24, hspace=0, wspace=4, top=1 - header / height, bottom=0.01, left=0.05)
    fig.suptitle(dashboard["title"], fontsize=14, fontweight="bold")
    for panel in panels:
        pos = panel["gridPos"]
        # the first grid row of each panel holds the title above and the tick labels below
        ax = fig.add_subplot(grid[pos["y"] + 1 : pos["y"] + pos["h"], pos["x"] : pos["x"] + pos["w"]])
        ax.set_title(panel["title"], fontsize=9, loc="left")
        ax.tick_params(labelsize=7)
        series = []
        for target in panel.get("targets", []):
            for s in query_range(prometheus, expand(target["expr"], dashboard), start, end, step):
                times = [datetime.fromtimestamp(float(t)) for t, _v in s["values"]]
                values = [float(v) for _t, v in s["values"]]
                series.append((legend(target.get("legendFormat", ""), s["metric"]), times, values))
        if panel["type"] == "stat":
            ax.axis("off")
            text = "\n".join(f"{name}: {_number(values[-1])}" for name, _t, values in series) or "no data"
            ax.text(0.5, 0.5, text, ha="center", va="center", fontsize=12, transform=ax.transAxes)
            continue
        for name, times, values in series:
            ax.plot(times, values, label=name, linewidth=1.2)
        if not series:
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes, color="grey")
        ax.set_xlim(datetime.fromtimestamp(start), datetime.fromtimestamp(end))
        ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S"))
        unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit")
        if unit in _UNITS:
            ax.set_ylabel(_UNITS[unit], fontsize=7)
        ax.grid(alpha=0.3)
        if any(name for name, _t, _v in series) and len(series) <= 8:
            ax.legend(fontsize=6, loc="upper left", framealpha=0.6)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{dashboard['uid']}.png"
    fig.savefig(path)
    plt.close(fig)
    return path


def render_all(prometheus: str, out: Path, range_seconds: float, directory: Path = DASHBOARDS_DIR) -> list[Path]:
    """One PNG per dashboard of ``directory``; returns their paths."""
    end = time.time()
    return [render_dashboard(d, prometheus, out, range_seconds, end) for d in load_dashboards(directory)]


def parse_duration(text: str) -> float:
    """``90s``, ``15m``, ``2h`` or plain seconds."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([smhd]?)", text.strip())
    if not match:
        raise ValueError(f"not a duration: {text!r} (e.g. 30s, 15m, 1h)")
    return float(match.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}[match.group(2)]


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("dashboards", help="render the Grafana dashboards from a live Prometheus to PNG")
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    render = actions.add_parser("render", help="one PNG per dashboard of monitoring/grafana/dashboards")
    render.add_argument("--prometheus", required=True, help="Prometheus base URL, e.g. http://127.0.0.1:9090")
    render.add_argument("--out", required=True, type=Path, help="directory for the PNG files")
    render.add_argument("--range", default="15m", help="time range ending now (default 15m)")
    render.add_argument("--dashboards", type=Path, default=DASHBOARDS_DIR, help="directory of dashboard JSON files")
    return p


def run(args: argparse.Namespace) -> int:
    from ivm.processor.cli import CommandError

    try:
        seconds = parse_duration(args.range)
    except ValueError as err:
        raise CommandError(f"--range: {err}") from err
    if not args.dashboards.is_dir():
        raise CommandError(f"--dashboards {args.dashboards}: no such directory")
    try:
        paths = render_all(args.prometheus, args.out, seconds, args.dashboards)
    except OSError as err:  # unreachable, or an HTTP error
        raise CommandError(f"cannot query Prometheus at {args.prometheus}: {err}", 1) from err
    except RuntimeError as err:  # Prometheus refused a query
        raise CommandError(f"Prometheus at {args.prometheus}: {err}", 1) from err
    for path in paths:
        print(path)
    return 0
