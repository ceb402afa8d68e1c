"""Browser flows of the web view (tests/tests/e2e/web.rs runs them): each takes
the printed URL and a JSON argument, drives the page and prints JSON."""

import json
import sys

from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys

import browser


def texts(driver, css):
    return [e.text for e in driver.find_elements(By.CSS_SELECTOR, css)]


def open_conversation(driver, title):
    browser.ready(driver, "list")
    link = driver.find_element(By.LINK_TEXT, title)
    # Keyboard navigable: reach it by focus and Enter, not a mouse click.
    driver.execute_script("arguments[0].focus()", link)
    link.send_keys(Keys.ENTER)
    browser.ready(driver, "conversation")


def read(driver, arg):
    browser.ready(driver, "list")
    titles = texts(driver, "#sessions a.session")
    open_conversation(driver, arg["title"])
    tools = driver.find_elements(By.CSS_SELECTOR, "#transcript details.tool")
    folded = [t.get_attribute("open") is None for t in tools]
    output_hidden = [not t.find_element(By.CSS_SELECTOR, "pre").is_displayed() for t in tools]
    if tools:
        tools[0].find_element(By.TAG_NAME, "summary").click()
    return {
        "titles": titles,
        "messages": texts(driver, "#transcript .msg .text"),
        "tools_folded": folded,
        "tool_text_hidden": output_hidden,
        "first_tool_opened": tools[0].text if tools else "",
        "checkpoints": len(driver.find_elements(By.CSS_SELECTOR, "#transcript .checkpoint")),
        "pager": texts(driver, "nav.pager span")[:1],
    }


def search(driver, arg):
    browser.ready(driver, "list")
    driver.find_element(By.ID, "nav-search").click()
    box = browser.wait(driver, lambda d: d.find_element(By.CSS_SELECTOR, "input[type=search]"))
    box.send_keys(arg["query"])
    box.send_keys(Keys.ENTER)
    browser.ready(driver, "search")
    hits = texts(driver, "#results li.hit a")
    marks = texts(driver, "#results mark")
    driver.find_element(By.CSS_SELECTOR, "#results li.hit a").click()
    browser.ready(driver, "conversation")
    return {"hits": hits, "marks": marks, "opened": driver.find_element(By.TAG_NAME, "h1").text}


def diff(driver, arg):
    open_conversation(driver, arg["title"])
    links = driver.find_elements(By.CSS_SELECTOR, "#transcript a.diff-link")
    links[-1].click()
    browser.ready(driver, "diff")
    return {
        "files": [e.get_attribute("data-path") for e in driver.find_elements(By.CSS_SELECTOR, "#diff details.file")],
        "added": texts(driver, "#diff pre span.add"),
        "removed": texts(driver, "#diff pre span.del"),
    }


def undo(driver, arg):
    open_conversation(driver, arg["title"])
    driver.find_element(By.ID, "undo").click()
    plan = browser.wait(driver, lambda d: d.find_element(By.ID, "plan"))
    plan_text = plan.text
    with open(arg["marker"]) as f:
        before_confirm = f.read()
    driver.find_element(By.ID, "confirm").click()
    done = browser.wait(driver, lambda d: d.find_element(By.ID, "restored"))
    return {"plan": plan_text, "before_confirm": before_confirm, "done": done.text}


def send(driver, arg):
    open_conversation(driver, arg["title"])
    box = driver.find_element(By.ID, "message")
    box.send_keys(arg["message"])
    driver.find_element(By.ID, "send").click()
    browser.wait(driver, lambda d: d.find_element(By.CSS_SELECTOR, "#live .msg.assistant").get_attribute("data-finished"))
    reply = driver.find_element(By.CSS_SELECTOR, "#live .msg.assistant")
    return {
        "finished": reply.get_attribute("data-finished"),
        "answer": driver.find_element(By.ID, "answer").text,
        "deltas": int(reply.get_attribute("data-deltas") or 0),
    }


def approve(driver, arg):
    open_conversation(driver, arg["title"])
    driver.find_element(By.ID, "message").send_keys(arg["message"])
    driver.find_element(By.ID, "send").click()
    button = browser.wait(driver, lambda d: d.find_element(By.ID, "approve"))
    prompt = driver.find_element(By.CSS_SELECTOR, ".approval").text
    # The Run button has the focus: Enter approves.
    focused = driver.switch_to.active_element.get_attribute("id")
    button.send_keys(Keys.ENTER)
    browser.wait(driver, lambda d: d.find_element(By.CSS_SELECTOR, "#live .msg.assistant").get_attribute("data-finished"))
    return {
        "prompt": prompt,
        "focused": focused,
        "finished": driver.find_element(By.CSS_SELECTOR, "#live .msg.assistant").get_attribute("data-finished"),
        "tool": texts(driver, "#live details.tool summary"),
    }


def stop(driver, arg):
    open_conversation(driver, arg["title"])
    driver.find_element(By.ID, "message").send_keys(arg["message"])
    driver.find_element(By.ID, "send").click()
    button = browser.wait(driver, lambda d: d.find_element(By.ID, "stop") if d.find_element(By.ID, "stop").is_enabled() else None)
    button.click()
    browser.wait(driver, lambda d: d.find_element(By.CSS_SELECTOR, "#live .msg.assistant").get_attribute("data-finished"))
    return {
        "finished": driver.find_element(By.CSS_SELECTOR, "#live .msg.assistant").get_attribute("data-finished"),
        "state": driver.find_element(By.ID, "turn-state").text,
    }


def unknown(driver, arg):
    """A transcript item of a kind this page does not know (say agentd grew a
    new record) is shown as it is, and the rest still renders."""
    browser.ready(driver, "list")
    driver.execute_script(
        """
        const real = window.fetch;
        window.fetch = async (...args) => {
          const res = await real(...args);
          if (!String(args[0]).startsWith("/api/transcript")) return res;
          const body = await res.json();
          body.items.splice(1, 0, {index: 9999, type: "hologram", at: "2026-01-01T00:00:00Z",
            summary: "Earlier turns, summed up", tokens_before: 120000, tokens_after: 8000});
          return new Response(JSON.stringify(body), {status: 200, headers: {"Content-Type": "application/json"}});
        };
        """
    )
    driver.find_element(By.LINK_TEXT, arg["title"]).click()
    browser.ready(driver, "conversation")
    item = driver.find_element(By.CSS_SELECTOR, '#transcript details.unknown[data-type="hologram"]')
    summary = item.find_element(By.TAG_NAME, "summary").text
    item.find_element(By.TAG_NAME, "summary").click()
    return {"summary": summary, "body": item.text, "messages": texts(driver, "#transcript .msg .text")}


def screenshot(driver, arg):
    open_conversation(driver, arg["title"])
    for details in driver.find_elements(By.CSS_SELECTOR, "#transcript details.tool")[:1]:
        details.find_element(By.TAG_NAME, "summary").click()
    # The last answer (Markdown, a code block) in view above the composer.
    answers = driver.find_elements(By.CSS_SELECTOR, "#transcript .msg.assistant")
    if answers:
        driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", answers[-1])
    driver.save_screenshot(arg["path"])
    return {"saved": arg["path"]}


def visit(driver, arg):
    """Logged in, opens other local servers' pages (they record what the
    browser sends them), then comes back to the web view."""
    browser.ready(driver, "list")
    home = driver.current_url
    for url in arg["urls"]:
        driver.get(url)
    driver.get(home)
    browser.ready(driver, "list")
    return {"back": driver.current_url}


def markdown(driver, arg):
    """An answer's Markdown in the transcript and in a turn sent from the page."""
    driver.execute_script("window.__pwned = false;")
    open_conversation(driver, arg["title"])
    answers = driver.find_elements(By.CSS_SELECTOR, "#transcript .msg.assistant .md")
    md = answers[-1]
    links = [{"href": a.get_attribute("href"), "rel": a.get_attribute("rel"), "target": a.get_attribute("target")}
             for a in md.find_elements(By.TAG_NAME, "a")]
    result = {
        "text": md.text,
        "strong": [e.text for e in md.find_elements(By.TAG_NAME, "strong")],
        "code": [e.text for e in md.find_elements(By.CSS_SELECTOR, "p code")],
        "keywords": [e.text for e in md.find_elements(By.CSS_SELECTOR, "pre.code .hl-keyword")],
        "items": [e.text for e in md.find_elements(By.TAG_NAME, "li")],
        "links": links,
        "inert": [e.text for e in md.find_elements(By.CSS_SELECTOR, ".inert-link")],
        "scripts": len(driver.find_elements(By.CSS_SELECTOR, "main script, main img, main iframe, main [onerror], main [onclick]")),
    }
    # A turn sent from the page: its answer is rendered when it is finished.
    driver.find_element(By.ID, "message").send_keys(arg["message"])
    driver.find_element(By.ID, "send").click()
    browser.wait(driver, lambda d: d.find_element(By.CSS_SELECTOR, "#live .msg.assistant").get_attribute("data-finished"))
    live = driver.find_element(By.ID, "answer")
    result["live_strong"] = [e.text for e in live.find_elements(By.TAG_NAME, "strong")]
    result["live_text"] = live.text
    result["pwned"] = driver.execute_script("return window.__pwned")
    return result


def compaction(driver, arg):
    open_conversation(driver, arg["title"])
    marks = driver.find_elements(By.CSS_SELECTOR, "#transcript .compaction")
    return {
        "lines": [m.find_element(By.CSS_SELECTOR, ".line").text for m in marks],
        "notes": [m.find_element(By.CSS_SELECTOR, ".note").text for m in marks],
        "summary": [m.find_element(By.TAG_NAME, "summary").text for m in marks],
        "unknown": len(driver.find_elements(By.CSS_SELECTOR, "#transcript details.unknown")),
        "messages": texts(driver, "#transcript .msg .text"),
    }


def layout(driver, arg):
    """A long conversation: times on hover, one pager, the composer in reach,
    the focus on the content after a link; then a message sent."""
    browser.ready(driver, "list")
    times = [{"title": t.get_attribute("title"), "datetime": t.get_attribute("datetime"), "text": t.text}
             for t in driver.find_elements(By.CSS_SELECTOR, "#sessions time")]
    open_conversation(driver, arg["title"])
    focused = driver.execute_script(
        "const a = document.activeElement; return {id: a.id, in_main: document.getElementById('main').contains(a)};")
    height = driver.execute_script("return window.innerHeight")
    page_height = driver.execute_script("return document.documentElement.scrollHeight")

    def composer_in_view():
        r = driver.execute_script("const r = document.getElementById('message').getBoundingClientRect(); return [r.top, r.bottom];")
        return r[0] >= 0 and r[1] <= height

    def pager_count():
        return driver.execute_script(
            "return (document.getElementById('main').innerText.match(/page \\d+ of \\d+/g) || []).length")

    at_top = composer_in_view()
    driver.execute_script("window.scrollTo(0, document.documentElement.scrollHeight / 2)")
    in_middle = composer_in_view()
    pagers_before = pager_count()
    box = driver.find_element(By.ID, "message")
    box.send_keys(arg["message"])
    driver.find_element(By.ID, "send").click()
    browser.wait(driver, lambda d: d.find_element(By.CSS_SELECTOR, "#live .msg.assistant").get_attribute("data-finished"))
    checkpoint_times = [t.get_attribute("title") for t in driver.find_elements(By.CSS_SELECTOR, "#transcript .checkpoint time")]
    lines = driver.execute_script("return document.getElementById('main').innerText").split("\n")
    return {
        "stray_null": "null" in [line.strip() for line in lines],
        "times": times,
        "focused": focused,
        "taller_than_window": page_height > height * 2,
        "composer_at_top": at_top,
        "composer_in_middle": in_middle,
        "pagers_before": pagers_before,
        "pagers_after": pager_count(),
        "checkpoint_times": checkpoint_times[:2],
    }


def failing_send(driver, arg):
    """A message agentx refuses: the error shows and "thinking…" goes."""
    open_conversation(driver, arg["title"])
    driver.execute_script("document.getElementById('message').value = 'x'.repeat(arguments[0]);", arg["size"])
    driver.find_element(By.ID, "send").click()
    browser.wait(driver, lambda d: d.find_element(By.CSS_SELECTOR, "#live .msg.assistant").get_attribute("data-finished"))
    return {
        "finished": driver.find_element(By.CSS_SELECTOR, "#live .msg.assistant").get_attribute("data-finished"),
        "state": driver.find_element(By.ID, "turn-state").text,
        "errors": texts(driver, "#live .error"),
    }


def titles(driver, arg):
    browser.ready(driver, "list")
    return {"titles": texts(driver, "#sessions a.session"), "errors": texts(driver, ".error")}


def main():
    flow, url, arg = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    driver = browser.start(width=arg.get("width", 1200), height=arg.get("height", 900))
    try:
        driver.get(url)
        result = globals()[flow](driver, arg)
        result["url_after_login"] = driver.current_url
        result["cookie_visible_to_script"] = driver.execute_script("return document.cookie")
    finally:
        driver.quit()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
