#!/usr/bin/env python3
"""Generates usescope's Grafana dashboards with grafana-foundation-sdk.

    dashboards/generate.py            # rewrite dashboards/*.json
    dashboards/generate.py --check    # exit 1 if a checked-in file is stale

One script keeps the dashboards consistent: the same template variables
(datasource, job, instance), the same links between them, stable uids, a
unit and a "what bad looks like" description on every panel. Every query
of the three per-host dashboards selects `{job="$job", instance="$instance"}`
through SEL; the fleet overview has no instance variable and reads one
series per host (FLEET_SIGNALS, checked against the hosts' own scrapes by
tests/fleet).

The panels are built with Grafana's own builder library,
grafana-foundation-sdk, at the version pinned in requirements.txt (its
Grafana 10.4 schema, the Grafana of docker-compose.yml). scripts/setup.sh
installs it into a virtual environment of its own; run with another Python,
this script re-runs itself with that one.
"""

import json
import os
import sys
from importlib import metadata
from pathlib import Path

HERE = Path(__file__).resolve().parent
VENV = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "usescope" / "dashboards-venv"


def pinned_sdk():
    """The `grafana-foundation-sdk==VERSION` line of requirements.txt."""
    for line in (HERE / "requirements.txt").read_text().splitlines():
        if line.startswith("grafana-foundation-sdk=="):
            return line.split("==", 1)[1].strip()
    sys.exit(f"{HERE / 'requirements.txt'}: no grafana-foundation-sdk==VERSION line")


def ensure_sdk():
    """Continues only under a Python that has the pinned SDK: the JSON
    depends on its version, so --check must not pass or fail by accident."""
    want = pinned_sdk()
    try:
        have = metadata.version("grafana-foundation-sdk")
    except metadata.PackageNotFoundError:
        have = None
    if have == want:
        return
    venv_python = VENV / "bin" / "python3"
    if venv_python.exists() and not os.environ.get("USESCOPE_DASHBOARDS_REEXEC"):
        os.environ["USESCOPE_DASHBOARDS_REEXEC"] = "1"
        os.execv(venv_python, [str(venv_python), __file__, *sys.argv[1:]])
    sys.exit(
        f"generate.py: needs grafana-foundation-sdk=={want} (found {have or 'none'} under {sys.executable}); "
        f"scripts/setup.sh installs it into {VENV}"
    )


ensure_sdk()

from grafana_foundation_sdk.builders import common as cb  # noqa: E402
from grafana_foundation_sdk.builders import dashboard as db  # noqa: E402
from grafana_foundation_sdk.builders import heatmap as hm  # noqa: E402
from grafana_foundation_sdk.builders import prometheus as pq  # noqa: E402
from grafana_foundation_sdk.builders import stat as st  # noqa: E402
from grafana_foundation_sdk.builders import table as tb  # noqa: E402
from grafana_foundation_sdk.builders import timeseries as ts  # noqa: E402
from grafana_foundation_sdk.cog.encoder import JSONEncoder  # noqa: E402
from grafana_foundation_sdk.models import common as cm  # noqa: E402
from grafana_foundation_sdk.models import dashboard as dm  # noqa: E402
from grafana_foundation_sdk.models import heatmap as hmm  # noqa: E402
from grafana_foundation_sdk.models import prometheus as pm  # noqa: E402

SEL = 'job="$job", instance="$instance"'
DS = dm.DataSourceRef(type_val="prometheus", uid="${datasource}")
RI = "$__rate_interval"

UIDS = {
    "overview": "usescope-overview",
    "kernel": "usescope-kernel",
    "ebpf": "usescope-ebpf",
    "fleet": "usescope-fleet",
    "workload": "usescope-workload",
}


def target(expr, legend="", ref="A", fmt="time_series", instant=False):
    q = (
        pq.Dataquery()
        .datasource(DS)
        .expr(expr)
        .legend_format(legend or "__auto")
        .ref_id(ref)
        .format(pm.PromQueryFormat(fmt))
    )
    return q.instant() if instant else q.range()


def runq_quantile(q, by="", sel=SEL):
    """A run-queue latency quantile from the runqlat histogram."""
    return (f'histogram_quantile({q}, sum by ({by}le) '
            f'(rate(usescope_runqueue_latency_seconds_bucket{{{sel}}}[{RI}])))')


def targets(*pairs, fmt="time_series", instant=False):
    return [
        target(expr, legend, chr(ord("A") + i), fmt, instant)
        for i, (expr, legend) in enumerate(pairs)
    ]


class Layout:
    """Places panels left to right on Grafana's 24-column grid, starting a
    new line when a panel does not fit (the SDK's own placement only wraps
    after a line is full, and would let a panel overhang the grid)."""

    def __init__(self):
        self.items = []  # ("row" | "panel", builder)
        self.x = 0
        self.y = 0
        self.row_h = 0
        self.next_id = 1

    def _id(self):
        i = self.next_id
        self.next_id += 1
        return i

    def row(self, title):
        self.newline()
        row = db.Row(title).id(self._id()).grid_pos(dm.GridPos(h=1, w=24, x=0, y=self.y))
        self.items.append(("row", row))
        self.y += 1

    def newline(self):
        if self.x:
            self.y += self.row_h
            self.x = 0
            self.row_h = 0

    def add(self, panel, w, h):
        if self.x + w > 24:
            self.newline()
        panel.id(self._id()).grid_pos(dm.GridPos(h=h, w=w, x=self.x, y=self.y))
        self.items.append(("panel", panel))
        self.x += w
        self.row_h = max(self.row_h, h)


def thresholds(*steps, base="green"):
    """steps: (value, colour) pairs after the base colour."""
    out = [dm.Threshold(value=None, color=base)]
    out += [dm.Threshold(value=v, color=c) for v, c in steps]
    return db.ThresholdsConfig().mode(dm.ThresholdsMode.ABSOLUTE).steps(out)


def low_is_bad(orange, green):
    """Thresholds for a value that is bad when small (free pages, hit ratio)."""
    return thresholds((orange, "orange"), (green, "green"), base="red")


def timeseries(title, description, unit, tgts, stack=False, minimum=None, maximum=None, thr=None):
    p = (
        ts.Panel()
        .title(title)
        .description(description)
        .datasource(DS)
        .unit(unit)
        .draw_style(cm.GraphDrawStyle.LINE)
        .line_width(1)
        .fill_opacity(20 if stack else 5)
        .show_points(cm.VisibilityMode.NEVER)
        .span_nulls(False)
        .stacking(cb.StackingConfig().mode(cm.StackingMode.NORMAL if stack else cm.StackingMode.NONE).group("A"))
        .legend(cb.VizLegendOptions()
                .display_mode(cm.LegendDisplayMode.LIST)
                .placement(cm.LegendPlacement.BOTTOM)
                .show_legend(True))
        .tooltip(cb.VizTooltipOptions().mode(cm.TooltipDisplayMode.MULTI).sort(cm.SortOrder.DESCENDING))
        .targets(tgts)
    )
    if minimum is not None:
        p.min(minimum)
    if maximum is not None:
        p.max(maximum)
    if thr:
        p.thresholds(thr).thresholds_style(
            cb.GraphThresholdsStyleConfig().mode(cm.GraphThresholdsStyleMode.DASHED))
    return p


def stat(title, description, unit, expr, thr, legend="", decimals=None, mappings=None):
    p = (
        st.Panel()
        .title(title)
        .description(description)
        .datasource(DS)
        .unit(unit)
        .thresholds(thr)
        .color_scheme(db.FieldColor().mode(dm.FieldColorModeId.THRESHOLDS))
        .reduce_options(cb.ReduceDataOptions().calcs(["lastNotNull"]).fields("").values(False))
        .color_mode(cm.BigValueColorMode.BACKGROUND)
        .graph_mode(cm.BigValueGraphMode.AREA)
        .justify_mode(cm.BigValueJustifyMode.AUTO)
        .text_mode(cm.BigValueTextMode.AUTO)
        .targets([target(expr, legend)])
    )
    if decimals is not None:
        p.decimals(decimals)
    if mappings:  # {value: text}
        p.mappings([
            dm.ValueMap(options={value: dm.ValueMappingResult(text=text) for value, text in mappings.items()})
        ])
    return p


def heatmap(title, description, unit, tgt, from_buckets):
    p = (
        hm.Panel()
        .title(title)
        .description(description)
        .datasource(DS)
        .unit(unit)
        .calculate(False)
        .cell_gap(1)
        .color(hm.HeatmapColorOptions()
               .mode(hmm.HeatmapColorMode.SCHEME)
               .scheme("Oranges")
               .scale(hmm.HeatmapColorScale.EXPONENTIAL)
               .exponent(0.5)
               .steps(64))  # Grafana's default; the SDK's 0 would leave no colours
        .y_axis(hm.YAxisConfig().axis_placement(cm.AxisPlacement.LEFT).unit(unit if from_buckets else "short"))
        .rows_frame(hm.RowsHeatmapOptions().layout(cm.HeatmapCellLayout.AUTO))
        .mode(cm.TooltipDisplayMode.SINGLE)
        .show_legend()
        .targets([tgt])
    )
    # The tooltip's histogram of the y-axis only makes sense for buckets.
    return p.show_y_histogram() if from_buckets else p.hide_y_histogram()


def table(title, description, unit, expr):
    return (
        tb.Panel()
        .title(title)
        .description(description)
        .datasource(DS)
        .unit(unit)
        .show_header(True)
        .with_transformation(dm.DataTransformerConfig(
            id_val="organize",
            options={"excludeByName": {"Time": True, "Value": True, "__name__": True}},
        ))
        .targets([target(expr, fmt="table", instant=True)])
    )


def label_values(name, label, query):
    """A template variable whose values are a label of the exporter's series."""
    return (
        db.QueryVariable(name)
        .label(label)
        .datasource(DS)
        .query({"query": query, "refId": name})
        .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(dm.VariableSort.ALPHABETICAL_ASC)
        .include_all(False)
        .multi(False)
    )


def variables():
    return [
        db.DatasourceVariable("datasource").label("Data source").type("prometheus").regex(""),
        label_values("job", "Job", "label_values(node_scrape_collector_success, job)"),
        label_values("instance", "Instance", 'label_values(node_scrape_collector_success{job="$job"}, instance)'),
    ]


def annotations():
    return [
        db.AnnotationQuery()
        .name("Annotations & Alerts")
        .built_in(1)
        .datasource(dm.DataSourceRef(type_val="grafana", uid="-- Grafana --"))
        .enable(True)
        .hide(True)
        .icon_color("rgba(0, 211, 255, 1)")
        .type("dashboard"),
        db.AnnotationQuery()
        .name("Firing alerts")
        .datasource(DS)
        .enable(True)
        .icon_color("red")
        .expr('ALERTS{alertstate="firing", instance="$instance"}'),
    ]


# Prometheus annotation fields the SDK's AnnotationQuery has no setter for
# (its schema is the datasource-neutral one): without them the annotation
# would be titled by its series name and carry no tags.
PROMETHEUS_ANNOTATION_FIELDS = {
    "step": "60s",
    "tagKeys": "alertname,severity",
    "titleFormat": "{{alertname}}",
    "useValueForTime": False,
}


def dashboard(key, title, description, layout, variables_list=None, annotation_list=None):
    d = (
        db.Dashboard(title)
        .uid(UIDS[key])
        .description(description)
        .tags(["usescope"])
        .editable()
        .tooltip(dm.DashboardCursorSync.CROSSHAIR)
        .version(1)
        .refresh("30s")
        .time("now-1h", "now")
        .timezone("")
        .fiscal_year_start_month(0)
        .live_now(False)
        .week_start("")
        .annotations(annotations() if annotation_list is None else annotation_list)
        .link(db.DashboardLink("usescope dashboards")
              .type(dm.DashboardLinkType.DASHBOARDS)
              .tags(["usescope"])
              .as_dropdown(False)
              .include_vars(True)
              .keep_time(True)
              .target_blank(False)
              .icon("external link")
              .tooltip("")
              .url(""))
        .variables(variables() if variables_list is None else variables_list)
    )
    for kind, item in layout.items:
        if kind == "row":
            d.with_row(item)
        else:
            d.with_panel(item)
    out = json.loads(json.dumps(d.build(), cls=JSONEncoder))
    for a in out["annotations"]["list"]:
        if "expr" in a:
            a.update(PROMETHEUS_ANNOTATION_FIELDS)
    return out


def cpus():
    return f'scalar(count(node_cpu_seconds_total{{{SEL}, mode="idle"}}))'


def overview():
    L = Layout()
    L.row("Saturated now")
    top = [
        ("Load per CPU", "Load average (1 min) divided by the CPU count. Bad: 0.7 needs a look, 1.0 or more means tasks queue for CPU or I/O.",
         "short", f'node_load1{{{SEL}}} / {cpus()}', thresholds((0.7, "orange"), (1.0, "red")), 2),
        ("Run-queue p99", "99th percentile time a runnable task waited for a CPU (eBPF). Bad: above 10 ms sustained.",
         "s", runq_quantile("0.99"),
         thresholds((0.005, "orange"), (0.01, "red")), None),
        ("Worst CPU iowait", "iowait of the busiest CPU: one CPU can be stuck while the average looks fine. Bad: above 50%, and paging only when a disk is also busy.",
         "percentunit", f'max(rate(node_cpu_seconds_total{{{SEL}, mode="iowait"}}[{RI}]))', thresholds((0.3, "orange"), (0.5, "red")), 1),
        ("Worst softirq CPU", "Share of time the busiest CPU spends in softirq. Bad: around 30% on one CPU is a network receive storm.",
         "percentunit", f'max(rate(node_cpu_seconds_total{{{SEL}, mode="softirq"}}[{RI}]))', thresholds((0.2, "orange"), (0.3, "red")), 1),
        ("Zone free / low", "Lowest ratio of free pages to the low watermark over all zones. Bad: below 100% means kswapd is reclaiming; staying there means it cannot keep up.",
         "percentunit", f'min(node_zoneinfo_nr_free_pages{{{SEL}}} / (node_zoneinfo_low_pages{{{SEL}}} > 0))', low_is_bad(1.0, 1.2), 0),
        ("Memory PSI", "Share of time some task was stalled waiting for memory (PSI). Bad: anything sustained above a few percent.",
         "percentunit", f'rate(node_pressure_memory_waiting_seconds_total{{{SEL}}}[{RI}])', thresholds((0.05, "orange"), (0.2, "red")), 1),
        ("Busiest disk", "Utilisation (share of time with I/O in flight) of the busiest disk. Bad: 60% warns, 80% is a bottleneck for a single-queue device.",
         "percentunit", f'max(rate(node_disk_io_time_seconds_total{{{SEL}}}[{RI}]))', thresholds((0.6, "orange"), (0.8, "red")), 0),
        ("Conntrack used", "Connection-tracking table use. Bad: at 100% the kernel drops new flows; alerts at 75% and 90%.",
         "percentunit", f'node_nf_conntrack_entries{{{SEL}}} / (node_nf_conntrack_entries_limit{{{SEL}}} > 0)', thresholds((0.75, "orange"), (0.9, "red")), 0),
        ("Listen drops", "Incoming TCP connections dropped at full listen queues per second. Bad: any.",
         "cps", f'rate(node_netstat_TcpExt_ListenDrops{{{SEL}}}[{RI}])', thresholds((0.0001, "red")), None),
        ("Page-cache hits", "Share of page-cache accesses that hit (eBPF). Bad: below 50% under read load; O_DIRECT I/O is not counted.",
         "percentunit", f'clamp_min(1 - rate(usescope_page_cache_misses_total{{{SEL}}}[{RI}]) / (rate(usescope_page_cache_accesses_total{{{SEL}}}[{RI}]) > 0), 0)',
         low_is_bad(0.5, 0.8), 0),
    ]
    for title, desc, unit, expr, thr, dec in top:
        L.add(stat(title, desc, unit, expr, thr, decimals=dec), w=4, h=4)

    L.row("CPU — utilisation, saturation, errors")
    L.add(timeseries("CPU utilisation per CPU",
        "Share of time each CPU was busy (not idle, iowait or steal). Bad: all CPUs near 100% together; one CPU at 100% with others idle is a single-threaded bottleneck.",
        "percentunit", targets((f'1 - sum by (cpu) (rate(node_cpu_seconds_total{{{SEL}, mode=~"idle|iowait|steal"}}[{RI}]))', "cpu {{cpu}}")),
        minimum=0, maximum=1), 6, 8)
    L.add(timeseries("Load and runnable tasks per CPU",
        "Load averages and running tasks divided by the CPU count. Bad: 1 or more sustained. Load includes tasks in uninterruptible (D) sleep, so check iowait too.",
        "short", targets(
            (f'node_load1{{{SEL}}} / {cpus()}', "load1 / CPU"),
            (f'node_load5{{{SEL}}} / {cpus()}', "load5 / CPU"),
            (f'node_procs_running{{{SEL}}} / {cpus()}', "running / CPU")),
        minimum=0, thr=thresholds((0.7, "orange"), (1.0, "red"))), 6, 8)
    L.add(timeseries("Run-queue latency (eBPF)",
        "p50 and p99 wait from wakeup to running. Bad: p99 above 10 ms sustained (tasks wait for a CPU); empty when the runqlat probe is off.",
        "s", targets(
            (runq_quantile("0.50"), "p50"),
            (runq_quantile("0.99"), "p99")),
        thr=thresholds((0.01, "red"))), 6, 8)
    L.add(timeseries("CPU errors: machine checks",
        "Machine-check exceptions per second from /proc/interrupts (needs --collector.interrupts). Bad: any; the CPU or memory reports hardware errors.",
        "cps", targets((f'sum(rate(node_interrupts_total{{{SEL}, type="MCE"}}[{RI}]))', "MCE"))), 6, 8)

    L.row("Memory — utilisation, saturation, errors")
    L.add(timeseries("Memory utilisation",
        "1 - MemAvailable / MemTotal. Bad: close to 100% together with reclaim or major faults on the right.",
        "percentunit", targets((f'1 - node_memory_MemAvailable_bytes{{{SEL}}} / node_memory_MemTotal_bytes{{{SEL}}}', "used")),
        minimum=0, maximum=1), 6, 8)
    L.add(timeseries("Zone free pages / low watermark",
        "Free pages of each zone as a share of its low watermark. Bad: below 100% (kswapd reclaiming); a zone staying below, or dropping toward min (80% of low), means allocations stall.",
        "percentunit", targets((f'node_zoneinfo_nr_free_pages{{{SEL}}} / (node_zoneinfo_low_pages{{{SEL}}} > 0)', "node {{node}} {{zone}}")),
        thr=thresholds((1.0, "transparent"))), 6, 8)
    L.add(timeseries("Reclaim and major faults",
        "Pages scanned by kswapd and by direct reclaim, and major page faults per second. Bad: direct reclaim at all (allocating tasks stall), major faults rising (reading back evicted pages).",
        "cps", targets(
            (f'rate(node_vmstat_pgscan_kswapd{{{SEL}}}[{RI}])', "pgscan kswapd"),
            (f'rate(node_vmstat_pgscan_direct{{{SEL}}}[{RI}])', "pgscan direct"),
            (f'rate(node_vmstat_pgmajfault{{{SEL}}}[{RI}])', "major faults"))), 6, 8)
    L.add(timeseries("Memory errors: OOM kills",
        "Processes killed by the OOM killer in each interval. Bad: any.",
        "short", targets((f'increase(node_vmstat_oom_kill{{{SEL}}}[{RI}])', "OOM kills")), minimum=0), 6, 8)

    L.row("Disk — utilisation, saturation, latency (no error counters in /proc: see dmesg and SMART)")
    L.add(timeseries("Disk utilisation",
        "Share of time each device had I/O in flight (iostat %util). Bad: 60% warns, 80% is a bottleneck for one-request-at-a-time devices; NVMe/RAID can show 100% with headroom.",
        "percentunit", targets((f'rate(node_disk_io_time_seconds_total{{{SEL}}}[{RI}])', "{{device}}")),
        minimum=0, maximum=1, thr=thresholds((0.6, "orange"), (0.8, "red"))), 6, 8)
    L.add(timeseries("Disk queue (aqu-sz)",
        "Average requests queued or in service. Bad: 1 or more on a busy device means requests wait.",
        "short", targets((f'rate(node_disk_io_time_weighted_seconds_total{{{SEL}}}[{RI}])', "{{device}}")),
        minimum=0, thr=thresholds((1, "red"))), 6, 8)
    L.add(timeseries("Disk await",
        "Average time per completed read and write. Bad: tens of ms on SSD, hundreds on spinning disks; seconds during log storms.",
        "s", targets(
            (f'rate(node_disk_read_time_seconds_total{{{SEL}}}[{RI}]) / (rate(node_disk_reads_completed_total{{{SEL}}}[{RI}]) > 0)', "{{device}} read"),
            (f'rate(node_disk_write_time_seconds_total{{{SEL}}}[{RI}]) / (rate(node_disk_writes_completed_total{{{SEL}}}[{RI}]) > 0)', "{{device}} write"))), 6, 8)
    L.add(timeseries("I/O pressure (PSI)",
        "Share of time some (waiting) or all (stalled) non-idle tasks waited for I/O. Bad: stalled above a few percent.",
        "percentunit", targets(
            (f'rate(node_pressure_io_waiting_seconds_total{{{SEL}}}[{RI}])', "some"),
            (f'rate(node_pressure_io_stalled_seconds_total{{{SEL}}}[{RI}])', "full")), minimum=0), 6, 8)

    L.row("Network — utilisation, saturation, errors")
    L.add(timeseries("Network throughput",
        "Bytes per second received (+) and transmitted (-) per interface, loopback excluded. /proc has no link speed: bad is near the NIC's line rate.",
        "Bps", targets(
            (f'rate(node_network_receive_bytes_total{{{SEL}, device!="lo"}}[{RI}])', "{{device}} rx"),
            (f'-rate(node_network_transmit_bytes_total{{{SEL}, device!="lo"}}[{RI}])', "{{device}} tx"))), 6, 8)
    L.add(timeseries("Softnet squeezes and backlog drops",
        "time_squeeze: the NAPI budget ran out with packets left; dropped: the per-CPU backlog overflowed. Bad: squeezes sustained (raise netdev_budget, spread queues); any backlog drop.",
        "cps", targets(
            (f'sum(rate(node_softnet_times_squeezed_total{{{SEL}}}[{RI}]))', "squeezed"),
            (f'sum(rate(node_softnet_dropped_total{{{SEL}}}[{RI}]))', "backlog dropped"))), 6, 8)
    L.add(timeseries("TCP listen queue overflows",
        "SYNs or handshakes dropped because an accept queue was full. Bad: any; clients see connect timeouts.",
        "cps", targets(
            (f'rate(node_netstat_TcpExt_ListenOverflows{{{SEL}}}[{RI}])', "overflows"),
            (f'rate(node_netstat_TcpExt_ListenDrops{{{SEL}}}[{RI}])', "drops"))), 6, 8)
    L.add(timeseries("Network errors and drops",
        "Interface errors and drops per second, and kernel drops by reason (eBPF). Bad: any interface error; drop reasons other than background NO_SOCKET.",
        "pps", targets(
            (f'rate(node_network_receive_errs_total{{{SEL}, device!="lo"}}[{RI}]) + rate(node_network_transmit_errs_total{{{SEL}, device!="lo"}}[{RI}])', "{{device}} errors"),
            (f'rate(node_network_receive_drop_total{{{SEL}, device!="lo"}}[{RI}]) + rate(node_network_transmit_drop_total{{{SEL}, device!="lo"}}[{RI}])', "{{device}} drops"),
            (f'sum by (reason) (rate(usescope_skb_drops_total{{{SEL}}}[{RI}]))', "{{reason}}"))), 6, 8)

    L.row("Conntrack and sockets")
    L.add(timeseries("Conntrack table use",
        "Entries as a share of nf_conntrack_max. Bad: 75% (ticket), 90% (page); at 100% new flows are dropped. Empty without the nf_conntrack module.",
        "percentunit", targets((f'node_nf_conntrack_entries{{{SEL}}} / (node_nf_conntrack_entries_limit{{{SEL}}} > 0)', "used")),
        minimum=0, maximum=1, thr=thresholds((0.75, "orange"), (0.9, "red"))), 8, 8)
    L.add(timeseries("TCP sockets in TIME_WAIT",
        "Sockets in TIME_WAIT. Bad: thousands that keep growing (short upstream connections: enable keepalive); they also hold conntrack entries.",
        "short", targets((f'node_sockstat_TCP_tw{{{SEL}}}', "TIME_WAIT"))), 8, 8)
    L.add(timeseries("Conntrack failures",
        "Packets dropped, entries early-dropped and inserts failed per second. Bad: any drop or early_drop (table full); insert_failed with a half-empty table is a NAT race.",
        "cps", targets(
            (f'rate(node_nf_conntrack_stat_drop{{{SEL}}}[{RI}])', "drop"),
            (f'rate(node_nf_conntrack_stat_early_drop{{{SEL}}}[{RI}])', "early_drop"),
            (f'rate(node_nf_conntrack_stat_insert_failed{{{SEL}}}[{RI}])', "insert_failed"))), 8, 8)

    L.row("Page cache (eBPF)")
    L.add(timeseries("Page-cache hit ratio",
        "1 - misses / accesses. Bad: below 50% under steady read load. Readahead and writes count as misses; O_DIRECT is invisible.",
        "percentunit", targets((f'clamp_min(1 - rate(usescope_page_cache_misses_total{{{SEL}}}[{RI}]) / (rate(usescope_page_cache_accesses_total{{{SEL}}}[{RI}]) > 0), 0)', "hit ratio")),
        minimum=0, maximum=1, thr=thresholds((0.5, "transparent"))), 12, 8)
    L.add(timeseries("Page-cache misses",
        "Pages added to the cache (misses) per second: roughly pages read from disk. Bad: rising together with disk reads and a falling hit ratio.",
        "cps", targets((f'rate(usescope_page_cache_misses_total{{{SEL}}}[{RI}])', "misses"))), 12, 8)

    L.row("Latency and stalls (eBPF: --probe.biolatency, --probe.softirq, --probe.reclaim)")
    L.add(heatmap("Disk latency heatmap",
        "Completed block I/Os per service-time bucket (issue to completion, all disks and ops; eBPF biolatency). Bad: mass moving up past a few ms on SSD or tens of ms on spinning disks; a second band far above the first is a device or path that stalls. Empty without --probe.biolatency.",
        "s", target(f'sum by (le) (increase(usescope_block_io_latency_seconds_bucket{{{SEL}}}[{RI}]))', "{{le}}", fmt="heatmap"), True), 8, 8)
    L.add(timeseries("Softirq share per CPU",
        "Share of each CPU's time spent in softirq handlers, measured per handler run (eBPF softirq; exact where /proc/stat samples at ticks). Bad: around 30% on one CPU is a network receive storm (with ksoftirqd busy). Empty without --probe.softirq.",
        "percentunit", targets((f'sum by (cpu) (rate(usescope_softirq_seconds_total{{{SEL}}}[{RI}]))', "cpu {{cpu}}")),
        minimum=0, thr=thresholds((0.2, "orange"), (0.3, "red"))), 8, 8)
    L.add(timeseries("Reclaim and compaction stalls",
        "Seconds per second allocating tasks spent stalled, summed over tasks (eBPF reclaim): global direct reclaim (host short of memory), memcg reclaim (a cgroup at its limit), and direct compaction. Bad: 0.1 or more sustained (alerts: DirectReclaimStalling pages, the others are tickets). Empty without --probe.reclaim.",
        "s", targets(
            (f'sum by (kind) (rate(usescope_direct_reclaim_seconds_sum{{{SEL}}}[{RI}]))', "{{kind}} reclaim"),
            (f'rate(usescope_compaction_stall_seconds_sum{{{SEL}}}[{RI}])', "compaction")),
        minimum=0, thr=thresholds((0.1, "red"))), 8, 8)
    return dashboard("overview", "usescope / USE overview",
                     "Utilisation, saturation and errors of every resource on one host: find the saturated one in a minute.", L)


def kernel():
    L = Layout()
    L.row("CPU")
    L.add(timeseries("CPU modes per CPU",
        "Time share of each mode on each CPU, stacked (a CPU sums to 100%). Bad: one CPU full of iowait or softirq while others idle; system above user for long.",
        "percentunit", targets((f'sum by (cpu, mode) (rate(node_cpu_seconds_total{{{SEL}, mode!="idle"}}[{RI}]))', "cpu {{cpu}} {{mode}}")),
        stack=True, minimum=0), 12, 9)
    L.add(timeseries("Context switches and interrupts",
        "Per second. Bad: a 10x jump over the last hour, or above 10 000/s together with high system CPU.",
        "cps", targets(
            (f'rate(node_context_switches_total{{{SEL}}}[{RI}])', "context switches"),
            (f'rate(node_intr_total{{{SEL}}}[{RI}])', "interrupts"))), 6, 9)
    L.add(timeseries("Processes running and blocked",
        "Runnable and D-state (blocked on I/O) tasks. Bad: running above the CPU count; blocked above zero for long.",
        "short", targets(
            (f'node_procs_running{{{SEL}}}', "running"),
            (f'node_procs_blocked{{{SEL}}}', "blocked"))), 6, 9)

    L.row("Softirq")
    L.add(heatmap("NET_RX softirqs per CPU",
        "NET_RX softirqs per second, one row per CPU. Bad: one hot row while the others stay cold: receive work lands on one CPU (one RX queue, no RPS).",
        "cps", target(f'sum by (cpu) (rate(node_softirqs_functions_total{{{SEL}, type="NET_RX"}}[{RI}]))', "{{cpu}}"), False), 12, 9)
    L.add(timeseries("Softirq time share per CPU",
        "Share of each CPU's time in softirq. Bad: 30% or more on one CPU (with ksoftirqd busy) is a network storm.",
        "percentunit", targets((f'rate(node_cpu_seconds_total{{{SEL}, mode="softirq"}}[{RI}])', "cpu {{cpu}}")),
        minimum=0, thr=thresholds((0.3, "red"))), 6, 9)
    L.add(timeseries("Softirqs by type",
        "All CPUs, per second, by softirq type. Bad: NET_RX or NET_TX dominating after a traffic change; SCHED/RCU storms.",
        "cps", targets((f'sum by (type) (rate(node_softirqs_functions_total{{{SEL}}}[{RI}]))', "{{type}}"))), 6, 9)

    L.row("Memory")
    L.add(timeseries("Zone free pages vs watermarks (pages)",
        "Free pages of each zone against its min, low and high watermarks. Bad: free below low (kswapd reclaiming) and not climbing back to high; below min, allocations stall in direct reclaim.",
        "short", targets(
            (f'node_zoneinfo_nr_free_pages{{{SEL}}} and on (node, zone) (node_zoneinfo_managed_pages{{{SEL}}} > 0)', "node {{node}} {{zone}} free"),
            (f'node_zoneinfo_min_pages{{{SEL}}} > 0', "node {{node}} {{zone}} min"),
            (f'node_zoneinfo_low_pages{{{SEL}}} > 0', "node {{node}} {{zone}} low"),
            (f'node_zoneinfo_high_pages{{{SEL}}} > 0', "node {{node}} {{zone}} high"))), 12, 9)
    L.add(timeseries("Available memory",
        "MemAvailable against MemTotal. Bad: available trending to zero.",
        "bytes", targets(
            (f'node_memory_MemTotal_bytes{{{SEL}}}', "total"),
            (f'node_memory_MemAvailable_bytes{{{SEL}}}', "available"))), 6, 9)
    L.add(timeseries("Pressure stall (PSI)",
        "Share of time tasks stalled on CPU, memory and I/O. Bad: memory or io 'full' above a few percent; cpu 'some' high means run-queue waits.",
        "percentunit", targets(
            (f'rate(node_pressure_cpu_waiting_seconds_total{{{SEL}}}[{RI}])', "cpu some"),
            (f'rate(node_pressure_memory_waiting_seconds_total{{{SEL}}}[{RI}])', "memory some"),
            (f'rate(node_pressure_memory_stalled_seconds_total{{{SEL}}}[{RI}])', "memory full"),
            (f'rate(node_pressure_io_waiting_seconds_total{{{SEL}}}[{RI}])', "io some"),
            (f'rate(node_pressure_io_stalled_seconds_total{{{SEL}}}[{RI}])', "io full")), minimum=0), 6, 9)
    L.add(timeseries("Reclaim: scanned and stolen pages",
        "Pages scanned and reclaimed per second by kswapd and by direct reclaim. Bad: any direct reclaim; steal far below scan (reclaim is struggling).",
        "cps", targets(
            (f'rate(node_vmstat_pgscan_kswapd{{{SEL}}}[{RI}])', "scan kswapd"),
            (f'rate(node_vmstat_pgsteal_kswapd{{{SEL}}}[{RI}])', "steal kswapd"),
            (f'rate(node_vmstat_pgscan_direct{{{SEL}}}[{RI}])', "scan direct"),
            (f'rate(node_vmstat_pgsteal_direct{{{SEL}}}[{RI}])', "steal direct"))), 12, 8)
    L.add(timeseries("Allocation stalls and major faults",
        "Direct-reclaim stalls and major page faults per second. Bad: allocstall above zero (tasks stall allocating), major faults climbing (thrashing).",
        "cps", targets(
            (f'rate(node_vmstat_allocstall_normal{{{SEL}}}[{RI}]) + rate(node_vmstat_allocstall_movable{{{SEL}}}[{RI}])', "allocstall"),
            (f'rate(node_vmstat_pgmajfault{{{SEL}}}[{RI}])', "major faults"),
            (f'rate(node_vmstat_oom_kill{{{SEL}}}[{RI}])', "OOM kills"))), 12, 8)

    L.row("Disk")
    L.add(timeseries("Disk IOPS",
        "Completed reads (+) and writes (-) per second. Bad: flat at the device's rated IOPS while await rises.",
        "iops", targets(
            (f'rate(node_disk_reads_completed_total{{{SEL}}}[{RI}])', "{{device}} read"),
            (f'-rate(node_disk_writes_completed_total{{{SEL}}}[{RI}])', "{{device}} write"))), 6, 8)
    L.add(timeseries("Disk throughput",
        "Bytes read (+) and written (-) per second. Bad: flat at the device's rated bandwidth while await rises.",
        "Bps", targets(
            (f'rate(node_disk_read_bytes_total{{{SEL}}}[{RI}])', "{{device}} read"),
            (f'-rate(node_disk_written_bytes_total{{{SEL}}}[{RI}])', "{{device}} write"))), 6, 8)
    L.add(timeseries("Disk await",
        "Average time per completed request. Bad: well above the device's baseline (ms on SSD); a log storm once showed 7.27 s writes.",
        "s", targets(
            (f'rate(node_disk_read_time_seconds_total{{{SEL}}}[{RI}]) / (rate(node_disk_reads_completed_total{{{SEL}}}[{RI}]) > 0)', "{{device}} r_await"),
            (f'rate(node_disk_write_time_seconds_total{{{SEL}}}[{RI}]) / (rate(node_disk_writes_completed_total{{{SEL}}}[{RI}]) > 0)', "{{device}} w_await"))), 6, 8)
    L.add(timeseries("Disk queue and utilisation",
        "aqu-sz (requests in flight on average) and in-flight requests now. Bad: queue of 1 or more while utilisation is high.",
        "short", targets(
            (f'rate(node_disk_io_time_weighted_seconds_total{{{SEL}}}[{RI}])', "{{device}} aqu-sz"),
            (f'node_disk_io_now{{{SEL}}}', "{{device}} in flight"))), 6, 8)

    L.row("Network")
    L.add(timeseries("Interface drops and errors",
        "Per interface and direction, per second. Bad: any error; drops that track traffic peaks (ring too small).",
        "pps", targets(
            (f'rate(node_network_receive_drop_total{{{SEL}}}[{RI}])', "{{device}} rx drop"),
            (f'rate(node_network_transmit_drop_total{{{SEL}}}[{RI}])', "{{device}} tx drop"),
            (f'rate(node_network_receive_errs_total{{{SEL}}}[{RI}])', "{{device}} rx errs"),
            (f'rate(node_network_transmit_errs_total{{{SEL}}}[{RI}])', "{{device}} tx errs"))), 8, 8)
    L.add(timeseries("TCP listen overflows and drops",
        "Per second. Bad: any: an accept queue is full and clients time out.",
        "cps", targets(
            (f'rate(node_netstat_TcpExt_ListenOverflows{{{SEL}}}[{RI}])', "ListenOverflows"),
            (f'rate(node_netstat_TcpExt_ListenDrops{{{SEL}}}[{RI}])', "ListenDrops"))), 8, 8)
    L.add(timeseries("Softnet per CPU",
        "Squeezes (budget exhausted) and backlog drops per CPU per second. Bad: sustained squeezes on one CPU; any backlog drop.",
        "cps", targets(
            (f'rate(node_softnet_times_squeezed_total{{{SEL}}}[{RI}])', "cpu {{cpu}} squeezed"),
            (f'rate(node_softnet_dropped_total{{{SEL}}}[{RI}])', "cpu {{cpu}} dropped"))), 8, 8)

    L.row("Processes and TCP (--probe.tasks, --probe.exits, --probe.tcpretrans, --probe.tcpconnect, --collector.tcpsockets)")
    L.add(timeseries("Process starts and CPU of ended tasks",
        "exec()s per second, and CPU seconds per second of tasks that have ended (each counted whole when the kernel frees it). Bad: thousands of starts a second, or ended tasks taking a large share of the CPU: short-lived processes top never shows.",
        "short", targets(
            (f'instance:usescope_process_execs:rate5m{{{SEL}}}', "execs/s"),
            (f'instance:usescope_exited_tasks_cpu:rate5m{{{SEL}}}', "CPU s/s of ended tasks"))), 8, 8)
    L.add(timeseries("Zombies and PIDs",
        "Zombie processes (the tasks probe, else the processes collector), and tasks against pid_max and threads-max. Bad: zombies growing (a parent not reaping); either ratio near 1 (fork fails with EAGAIN).",
        "short", targets(
            (f'instance:zombie_processes:count{{{SEL}}}', "zombies"),
            (f'instance:usescope_tasks_per_pid_max:ratio{{{SEL}}}', "tasks / pid_max"),
            (f'instance:usescope_tasks_per_threads_max:ratio{{{SEL}}}', "tasks / threads-max"))), 8, 8)
    L.add(timeseries("TCP retransmissions by kind",
        "Retransmitted segments per second by kind (timeout, fast, tail loss probe, SYN...), and all retransmissions per segment sent. Bad: timeouts, or a ratio above a few percent.",
        "short", targets(
            (f'sum by (kind) (instance_kind:usescope_tcp_retransmitted_segments:rate5m{{{SEL}}})', "{{kind}}/s"),
            (f'instance:node_netstat_Tcp_RetransSegs:ratio_rate5m{{{SEL}}}', "retransmitted / sent"))), 8, 8)
    L.add(timeseries("SYN queues and ephemeral ports",
        "The fullest listener's SYN queue against its backlog, SYN cookies sent per second, and the most ports toward one destination against ip_local_port_range. Bad: a SYN queue at 1 (a SYN flood or a slow accept), ports near 1 (the next connect fails with EADDRNOTAVAIL).",
        "short", targets(
            (f'usescope_tcp_syn_queue_fullest_ratio{{{SEL}}}', "fullest SYN queue"),
            (f'instance:node_netstat_TcpExt_SyncookiesSent:rate5m{{{SEL}}}', "SYN cookies/s"),
            (f'instance:usescope_tcp_ephemeral_ports_used:ratio{{{SEL}}}', "ephemeral ports used"))), 8, 8)
    L.add(timeseries("Connects refused a local port, delayed ACKs",
        "connect() calls that found no free local port (EADDRNOTAVAIL) in 5 minutes, and delayed ACKs per segment received. Bad: any failed connect; delayed ACKs on a large share of segments (Nagle on the peer holding its next segment for this ACK: 40 ms stalls).",
        "short", targets(
            (f'instance:usescope_tcp_connect_no_local_port:increase5m{{{SEL}}}', "connects without a port"),
            (f'instance:node_netstat_TcpExt_DelayedACKs:ratio_rate5m{{{SEL}}}', "delayed ACKs / segment"))), 8, 8)

    L.row("Conntrack")
    L.add(timeseries("Conntrack entries vs limit",
        "Tracked flows against nf_conntrack_max. Bad: entries approaching the limit (new flows are dropped at the limit). Empty without the nf_conntrack module.",
        "short", targets(
            (f'node_nf_conntrack_entries{{{SEL}}}', "entries"),
            (f'node_nf_conntrack_entries_limit{{{SEL}}}', "limit"))), 12, 8)
    L.add(timeseries("Conntrack events",
        "Inserts, drops, early drops, failed inserts and search restarts per second. Bad: any drop or early_drop.",
        "cps", targets(
            (f'rate(node_nf_conntrack_stat_insert{{{SEL}}}[{RI}])', "insert"),
            (f'rate(node_nf_conntrack_stat_drop{{{SEL}}}[{RI}])', "drop"),
            (f'rate(node_nf_conntrack_stat_early_drop{{{SEL}}}[{RI}])', "early_drop"),
            (f'rate(node_nf_conntrack_stat_insert_failed{{{SEL}}}[{RI}])', "insert_failed"),
            (f'rate(node_nf_conntrack_stat_search_restart{{{SEL}}}[{RI}])', "search_restart"))), 12, 8)
    return dashboard("kernel", "usescope / Kernel detail",
                     "Per-CPU, per-zone, per-device and per-interface detail to confirm what the USE overview points at.", L)


def ebpf():
    L = Layout()
    L.row("Run-queue latency")
    L.add(heatmap("Run-queue latency heatmap",
        "Wakeups per latency bucket over time (log2 buckets). Bad: mass moving up past 1-10 ms; a band at tens of ms means tasks queue for CPU (e.g. a container at its CPU limit).",
        "s", target(f'sum by (le) (increase(usescope_runqueue_latency_seconds_bucket{{{SEL}}}[{RI}]))', "{{le}}", fmt="heatmap"), True), 12, 9)
    L.add(timeseries("Run-queue latency quantiles",
        "p50, p90, p99 of the wait from wakeup (or preemption) to running. Bad: p99 above 10 ms sustained.",
        "s", targets(
            (runq_quantile("0.50"), "p50"),
            (runq_quantile("0.90"), "p90"),
            (runq_quantile("0.99"), "p99")),
        thr=thresholds((0.01, "red"))), 6, 9)
    L.add(timeseries("Run-queue p99 per CPU",
        "p99 per CPU; only with --probe.runqlat.per-cpu. Bad: one CPU far above the others (pinned or IRQ-heavy CPU).",
        "s", targets((runq_quantile("0.99", by="cpu, ", sel=SEL + ', cpu!=""'), "cpu {{cpu}}"))), 6, 9)

    L.row("Page cache")
    L.add(timeseries("Page-cache hit ratio",
        "1 - misses / accesses: the share of pages readers asked for (read() or mmap) that were already cached. Bad: below 50% under steady reads. Pages readahead fetched before a reader asked count as hits; O_DIRECT is invisible.",
        "percentunit", targets((f'clamp_min(1 - rate(usescope_page_cache_misses_total{{{SEL}}}[{RI}]) / (rate(usescope_page_cache_accesses_total{{{SEL}}}[{RI}]) > 0), 0)', "hit ratio")),
        minimum=0, maximum=1, thr=thresholds((0.5, "transparent"))), 8, 8)
    L.add(timeseries("Page-cache accesses, misses, readahead, dirtied",
        "Pages per second. Misses + readahead is what the cache read in. Bad: misses tracking accesses (nothing is cached); readahead far above accesses (read in, never used); dirtied far above disk writes (writeback will stall writers).",
        "cps", targets(
            (f'rate(usescope_page_cache_accesses_total{{{SEL}}}[{RI}])', "accesses"),
            (f'rate(usescope_page_cache_misses_total{{{SEL}}}[{RI}])', "misses"),
            (f'rate(usescope_page_cache_readahead_pages_total{{{SEL}}}[{RI}])', "readahead"),
            (f'rate(usescope_page_cache_dirtied_total{{{SEL}}}[{RI}])', "dirtied"))), 8, 8)
    L.add(timeseries("Disk reads for comparison",
        "Bytes read from disk per second: should track page-cache misses. Bad: high disk reads with few misses means O_DIRECT I/O bypassing the cache.",
        "Bps", targets((f'sum(rate(node_disk_read_bytes_total{{{SEL}}}[{RI}]))', "disk read"))), 8, 8)

    L.row("Packet drops")
    L.add(timeseries("Drops by reason",
        "Packets freed by the kernel as drops, per reason (skb:kfree_skb). Bad: NETFILTER_DROP with conntrack near full; socket buffer reasons (receiver too slow); any checksum reason.",
        "pps", targets((f'sum by (reason) (rate(usescope_skb_drops_total{{{SEL}}}[{RI}]))', "{{reason}}")), stack=True), 16, 9)
    L.add(table("Top drop reasons (last hour)",
        "Drops per reason over the last hour. Bad: anything but a steady trickle of NO_SOCKET from scanners.",
        "short", f'sort_desc(round(sum by (reason) (increase(usescope_skb_drops_total{{{SEL}}}[1h])) > 0))'), 8, 9)

    L.row("Probe status and overhead")
    L.add(stat("Probes up",
        "1 when the probe is loaded and attached. Bad: 0 — the probe's metrics and alerts are missing; the log names the cause.",
        "none", f'usescope_probe_up{{{SEL}}}', thresholds((1, "green"), base="red"),
        legend="{{probe}}", mappings={"0": "down", "1": "up"}), 8, 6)
    L.add(table("Probe attach modes",
        "Which hook each probe uses (tp_btf, raw_tp, ...). Bad: a fallback mode where the preferred one should work.",
        "none", f'usescope_probe_info{{{SEL}}}'), 8, 6)
    L.add(timeseries("Collector failures",
        "Collectors whose last scrape failed (0 = failed). Bad: any 0: that collector's metrics are missing.",
        "none", targets((f'node_scrape_collector_success{{{SEL}}} == 0', "{{collector}}"))), 8, 6)
    L.add(timeseries("BPF CPU time per program",
        "CPU seconds per second spent in each BPF program (kernel BPF statistics: needs usescope --probe.bpf-stats). Bad: above a few percent of one CPU on a hot path.",
        "percentunit", targets((f'rate(usescope_bpf_program_run_seconds_total{{{SEL}}}[{RI}])', "{{probe}}/{{program}}")), minimum=0), 8, 8)
    L.add(timeseries("BPF cost per run",
        "Average time per program run (needs --probe.bpf-stats). Bad: well above ~100 ns for a per-CPU counter update.",
        "s", targets((f'rate(usescope_bpf_program_run_seconds_total{{{SEL}}}[{RI}]) / (rate(usescope_bpf_program_runs_total{{{SEL}}}[{RI}]) > 0)', "{{probe}}/{{program}}"))), 8, 8)
    L.add(timeseries("BPF runs per second",
        "Program invocations per second, the event rate of each hook (needs --probe.bpf-stats). Bad: millions per second on one hook: consider turning that probe off.",
        "cps", targets((f'rate(usescope_bpf_program_runs_total{{{SEL}}}[{RI}])', "{{probe}}/{{program}}"))), 8, 8)
    L.add(timeseries("Events lost: runs the kernel skipped",
        "Runs of a probe's programs the kernel skipped because the same program was already running on that CPU (kernel recursion misses; always counted). Each is an event the probe did not count. Bad: anything above zero on a probe whose numbers you are reading.",
        "cps", targets((f'sum by (probe) (rate(usescope_bpf_program_recursion_misses_total{{{SEL}}}[{RI}]))', "{{probe}}")), minimum=0), 24, 6)
    return dashboard("ebpf", "usescope / eBPF",
                     "What /proc cannot show: run-queue latency, page-cache hits and misses, packet drops by reason, and the probes' own status and cost.", L)


# "Which workload": the cgroup collector's families (--collector.cgroup, off by
# default; every panel is empty while it is off). The top rows rank cgroups
# per USE resource; the last row follows one cgroup, chosen in $cgroup.
WORKLOAD_TOP = 10
CG_SEL = SEL + ', cgroup="$cgroup"'


def cg_top(expr):
    return f"topk({WORKLOAD_TOP}, {expr})"


def cg_rate(family, sel=SEL):
    return f"rate(usescope_cgroup_{family}{{{sel}}}[{RI}])"


def workload():
    L = Layout()
    io_bytes = f'{cg_rate("io_read_bytes_total")} + {cg_rate("io_written_bytes_total")}'
    io_ops = f'{cg_rate("io_reads_total")} + {cg_rate("io_writes_total")}'
    L.row("CPU: which cgroups use it, which are throttled")
    L.add(timeseries("Top cgroups by CPU",
        "CPUs used per cgroup (user + system, descendants included). Bad: one cgroup taking most of the host while CPUSaturated fires.",
        "short", targets((cg_top(cg_rate("cpu_usage_seconds_total")), "{{cgroup}}")), minimum=0), 8, 8)
    L.add(timeseries("Top cgroups by CFS throttling",
        "Share of CFS periods in which the cgroup used up its CPU quota (only cgroups with a quota). Bad: above 25% (CgroupCPUThrottlingHigh): its tasks wait for the next period while CPUs may be idle.",
        "percentunit", targets((cg_top(f'{cg_rate("cpu_cfs_throttled_periods_total")} / ({cg_rate("cpu_cfs_periods_total")} > 0)'), "{{cgroup}}")),
        minimum=0, maximum=1, thr=thresholds((0.25, "red"))), 8, 8)
    L.add(timeseries("Top cgroups by CPU pressure",
        "PSI cpu some: share of time some task of the cgroup waited for a CPU (cgroup v2 only; empty on v1 without a unified hierarchy). Bad: sustained above 10-20%.",
        "percentunit", targets((cg_top(cg_rate("pressure_cpu_waiting_seconds_total")), "{{cgroup}}")), minimum=0), 8, 8)

    L.row("Memory: which cgroups hold it, which are near their limit")
    L.add(timeseries("Top cgroups by working set",
        "Usage less inactive file cache: what the cgroup cannot give back cheaply (cAdvisor's container_memory_working_set_bytes). Bad: growing without bound (a leak).",
        "bytes", targets((cg_top(f"usescope_cgroup_memory_working_set_bytes{{{SEL}}}"), "{{cgroup}}")), minimum=0), 8, 8)
    L.add(timeseries("Top cgroups by working set / limit",
        "Working set as a share of the memory limit (only cgroups with a limit). Bad: 90% or more (CgroupMemoryPressure): reclaim of hot pages, then an OOM kill.",
        "percentunit", targets((cg_top(f"usescope_cgroup_memory_working_set_bytes{{{SEL}}} / (usescope_cgroup_memory_limit_bytes{{{SEL}}} > 0)"), "{{cgroup}}")),
        minimum=0, thr=thresholds((0.9, "red"))), 8, 8)
    L.add(timeseries("OOM kills and memory pressure",
        "OOM kills per cgroup in the last hour (any is bad: CgroupOOMKill), from the cgroup's own counter and, with --probe.oomkill, from the kernel's choice of victim, which keeps a cgroup's kills after the cgroup is gone (a restarted container); and PSI memory full (v2 only): share of time all of the cgroup's tasks stalled on memory. Bad: above 10%.",
        "short", targets(
            (cg_top(f"increase(usescope_cgroup_memory_oom_kills_total{{{SEL}}}[1h]) > 0"), "OOM kills {{cgroup}}"),
            (cg_top(f"increase(usescope_cgroup_oom_kills_total{{{SEL}}}[1h]) > 0"), "OOM victims (probe) {{cgroup}}"),
            (cg_top(cg_rate("pressure_memory_stalled_seconds_total")), "stalled {{cgroup}}")), minimum=0), 8, 8)

    L.row("I/O: which cgroups read and write")
    L.add(timeseries("Top cgroups by I/O bytes",
        "Bytes read and written per second per cgroup, all devices. On cgroup v1, blkio counts a device only once a throttle rule is set on it (docs/collectors/cgroup.md). Bad: one cgroup behind most of a saturated disk's traffic (HighIOWait, DiskSaturated).",
        "Bps", targets((cg_top(f"sum without (device) ({io_bytes})"), "{{cgroup}}")), minimum=0), 8, 8)
    L.add(timeseries("Top cgroups by IOPS",
        "Read and write operations per second per cgroup, all devices (v1: devices with a throttle rule). Bad: small random I/O from one cgroup at a disk's IOPS limit.",
        "iops", targets((cg_top(f"sum without (device) ({io_ops})"), "{{cgroup}}")), minimum=0), 8, 8)
    L.add(timeseries("Top cgroups by I/O pressure",
        "PSI io some: share of time some task of the cgroup waited for I/O (cgroup v2 only). Bad: sustained above 10-20%.",
        "percentunit", targets((cg_top(cg_rate("pressure_io_waiting_seconds_total")), "{{cgroup}}")), minimum=0), 8, 8)
    L.add(timeseries("Top cgroups by block I/O latency (p99)",
        "p99 time from issue to completion of the block I/O charged to each cgroup, per op (needs --probe.biolatency --probe.biolatency.per-cgroup; cgroups doing at least one I/O a second). Bad: tens of ms on SSD, hundreds on spinning disks, or one cgroup far above the others on the same disk (it is throttled, or its I/O pattern is).",
        "s", targets((cg_top(f"instance_cgroup_op:usescope_cgroup_block_io_latency_seconds:p99_rate5m{{{SEL}}}"), "{{cgroup}} {{op}}")),
        minimum=0), 8, 8)

    L.row("Pids: which cgroups run the most tasks")
    L.add(timeseries("Top cgroups by tasks",
        "Tasks (processes and threads) per cgroup, pids.current. Bad: growing without bound (a fork or thread leak).",
        "short", targets((cg_top(f"usescope_cgroup_pids{{{SEL}}}"), "{{cgroup}}")), minimum=0), 8, 8)
    L.add(timeseries("Top cgroups by tasks / pids limit",
        "pids.current over pids.max (only cgroups with a limit). Bad: near 100%: fork() and thread creation fail with EAGAIN.",
        "percentunit", targets((cg_top(f"usescope_cgroup_pids{{{SEL}}} / (usescope_cgroup_pids_limit{{{SEL}}} > 0)"), "{{cgroup}}")),
        minimum=0, thr=thresholds((0.9, "red"))), 8, 8)
    L.add(timeseries("Process starts by cgroup",
        "Programs started (execs) per second per cpu cgroup (needs --probe.tasks --probe.tasks.per-cgroup): which workload spawns short-lived processes, whose CPU top never shows. Bad: a cgroup far above its usual rate (a shell loop, a crash-looping helper). When a cgroup is removed its series ends and its execs move to \"other\", which then jumps for one window (see usescope_cgroup_process_execs_folded_total{reason=\"gone\"}).",
        "cps", targets((cg_top(cg_rate("process_execs_total")), "{{cgroup}}")), minimum=0), 8, 8)

    L.row("One cgroup: $cgroup")
    L.add(timeseries("CPU of $cgroup",
        "CPUs used (user, system) and seconds per second throttled at the CFS quota. Bad: throttled close to or above zero while user time sits at the quota.",
        "short", targets(
            (cg_rate("cpu_user_seconds_total", CG_SEL), "user"),
            (cg_rate("cpu_system_seconds_total", CG_SEL), "system"),
            (cg_rate("cpu_cfs_throttled_seconds_total", CG_SEL), "throttled")), minimum=0), 8, 8)
    L.add(timeseries("Memory of $cgroup",
        "Usage, working set and limit. Bad: working set approaching the limit.",
        "bytes", targets(
            (f"usescope_cgroup_memory_usage_bytes{{{CG_SEL}}}", "usage"),
            (f"usescope_cgroup_memory_working_set_bytes{{{CG_SEL}}}", "working set"),
            (f"usescope_cgroup_memory_limit_bytes{{{CG_SEL}}}", "limit")), minimum=0), 8, 8)
    L.add(timeseries("Pressure of $cgroup",
        "PSI some (waiting) for CPU, memory and I/O (cgroup v2 only). Bad: sustained above 10-20%.",
        "percentunit", targets(
            (cg_rate("pressure_cpu_waiting_seconds_total", CG_SEL), "cpu"),
            (cg_rate("pressure_memory_waiting_seconds_total", CG_SEL), "memory"),
            (cg_rate("pressure_io_waiting_seconds_total", CG_SEL), "io")), minimum=0), 8, 8)
    L.add(timeseries("I/O of $cgroup per device",
        "Bytes read and written per device (v1: devices with a throttle rule). Bad: at the device's limit while it is saturated.",
        "Bps", targets(
            (cg_rate("io_read_bytes_total", CG_SEL), "read {{device}}"),
            (cg_rate("io_written_bytes_total", CG_SEL), "written {{device}}")), minimum=0), 12, 8)
    L.add(timeseries("Tasks of $cgroup",
        "pids.current and pids.max. Bad: tasks near the limit.",
        "short", targets(
            (f"usescope_cgroup_pids{{{CG_SEL}}}", "tasks"),
            (f"usescope_cgroup_pids_limit{{{CG_SEL}}}", "limit")), minimum=0), 12, 8)

    L.row("Collector coverage")
    L.add(stat("cgroups folded into other",
        "Selected cgroups summed into cgroup=\"other\" beyond --collector.cgroup.max. Bad: many: a workload may hide in other.",
        "none", f"usescope_cgroup_folded{{{SEL}}}", thresholds((1, "orange"))), 12, 4)
    L.add(stat("Walk limit reached",
        "1 when the last walk stopped at --collector.cgroup.max-walk or max-depth: cgroups beyond it are not reported. Bad: 1.",
        "none", f"max(usescope_cgroup_walk_limit_reached{{{SEL}}})", thresholds((1, "red")),
        mappings={"0": "no", "1": "yes"}), 12, 4)

    variables_list = variables() + [
        label_values("cgroup", "cgroup", 'label_values(usescope_cgroup_cpu_usage_seconds_total{job="$job", instance="$instance"}, cgroup)'),
    ]
    return dashboard("workload", "usescope / Which workload",
                     "Which cgroup (service, container, pod) uses each USE resource, from the cgroup collector (usescope --collector.cgroup; empty while it is off), and one cgroup in detail.",
                     L, variables_list)


# The fleet overview reads one series per host: the shards' recording rules
# (alerts/usescope-rules.yml), not the raw per-CPU or per-device series, and
# has no per-host variable, so it loads as fast at 1,000 hosts as at 10.
FLEET_SEL = 'job="$job"'

# (title, description, unit, per-host expression, bad threshold or None).
# Each expression gives one series per host (labels instance and job);
# tests/fleet computes each from the hosts' own scrapes and compares.
FLEET_SIGNALS = [
    ("CPU busy", "Share of CPU time busy (not idle, iowait or steal), averaged over the host's CPUs. Bad: 90% and more.",
     "percentunit", f'instance:node_cpu_utilisation:rate5m{{{FLEET_SEL}}}', 0.9),
    ("CPU saturated", "1-minute load average per CPU. Bad: 1 and more (tasks wait for a CPU or for I/O).",
     "short", f'instance:node_load1_per_cpu:ratio{{{FLEET_SEL}}}', 1),
    ("iowait, worst CPU", "iowait of each host's busiest CPU: one stuck CPU hides behind the average. Bad: above 50% (HighIOWait pages when a disk is busy too).",
     "percentunit", f'max by (instance, job) (instance_cpu:node_cpu_iowait:rate5m{{{FLEET_SEL}}})', 0.5),
    ("Memory used", "1 - MemAvailable / MemTotal. Bad: 90% and more; check the zone watermarks on the host.",
     "percentunit", f'instance:node_memory_utilisation:ratio{{{FLEET_SEL}}}', 0.9),
    ("Busiest disk", "Utilisation of each host's busiest disk (share of time with I/O in flight). Bad: 80% and more.",
     "percentunit", f'instance:node_disk_io_time_seconds:max_rate5m{{{FLEET_SEL}}}', 0.8),
    ("Conntrack used", "Connection-tracking table use. Bad: 90% and more (ConntrackTableFull pages); at 100% new flows are dropped.",
     "percentunit", f'instance:node_nf_conntrack_entries:ratio{{{FLEET_SEL}}}', 0.9),
    ("Fullest filesystem", "Used share of each host's fullest writable filesystem. Bad: 95% and more (FilesystemAlmostOutOfSpace).",
     "percentunit", f'max by (instance, job) (1 - node_filesystem_avail_bytes{{{FLEET_SEL}, fstype!=""}} / (node_filesystem_size_bytes{{{FLEET_SEL}, fstype!=""}} > 0))', 0.95),
    ("Failing collectors", "Collectors whose last scrape failed on the host (errors: their series are missing). Bad: any.",
     "short", f'count by (instance, job) (node_scrape_collector_success{{{FLEET_SEL}}} == 0)', 1),
    ("Network throughput", "Bytes per second received and sent, all interfaces but loopback. /proc has no link speed: compare with the NIC's line rate.",
     "Bps", f'sum by (instance, job) (instance_device:node_network_receive_bytes:rate5m{{{FLEET_SEL}}} + instance_device:node_network_transmit_bytes:rate5m{{{FLEET_SEL}}})', None),
]
FLEET_TOP = 10
FLEET_PAGING = f'ALERTS{{{FLEET_SEL}, alertstate="firing", severity="page"}}'


def hosts_over(expr, threshold):
    """The number of hosts whose value is at or above the threshold; 0 (not
    "No data") when there are none."""
    return f"count({expr} >= {threshold}) or vector(0)"


def host_link():
    """A table cell's link to the per-host USE overview of its row's host."""
    return (db.DashboardLink("USE overview of ${__data.fields.instance}")
            .type(dm.DashboardLinkType.LINK)
            .url(f"/d/{UIDS['overview']}/?var-datasource=${{datasource}}&var-job=${{__data.fields.job}}"
                 "&var-instance=${__data.fields.instance}&${__url_time_range}")
            .tooltip("")
            .icon("external link")
            .as_dropdown(False)
            .include_vars(False)
            .keep_time(True)
            .target_blank(False)
            .tags([]))


def fleet_table(title, description, unit, expr):
    """An instant table of hosts (instance, job, value) whose rows link to
    the host's own dashboard."""
    return (
        tb.Panel()
        .title(title)
        .description(description)
        .datasource(DS)
        .unit(unit)
        .show_header(True)
        .data_links([host_link()])
        .with_transformation(dm.DataTransformerConfig(
            id_val="organize",
            options={"excludeByName": {"Time": True, "__name__": True}, "renameByName": {"Value": title}},
        ))
        .sort_by([cb.TableSortByFieldState().display_name(title).desc(True)])
        .targets([target(expr, fmt="table", instant=True)])
    )


def fleet():
    L = Layout()
    L.row("Fleet")
    L.add(stat("Hosts up", "Hosts whose last scrape succeeded.", "none",
               f'count(up{{{FLEET_SEL}}} == 1) or vector(0)', thresholds(base="green")), w=6, h=4)
    L.add(stat("Hosts down", "Hosts whose last scrape failed (up == 0). Bad: any: their alerts cannot fire.", "none",
               f'count(up{{{FLEET_SEL}}} == 0) or vector(0)', thresholds((1, "red"))), w=6, h=4)
    L.add(stat("Scrape shards answering", "Shards (the `shard` external label of deploy/fleet) with data in the query layer. Bad: fewer than you run: a dead shard's hosts are missing everywhere, and the query layer warns of a partial response.",
               "none", f'count(count by (shard) (up{{{FLEET_SEL}}}))', thresholds(base="blue")), w=6, h=4)
    L.add(stat("Hosts paging", "Hosts with a page-severity alert firing now.", "none",
               f"count(count by (instance, job) ({FLEET_PAGING})) or vector(0)", thresholds((1, "red"))), w=6, h=4)

    L.row("Hosts per USE state")
    counted = [(t, d, u, e, thr) for t, d, u, e, thr in FLEET_SIGNALS if thr is not None]
    for title, desc, unit, expr, thr in counted:
        shown = f"{thr:.0%}" if unit == "percentunit" else f"{thr:g}"
        L.add(stat(f"{title} ≥ {shown}", f"Hosts at or above the bad threshold. {desc}", "none",
                   hosts_over(expr, thr), thresholds((1, "red"))), w=3, h=4)
    L.add(timeseries("Hosts in a bad state, over time",
        "The counts above over time: how many hosts were past each threshold. Bad: any line above zero; a step up across many hosts at once is a fleet-wide cause (a deploy, a noisy neighbour, a shared backend).",
        "none", targets(*[(hosts_over(e, thr), t) for t, _, _, e, thr in counted]), minimum=0), 24, 8)

    L.row(f"Top {FLEET_TOP} hosts per resource (click a host for its USE overview)")
    for title, desc, unit, expr, _ in FLEET_SIGNALS:
        L.add(fleet_table(title, desc, unit, f"topk({FLEET_TOP}, {expr})"), 8, 8)
    L.add(fleet_table("Pages firing", "Page-severity alerts firing now, per host.", "none",
                      f"count by (alertname, instance, job) ({FLEET_PAGING})"), 8, 8)
    variables_list = [
        db.DatasourceVariable("datasource").label("Data source").type("prometheus").regex(""),
        label_values("job", "Job", "label_values(up, job)"),
    ]
    annotation_list = annotations()[:1]
    return dashboard("fleet", "usescope / Fleet overview",
                     "Every host at once: how many are in a bad USE state, which hosts are worst per resource, and a link from each to its own dashboards. One series per host from the recording rules, no per-host variable.",
                     L, variables_list, annotation_list)


BUILDERS = {"usescope-overview.json": overview, "usescope-kernel.json": kernel, "usescope-ebpf.json": ebpf,
            "usescope-fleet.json": fleet, "usescope-workload.json": workload}


def render(build):
    return json.dumps(build(), indent=2, ensure_ascii=False) + "\n"


def main():
    check = "--check" in sys.argv[1:]
    stale = []
    for name, build in BUILDERS.items():
        text = render(build)
        path = HERE / name
        if check:
            if not path.exists() or path.read_text() != text:
                stale.append(name)
        else:
            path.write_text(text)
    if stale:
        print("stale (run dashboards/generate.py): " + ", ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
