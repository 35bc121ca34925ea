"""The live view of `sluice serve` in headless Chromium (Playwright driving Debian's chromium).

    serve_view.py URL TOKEN FINISHED_ID RUNNING_ID MIRROR_ID SCREENSHOT

Signs in with TOKEN, checks that the numbers the page shows for the finished pipeline are those
of `/metrics`, that the page lists only the tenant's pipelines, that the changelog mirror's card
shows how far its source is (its snapshot's rows as the API says, its position's age), that the
pause and resume buttons of the running one work (the API says so), and writes a screenshot.
Prints `ok` or raises.
"""

import json
import re
import sys
import urllib.request

from playwright.sync_api import expect, sync_playwright

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def metrics(url):
    """`/metrics` as {(name, labels): value}."""
    text = urllib.request.urlopen(url + "/metrics").read().decode()
    out = {}
    for line in text.splitlines():
        m = re.match(r"^(\w+)\{([^}]*)\} (\S+)$", line)
        if m:
            out[(m.group(1), m.group(2))] = float(m.group(3))
    return out


def api(url, token, path, method="GET"):
    req = urllib.request.Request(url + path, method=method, headers={"Authorization": "Bearer " + token})
    return json.loads(urllib.request.urlopen(req).read() or b"{}")


def main(url, token, finished, running, mirror, screenshot):
    tenant, name = finished.split(".", 1)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        page.goto(url + "/")
        page.fill("#token", "not-a-token")
        page.click("#signin button")
        expect(page.locator("#signin-error")).to_have_text("the token is not one of this server's")
        page.fill("#token", token)
        page.click("#signin button")
        expect(page.locator("#who")).to_have_text("tenant " + tenant)

        card = page.locator(f'section[data-pipeline="{finished}"]')
        expect(card.locator(".state")).to_have_text("finished")
        shown = {cls: card.locator("." + cls).inner_text() for cls in
                 ["rows-in", "rows-out", "rows-transformed", "loads-committed", "checkpoint", "rows-filtered"]}
        m = metrics(url)
        labels = f'tenant="{tenant}",pipeline="{name}"'
        want = {
            "rows-in": m[("sluice_rows_read_total", labels)],
            "rows-out": m[("sluice_rows_written_total", labels)],
            "rows-transformed": m[("sluice_rows_transformed_total", labels)],
            "loads-committed": m[("sluice_txns_committed_total", labels)],
            "rows-filtered": m[("sluice_totalFlushFilteredRows_total", labels + ',sink="doris"')],
        }
        for cls, value in want.items():
            assert float(shown[cls]) == value, f"{cls}: the page shows {shown[cls]}, /metrics {value}"
        assert float(shown["rows-in"]) > 0, shown
        last = api(url, token, "/api/v1/pipelines/" + finished)["last_checkpoint"]["id"]
        assert int(shown["checkpoint"]) == last, (shown["checkpoint"], last)
        graph = card.locator(".graph .stage")
        expect(graph).to_have_count(3)
        expect(card.locator(".history tr")).not_to_have_count(1)

        # Only the tenant's own pipelines.
        ids = page.locator("section.pipeline").evaluate_all("els => els.map(e => e.dataset.pipeline)")
        assert all(i.startswith(tenant + ".") for i in ids), ids

        # How far the mirror's source is.
        source = api(url, token, "/api/v1/pipelines/" + mirror)["sources"][0]
        sources = page.locator(f'section[data-pipeline="{mirror}"] table.sources')
        expect(sources.locator(".source-name")).to_have_text(source["source"])
        expect(sources.locator(".source-age")).to_have_text(re.compile(r"^\d+\.\d$"), timeout=30_000)
        rows = [str(t["rows_read"]) for t in source["tables"].values()] or [""]
        expect(sources.locator(".snapshot-rows")).to_have_text(rows)

        # The buttons of the running one.
        live = page.locator(f'section[data-pipeline="{running}"]')
        expect(live.locator(".state")).to_have_text("running", timeout=30_000)
        expect(live.locator(".rows-in")).not_to_have_text("0", timeout=30_000)
        expect(live.locator(".stage.source .rate")).not_to_have_text("0 rows/s", timeout=30_000)
        page.screenshot(path=screenshot, full_page=True)
        live.locator("button.pause").click()
        expect(live.locator(".state")).to_have_text("paused", timeout=30_000)
        assert api(url, token, "/api/v1/pipelines/" + running)["state"] == "paused"
        live.locator("button.resume").click()
        expect(live.locator(".state")).to_have_text("running", timeout=30_000)
        assert api(url, token, "/api/v1/pipelines/" + running)["desired"] == "running"
        browser.close()
    print("ok")


if __name__ == "__main__":
    main(*sys.argv[1:])
