"""Headless Chromium from the distribution, driven by Selenium: no download,
no statistics (SE_AVOID_STATS), nothing leaves this machine."""

import os

os.environ["SE_AVOID_STATS"] = "true"

from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


def start(width=1200, height=900, dark=False):
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-default-apps",
        "--disable-sync",
        "--metrics-recording-only",
        "--no-default-browser-check",
        f"--window-size={width},{height}",
    ):
        options.add_argument(arg)
    if dark:
        options.add_argument("--force-dark-mode")
        options.add_argument("--blink-settings=preferredColorScheme=0")
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


def wait(driver, condition, timeout=30):
    """Waits for a real condition (never a fixed sleep)."""
    return WebDriverWait(driver, timeout, poll_frequency=0.05).until(lambda d: condition(d))


def ready(driver, view):
    wait(driver, lambda d: d.execute_script("return document.body.dataset.ready") == view)
