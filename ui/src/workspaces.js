// Workspaces: organizations, a searchable paginated list with tags, and a workspace's detail:
// settings, lock state, remote state consumers, state versions, outputs, variables and runs.
import { useEffect, useRef, useState } from "preact/hooks";
import { call, get } from "./api.js";
import {
  Async, ErrorBox, KeyValues, Link, Page, Status, Table, fmtTime, html, navigate, useAsync,
} from "./ui.js";

const enc = encodeURIComponent;

export function Organizations() {
  const state = useAsync(() => get("workspace", "/api/v2/organizations"), []);
  return html`<${Page} title="Organizations">
    <${Async} state=${state}>${(doc) => html`<${Table} caption="Organizations you can see" head=${["Name", "Email"]}
      empty="No organization is visible to this token."
      rows=${doc.data.map((o) => [html`<${Link} href=${`/ui/workspaces/${enc(o.id)}`}>${o.attributes.name || o.id}</${Link}>`, o.attributes.email || ""])} />`}</${Async}>
  </${Page}>`;
}

export function WorkspaceList({ org, search }) {
  const params = new URLSearchParams(search);
  const q = params.get("q") || "";
  const tag = params.get("tag") || "";
  const page = Number(params.get("page") || "1") || 1;
  const [text, setText] = useState(q);
  const state = useAsync(
    () => get("workspace", `/api/v2/organizations/${enc(org)}/workspaces`, {
      query: { "search[name]": q, "search[tags]": tag, "page[number]": String(page), "page[size]": "20" },
    }),
    [org, q, tag, page],
  );
  const href = (nq, nt, np) => {
    const s = new URLSearchParams();
    if (nq) s.set("q", nq);
    if (nt) s.set("tag", nt);
    if (np > 1) s.set("page", String(np));
    return `/ui/workspaces/${enc(org)}${s.toString() ? "?" + s : ""}`;
  };
  const go = (nq, np) => navigate(href(nq, tag, np));
  return html`<${Page} title=${`Workspaces in ${org}`}>
    <form role="search" class="inline" onSubmit=${(e) => { e.preventDefault(); go(text.trim(), 1); }}>
      <label for="ws-search">Search workspaces by name</label>
      <input id="ws-search" name="search" type="search" value=${text} onInput=${(e) => setText(e.target.value)} />
      <button type="submit">Search</button>
    </form>
    ${tag ? html`<p>Tagged <span class="tag">${tag}</span> <${Link} href=${href(q, "", 1)}>Show every tag</${Link}></p>` : null}
    <${Async} state=${state}>${(doc) => {
      const pg = (doc.meta && doc.meta.pagination) || {};
      return html`
        <${Table} caption="Workspaces" head=${["Name", "Tags", "Terraform", "Lock", "Updated"]}
          empty=${q || tag ? "No workspace matches this search." : "This organization has no workspaces."}
          rows=${doc.data.map((w) => [
            html`<${Link} href=${`/ui/workspaces/${enc(org)}/${enc(w.attributes.name)}`}>${w.attributes.name}</${Link}>`,
            html`<ul class="tags" aria-label="tags">${(w.attributes["tag-names"] || []).map((t) => html`<li class="tag"><${Link} href=${href(q, t, 1)} aria-label=${`Workspaces tagged ${t}`}>${t}</${Link}></li>`)}</ul>`,
            w.attributes["terraform-version"] || "",
            w.attributes.locked ? "locked" : "unlocked",
            fmtTime(w.attributes["updated-at"]),
          ])} />
        <nav class="pager" aria-label="Pagination">
          <button type="button" disabled=${!pg["prev-page"]} onClick=${() => go(q, page - 1)}>Previous page</button>
          <span>Page ${pg["current-page"] || page} of ${pg["total-pages"] || 1} (${pg["total-count"] ?? doc.data.length} workspaces)</span>
          <button type="button" disabled=${!pg["next-page"]} onClick=${() => go(q, page + 1)}>Next page</button>
        </nav>`;
    }}</${Async}>
  </${Page}>`;
}

// A list that may not exist yet on this server (runs land with remote operations): a 404 is
// "none", any other refusal is shown.
const optional = (p, query) => async () => {
  try {
    return await get("workspace", p, { query });
  } catch (e) {
    if (e.status === 404) return { data: [] };
    throw e;
  }
};

export function WorkspaceDetail({ org, name }) {
  const ws = useAsync(() => get("workspace", `/api/v2/organizations/${enc(org)}/workspaces/${enc(name)}`), [org, name]);
  return html`<${Page} title=${name}>
    <nav aria-label="Breadcrumb" class="crumbs"><ol>
      <li><${Link} href="/ui/workspaces">organizations</${Link}></li>
      <li><${Link} href=${`/ui/workspaces/${enc(org)}`}>${org}</${Link}></li>
      <li><span aria-current="page">${name}</span></li></ol></nav>
    <${Async} state=${ws}>${(doc) => html`<${WorkspaceBody} org=${org} ws=${doc.data} reload=${ws.reload} />`}</${Async}>
  </${Page}>`;
}

function WorkspaceBody({ org, ws, reload }) {
  const a = ws.attributes;
  const id = ws.id;
  const [error, setError] = useState(null);
  // Bumped when a run finishes: its state, outputs and lock changed, so every section re-reads.
  const [stamp, setStamp] = useState(0);
  const consumers = useAsync(optional(`/api/v2/workspaces/${enc(id)}/relationships/remote-state-consumers`), [id, stamp]);
  const states = useAsync(optional("/api/v2/state-versions", { "filter[workspace][name]": a.name, "filter[organization][name]": org }), [id, stamp]);
  // Outputs exist only once a state does: ask only then (a 404 would be noise, not news).
  const hasState = Boolean(ws.relationships && ws.relationships["current-state-version"] && ws.relationships["current-state-version"].data);
  const outputs = useAsync(hasState ? optional(`/api/v2/workspaces/${enc(id)}/current-state-version-outputs`) : async () => ({ data: [] }), [id, hasState, stamp]);
  const vars = useAsync(optional(`/api/v2/workspaces/${enc(id)}/vars`), [id, stamp]);
  const runs = useAsync(optional(`/api/v2/workspaces/${enc(id)}/runs`), [id]);
  // While a run goes on, re-read the list so its status moves without a reload.
  const busy = runs.data && runs.data.data.some((r) => !FINAL.has(r.attributes.status));
  const wasBusy = useRef(false);
  useEffect(() => {
    if (wasBusy.current && !busy) {
      setStamp((n) => n + 1);
      reload();
    }
    wasBusy.current = Boolean(busy);
    if (!busy) return undefined;
    const t = setTimeout(runs.reload, 2000);
    return () => clearTimeout(t);
  }, [busy, runs.data]);
  const lock = async (action) => {
    setError(null);
    try {
      await call("workspace", `/api/v2/workspaces/${enc(id)}/actions/${action}`, {
        method: "POST",
        body: action === "lock" ? { reason: "locked from the Trellis console" } : undefined,
      });
      reload();
    } catch (e) {
      setError(e);
    }
  };
  return html`
    <div class="lock" role="group" aria-label="Lock state">
      <span>State: <strong>${a.locked ? "locked" : "unlocked"}</strong></span>
      ${a.locked
        ? html`<button type="button" onClick=${() => lock("unlock")}>Unlock</button>`
        : html`<button type="button" onClick=${() => lock("lock")}>Lock</button>`}
    </div>
    <${ErrorBox} error=${error} />
    <h2>Settings</h2>
    <${KeyValues} label="Workspace settings" pairs=${[
      ["ID", id], ["Description", a.description], ["Execution mode", a["execution-mode"]],
      ["Terraform version", a["terraform-version"]], ["Auto apply", a["auto-apply"]],
      ["Working directory", a["working-directory"]], ["Global remote state", a["global-remote-state"]],
      ["Tags", (a["tag-names"] || []).join(", ")], ["Resources", a["resource-count"]],
      ["Created", fmtTime(a["created-at"])], ["Updated", fmtTime(a["updated-at"])],
    ]} />
    <h2>Remote state consumers</h2>
    <${Async} state=${consumers}>${(d) => html`<${Table} caption="Workspaces that may read this state" head=${["Workspace"]}
      empty=${a["global-remote-state"] ? "Every workspace in the organization may read this state." : "No other workspace may read this state."}
      rows=${d.data.map((c) => [c.attributes && c.attributes.name ? c.attributes.name : c.id])} />`}</${Async}>
    <h2>State versions</h2>
    <${Async} state=${states}>${(d) => html`<${Table} caption="State versions, newest first" head=${["Serial", "ID", "Created"]}
      empty="No state has been uploaded."
      rows=${d.data.map((s) => [s.attributes.serial, html`<code>${s.id}</code>`, fmtTime(s.attributes["created-at"])])} />`}</${Async}>
    <h2>Outputs</h2>
    <${Async} state=${outputs}>${(d) => html`<${Table} caption="Outputs of the current state" head=${["Name", "Type", "Value"]}
      empty="The current state has no outputs."
      rows=${d.data.map((o) => [o.attributes.name, o.attributes.type || "", o.attributes.sensitive ? "(sensitive)" : html`<code>${JSON.stringify(o.attributes.value)}</code>`])} />`}</${Async}>
    <h2>Variables</h2>
    <${Async} state=${vars}>${(d) => html`<${Table} caption="Workspace variables" head=${["Key", "Category", "Value"]}
      empty="No variables."
      rows=${d.data.map((v) => [html`<code>${v.attributes.key}</code>`, v.attributes.category, v.attributes.sensitive ? "(sensitive)" : v.attributes.value])} />`}</${Async}>
    <h2>Runs</h2>
    <${Async} state=${runs}>${(d) => d.data.length ? html`<ul class="runs" aria-label="Runs, newest first">${d.data.map((r) => html`<${Run} key=${r.id} run=${r} />`)}</ul>` : html`<p class="muted">No runs.</p>`}</${Async}>`;
}

// Run statuses, and phase statuses, after which nothing changes.
const FINAL = new Set([
  "applied", "planned_and_finished", "errored", "discarded", "canceled", "force_canceled",
  "policy_soft_failed", "finished", "unreachable",
]);

function Run({ run }) {
  const [open, setOpen] = useState(false);
  const a = run.attributes;
  return html`<li class="alloc">
    <div class="alloc-head"><code>${run.id}</code> <${Status} value=${a.status} /> <span>${a.message || ""}</span> <span>${fmtTime(a["created-at"])}</span></div>
    <details onToggle=${(e) => setOpen(e.target.open)}>
      <summary>Plan and apply logs</summary>
      ${open ? html`<${PhaseLog} run=${run} phase="plan" /><${PhaseLog} run=${run} phase="apply" />` : null}
    </details>
  </li>`;
}

// A phase's log, re-read while the run goes on (the log ends with ETX once the phase is over).
function PhaseLog({ run, phase }) {
  const rel = run.relationships && run.relationships[phase] && run.relationships[phase].data;
  const [log, setLog] = useState({ text: "" });
  useEffect(() => {
    if (!rel) return undefined;
    let live = true;
    let timer;
    const tick = async () => {
      try {
        const doc = await get("workspace", `/api/v2/${phase === "plan" ? "plans" : "applies"}/${enc(rel.id)}`);
        const url = doc.data.attributes["log-read-url"];
        let text = "";
        if (url) {
          const u = new URL(url, location.href);
          text = (await call("workspace", u.pathname + u.search, { text: true })).data;
        }
        if (!live) return;
        const done = text.includes("\u0003") || FINAL.has(doc.data.attributes.status) || FINAL.has(run.attributes.status);
        setLog({ text: text.replace(/[\u0002\u0003]/g, ""), status: doc.data.attributes.status });
        if (!done) timer = setTimeout(tick, 2000);
      } catch (error) {
        if (live) setLog((l) => ({ ...l, error }));
      }
    };
    tick();
    return () => {
      live = false;
      clearTimeout(timer);
    };
  }, [rel && rel.id]);
  if (!rel) return null;
  return html`<h3>${phase === "plan" ? "Plan" : "Apply"} ${log.status ? html`<${Status} value=${log.status} />` : null}</h3>
    <${ErrorBox} error=${log.error} />
    <pre class="diff" tabindex="0" aria-label=${`${phase} log`} aria-live="polite">${log.text || "(no output yet)"}</pre>`;
}
