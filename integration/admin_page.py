#!/usr/bin/env python3
"""Drives rebound's admin page in a real browser: Debian's chromium, headless, through
chromedriver and python3-selenium. Called by integration/admin_page_test.cpp with a rebound
that holds two dead letters; replays one with the right token, is refused the other with a
wrong one, and checks what the page shows and that its JavaScript console stays free of
errors. Prints what failed and exits 1, or exits 0."""
import argparse
import sys

from selenium import webdriver
from selenium.common.exceptions import (NoSuchElementException, StaleElementReferenceException,
                                        TimeoutException)
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

ap = argparse.ArgumentParser()
ap.add_argument("--url", required=True)
ap.add_argument("--token", required=True)
ap.add_argument("--replay", required=True, help="the dead letter to replay")
ap.add_argument("--refused", required=True, help="the dead letter a wrong token must not replay")
ap.add_argument("--dependency", required=True)
args = ap.parse_args()

options = webdriver.ChromeOptions()
options.binary_location = "/usr/bin/chromium"
for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
             "--no-first-run", "--disable-extensions"):
    options.add_argument(flag)
options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
    return ok


# The page re-renders its tables every few seconds: an element found a moment ago may be gone
# (stale) by the time it is read. Every read happens inside a predicate that is asked again, and a
# stale or missing element means "not yet", never a failure.
RERENDERED = (StaleElementReferenceException, NoSuchElementException)


def wait(predicate, what, seconds=25):
    try:
        WebDriverWait(driver, seconds, poll_frequency=0.2, ignored_exceptions=RERENDERED).until(
            lambda d: predicate())
        return True
    except TimeoutException:
        failures.append("timed out waiting for " + what)
        return False


def click(find, what):
    """Clicks what find() returns, looked up again if a re-render replaced it meanwhile."""
    def clicked():
        find().click()
        return True
    return wait(clicked, "to click " + what)


def rows(table):
    return driver.find_elements(By.CSS_SELECTOR, "#%s tbody tr" % table)


def dlq_row(task):
    found = driver.find_elements(By.CSS_SELECTOR, '#dlq tbody tr[data-task="%s"]' % task)
    return found[0] if found else None


def listed(task):
    """The dead letter's row; while it is not listed, raises what wait() takes for "not yet"."""
    row = dlq_row(task)
    if row is None:
        raise NoSuchElementException("dead letter %s not listed" % task)
    return row


def console_errors():
    return [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]


try:
    driver.get(args.url)
    check(driver.title == "rebound admin", "the page's title is %r" % driver.title)
    wait(lambda: dlq_row(args.replay) and dlq_row(args.refused), "both dead letters listed")

    def replay_row_cells():
        return [c.text for c in listed(args.replay).find_elements(By.TAG_NAME, "td")]
    wait(lambda: replay_row_cells()[1] == args.dependency and replay_row_cells()[2].startswith("POST /"),
         "the dead letter's dependency and request cells")

    def dependency_cell(column):
        """The text of the dependency's row in `column` (1 breaker, 6 concurrency, 7 ejected)."""
        for r in rows("dependencies"):
            if r.get_attribute("data-dependency") == args.dependency:
                return r.find_elements(By.TAG_NAME, "td")[column].text
        return None
    wait(lambda: dependency_cell(1) in ("closed", "half_open", "open"), "the dependency's breaker state")
    wait(lambda: dependency_cell(6) == "limit 8, 0 in flight", "the dependency's concurrency limit")
    wait(lambda: dependency_cell(7) == "none", "the dependency's ejected addresses (its one address is never ejected)")
    wait(lambda: args.dependency in driver.find_element(By.ID, "config").text, "the running config shown")
    # retry_tasks is counted every 10 s: the page shows the count once it was taken.
    wait(lambda: driver.find_element(By.CSS_SELECTOR, '#tasks td[data-status="DEAD_LETTERED"]').text == "2",
         "DEAD_LETTERED counted 2")

    # The operator types the token and replays the first: it leaves the list.
    driver.find_element(By.ID, "token").send_keys(args.token)
    click(lambda: listed(args.replay).find_element(By.CSS_SELECTOR, "button.replay"), "replay")
    wait(lambda: dlq_row(args.replay) is None, "the replayed dead letter to leave the list")
    wait(lambda: ("Replayed " + args.replay) in driver.find_element(By.ID, "message").text, "the replay confirmed")
    check(dlq_row(args.refused) is not None, "the other dead letter is still listed")
    errors = console_errors()
    check(not errors, "console errors during a replay: %r" % errors)

    # Nothing of the token outlives the tab.
    stored = driver.execute_script("return [localStorage.length, sessionStorage.length, document.cookie]")
    check(stored == [0, 0, ""], "the page stored something: %r" % stored)

    # A wrong token: refused, said so, the dead letter stays.
    token = driver.find_element(By.ID, "token")  # outside the tables: never re-rendered
    token.clear()
    token.send_keys("not-the-token")
    click(lambda: listed(args.refused).find_element(By.CSS_SELECTOR, "button.replay"), "replay with a wrong token")
    wait(lambda: "refused" in driver.find_element(By.ID, "message").text, "the refusal said")
    check(dlq_row(args.refused) is not None, "a refused dead letter left the list")
    # Chromium logs the 401 of the refused fetch as a failed resource; nothing else may appear.
    errors = [e for e in console_errors() if "401" not in e["message"]]
    check(not errors, "console errors after a refused replay: %r" % errors)
finally:
    driver.quit()

for f in failures:
    print("admin page: " + f)
sys.exit(1 if failures else 0)
