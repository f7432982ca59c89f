"""The web console in a real headless Chromium against `trellis dev` (scheduler ACLs on): log in,
a KV secret at its URL (masked, then revealed), a workspace in its org's list, a running job's
allocation, and an allocation reaching `running` (or `failed`) while the page is open, with no
reload, no browser console error and no request to another host; then every page the console
has, checked against what the API itself answers. Screenshots are kept under
tests/artifacts/console/ (and, with TRELLIS_UPDATE_DOCS=1, copied to docs/console-*.png)."""

from __future__ import annotations

import io
import os
import re
import secrets
import shutil
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import requests

from tests.job_helpers import one_task_job, raw_exec_task
from tests.procs import ROOT, DevProcess, dev, until

pytestmark = pytest.mark.e2e

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
ARTIFACTS = ROOT / "tests" / "artifacts" / "console"
ORG = "console-org"
WORKSPACE = "billing-prod"
SECRET_VALUE = "s3cr3t-" + secrets.token_hex(6)
# One screenshot per section for docs/ (the revealed secret stays a test artifact only).
DOCS_SHOTS = {"login", "secrets", "secret", "policy", "pki", "workspaces", "workspace", "jobs"}
DOCS_SHOTS |= {"job", "nodes", "narrow", "workspace-run"}

webdriver = pytest.importorskip("selenium.webdriver")
if not (os.access(CHROMIUM, os.X_OK) and os.access(CHROMEDRIVER, os.X_OK)):
    if os.environ.get("TRELLIS_REQUIRE_ALL"):
        raise RuntimeError("chromium and chromium-driver are required (test.sh installs them)")
    pytest.skip("Debian's chromium and chromium-driver are not installed", allow_module_level=True)

from selenium.webdriver.common.action_chains import ActionChains  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.common.keys import Keys  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402


def _job(job_id: str, count: int) -> dict[str, Any]:
    task = raw_exec_task("server", "/bin/sh", "-c", "sleep 600")
    return {"Job": one_task_job(job_id, task, kind="service", group="web", count=count)}


class Seeded:
    def __init__(self, d: DevProcess, token: str) -> None:
        self.d = d
        self.token = token
        self.vault = {"X-Vault-Token": token, "X-Svc-Request": "true"}
        self.tfe = {"Authorization": f"Bearer {token}", "Content-Type": "application/vnd.api+json"}
        self.nomad = {"X-Nomad-Token": token}

    def secrets(self, method: str, path: str, **kw: Any) -> requests.Response:
        return requests.request(method, self.d.secrets + path, headers=self.vault, timeout=15, **kw)

    def workspace(self, method: str, path: str, **kw: Any) -> requests.Response:
        return requests.request(method, self.d.workspace + path, headers=self.tfe, timeout=15, **kw)

    def scheduler(self, method: str, path: str, **kw: Any) -> requests.Response:
        url = self.d.scheduler + path
        return requests.request(method, url, headers=self.nomad, timeout=15, **kw)

    def job(self, job_id: str, count: int) -> None:
        r = self.scheduler("POST", "/v1/jobs", json=_job(job_id, count))
        assert r.status_code == 200, r.text


@pytest.fixture(scope="module")
def seeded() -> Iterator[Seeded]:
    token = "console-" + secrets.token_hex(8)
    # Scheduler ACLs on: each of the three APIs checks the console's token by its own rules.
    with dev("--root-token", token, "--acl") as d:
        s = Seeded(d, token)
        r = s.secrets("POST", "/v1/sys/mounts/kv", json={"type": "kv", "options": {"version": "2"}})
        assert r.status_code in (200, 204), r.text
        for value in ("first", SECRET_VALUE):
            r = s.secrets("POST", "/v1/kv/data/app/db", json={"data": {"password": value}})
            assert r.status_code == 200, r.text
        doc = {"data": {"type": "organizations", "attributes": {"name": ORG, "email": "o@x.test"}}}
        assert s.workspace("POST", "/api/v2/organizations", json=doc).status_code == 201
        for name, tags in ((WORKSPACE, ["prod", "billing"]), ("scratch", ["dev"])):
            ws = {"data": {"type": "workspaces", "attributes": {"name": name, "tag-names": tags}}}
            r = s.workspace("POST", f"/api/v2/organizations/{ORG}/workspaces", json=ws)
            assert r.status_code == 201, r.text
        until(
            lambda: any(n["Status"] == "ready" for n in s.scheduler("GET", "/v1/nodes").json()),
            what="the dev client node is ready",
        )
        yield s


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    # No selenium-manager: it would fetch drivers (and send stats) over the network.
    os.environ["SE_AVOID_STATS"] = "true"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    opts = Options()
    opts.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1400,900",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-extensions",
    ):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=opts, service=Service(executable_path=CHROMEDRIVER))
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def shot(driver: Any, name: str) -> Path:
    path = ARTIFACTS / f"console-{name}.png"
    driver.save_screenshot(str(path))
    if os.environ.get("TRELLIS_UPDATE_DOCS") and name in DOCS_SHOTS:
        shutil.copyfile(path, ROOT / "docs" / f"console-{name}.png")
    return path


def text_of(driver: Any) -> str:
    return driver.find_element(By.TAG_NAME, "main").text


def wait_text(driver: Any, needle: str, timeout: float = 30.0) -> None:
    WebDriverWait(driver, timeout, poll_frequency=0.2).until(
        lambda d: needle in d.find_element(By.TAG_NAME, "body").text,
        message=f"page never showed {needle!r}",
    )


def console_errors(driver: Any) -> list[dict[str, Any]]:
    return [e for e in driver.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]


def foreign_requests(driver: Any, origin: str) -> list[str]:
    names = driver.execute_script(
        "return performance.getEntriesByType('resource').map(e => e.name)"
        ".concat(performance.getEntriesByType('navigation').map(e => e.name))"
    )
    host = urlsplit(origin).netloc
    return [n for n in names if urlsplit(n).netloc != host]


@pytest.fixture(scope="module")
def logged_in(seeded: Seeded, browser: Any) -> Any:
    """Sign in once through the form, on the workspace listener (any listener serves it)."""
    browser.get(seeded.d.workspace + "/ui/secrets")
    field = WebDriverWait(browser, 30).until(lambda d: d.find_element(By.NAME, "token"))
    shot(browser, "login")
    field.send_keys(seeded.token)
    browser.find_element(By.CSS_SELECTOR, "form button[type=submit]").click()
    wait_text(browser, "Secrets engines")
    return browser


def test_login_keeps_the_token_in_the_session_only(seeded: Seeded, logged_in: Any) -> None:
    b = logged_in
    assert seeded.token not in b.current_url
    assert b.execute_script("return localStorage.length") == 0
    assert b.execute_script("return document.cookie") == ""
    # Landmarks and labels a screen reader announces.
    assert b.find_element(By.CSS_SELECTOR, "nav[aria-label=Sections]")
    assert b.find_element(By.TAG_NAME, "main")
    wait_text(b, "kv/")
    shot(b, "secrets")
    assert console_errors(b) == []


def test_kv_secret_at_its_url_masked_then_revealed(seeded: Seeded, logged_in: Any) -> None:
    b = logged_in
    # A deep link, loaded from scratch: the gateway serves the app for the page's path, and the
    # token, kept in this origin's session storage, survives the load.
    b.get(seeded.d.workspace + "/ui/secrets/kv/app/db")
    wait_text(b, "Versions")
    value = WebDriverWait(b, 30).until(
        lambda d: d.find_element(By.CSS_SELECTOR, "code[data-key=password]")
    )
    assert value.text == "••••••••"
    assert SECRET_VALUE not in b.page_source
    shot(b, "secret")
    b.find_element(By.CSS_SELECTOR, "button[aria-label='Reveal password']").click()
    WebDriverWait(b, 10).until(lambda d: value.text == SECRET_VALUE)
    assert "v2" in text_of(b) and "(current)" in text_of(b)
    shot(b, "secret-revealed")
    # The metadata section shows what the API keeps about the secret.
    meta = seeded.secrets("GET", "/v1/kv/metadata/app/db").json()["data"]
    dl = b.find_element(By.CSS_SELECTOR, "dl[aria-label='Secret metadata']").text
    assert f"Current version\n{meta['current_version']}" in dl, dl
    assert f"Max versions\n{meta['max_versions']}" in dl, dl
    # An older version, from the versions table: its own value, masked again until asked.
    b.find_element(By.CSS_SELECTOR, "a[aria-label='View version 1']").click()
    wait_text(b, "Data (version 1)")
    assert b.current_url.endswith("/ui/secrets/kv/app/db?version=1")

    def version_1_revealed(d: Any) -> bool:
        # Until version 1's data arrives the page may still show version 2's (masked).
        value = d.find_element(By.CSS_SELECTOR, "code[data-key=password]")
        if "masked" in (value.get_attribute("class") or ""):
            d.find_element(By.CSS_SELECTOR, "button[aria-label='Reveal password']").click()
            return False
        return bool(value.text == "first")

    WebDriverWait(b, 30, poll_frequency=0.3).until(version_1_revealed)
    # The token travelled in a header, never in an address the browser fetched.
    names = b.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    assert names and not any(seeded.token in n for n in names)
    assert foreign_requests(b, seeded.d.workspace) == []
    assert console_errors(b) == []


def _folder_rows(driver: Any) -> list[list[str]]:
    table = driver.find_element(By.XPATH, "//table[caption='Keys in this folder']")
    return [
        [td.text for td in tr.find_elements(By.TAG_NAME, "td")]
        for tr in table.find_elements(By.CSS_SELECTOR, "tbody tr")
    ]


def test_kv_folders_browse_down_to_a_secret(seeded: Seeded, logged_in: Any) -> None:
    """From the mount's root, folder by folder, by clicking: each folder lists what the API's
    LIST gives, folders apart from secrets."""
    top = "browse-" + secrets.token_hex(3)
    for path in (f"{top}/inner/leaf", f"{top}/sibling"):
        r = seeded.secrets("POST", f"/v1/kv/data/{path}", json={"data": {"k": path}})
        assert r.status_code == 200, r.text
    b = logged_in
    b.get(seeded.d.workspace + "/ui/secrets/kv/")
    WebDriverWait(b, 30).until(lambda d: d.find_element(By.LINK_TEXT, f"{top}/")).click()
    WebDriverWait(b, 20).until(lambda d: d.current_url.endswith(f"/ui/secrets/kv/{top}/"))
    listed = seeded.secrets("GET", f"/v1/kv/metadata/{top}/", params={"list": "true"})
    keys = listed.json()["data"]["keys"]
    assert sorted(keys) == ["inner/", "sibling"]
    want = sorted([k, "folder" if k.endswith("/") else "secret"] for k in keys)
    WebDriverWait(b, 20).until(lambda d: sorted(_folder_rows(d)) == want)
    b.find_element(By.LINK_TEXT, "inner/").click()
    WebDriverWait(b, 20).until(lambda d: _folder_rows(d) == [["leaf", "secret"]])
    b.find_element(By.LINK_TEXT, "leaf").click()
    WebDriverWait(b, 20).until(lambda d: d.current_url.endswith(f"/ui/secrets/kv/{top}/inner/leaf"))
    value = WebDriverWait(b, 30).until(
        lambda d: d.find_element(By.CSS_SELECTOR, "code[data-key=k]")
    )
    assert value.text == "••••••••"
    assert console_errors(b) == []


def test_a_secret_that_is_not_there(seeded: Seeded, logged_in: Any) -> None:
    """The secrets API answers a path with nothing there 404 `{"errors":[]}`: the page says so
    in words rather than showing the raw body."""
    direct = seeded.secrets("GET", "/v1/kv/data/app/nothing-here")
    assert (direct.status_code, direct.json()) == (404, {"errors": []})
    b = logged_in
    b.get(seeded.d.workspace + "/ui/secrets/kv/app/nothing-here")
    err = WebDriverWait(b, 20).until(lambda d: d.find_element(By.CSS_SELECTOR, "[role=alert]"))
    assert err.text == "The secrets API answered 404: nothing at this path"
    assert all("404" in e["message"] for e in console_errors(b))


def test_workspace_in_its_orgs_list(seeded: Seeded, logged_in: Any) -> None:
    b = logged_in
    b.get(seeded.d.workspace + f"/ui/workspaces/{ORG}")
    wait_text(b, WORKSPACE)
    body = text_of(b)
    assert "scratch" in body and "billing" in body and "prod" in body
    shot(b, "workspaces")
    # Search narrows the list through the API's search[name].
    box = b.find_element(By.ID, "ws-search")
    box.send_keys("billing")
    box.submit()
    WebDriverWait(b, 20).until(lambda d: "scratch" not in text_of(d))
    assert WORKSPACE in text_of(b)
    assert foreign_requests(b, seeded.d.workspace) == []
    assert console_errors(b) == []


def _names_on_page(driver: Any) -> list[str]:
    rows = driver.find_elements(By.CSS_SELECTOR, "table tbody tr td:first-child a")
    return [r.text for r in rows]


def test_workspace_list_pages_and_tags(seeded: Seeded, logged_in: Any) -> None:
    """22 workspaces are two pages of 20; a tag's link narrows the list to that tag, as the
    API's own search[tags] does."""
    org = "console-pages-" + secrets.token_hex(3)
    doc = {"data": {"type": "organizations", "attributes": {"name": org, "email": "p@x.test"}}}
    assert seeded.workspace("POST", "/api/v2/organizations", json=doc).status_code == 201
    for i in range(22):
        attrs = {"name": f"svc-{i:02}", "tag-names": ["odd" if i % 2 else "even"]}
        ws = {"data": {"type": "workspaces", "attributes": attrs}}
        r = seeded.workspace("POST", f"/api/v2/organizations/{org}/workspaces", json=ws)
        assert r.status_code == 201, r.text

    def api_names(**params: str) -> list[str]:
        r = seeded.workspace("GET", f"/api/v2/organizations/{org}/workspaces", params=params)
        return [w["attributes"]["name"] for w in r.json()["data"]]

    b = logged_in
    b.get(seeded.d.workspace + f"/ui/workspaces/{org}")
    wait_text(b, "Page 1 of 2 (22 workspaces)")
    first = _names_on_page(b)
    assert first == api_names(**{"page[number]": "1", "page[size]": "20"})
    b.find_element(By.XPATH, "//button[text()='Next page']").click()
    wait_text(b, "Page 2 of 2 (22 workspaces)")
    WebDriverWait(b, 20).until(lambda d: len(_names_on_page(d)) == 2)
    second = _names_on_page(b)
    assert sorted(first + second) == [f"svc-{i:02}" for i in range(22)]
    assert b.find_element(By.XPATH, "//button[text()='Next page']").get_attribute("disabled")
    b.find_element(By.XPATH, "//button[text()='Previous page']").click()
    wait_text(b, "Page 1 of 2 (22 workspaces)")
    # A tag is a link to the list of workspaces carrying it.
    b.find_element(By.CSS_SELECTOR, "a[aria-label='Workspaces tagged odd']").click()
    wait_text(b, "Page 1 of 1 (11 workspaces)")
    assert "tag=odd" in b.current_url
    odd = _names_on_page(b)
    assert sorted(odd) == sorted(api_names(**{"search[tags]": "odd"}))
    assert sorted(odd) == [f"svc-{i:02}" for i in range(1, 22, 2)]
    b.find_element(By.XPATH, "//a[text()='Show every tag']").click()
    wait_text(b, "Page 1 of 2 (22 workspaces)")
    assert foreign_requests(b, seeded.d.workspace) == []
    assert console_errors(b) == []


def test_workspace_detail_shows_consumers_and_variables(seeded: Seeded, logged_in: Any) -> None:
    """What the API holds about a workspace shows on its page: the workspaces that may read its
    state, and its variables, a sensitive one without its value."""
    w = f"/api/v2/organizations/{ORG}/workspaces"
    name = "shared-" + secrets.token_hex(3)
    reader = "reader-" + secrets.token_hex(3)
    ids = {}
    for n in (name, reader):
        attrs = {"name": n, "global-remote-state": False}
        r = seeded.workspace("POST", w, json={"data": {"type": "workspaces", "attributes": attrs}})
        assert r.status_code == 201, r.text
        ids[n] = r.json()["data"]["id"]
    rel = {"data": [{"type": "workspaces", "id": ids[reader]}]}
    path = f"/api/v2/workspaces/{ids[name]}/relationships/remote-state-consumers"
    assert seeded.workspace("POST", path, json=rel).status_code == 204
    hidden = "pw-" + secrets.token_hex(6)
    for key, value, sensitive in (("region", "eu-west-1", False), ("db_pass", hidden, True)):
        attrs = {"key": key, "value": value, "category": "terraform", "sensitive": sensitive}
        r = seeded.workspace(
            "POST",
            f"/api/v2/workspaces/{ids[name]}/vars",
            json={"data": {"type": "vars", "attributes": attrs}},
        )
        assert r.status_code == 201, r.text
    b = logged_in
    b.get(seeded.d.workspace + f"/ui/workspaces/{ORG}/{name}")
    consumers = WebDriverWait(b, 30).until(
        lambda d: d.find_element(By.XPATH, "//table[caption='Workspaces that may read this state']")
    )
    assert reader in consumers.text
    variables = b.find_element(By.XPATH, "//table[caption='Workspace variables']")
    rows = [
        [td.text for td in tr.find_elements(By.TAG_NAME, "td")]
        for tr in variables.find_elements(By.CSS_SELECTOR, "tbody tr")
    ]
    assert sorted(rows) == [
        ["db_pass", "terraform", "(sensitive)"],
        ["region", "terraform", "eu-west-1"],
    ]
    assert hidden not in b.page_source
    assert console_errors(b) == []


def test_allocation_reaches_running_while_the_page_is_open(seeded: Seeded, logged_in: Any) -> None:
    b = logged_in
    job_id = "console-web-" + secrets.token_hex(3)
    seeded.job(job_id, 0)
    b.get(seeded.d.workspace + f"/ui/jobs/{job_id}")
    wait_text(b, "No allocations yet.")
    # A marker that a reload would wipe: the change must arrive through the blocking query.
    b.execute_script("window.__stillHere = true")
    started = time.monotonic()
    seeded.job(job_id, 1)
    WebDriverWait(b, 60, poll_frequency=0.3).until(
        lambda d: any(
            "running" in el.text for el in d.find_elements(By.CSS_SELECTOR, "li.alloc .status")
        ),
        message="the allocation never showed as running",
    )
    print(f"console: allocation shown running {time.monotonic() - started:.2f}s after register")
    assert b.execute_script("return window.__stillHere === true")
    # Version 1 differs from version 0 by the group's count: the diff is shown.
    b.find_element(By.CSS_SELECTOR, ".versions summary").click()
    diff = b.find_element(By.CSS_SELECTOR, ".versions pre.diff").text
    assert "Count: 0 => 1" in diff, diff
    alloc = b.find_element(By.CSS_SELECTOR, "li.alloc")
    alloc.find_element(By.TAG_NAME, "summary").click()
    WebDriverWait(b, 10).until(lambda d: "Started" in alloc.text)
    # Its evaluations and deployments, as the API lists them (the page may trail it a moment).
    for what, caption in (("evaluations", "Evaluations"), ("deployments", "Deployments")):
        listed = seeded.scheduler("GET", f"/v1/job/{job_id}/{what}").json()
        assert listed, f"the API lists no {what}"
        table = f"//table[caption='{caption}']"
        WebDriverWait(b, 20).until(
            lambda d, listed=listed, table=table: all(
                x["ID"][:8] in d.find_element(By.XPATH, table).text for x in listed
            ),
            message=f"the page does not list every one of the job's {what}",
        )
    shot(b, "job")
    b.get(seeded.d.workspace + "/ui/jobs")
    wait_text(b, job_id)
    shot(b, "jobs")
    b.get(seeded.d.workspace + "/ui/nodes")
    wait_text(b, "dc1")
    shot(b, "nodes")
    assert foreign_requests(b, seeded.d.workspace) == []
    assert console_errors(b) == []


def _failing_job(job_id: str, count: int) -> dict[str, Any]:
    task = raw_exec_task("main", "/bin/sh", "-c", "exit 3")
    job = one_task_job(job_id, task, kind="batch", group="once", count=count)
    # No restart, no reschedule: the first exit fails the allocation for good.
    job["TaskGroups"][0]["RestartPolicy"] = {"Attempts": 0, "Mode": "fail"}
    job["TaskGroups"][0]["ReschedulePolicy"] = {"Attempts": 0, "Unlimited": False}
    return {"Job": job}


def test_allocation_failing_shows_while_the_page_is_open(seeded: Seeded, logged_in: Any) -> None:
    b = logged_in
    job_id = "console-fail-" + secrets.token_hex(3)
    assert seeded.scheduler("POST", "/v1/jobs", json=_failing_job(job_id, 0)).status_code == 200
    b.get(seeded.d.workspace + f"/ui/jobs/{job_id}")
    wait_text(b, "No allocations yet.")
    b.execute_script("window.__stillHere = true")
    assert seeded.scheduler("POST", "/v1/jobs", json=_failing_job(job_id, 1)).status_code == 200
    WebDriverWait(b, 60, poll_frequency=0.3).until(
        lambda d: any(
            "failed" in el.text for el in d.find_elements(By.CSS_SELECTOR, "li.alloc .status")
        ),
        message="the allocation never showed as failed",
    )
    assert b.execute_script("return window.__stillHere === true")
    alloc = b.find_element(By.CSS_SELECTOR, "li.alloc")
    alloc.find_element(By.TAG_NAME, "summary").click()
    WebDriverWait(b, 10).until(lambda d: "Terminated" in alloc.text)
    assert "(failed)" in alloc.text
    assert console_errors(b) == []


def test_jobs_filter_box_uses_the_apis_expressions(seeded: Seeded, logged_in: Any) -> None:
    """Typed into the filter box and sent with Enter: the list is what the API's filter gives."""
    tag = secrets.token_hex(3)
    ids = [f"console-filter-{tag}-a", f"console-filter-{tag}-b"]
    for job_id in ids:
        seeded.job(job_id, 0)
    b = logged_in
    b.get(seeded.d.workspace + "/ui/jobs")
    wait_text(b, ids[1])
    box = b.find_element(By.ID, "job-filter")
    expr = f'ID == "{ids[0]}"'
    box.send_keys(expr, Keys.ENTER)
    # The list empties while the filtered one loads: wait for the filtered list itself.
    WebDriverWait(b, 20).until(
        lambda d: _names_on_page(d) == [ids[0]], message="filter not applied"
    )
    api = seeded.scheduler("GET", "/v1/jobs", params={"filter": expr})
    assert [j["ID"] for j in api.json()] == [ids[0]]
    assert "filter=" in b.current_url
    # A job registered while the filtered list is open and matching the filter shows up live.
    box = b.find_element(By.ID, "job-filter")
    box.clear()
    box.send_keys(f'ID contains "{tag}"', Keys.ENTER)
    WebDriverWait(b, 20).until(lambda d: sorted(_names_on_page(d)) == ids)
    late = f"console-filter-{tag}-c"
    seeded.job(late, 0)
    WebDriverWait(b, 30).until(lambda d: late in _names_on_page(d), message="no live update")
    assert console_errors(b) == []


def test_secret_create_delete_undelete_through_forms(seeded: Seeded, logged_in: Any) -> None:
    b = logged_in
    b.get(seeded.d.workspace + "/ui/secrets/kv/app/")
    name = WebDriverWait(b, 30).until(lambda d: d.find_element(By.ID, "new-secret-name"))
    name.send_keys("api-key")
    data = b.find_element(By.ID, "new-secret-data")
    data.clear()
    data.send_keys("[1, 2]")
    b.find_element(By.CSS_SELECTOR, "form[aria-labelledby=new-secret-h] button").click()
    wait_text(b, "the secret must be a JSON object")
    data.clear()
    data.send_keys('{"token": "abc-123"}')
    b.find_element(By.CSS_SELECTOR, "form[aria-labelledby=new-secret-h] button").click()
    WebDriverWait(b, 20).until(lambda d: d.current_url.endswith("/ui/secrets/kv/app/api-key"))
    wait_text(b, "Delete v1")
    r = seeded.secrets("GET", "/v1/kv/data/app/api-key")
    assert r.json()["data"]["data"] == {"token": "abc-123"}
    b.find_element(By.XPATH, "//button[normalize-space(.)='Delete v1']").click()
    wait_text(b, "Undelete v1")
    assert seeded.secrets("GET", "/v1/kv/data/app/api-key").status_code == 404
    b.find_element(By.XPATH, "//button[normalize-space(.)='Undelete v1']").click()
    wait_text(b, "Delete v1")
    assert seeded.secrets("GET", "/v1/kv/data/app/api-key").status_code == 200
    # Update: a new version written through the edit form.
    b.find_element(By.XPATH, "//button[normalize-space(.)='Edit']").click()
    area = WebDriverWait(b, 10).until(lambda d: d.find_element(By.ID, "edit-secret-data"))
    area.clear()
    area.send_keys('{"token": "def-456"}')
    b.find_element(By.XPATH, "//button[normalize-space(.)='Save version']").click()
    wait_text(b, "Delete v2")
    r = seeded.secrets("GET", "/v1/kv/data/app/api-key")
    assert r.json()["data"]["data"] == {"token": "def-456"}
    assert r.json()["data"]["metadata"]["version"] == 2
    assert console_errors(b) == []


def test_policy_edit_shows_the_apis_validation_error(seeded: Seeded, logged_in: Any) -> None:
    b = logged_in
    b.get(seeded.d.workspace + "/ui/policies")
    box = WebDriverWait(b, 30).until(lambda d: d.find_element(By.ID, "new-policy"))
    box.send_keys("console-readers")
    box.submit()
    area = WebDriverWait(b, 20).until(lambda d: d.find_element(By.ID, "policy-text"))
    area.send_keys('path "kv/data/*" { capabilities = ["read"')
    b.find_element(By.XPATH, "//button[text()='Save policy']").click()
    err = WebDriverWait(b, 20).until(lambda d: d.find_element(By.CSS_SELECTOR, "[role=alert]"))
    assert "secrets API answered 400" in err.text
    area.clear()
    area.send_keys('path "kv/data/*" { capabilities = ["read"] }')
    b.find_element(By.XPATH, "//button[text()='Save policy']").click()
    wait_text(b, "Saved.")
    r = seeded.secrets("GET", "/v1/sys/policies/acl/console-readers")
    assert "kv/data/*" in r.json()["data"]["policy"]
    shot(b, "policy")
    # Read back from the list: the stored text, as the API keeps it.
    b.get(seeded.d.workspace + "/ui/policies")
    WebDriverWait(b, 20).until(lambda d: d.find_element(By.LINK_TEXT, "console-readers")).click()
    area = WebDriverWait(b, 20).until(lambda d: d.find_element(By.ID, "policy-text"))
    assert area.get_attribute("value") == r.json()["data"]["policy"]
    # The one error the browser reports is the refusal the page showed.
    errors = console_errors(b)
    assert [e["message"] for e in errors if "400" not in e["message"]] == []


def test_workspace_detail_lock_and_unlock(seeded: Seeded, logged_in: Any) -> None:
    b = logged_in
    b.get(seeded.d.workspace + f"/ui/workspaces/{ORG}/{WORKSPACE}")
    wait_text(b, "Remote state consumers")
    wait_text(b, "No variables.")
    b.find_element(By.XPATH, "//button[text()='Lock']").click()
    wait_text(b, "Unlock")
    doc = seeded.workspace("GET", f"/api/v2/organizations/{ORG}/workspaces/{WORKSPACE}").json()
    assert doc["data"]["attributes"]["locked"] is True
    shot(b, "workspace")
    b.find_element(By.XPATH, "//button[text()='Unlock']").click()
    WebDriverWait(b, 20).until(lambda d: d.find_elements(By.XPATH, "//button[text()='Lock']"))
    doc = seeded.workspace("GET", f"/api/v2/organizations/{ORG}/workspaces/{WORKSPACE}").json()
    assert doc["data"]["attributes"]["locked"] is False
    assert console_errors(b) == []


def _start_run(seeded: Seeded, ws_name: str) -> str:
    """A run of a configuration holding one output, through the API as the CLI would make it."""
    w = f"/api/v2/organizations/{ORG}/workspaces"
    attrs = {"name": ws_name, "terraform-version": "1.0.3"}
    r = seeded.workspace("POST", w, json={"data": {"type": "workspaces", "attributes": attrs}})
    assert r.status_code == 201, r.text
    ws_id = r.json()["data"]["id"]
    cv_doc = {"data": {"type": "configuration-versions", "attributes": {"auto-queue-runs": False}}}
    r = seeded.workspace("POST", f"/api/v2/workspaces/{ws_id}/configuration-versions", json=cv_doc)
    assert r.status_code == 201, r.text
    cv = r.json()["data"]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        body = b'output "greeting" { value = "hello from the console" }\n'
        info = tarfile.TarInfo("main.tf")
        info.size = len(body)
        tar.addfile(info, io.BytesIO(body))
    r = requests.put(cv["attributes"]["upload-url"], data=buf.getvalue(), timeout=15)
    assert r.status_code == 200, r.text
    rel = {
        "workspace": {"data": {"type": "workspaces", "id": ws_id}},
        "configuration-version": {"data": {"type": "configuration-versions", "id": cv["id"]}},
    }
    run = {"type": "runs", "attributes": {"message": "console run", "auto-apply": True}}
    r = seeded.workspace("POST", "/api/v2/runs", json={"data": {**run, "relationships": rel}})
    assert r.status_code == 201, r.text
    return str(r.json()["data"]["id"])


def test_workspace_run_and_its_logs(seeded: Seeded, logged_in: Any) -> None:
    """A run started while the page is open moves to `applied` and its logs show, no reload."""
    b = logged_in
    run_id = _start_run(seeded, "console-runs")
    b.get(seeded.d.workspace + f"/ui/workspaces/{ORG}/console-runs")
    wait_text(b, run_id)
    b.execute_script("window.__stillHere = true")
    WebDriverWait(b, 90, poll_frequency=0.5).until(
        lambda d: "applied" in d.find_element(By.CSS_SELECTOR, "ul.runs li").text,
        message="the run never showed as applied",
    )
    b.find_element(By.CSS_SELECTOR, "ul.runs summary").click()
    WebDriverWait(b, 30, poll_frequency=0.5).until(
        lambda d: (
            "Apply complete" in d.find_element(By.CSS_SELECTOR, "pre[aria-label='apply log']").text
        ),
        message="the apply log never showed",
    )
    # The finished run changed the workspace: its new state's output and the released lock
    # show without a reload.
    wait_text(b, "hello from the console")
    wait_text(b, "State: unlocked")
    # The state the run wrote is listed under its serial and id.
    sv = seeded.workspace(
        "GET",
        "/api/v2/state-versions",
        params={"filter[workspace][name]": "console-runs", "filter[organization][name]": ORG},
    ).json()["data"]
    assert sv, "the run wrote no state version"
    states = b.find_element(By.XPATH, "//table[caption='State versions, newest first']").text
    for version in sv:
        assert version["id"] in states and str(version["attributes"]["serial"]) in states
    assert b.execute_script("return window.__stillHere === true")
    b.execute_script("document.querySelector('ul.runs').scrollIntoView()")
    shot(b, "workspace-run")
    assert console_errors(b) == []


def test_pki_issuers_and_certificates(seeded: Seeded, logged_in: Any) -> None:
    r = seeded.secrets("POST", "/v1/sys/mounts/pki", json={"type": "pki"})
    assert r.status_code in (200, 204), r.text
    r = seeded.secrets(
        "POST",
        "/v1/pki/root/generate/internal",
        json={"common_name": "console.test", "issuer_name": "console-root", "ttl": "24h"},
    )
    assert r.status_code == 200, r.text
    b = logged_in
    b.get(seeded.d.workspace + "/ui/secrets/pki/")
    wait_text(b, "console-root")
    shot(b, "pki")
    b.find_element(By.CSS_SELECTOR, "a[href*='/ui/secrets/pki/issuer/']").click()
    wait_text(b, "BEGIN CERTIFICATE")
    # A certificate issued through a role is listed by serial; its page shows the API's PEM.
    role = {"allowed_domains": ["console.test"], "allow_subdomains": True, "max_ttl": "1h"}
    assert seeded.secrets("POST", "/v1/pki/roles/web", json=role).status_code in (200, 204)
    r = seeded.secrets("POST", "/v1/pki/issue/web", json={"common_name": "app.console.test"})
    assert r.status_code == 200, r.text
    serial, pem = r.json()["data"]["serial_number"], r.json()["data"]["certificate"]
    b.get(seeded.d.workspace + "/ui/secrets/pki/")
    certs = f"//table[caption='Issued certificates']//a[.='{serial}']"
    link = WebDriverWait(b, 30).until(lambda d: d.find_element(By.XPATH, certs))
    link.click()
    wait_text(b, f"Certificate {serial}")
    shown = WebDriverWait(b, 30).until(
        lambda d: d.find_element(By.CSS_SELECTOR, "pre[aria-label='PEM certificate']")
    )
    assert shown.text.strip() == pem.strip()
    assert console_errors(b) == []


def test_narrow_window_keeps_everything_reachable(seeded: Seeded, logged_in: Any) -> None:
    b = logged_in
    b.set_window_size(420, 860)
    try:
        for page, ready in (
            (f"/ui/workspaces/{ORG}", WORKSPACE),
            (f"/ui/workspaces/{ORG}/{WORKSPACE}", "Settings"),
            ("/ui/jobs", "Filter expression"),
            ("/ui/nodes", "dc1"),
            ("/ui/secrets/kv/app/db", "Versions"),
        ):
            b.get(seeded.d.workspace + page)
            wait_text(b, ready)
            # Nothing wider than the window but the scrollable tables.
            overflow = b.execute_script(
                "return document.documentElement.scrollWidth - document.documentElement.clientWidth"
            )
            assert overflow <= 0, page
        shot(b, "narrow")
    finally:
        b.set_window_size(1400, 900)


def test_a_refusal_is_the_apis_own(seeded: Seeded, logged_in: Any) -> None:
    """A filter the scheduler refuses shows the scheduler's words."""
    b = logged_in
    b.get(seeded.d.workspace + "/ui/jobs?filter=" + requests.utils.quote("Status =="))
    err = WebDriverWait(b, 20).until(lambda d: d.find_element(By.CSS_SELECTOR, "[role=alert]"))
    assert "scheduler API answered 400" in err.text
    assert all("400" in e["message"] for e in console_errors(b))


def test_every_control_is_labelled(seeded: Seeded, logged_in: Any) -> None:
    """Inputs have labels, buttons have names, and the page has its landmarks."""
    b = logged_in
    unlabelled = """
      const bad = [];
      for (const el of document.querySelectorAll('input, textarea, select'))
        if (!el.labels.length && !el.getAttribute('aria-label')) bad.push(el.outerHTML);
      for (const el of document.querySelectorAll('button, a'))
        if (!(el.textContent.trim() || el.getAttribute('aria-label'))) bad.push(el.outerHTML);
      if (!document.querySelector('header nav') || !document.querySelector('main'))
        bad.push('landmarks');
      return bad;"""
    for page, ready in (
        ("/ui/secrets/kv/app/", "Create a secret"),
        (f"/ui/workspaces/{ORG}", WORKSPACE),
        ("/ui/jobs", "Filter expression"),
        ("/ui/policies/default", "Policy (HCL)"),
    ):
        b.get(seeded.d.workspace + page)
        wait_text(b, ready)
        assert b.execute_script(unlabelled) == [], page
        # The page's heading takes focus, so a screen reader announces where we are.
        assert b.execute_script("return document.activeElement.id") == "page-title"


def test_keyboard_alone_reaches_every_section(seeded: Seeded, logged_in: Any) -> None:
    """Tab from the top of the page: the skip link, then the sections; Enter opens one, and
    its heading takes the focus."""
    b = logged_in
    b.get(seeded.d.workspace + "/ui/secrets")
    wait_text(b, "Secrets engines")
    # Where a keyboard user starts on a fresh page: the first focusable element.
    b.execute_script("document.querySelector('a, button, input').focus()")
    seen = [b.execute_script("return document.activeElement.textContent.trim()")]
    for _ in range(12):
        ActionChains(b).send_keys(Keys.TAB).perform()
        seen.append(b.execute_script("return document.activeElement.textContent.trim()"))
        if seen[-1] == "Nodes":
            break
    assert seen[:6] == ["Skip to content", "Secrets", "Policies", "Workspaces", "Jobs", "Nodes"]
    ActionChains(b).send_keys(Keys.ENTER).perform()
    WebDriverWait(b, 10).until(lambda d: d.current_url.endswith("/ui/nodes"))
    WebDriverWait(b, 20).until(
        lambda d: d.execute_script("return document.activeElement.id") == "page-title"
    )
    assert b.find_element(By.ID, "page-title").text == "Client nodes"
    assert console_errors(b) == []


def test_a_narrower_token_gets_each_apis_own_refusal(seeded: Seeded, browser: Any) -> None:
    """Signed in on another listener (its own origin, its own session) with a token that may
    only read kv/data/*: the secret shows, the policy list is the secrets API's 403."""
    policy = 'path "kv/data/*" { capabilities = ["read"] }'
    r = seeded.secrets("PUT", "/v1/sys/policies/acl/console-narrow", json={"policy": policy})
    assert r.status_code in (200, 204), r.text
    r = seeded.secrets("POST", "/v1/auth/token/create", json={"policies": ["console-narrow"]})
    narrow = r.json()["auth"]["client_token"]
    b = browser
    b.get(seeded.d.secrets + "/ui/secrets/kv/app/db")
    field = WebDriverWait(b, 30).until(lambda d: d.find_element(By.NAME, "token"))
    field.send_keys(narrow)
    field.submit()
    value = WebDriverWait(b, 30).until(
        lambda d: d.find_element(By.CSS_SELECTOR, "code[data-key=password]")
    )
    assert value.text == "••••••••"
    b.get(seeded.d.secrets + "/ui/policies")
    err = WebDriverWait(b, 20).until(lambda d: d.find_element(By.CSS_SELECTOR, "[role=alert]"))
    assert "secrets API answered 403" in err.text
    direct = requests.get(
        seeded.d.secrets + "/v1/sys/policies/acl?list=true",
        headers={"X-Vault-Token": narrow},
        timeout=10,
    )
    assert direct.status_code == 403 and "; ".join(direct.json()["errors"]) in err.text
    # The workspace API does not know this token: its own 401, in its own words.
    b.get(seeded.d.secrets + f"/ui/workspaces/{ORG}")
    err = WebDriverWait(b, 20).until(lambda d: d.find_element(By.CSS_SELECTOR, "[role=alert]"))
    direct = requests.get(
        seeded.d.workspace + f"/api/v2/organizations/{ORG}/workspaces",
        headers={"Authorization": f"Bearer {narrow}"},
        timeout=10,
    )
    assert direct.status_code == 401
    first = direct.json()["errors"][0]
    assert f"workspace API answered 401: {first['title']}: {first['detail']}" in err.text
    assert WORKSPACE not in text_of(b)
    # The scheduler, with its ACLs on, does not know it either: its 403, in its words.
    b.get(seeded.d.secrets + "/ui/jobs")
    err = WebDriverWait(b, 20).until(lambda d: d.find_element(By.CSS_SELECTOR, "[role=alert]"))
    direct = requests.get(
        seeded.d.scheduler + "/v1/jobs", headers={"X-Nomad-Token": narrow}, timeout=10
    )
    assert direct.status_code == 403
    assert f"scheduler API answered 403: {direct.text.strip()}" in err.text
    # The refusals the browser logged are the APIs' own (401s from the workspace API, 403s
    # from the secrets API and the scheduler), nothing else.
    assert all(re.search(r"status of 40[13]", e["message"]) for e in console_errors(b)), (
        console_errors(b)
    )
    b.find_element(By.CSS_SELECTOR, "button.logout").click()
    WebDriverWait(b, 10).until(lambda d: d.find_elements(By.NAME, "token"))


def _sign_in(b: Any, url: str, token: str) -> None:
    b.get(url)
    field = WebDriverWait(b, 30).until(lambda d: d.find_element(By.NAME, "token"))
    field.send_keys(token)
    field.submit()


def _refusal(b: Any) -> str:
    return str(
        WebDriverWait(b, 20).until(lambda d: d.find_element(By.CSS_SELECTOR, "[role=alert]")).text
    )


def _sign_out(b: Any) -> None:
    b.find_element(By.CSS_SELECTOR, "button.logout").click()
    WebDriverWait(b, 10).until(lambda d: d.find_elements(By.NAME, "token"))


def test_a_token_only_one_api_knows_signs_in(seeded: Seeded, browser: Any) -> None:
    """On the scheduler's listener (its own origin): a scheduler ACL token the secrets API does
    not know signs in, lands in the jobs, and sees each other API's own refusal; so does a
    workspace team token; a token no API knows gets all three refusals and stays out."""
    tag = secrets.token_hex(3)
    rules = 'namespace "default" { policy = "read" }\nnode { policy = "read" }'
    r = seeded.scheduler("POST", f"/v1/acl/policy/console-ro-{tag}", json={"Rules": rules})
    assert r.status_code == 200, r.text
    doc = {"Name": f"console-{tag}", "Type": "client", "Policies": [f"console-ro-{tag}"]}
    r = seeded.scheduler("POST", "/v1/acl/token", json=doc)
    assert r.status_code == 200, r.text
    sched_token = r.json()["SecretID"]
    job_id = f"console-only-{tag}"
    seeded.job(job_id, 0)
    base = seeded.d.scheduler
    b = browser
    # From the bare /ui/: the first API that knows the token picks the section to land in.
    _sign_in(b, base + "/ui/", sched_token)
    WebDriverWait(b, 30).until(lambda d: urlsplit(d.current_url).path == "/ui/jobs")
    wait_text(b, job_id)
    assert b.execute_script("return sessionStorage.length") == 1
    b.find_element(By.XPATH, "//nav//a[text()='Secrets']").click()
    err = _refusal(b)
    direct = requests.get(
        seeded.d.secrets + "/v1/sys/mounts", headers={"X-Vault-Token": sched_token}, timeout=10
    )
    assert direct.status_code == 403
    assert f"secrets API answered 403: {'; '.join(direct.json()['errors'])}" in err
    b.get(base + f"/ui/workspaces/{ORG}")
    assert "workspace API answered 401" in _refusal(b)
    assert WORKSPACE not in text_of(b)
    _sign_out(b)

    # A workspace team token (the secrets API and the scheduler know nothing of it).
    r = seeded.workspace(
        "POST",
        f"/api/v2/organizations/{ORG}/teams",
        json={
            "data": {
                "type": "teams",
                "attributes": {
                    "name": f"console-readers-{tag}",
                    "organization-access": {"read-workspaces": True},
                },
            }
        },
    )
    assert r.status_code == 200, r.text  # HCP Terraform answers a new team with 200
    r = seeded.workspace(
        "POST",
        f"/api/v2/teams/{r.json()['data']['id']}/authentication-token",
        json={"data": {"type": "authentication-token"}},
    )
    assert r.status_code == 201, r.text
    team_token = r.json()["data"]["attributes"]["token"]
    _sign_in(b, base + "/ui/", team_token)
    WebDriverWait(b, 30).until(lambda d: urlsplit(d.current_url).path == "/ui/workspaces")
    b.get(base + f"/ui/workspaces/{ORG}")
    wait_text(b, WORKSPACE)
    b.get(base + "/ui/jobs")
    err = _refusal(b)
    direct = requests.get(base + "/v1/jobs", headers={"X-Nomad-Token": team_token}, timeout=10)
    assert direct.status_code == 403
    assert f"scheduler API answered 403: {direct.text.strip()}" in err
    _sign_out(b)

    # A token nobody knows: each API's refusal is shown, and nothing is kept.
    _sign_in(b, base + "/ui/jobs", "nobody-" + tag)
    WebDriverWait(b, 20).until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "[role=alert]")) == 3)
    alerts = [e.text for e in b.find_elements(By.CSS_SELECTOR, "[role=alert]")]
    assert [a.split(" answered")[0] for a in alerts] == [
        "The secrets API",
        "The workspace API",
        "The scheduler API",
    ]
    direct = requests.get(
        base + "/v1/acl/token/self", headers={"X-Nomad-Token": "nobody-" + tag}, timeout=10
    )
    assert f"scheduler API answered {direct.status_code}: {direct.text.strip()}" in alerts[2]
    assert b.execute_script("return sessionStorage.length") == 0
    assert b.find_elements(By.NAME, "token")
    # What the browser logged are the APIs' refusals, nothing else.
    assert all(re.search(r"status of 40[13]", e["message"]) for e in console_errors(b)), (
        console_errors(b)
    )


def test_logout_forgets_the_token(seeded: Seeded, logged_in: Any) -> None:
    b = logged_in
    b.get(seeded.d.workspace + "/ui/secrets")
    wait_text(b, "Sign out")
    b.find_element(By.CSS_SELECTOR, "button.logout").click()
    WebDriverWait(b, 10).until(lambda d: d.find_elements(By.NAME, "token"))
    assert b.execute_script("return sessionStorage.length") == 0
    b.get(seeded.d.workspace + "/ui/secrets/kv/app/db")
    WebDriverWait(b, 10).until(lambda d: d.find_elements(By.NAME, "token"))


def test_gateway_serves_the_console_with_strict_headers(seeded: Seeded) -> None:
    for base in (seeded.d.secrets, seeded.d.workspace, seeded.d.scheduler):
        r = requests.get(base + "/ui/jobs/some-job", timeout=10)
        assert r.status_code == 200 and '<div id="app">' in r.text
        csp = r.headers["Content-Security-Policy"]
        assert "default-src 'self'" in csp and "frame-ancestors 'none'" in csp
        assert "unsafe-inline" not in csp
        assert r.headers["X-Frame-Options"] == "DENY"
        assert r.headers["Referrer-Policy"] == "no-referrer"
        assert "<script>" not in r.text  # no inline script
        js = requests.get(base + "/ui/assets/app.js", timeout=10)
        assert js.status_code == 200 and "javascript" in js.headers["Content-Type"]
        assert requests.get(base + "/ui/assets/nope.js", timeout=10).status_code == 404


def test_the_proxy_gives_each_apis_own_refusal(seeded: Seeded) -> None:
    """Through the console proxy on any listener, a request without a token is refused exactly
    as the API itself refuses it."""
    direct = requests.get(seeded.d.secrets + "/v1/kv/data/app/db", timeout=10)
    proxied = requests.get(seeded.d.scheduler + "/ui/api/secrets/v1/kv/data/app/db", timeout=10)
    assert (proxied.status_code, proxied.json()) == (direct.status_code, direct.json())
    assert direct.status_code in (400, 403)
    r = requests.get(
        seeded.d.secrets + "/ui/api/secrets/v1/kv/data/app/db",
        headers=seeded.vault,
        timeout=10,
    )
    assert r.status_code == 200 and r.json()["data"]["data"]["password"] == SECRET_VALUE
    direct = requests.get(seeded.d.workspace + f"/api/v2/organizations/{ORG}", timeout=10)
    proxied = requests.get(
        seeded.d.secrets + f"/ui/api/workspace/api/v2/organizations/{ORG}", timeout=10
    )
    assert proxied.status_code == direct.status_code == 401
    assert proxied.json() == direct.json()
    direct = requests.get(seeded.d.scheduler + "/v1/jobs", timeout=10)
    proxied = requests.get(seeded.d.workspace + "/ui/api/scheduler/v1/jobs", timeout=10)
    assert proxied.status_code == direct.status_code == 403
    assert proxied.text == direct.text
    bad = requests.get(seeded.d.secrets + "/ui/api/nowhere/x", timeout=10)
    assert bad.status_code == 404 and "console API" in bad.text
