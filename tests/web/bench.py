"""Times the web view in headless Chromium: from navigation start until the
page is interactive (its data rendered, `data-ready` set), over fresh loads.
Prints JSON: each page's load times in ms."""

import json
import sys

import browser


def main():
    url, pages, runs = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
    driver = browser.start()
    try:
        driver.get(url)  # trades the token for the key (this tab's sessionStorage)
        browser.ready(driver, "list")
        origin = url.split("/?")[0]
        out = {}
        complete = []
        for name, (route, view) in pages.items():
            times = []
            for _ in range(runs + 1):
                driver.get("about:blank")
                driver.get(origin + "/" + route)
                browser.ready(driver, view)
                times.append(float(driver.execute_script("return document.body.dataset.readyAt")))
                if view == "list":
                    browser.wait(driver, lambda d: d.execute_script("return document.body.dataset.completeAt"))
                    complete.append(float(driver.execute_script("return document.body.dataset.completeAt")))
            out[name] = times[1:]  # the first load warms the caches
            if complete:
                out[name + "_complete"] = complete[1:]
                complete = []
        print(json.dumps(out))
    finally:
        driver.quit()


if __name__ == "__main__":
    main()
