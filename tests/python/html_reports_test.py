"""Every kind of HTML report, opened in headless Chromium.

For each report the test writes it with `--html`, loads it in Chromium (driven over the
DevTools protocol on a pipe, with nothing but the standard library), and checks that:
  - the page loads with no console message of level error, no uncaught exception, and no
    network request besides the file itself;
  - the JSON embedded in the page equals what the same command prints with --json;
  - the charts are there, with the expected series, and the figures they draw (their data-*
    attributes) are the --json figures;
  - hovering a chart shows its read-out;
and saves a full-page screenshot under the build folder (html-reports/*.png). With
--update-docs it also copies the estimate and fit screenshots to docs/images/ for the README and docs/html-reports.md.

    /usr/bin/python3 tests/python/html_reports_test.py --trainfit build/dev/trainfit --out build/dev
"""
import argparse
import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
DATA = os.path.join(ROOT, "tests", "data")
RESNET = ["--model", "resnet18", "--gpu", "rtx4090"]
SCHEDULES = os.path.join(DATA, "schedules")

# name: (arguments, the --json command's extra arguments)
REPORTS = {
    "estimate": (["estimate"] + RESNET + ["--batch", "32"], ["--explain"]),
    "fit": (["fit"] + RESNET + ["--what-if", "--target-batch", "1024"], ["--curve"]),
    "fit-all-gpus": (["fit", "--model", "resnet18", "--gpu", "all"], ["--curve"]),
    "compare": (["compare", "--gpu", "rtx4090", "--batch", "32", "--model", "resnet18", "--model",
                 "resnet34"], []),
    "summary": (["summary", "--model", "resnet18", "--batch", "32", "--depth", "2"], []),
    "loader": (["loader", "--profile", os.path.join(DATA, "loader", "decode.json"), "--step-time",
                "80ms", "--batch", "32"], []),
    "launch": (["launch"] + RESNET + ["--gpus", "4", "--baseline-batch", "512", "--baseline-lr", "0.1",
                                       "--cores", "32"], []),
    "schedule": (["schedule", "--scheduler", "CosineAnnealingWarmRestarts(T_0=10, T_mult=2, eta_min=1e-6)",
                  "--lr", "0.1,0.01", "--epochs", "70"], []),
    "schedule-plateau": (["schedule", "--scheduler", "ReduceLROnPlateau(factor=0.5, patience=3)",
                          "--lr", "0.01", "--metrics", os.path.join(SCHEDULES, "lightning_metrics.csv"),
                          "--column", "val_loss", "--early-stopping", "patience=10",
                          "--early-stopping", "min_delta=0.001"], []),
}

# What the page's charts say, read in the browser.
COLLECT = r"""
(() => {
  const attrs = el => Object.fromEntries(el.getAttributeNames().filter(n => n.startsWith('data-'))
                                           .map(n => [n.slice(5), el.getAttribute(n)]));
  const charts = {};
  document.querySelectorAll('svg.chart').forEach(svg => {
    charts[svg.getAttribute('data-chart')] = {
      series: [...svg.querySelectorAll('path.series')].map(p => ({name: p.getAttribute('data-series'),
               points: +p.getAttribute('data-points'), drawn: (p.getAttribute('d') || '').split('L').length})),
      marks: [...svg.querySelectorAll('[data-mark]')].map(attrs),
      rules: [...svg.querySelectorAll('line.rule')].map(attrs),
      bars: [...svg.querySelectorAll('rect.bar, rect.segment')].map(attrs),
      hover: svg.hasAttribute('data-hover'),
      box: (() => { const r = svg.getBoundingClientRect(); return [r.left, r.top, r.width, r.height]; })(),
    };
  });
  return {data: JSON.parse(document.getElementById('trainfit-data').textContent), charts: charts,
          scripts: [...document.scripts].filter(s => s.src).length,
          links: [...document.querySelectorAll('link[href], img[src]')].length};
})()
"""


class Browser:
    """Chromium with --remote-debugging-pipe: commands on fd 3, replies and events on fd 4."""

    def __init__(self, profile_dir):
        to_browser_r, self.to_browser = os.pipe()
        self.from_browser, from_browser_w = os.pipe()

        def fds():
            os.dup2(to_browser_r, 3)
            os.dup2(from_browser_w, 4)

        exe = shutil.which("chromium") or shutil.which("chromium-browser")
        if not exe:
            raise SystemExit("chromium is not installed: scripts/deps.sh test installs it")
        self.proc = subprocess.Popen(
            [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--remote-debugging-pipe",
             "--no-first-run", "--no-default-browser-check", "--disable-extensions",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--hide-scrollbars", "--mute-audio", f"--user-data-dir={profile_dir}", "about:blank"],
            preexec_fn=fds, pass_fds=(3, 4),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_browser_r)
        os.close(from_browser_w)
        self.buffer = b""
        self.next_id = 0
        self.events = []
        self.session = None
        target = self.call("Target.createTarget", {"url": "about:blank"}, session=False)["targetId"]
        self.session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True},
                                 session=False)["sessionId"]

    def _read_message(self):
        while b"\0" not in self.buffer:
            chunk = os.read(self.from_browser, 1 << 16)
            if not chunk:
                raise RuntimeError("chromium closed the DevTools pipe")
            self.buffer += chunk
        message, self.buffer = self.buffer.split(b"\0", 1)
        return json.loads(message)

    def call(self, method, params=None, session=True):
        self.next_id += 1
        message = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = self.session
        os.write(self.to_browser, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._read_message()
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            if "method" in reply:
                self.events.append(reply)

    def wait_for(self, method):
        while True:
            for i, e in enumerate(self.events):
                if e["method"] == method:
                    return self.events.pop(i)
            self.events.append(self._read_message())

    def close(self):
        try:
            self.call("Browser.close", session=False)
            self.proc.wait(timeout=10)
        except (RuntimeError, OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()


def run_trainfit(binary, args):
    proc = subprocess.run([binary] + args, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"trainfit {' '.join(args)}: {proc.stderr}")
    return proc.stdout


class Checks:
    def __init__(self):
        self.failures = 0
        self.count = 0

    def check(self, ok, line):
        self.count += 1
        self.failures += 0 if ok else 1
        print(f"  {'ok  ' if ok else 'FAIL'} {line}", flush=True)


def chart_checks(name, j, charts, c):
    """The figures each chart draws against the --json figures."""
    def chart(chart_id):
        c.check(chart_id in charts, f"{name}: chart {chart_id}")
        return charts.get(chart_id, {"series": [], "marks": [], "rules": [], "bars": []})

    def series(ch, names):
        got = sorted(s["name"] for s in ch["series"])
        c.check(got == sorted(names) and all(s["drawn"] > 1 for s in ch["series"]),
                f"{name}: series {got}")

    if name == "estimate":
        t = chart("memory-timeline")
        series(t, ["allocated", "reserved"])
        peak = [m for m in t["marks"] if m.get("mark") == "peak-allocated"]
        c.check(len(peak) == 1 and int(peak[0]["bytes"]) == j["peak_allocated_bytes"] and
                peak[0]["op"] == j["peak_op"] and peak[0]["module"] == j["peak_module"],
                f"{name}: peak marked at {j['peak_allocated_bytes']:,} bytes, {j['peak_op']} in "
                f"{j['peak_module']}")
        c.check(all(s["points"] == j["timeline_rows"] for s in t["series"]),
                f"{name}: every one of the {j['timeline_rows']} rows of --timeline drawn")
        b = chart("breakdown")
        drawn = {x["category"]: int(x["bytes"]) for x in b["bars"]}
        c.check(drawn == {k: v for k, v in j["breakdown"].items() if v > 0},
                f"{name}: breakdown by category = --json breakdown")
        blocks = chart("activations-by-block")
        c.check({x["module"]: int(x["bytes"]) for x in blocks["bars"]} == j["activations_by_module"],
                f"{name}: activations by block = --json activations_by_module")
    elif name == "fit":
        f = chart("memory-vs-batch")
        series(f, ["rtx4090"])
        mark = [m for m in f["marks"] if m.get("mark") == "max-batch"]
        c.check(len(mark) == 1 and int(mark[0]["batch"]) == j["max_batch"] and
                int(mark[0]["bytes"]) == j["device_used_bytes"],
                f"{name}: largest batch {j['max_batch']} marked at {j['device_used_bytes']:,} bytes")
        c.check([int(r["bytes"]) for r in f["rules"]] == [j["budget_bytes"]],
                f"{name}: budget line at {j['budget_bytes']:,} bytes")
        c.check(all(s["points"] == len(j["curve"]) for s in f["series"]),
                f"{name}: {len(j['curve'])} batch sizes drawn")
        w = chart("what-if-memory")
        c.check({x["knob"]: int(x["bytes"]) for x in w["bars"]} ==
                {r["name"]: r["device_used_bytes"] for r in j["what_if"]["rows"]},
                f"{name}: what-if bars = --json rows' device used")
        t = chart("target")
        c.check(int(t["bars"][1]["bytes"]) == j["target"]["device_used_bytes"],
                f"{name}: target plan's device used {j['target']['device_used_bytes']:,}")
    elif name == "fit-all-gpus":
        bars = chart("max-batch")["bars"]
        c.check({b["gpu"]: int(b["max-batch"]) for b in bars} == j["max_batch"],
                f"{name}: largest batch of all {len(bars)} GPUs = --json max_batch")
        f = chart("memory-vs-batch")
        c.check(len(f["series"]) == len(j["gpus"]), f"{name}: one curve per GPU")
    elif name == "compare":
        bars = chart("peak-by-model")["bars"]
        c.check([int(b["bytes"]) for b in bars] == [m["peak_allocated_bytes"] for m in j["models"]],
                f"{name}: peak allocated of each model")
        for m in j["models"]:
            chart(f"blocks-{m['model']}")
    elif name == "summary":
        bars = chart("parameters-by-module")["bars"]
        top = {m["path"]: m["parameters"] for m in j["modules"] if m["depth"] == 1}
        c.check({b["module"]: int(b["parameters"]) for b in bars} == top,
                f"{name}: parameters of the {len(top)} top-level modules")
        chart("kept-by-module")
    elif name == "loader":
        t = chart("loader-throughput")
        series(t, ["loader samples/s"])
        c.check([float(r["samples-per-s"]) for r in t["rules"]] == [j["gpu_samples_per_s"]],
                f"{name}: the GPU's rate {j['gpu_samples_per_s']} samples/s")
        workers = [m for m in t["marks"] if m.get("mark") == "workers"]
        c.check(len(workers) == 1 and int(workers[0]["workers"]) == j["num_workers"],
                f"{name}: num_workers={j['num_workers']} marked")
        chart("host-memory")
    elif name == "launch":
        bars = chart("step-time")["bars"]
        fitting = [(x["gpus"], x["strategy"], x["step_time_s"]) for x in j["candidates"] if x["fits"]]
        c.check([(int(b["gpus"]), b["strategy"], float(b["step-s"])) for b in bars] == fitting,
                f"{name}: step time of the {len(fitting)} configurations that fit")
        chart("gpu-seconds")
    elif name.startswith("schedule"):
        lr = chart("learning-rate")
        groups = j.get("lr_groups", [j["lr"]])
        c.check(len(lr["series"]) == len(groups) and all(s["points"] == len(j["lr"]) for s in lr["series"]),
                f"{name}: {len(groups)} group(s) of {len(j['lr'])} values drawn")
        first = [m for m in lr["marks"] if m.get("mark") == "first"]
        last = [m for m in lr["marks"] if m.get("mark") == "last"]
        c.check(float(first[0]["lr"]) == j["lr"][0] and float(last[0]["lr"]) == j["lr"][-1],
                f"{name}: first and last lr {j['lr'][0]}, {j['lr'][-1]}")
        if "stopped_epoch" in j:
            stops = [m for m in lr["marks"] if m.get("mark") == "stop"]
            c.check(len(stops) == 1 and int(stops[0]["epoch"]) == j["stopped_epoch"],
                    f"{name}: stops at epoch {j['stopped_epoch']}")
            drops = [int(m["epoch"]) for m in lr["marks"] if m.get("mark") == "plateau-drop"]
            c.check(drops == [d["epoch"] for d in j["plateau"]["drops"] if d["epoch"] < len(j["lr"])],
                    f"{name}: plateau drops at {drops}")
            best = [m for m in chart("metrics")["marks"] if m.get("mark") == "best"]
            c.check(len(best) == 1 and int(best[0]["epoch"]) == j["best_epoch"],
                    f"{name}: best epoch {j['best_epoch']}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trainfit", required=True)
    ap.add_argument("--out", required=True, help="the build folder: pages and screenshots go here")
    ap.add_argument("--update-docs", action="store_true",
                    help="copy the estimate and fit screenshots to docs/images/")
    args = ap.parse_args()
    out = os.path.join(args.out, "html-reports")
    os.makedirs(out, exist_ok=True)
    c = Checks()
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as profile:
        browser = Browser(profile)
        try:
            for domain in ("Runtime", "Log", "Network", "Page"):
                browser.call(f"{domain}.enable")
            browser.call("Emulation.setDeviceMetricsOverride",
                         {"width": 1100, "height": 900, "deviceScaleFactor": 1, "mobile": False})
            for name, (command, json_extra) in REPORTS.items():
                print(name, flush=True)
                page = os.path.join(out, f"{name}.html")
                run_trainfit(args.trainfit, command + ["--html", page])
                expected = json.loads(run_trainfit(args.trainfit, command + json_extra + ["--json"]))
                if name == "estimate":  # the timeline is the --timeline CSV's
                    csv = os.path.join(out, "estimate-timeline.csv")
                    run_trainfit(args.trainfit, command + ["--timeline", csv])
                    with open(csv) as f:
                        timeline_rows = sum(1 for _ in f) - 1
                url = "file://" + os.path.abspath(page)
                browser.events.clear()
                browser.call("Page.navigate", {"url": url})
                browser.wait_for("Page.loadEventFired")
                seen = browser.call("Runtime.evaluate", {"expression": COLLECT, "returnByValue": True})
                if "exceptionDetails" in seen:
                    c.check(False, f"{name}: reading the page failed: {seen['exceptionDetails']}")
                    continue
                got = seen["result"]["value"]
                # Hover the first chart with a read-out: the tooltip must show.
                hovered = next((ch for ch in got["charts"].values() if ch["hover"]), None)
                if hovered:
                    x, y, w, h = hovered["box"]
                    browser.call("Input.dispatchMouseEvent",
                                 {"type": "mouseMoved", "x": x + w * 0.5, "y": y + h * 0.5})
                    tip = browser.call("Runtime.evaluate", {
                        "expression": "[getComputedStyle(document.getElementById('tip')).display,"
                                      " document.getElementById('tip').textContent]",
                        "returnByValue": True})["result"]["value"]
                    c.check(tip[0] == "block" and len(tip[1]) > 0, f"{name}: hover shows {tip[1]!r:.60}")
                    browser.call("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": 1, "y": 1})
                    browser.call("Runtime.evaluate", {"expression": "document.getElementById('tip').style.display='none'"})
                errors = [e for e in browser.events
                          if e["method"] == "Runtime.exceptionThrown" or
                          (e["method"] == "Runtime.consoleAPICalled" and e["params"]["type"] == "error") or
                          (e["method"] == "Log.entryAdded" and e["params"]["entry"]["level"] == "error")]
                requests = [e["params"]["request"]["url"] for e in browser.events
                            if e["method"] == "Network.requestWillBeSent" and e["params"]["request"]["url"] != url]
                c.check(not errors, f"{name}: no console errors {[json.dumps(e)[:200] for e in errors]}")
                c.check(not requests and got["scripts"] == 0 and got["links"] == 0,
                        f"{name}: no network requests {requests}")
                c.check(got["data"] == expected, f"{name}: the embedded JSON equals --json")
                chart_checks(name, dict(expected, timeline_rows=timeline_rows) if name == "estimate"
                             else expected, got["charts"], c)
                metrics = browser.call("Page.getLayoutMetrics")["cssContentSize"]
                shot = browser.call("Page.captureScreenshot", {
                    "format": "png", "captureBeyondViewport": True,
                    "clip": {"x": 0, "y": 0, "width": 1100, "height": metrics["height"], "scale": 1}})
                png = os.path.join(out, f"{name}.png")
                with open(png, "wb") as f:
                    f.write(base64.b64decode(shot["data"]))
                print(f"  screenshot {os.path.relpath(png)}", flush=True)
        finally:
            browser.close()
    if args.update_docs:
        docs = os.path.join(ROOT, "docs", "images")
        os.makedirs(docs, exist_ok=True)
        for name in ("estimate", "fit", "schedule-plateau"):
            shutil.copy(os.path.join(out, f"{name}.png"), os.path.join(docs, f"{name}-report.png"))
    print(f"html reports: {c.count - c.failures}/{c.count} passed", flush=True)
    sys.exit(1 if c.failures or not c.count else 0)


if __name__ == "__main__":
    main()
