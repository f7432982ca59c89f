// Jobs and client nodes, kept live by blocking queries: when an allocation starts or fails the
// page changes by itself, no reload.
import { useState } from "preact/hooks";
import {
  Async, KeyValues, Link, Page, Status, Table, fmtTime, html, navigate, useBlocking,
} from "./ui.js";

const enc = encodeURIComponent;
const short = (id) => (id ? String(id).slice(0, 8) : "");

export function Jobs({ search }) {
  const filter = new URLSearchParams(search).get("filter") || "";
  const [text, setText] = useState(filter);
  const state = useBlocking("/v1/jobs", filter ? { filter } : {});
  return html`<${Page} title="Jobs">
    <form role="search" class="inline" onSubmit=${(e) => {
      e.preventDefault();
      const f = text.trim();
      navigate(f ? `/ui/jobs?filter=${enc(f)}` : "/ui/jobs");
    }}>
      <label for="job-filter">Filter expression</label>
      <input id="job-filter" name="filter" type="search" placeholder='Status == "running"' value=${text} onInput=${(e) => setText(e.target.value)} aria-describedby="filter-help" />
      <button type="submit">Apply filter</button>
      <p id="filter-help" class="muted help">The scheduler API's filter syntax, e.g. <code>Type == "batch"</code> or <code>Name contains "web"</code>.</p>
    </form>
    <${Async} state=${state}>${(jobs) => html`<${Table} caption="Jobs (live)" head=${["ID", "Type", "Status", "Priority", "Groups", "Submitted"]}
      empty=${filter ? "No job matches this filter." : "No jobs are registered."}
      rows=${jobs.map((j) => [
        html`<${Link} href=${`/ui/jobs/${enc(j.ID)}`}>${j.ID}</${Link}>`,
        j.Type, html`<${Status} value=${j.Status} />`, j.Priority,
        summarize(j.JobSummary), fmtTime(j.SubmitTime),
      ])} />`}</${Async}>
  </${Page}>`;
}

function summarize(summary) {
  if (!summary || !summary.Summary) return "";
  return Object.entries(summary.Summary)
    .map(([g, s]) => `${g}: ${s.Running || 0} running, ${s.Complete || 0} complete, ${s.Failed || 0} failed`)
    .join("; ");
}

export function JobDetail({ id }) {
  const p = `/v1/job/${enc(id)}`;
  const job = useBlocking(p);
  const allocs = useBlocking(`${p}/allocations`);
  const evals = useBlocking(`${p}/evaluations`);
  const deps = useBlocking(`${p}/deployments`);
  const versions = useBlocking(`${p}/versions`, { diffs: "true" });
  return html`<${Page} title=${`Job ${id}`}>
    <nav aria-label="Breadcrumb" class="crumbs"><ol><li><${Link} href="/ui/jobs">jobs</${Link}></li><li><span aria-current="page">${id}</span></li></ol></nav>
    <${Async} state=${job}>${(j) => html`<${KeyValues} label="Job" pairs=${[
      ["Status", j.Status], ["Type", j.Type], ["Version", j.Version], ["Priority", j.Priority],
      ["Datacenters", (j.Datacenters || []).join(", ")], ["Namespace", j.Namespace],
      ["Stopped", j.Stop], ["Submitted", fmtTime(j.SubmitTime)],
    ]} />`}</${Async}>
    <h2 id="allocs-h">Allocations</h2>
    <${Async} state=${allocs}>${(list) => html`<${Allocations} allocs=${list} />`}</${Async}>
    <h2>Evaluations</h2>
    <${Async} state=${evals}>${(list) => html`<${Table} caption="Evaluations" head=${["ID", "Triggered by", "Status", "Description"]}
      rows=${list.map((e) => [html`<code title=${e.ID}>${short(e.ID)}</code>`, e.TriggeredBy, html`<${Status} value=${e.Status} />`, e.StatusDescription || ""])} />`}</${Async}>
    <h2>Deployments</h2>
    <${Async} state=${deps}>${(list) => html`<${Table} caption="Deployments" head=${["ID", "Job version", "Status", "Description"]}
      empty="No deployments (batch and system jobs have none)."
      rows=${list.map((d) => [html`<code title=${d.ID}>${short(d.ID)}</code>`, d.JobVersion, html`<${Status} value=${d.Status} />`, d.StatusDescription || ""])} />`}</${Async}>
    <h2>Versions</h2>
    <${Async} state=${versions}>${(doc) => html`<${Versions} doc=${doc} />`}</${Async}>
  </${Page}>`;
}

function Allocations({ allocs }) {
  if (!allocs.length) return html`<p class="muted">No allocations yet.</p>`;
  const sorted = [...allocs].sort((a, b) => (b.CreateIndex || 0) - (a.CreateIndex || 0));
  return html`<ul class="allocs" aria-labelledby="allocs-h">${sorted.map((a) => html`<li class="alloc" data-alloc=${a.ID}>
    <div class="alloc-head">
      <code title=${a.ID}>${short(a.ID)}</code>
      <span>${a.TaskGroup}</span>
      <span>node <code>${short(a.NodeID)}</code> ${a.NodeName || ""}</span>
      <span>desired ${a.DesiredStatus}</span>
      <span class="alloc-status">client <${Status} value=${a.ClientStatus} /></span>
    </div>
    <details>
      <summary>Task events</summary>
      ${Object.entries(a.TaskStates || {}).map(([task, st]) => html`<${Table}
        caption=${`Task ${task}: ${st.State}${st.Failed ? " (failed)" : ""}`}
        head=${["Time", "Type", "Message"]}
        empty=${`Task ${task}: no events yet.`}
        rows=${(st.Events || []).map((e) => [fmtTime(e.Time), e.Type, e.DisplayMessage || e.Message || ""])} />`)}
    </details>
  </li>`)}</ul>`;
}

function Versions({ doc }) {
  const versions = doc.Versions || [];
  const diffs = doc.Diffs || [];
  return html`<ol class="versions" reversed>${versions.map((v, i) => html`<li>
    <strong>Version ${v.Version}</strong> ${v.Stable ? "(stable)" : ""} submitted ${fmtTime(v.SubmitTime)}
    ${diffs[i] ? html`<details><summary>Changes from version ${versions[i + 1] ? versions[i + 1].Version : "before"}</summary><pre class="diff" tabindex="0">${diffLines(diffs[i]).join("\n") || "(no changes)"}</pre></details>` : null}
  </li>`)}</ol>`;
}

const MARK = { Added: "+", Deleted: "-", Edited: "~", None: " " };
function diffLines(d, depth = 0) {
  const pad = "  ".repeat(depth);
  const out = [];
  for (const f of d.Fields || []) {
    if (f.Type === "None") continue;
    const val = f.Type === "Added" ? f.New : f.Type === "Deleted" ? f.Old : `${f.Old} => ${f.New}`;
    out.push(`${MARK[f.Type] || "~"} ${pad}${f.Name}: ${val}`);
  }
  const nested = [...(d.Objects || []), ...(d.TaskGroups || []), ...(d.Tasks || [])];
  for (const o of nested) {
    if (o.Type === "None") continue;
    out.push(`${MARK[o.Type] || "~"} ${pad}${o.Name || ""} {`, ...diffLines(o, depth + 1), `  ${pad}}`);
  }
  return out;
}

export function Nodes() {
  const state = useBlocking("/v1/nodes");
  return html`<${Page} title="Client nodes">
    <${Async} state=${state}>${(nodes) => html`<${Table} caption="Client nodes (live)" head=${["ID", "Name", "Datacenter", "Class", "Status", "Eligibility", "Drain"]}
      empty="No client node has registered."
      rows=${nodes.map((n) => [html`<code title=${n.ID}>${short(n.ID)}</code>`, n.Name, n.Datacenter, n.NodeClass || "", html`<${Status} value=${n.Status} />`, n.SchedulingEligibility, n.Drain ? "draining" : "no"])} />`}</${Async}>
  </${Page}>`;
}
