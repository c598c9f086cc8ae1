"""Checks an executed notebook (scripts/notebooks.sh test): every code cell
ran, no cell produced an error or a panic, the HTML displays each notebook is
expected to draw are present, and per notebook a few facts (the dashboard
finished and its loss fell, a sampled text is there)."""
import json, re, sys

def fail(msg):
    print("  check: " + msg)
    return False

def check(path):
    nb = json.load(open(path))
    name = path.rsplit("/", 1)[-1]
    ok = True
    html, text = [], []
    for i, c in enumerate(nb["cells"]):
        if c["cell_type"] != "code":
            continue
        if c.get("execution_count") is None:
            ok = fail("cell %d did not run" % i)
        for o in c.get("outputs", []):
            t = o["output_type"]
            if t == "error":
                ok = fail("cell %d: error %s: %s" % (i, o.get("ename"), o.get("evalue", "")[:500]))
            elif t == "stream":
                s = "".join(o["text"])
                text.append(s)
                if o["name"] == "stderr" and re.search(r"panic:|error|cannot|undefined", s):
                    ok = fail("cell %d: stderr: %s" % (i, s[:500]))
            elif t in ("display_data", "execute_result"):
                d = o.get("data", {})
                if "text/html" in d:
                    html.append("".join(d["text/html"]))
                if "text/plain" in d:
                    text.append("".join(d["text/plain"]))
    H, T = "\n".join(html), "\n".join(text)
    if "forge-error" in H or "forge-chart-error" in H:
        ok = fail("an HTML display shows an error")

    def need(cond, what):
        nonlocal ok
        if not cond:
            ok = fail("missing: " + what)

    need(len(html) > 0, "HTML display data")
    if name.startswith("01"):
        need(H.count("forge-table") >= 3, "tensor tables")
        need(H.count('class="forge-chart"') >= 2, "heatmap and histogram charts")
        need("forge-echarts-lib" in H, "the inlined echarts library")
        m = re.search(r"largest difference: (\S+)", T)
        need(m and float(m.group(1)) < 1e-6, "gradient check below 1e-6")
        need("inner dimensions differ" in T, "the caught shape error")
    elif name.startswith("02"):
        need(H.count("forge-table") >= 2, "module parameter tables")
        need('class="forge-chart"' in H, "gradient heatmap")
        m = re.search(r"loss before (\S+) → after one SGD step (\S+)", T)
        need(m and float(m.group(2)) < float(m.group(1)), "one SGD step lowering the loss")
    elif name.startswith("03"):
        states = re.findall(r'class="forge-dashboard" data-state="(\w+)"', H)
        need(states == ["done", "done"], "two finished dashboards (got %s)" % states)
        need("resumed: true at step 100" in T, "the second cell resuming at step 100")
        m = re.search(r"first loss (\S+), last loss (\S+)", T)
        need(m and float(m.group(2)) < float(m.group(1)) - 1, "the loss falling by more than 1")
        need(H.count('class="forge-chart"') >= 8, "dashboard charts")
    elif name.startswith("04"):
        need(H.count("forge-table") >= 3, "profile report tables")
        need('class="forge-chart"' in H, "profile bar chart")
        need(T.count("GFLOP/s") >= 2, "kernel bench results")
    elif name.startswith("05"):
        need(H.count("forge-tokens") >= 2, "coloured tokens")
        need(re.findall(r'data-state="(\w+)"', H) == ["done"], "a finished training dashboard")
        samples = re.findall(r'class="forge-text"[^>]*>([^<]*)</pre>', H)
        need(len(samples) == 6 and all(s.startswith("Elizabeth said") and len(s) > 40 for s in samples),
             "six sampled texts starting with the prompt (got %d)" % len(samples))
    elif name.startswith("06"):
        finals = re.findall(r"^(\S.*?)\s+loss (\S+) → (\S+), val_loss", T, re.M)
        need(len(finals) == 6 and all(float(b) < float(a) - 0.5 for _, a, b in finals),
             "six modes whose loss fell by more than 0.5 (got %s)" % finals)
        need(H.count('class="forge-table forge-compare"') == 2 and H.count('class="forge-chart"') >= 8, "the two comparison charts and the MoE dashboard")
        need("checkpointed losses equal the plain run's bit for bit: true" in T, "checkpointing reproducing the plain losses")
        need("MoE routing" in H, "the MoE routing chart")
        m = re.search(r"\(([\d.]+)× smaller\)", T)
        need(m and float(m.group(1)) > 1.5, "a smaller ternary export")
    return ok

sys.exit(0 if all([check(p) for p in sys.argv[1:]]) else 1)
