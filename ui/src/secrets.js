// Secrets: mounts, KV folders and secrets (masked until asked), versions, metadata, policies,
// PKI issuers and certificates. Every call carries the user's token; refusals are the API's.
import { useState } from "preact/hooks";
import { encPath, get, call } from "./api.js";
import {
  Async, ErrorBox, KeyValues, Link, Page, Table, fmtTime, html, navigate, useAsync,
} from "./ui.js";

// sys/internal/ui/mounts, as OpenBao's own UI asks: the mounts this token may use (a token
// that may not read sys/mounts still finds its KV secrets).
const MOUNTS = "/v1/sys/internal/ui/mounts";
const mountsOf = (doc) => {
  const table = (doc && doc.data && doc.data.secret) || {};
  return Object.entries(table)
    .filter(([k, v]) => k.endsWith("/") && v && typeof v === "object" && v.type)
    .map(([path, m]) => ({ path, ...m }));
};
const kvVersion = (m) => String((m.options && m.options.version) || "1");
const trimSlash = (s) => s.replace(/\/+$/, "");

export function Mounts() {
  const state = useAsync(() => get("secrets", MOUNTS), []);
  return html`<${Page} title="Secrets engines">
    <${Async} state=${state}>${(doc) => html`<${Table}
      caption="Mounted secrets engines"
      head=${["Path", "Type", "Description"]}
      rows=${mountsOf(doc).map((m) => [
        html`<${Link} href=${`/ui/secrets/${encPath(trimSlash(m.path))}/`}>${m.path}</${Link}>`,
        m.type + (m.type === "kv" ? ` v${kvVersion(m)}` : ""),
        m.description || "",
      ])}
    />`}</${Async}>
  </${Page}>`;
}

// /ui/secrets/<mount>/<path>: the mount is the longest mounted prefix of the path.
export function SecretsPath({ rest, search }) {
  const state = useAsync(() => get("secrets", MOUNTS), []);
  return html`<${Async} state=${state}>${(doc) => {
    const mounts = mountsOf(doc).sort((a, b) => b.path.length - a.path.length);
    const m = mounts.find((x) => (rest + "/").startsWith(x.path));
    if (!m) return html`<${Page} title="Not mounted"><p>Nothing is mounted at <code>${rest}</code>. <${Link} href="/ui/secrets">All mounts</${Link}></p></${Page}>`;
    const sub = rest.slice(m.path.length);
    if (m.type === "kv") {
      return sub === "" || sub.endsWith("/")
        ? html`<${KvFolder} mount=${m} path=${sub} />`
        : html`<${KvSecret} mount=${m} path=${sub} search=${search} />`;
    }
    if (m.type === "pki") return html`<${Pki} mount=${m} sub=${sub} />`;
    return html`<${Page} title=${m.path}><${KeyValues} label="Mount" pairs=${[["Type", m.type], ["Description", m.description], ["Accessor", m.accessor]]} /></${Page}>`;
  }}</${Async}>`;
}

function Crumbs({ mount, path }) {
  const parts = path.split("/").filter(Boolean);
  let acc = "";
  return html`<nav aria-label="Breadcrumb" class="crumbs"><ol>
    <li><${Link} href="/ui/secrets">secrets</${Link}></li>
    <li><${Link} href=${`/ui/secrets/${encPath(trimSlash(mount.path))}/`}>${trimSlash(mount.path)}</${Link}></li>
    ${parts.map((p, i) => {
      acc += p + (i < parts.length - 1 || path.endsWith("/") ? "/" : "");
      const href = `/ui/secrets/${encPath(mount.path + acc)}`;
      return html`<li>${i === parts.length - 1 ? html`<span aria-current="page">${p}</span>` : html`<${Link} href=${href}>${p}</${Link}>`}</li>`;
    })}
  </ol></nav>`;
}

const listPath = (mount, path) =>
  kvVersion(mount) === "2" ? `/v1/${encPath(mount.path + "metadata/" + path)}` : `/v1/${encPath(mount.path + path)}`;
const dataPath = (mount, path) =>
  kvVersion(mount) === "2" ? `/v1/${encPath(mount.path + "data/" + path)}` : `/v1/${encPath(mount.path + path)}`;

function KvFolder({ mount, path }) {
  const state = useAsync(async () => {
    try {
      return (await get("secrets", listPath(mount, path), { query: { list: "true" } })).data.keys || [];
    } catch (e) {
      if (e.status === 404) return []; // an empty folder: nothing listed yet
      throw e;
    }
  }, [mount.path, path]);
  return html`<${Page} title=${`${mount.path}${path}`}>
    <${Crumbs} mount=${mount} path=${path} />
    <${Async} state=${state}>${(keys) => html`<${Table}
      caption="Keys in this folder"
      head=${["Key", "Kind"]}
      empty="This folder holds no secrets."
      rows=${keys.map((k) => [
        html`<${Link} href=${`/ui/secrets/${encPath(mount.path + path + k)}`}>${k}</${Link}>`,
        k.endsWith("/") ? "folder" : "secret",
      ])}
    />`}</${Async}>
    <${SecretForm} mount=${mount} folder=${path} />
  </${Page}>`;
}

// Secret data as a JSON object of strings: validated here, the API has the final word.
function parseData(text) {
  let doc;
  try {
    doc = JSON.parse(text);
  } catch (e) {
    return [null, `not valid JSON: ${e.message}`];
  }
  if (!doc || typeof doc !== "object" || Array.isArray(doc)) return [null, "the secret must be a JSON object"];
  return [doc, ""];
}

function SecretForm({ mount, folder, path, initial, onSaved, cas }) {
  const creating = path === undefined;
  const [name, setName] = useState("");
  const [text, setText] = useState(initial ? JSON.stringify(initial, null, 2) : '{\n  "key": "value"\n}');
  const [error, setError] = useState(null);
  const [busy, setBusy] = useState(false);
  const submit = async (e) => {
    e.preventDefault();
    const target = creating ? folder + name.trim() : path;
    if (creating && (!name.trim() || name.trim().endsWith("/"))) {
      setError({ message: "give the secret a name (a path, not ending in /)" });
      return;
    }
    const [data, why] = parseData(text);
    if (why) return setError({ message: why });
    setBusy(true);
    setError(null);
    try {
      const body = kvVersion(mount) === "2" ? { data, ...(cas !== undefined ? { options: { cas } } : {}) } : data;
      await call("secrets", dataPath(mount, target), { method: "POST", body });
      if (onSaved) onSaved();
      else navigate(`/ui/secrets/${encPath(mount.path + target)}`);
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  };
  const id = creating ? "new-secret" : "edit-secret";
  return html`<form class="card" onSubmit=${submit} aria-labelledby=${id + "-h"}>
    <h2 id=${id + "-h"}>${creating ? "Create a secret" : "Write a new version"}</h2>
    ${creating ? html`<label for=${id + "-name"}>Path under ${mount.path}${folder}</label>
      <input id=${id + "-name"} name="path" value=${name} onInput=${(e) => setName(e.target.value)} required autocomplete="off" />` : null}
    <label for=${id + "-data"}>Data (a JSON object)</label>
    <textarea id=${id + "-data"} name="data" rows="6" spellcheck="false" value=${text} onInput=${(e) => setText(e.target.value)}></textarea>
    <${ErrorBox} error=${error} />
    <button type="submit" disabled=${busy}>${creating ? "Create" : "Save version"}</button>
  </form>`;
}

function Masked({ name, value }) {
  const [shown, setShown] = useState(false);
  const text = typeof value === "string" ? value : JSON.stringify(value);
  return html`<span class="secret-value">
    <code data-key=${name} class=${shown ? "revealed" : "masked"} aria-label=${shown ? `value of ${name}` : `value of ${name}, hidden`}>${shown ? text : "••••••••"}</code>
    <button type="button" class="small" aria-pressed=${shown} aria-label=${`${shown ? "Hide" : "Reveal"} ${name}`} onClick=${() => setShown(!shown)}>${shown ? "Hide" : "Reveal"}</button>
  </span>`;
}

function KvSecret({ mount, path, search }) {
  const v2 = kvVersion(mount) === "2";
  const version = new URLSearchParams(search).get("version") || "";
  const [editing, setEditing] = useState(false);
  const [actionError, setActionError] = useState(null);
  // Metadata first: a deleted or destroyed version is shown as such without asking for its
  // data (which the API would answer with a 404). A token that may read the data but not the
  // metadata still sees the data.
  const both = useAsync(async () => {
    let meta = null;
    let metaError = null;
    if (v2) {
      try {
        meta = await get("secrets", `/v1/${encPath(mount.path + "metadata/" + path)}`);
      } catch (e) {
        metaError = e;
      }
    }
    const md = meta && meta.data;
    const v = md ? md.versions[version || String(md.current_version)] : null;
    const gone = v && (v.deletion_time || v.destroyed);
    const data = gone ? { data: v2 ? { data: null } : null } : await get("secrets", dataPath(mount, path), { query: version ? { version } : {} });
    return { meta, metaError, data };
  }, [mount.path, path, version]);
  const secret = { data: both.data && both.data.data, error: both.error };
  const meta = both.data && both.data.meta ? { data: both.data.meta } : { error: (both.data && both.data.metaError) || both.error };
  const refresh = both.reload;
  const act = async (method, sub, body) => {
    setActionError(null);
    try {
      await call("secrets", `/v1/${encPath(mount.path + sub + path)}`, { method, body });
      refresh();
    } catch (e) {
      setActionError(e);
    }
  };
  const values = secret.data ? (v2 ? secret.data.data && secret.data.data.data : secret.data.data) : null;
  // Another version's data is masked again: what was revealed stays with its own version.
  const shownVersion = v2 && secret.data && secret.data.data && secret.data.data.metadata ? secret.data.data.metadata.version : "";
  const here = `/ui/secrets/${encPath(mount.path + path)}`;
  return html`<${Page} title=${path} actions=${html`
      <button type="button" onClick=${() => setEditing(!editing)} aria-expanded=${editing}>${editing ? "Cancel edit" : "Edit"}</button>
      ${v2 ? html`<button type="button" class="danger" onClick=${() => act("DELETE", "data/")}>Delete latest</button>` : html`<button type="button" class="danger" onClick=${async () => { await act("DELETE", ""); navigate(`/ui/secrets/${encPath(mount.path)}`); }}>Delete</button>`}`}>
    <${Crumbs} mount=${mount} path=${path} />
    <${ErrorBox} error=${actionError} />
    ${editing ? html`<${SecretForm} mount=${mount} path=${path} initial=${values || {}} onSaved=${() => { setEditing(false); refresh(); }} />` : null}
    <h2>Data${version ? ` (version ${version})` : ""}</h2>
    ${secret.error ? html`<${ErrorBox} error=${secret.error} />` : secret.data === undefined ? html`<p class="muted">Loading…</p>` :
      values ? html`<${Table} caption="Keys and values (hidden until revealed)" head=${["Key", "Value"]}
        rows=${Object.entries(values).map(([k, v]) => [html`<code>${k}</code>`, html`<${Masked} key=${`${shownVersion}:${k}`} name=${k} value=${v} />`])} />`
      : html`<p class="muted">This version is deleted or destroyed.</p>`}
    ${v2 ? html`<${Async} state=${meta}>${(m) => {
      const md = m.data;
      const versions = Object.entries(md.versions || {}).sort((a, b) => Number(b[0]) - Number(a[0]));
      return html`
        <h2>Versions</h2>
        <${Table} caption="Versions of this secret" head=${["Version", "Created", "State", "Actions"]}
          rows=${versions.map(([n, v]) => [
            html`<${Link} href=${`${here}?version=${n}`} aria-label=${`View version ${n}`}>v${n}</${Link}>${String(md.current_version) === n ? " (current)" : ""}`,
            fmtTime(v.created_time),
            v.destroyed ? "destroyed" : v.deletion_time ? `deleted ${fmtTime(v.deletion_time)}` : "active",
            v.destroyed ? "" : v.deletion_time
              ? html`<button type="button" class="small" onClick=${() => act("POST", "undelete/", { versions: [Number(n)] })}>Undelete v${n}</button>`
              : html`<button type="button" class="small danger" onClick=${() => act("POST", "delete/", { versions: [Number(n)] })}>Delete v${n}</button>`,
          ])} />
        <h2>Metadata</h2>
        <${KeyValues} label="Secret metadata" pairs=${[
          ["Current version", md.current_version], ["Oldest version", md.oldest_version],
          ["Max versions", md.max_versions], ["Check-and-set required", md.cas_required],
          ["Delete version after", md.delete_version_after], ["Created", fmtTime(md.created_time)],
          ["Updated", fmtTime(md.updated_time)],
          ["Custom metadata", md.custom_metadata ? JSON.stringify(md.custom_metadata) : ""],
        ]} />`;
    }}</${Async}>` : null}
  </${Page}>`;
}

// --- policies ------------------------------------------------------------------------------
export function Policies() {
  const state = useAsync(() => get("secrets", "/v1/sys/policies/acl", { query: { list: "true" } }), []);
  const [name, setName] = useState("");
  return html`<${Page} title="ACL policies">
    <${Async} state=${state}>${(doc) => html`<${Table} caption="Policies" head=${["Name"]}
      rows=${(doc.data.keys || []).map((k) => [html`<${Link} href=${`/ui/policies/${encodeURIComponent(k)}`}>${k}</${Link}>`])} />`}</${Async}>
    <form class="card inline" onSubmit=${(e) => { e.preventDefault(); if (name.trim()) navigate(`/ui/policies/${encodeURIComponent(name.trim())}?new=1`); }}>
      <label for="new-policy">New policy name</label>
      <input id="new-policy" name="policy-name" value=${name} onInput=${(e) => setName(e.target.value)} autocomplete="off" />
      <button type="submit">Create policy</button>
    </form>
  </${Page}>`;
}

export function Policy({ name, search }) {
  const isNew = new URLSearchParams(search).has("new");
  const state = useAsync(async () => {
    if (isNew) return { data: { name, policy: "" } };
    return await get("secrets", `/v1/sys/policies/acl/${encodeURIComponent(name)}`);
  }, [name, isNew]);
  return html`<${Page} title=${`Policy ${name}`}>
    <${Async} state=${state}>${(doc) => html`<${PolicyEditor} name=${name} initial=${doc.data.policy || ""} onSaved=${isNew ? () => navigate(`/ui/policies/${encodeURIComponent(name)}`, { replace: true }) : state.reload} />`}</${Async}>
  </${Page}>`;
}

function PolicyEditor({ name, initial, onSaved }) {
  const [text, setText] = useState(initial);
  const [error, setError] = useState(null);
  const [saved, setSaved] = useState(false);
  const readOnly = name === "root";
  const submit = async (e) => {
    e.preventDefault();
    setError(null);
    setSaved(false);
    try {
      await call("secrets", `/v1/sys/policies/acl/${encodeURIComponent(name)}`, { method: "PUT", body: { policy: text } });
      setSaved(true);
      onSaved();
    } catch (err) {
      setError(err); // the API's validation error, word for word
    }
  };
  return html`<form class="card" onSubmit=${submit}>
    <label for="policy-text">Policy (HCL)</label>
    <textarea id="policy-text" name="policy" rows="14" spellcheck="false" readOnly=${readOnly} value=${text} onInput=${(e) => setText(e.target.value)}></textarea>
    <${ErrorBox} error=${error} />
    ${saved ? html`<p role="status" class="ok">Saved.</p>` : null}
    ${readOnly ? html`<p class="muted">The root policy cannot be changed.</p>` : html`<button type="submit">Save policy</button>`}
  </form>`;
}

// --- PKI -----------------------------------------------------------------------------------
function Pki({ mount, sub }) {
  const [kind, id] = sub.split("/");
  return (kind === "cert" || kind === "issuer") && id
    ? html`<${PkiItem} mount=${mount} sub=${sub} kind=${kind} id=${id} />`
    : html`<${PkiList} mount=${mount} />`;
}

function PkiItem({ mount, sub, kind, id }) {
  const base = `/v1/${encPath(mount.path)}`;
  const state = useAsync(() => get("secrets", `${base}${kind}/${encodeURIComponent(id)}`), [sub]);
  // Scalar fields only: the PEM gets its own block, lists would not fit a row.
  const scalars = (data) =>
    Object.entries(data).filter(([, v]) => typeof v !== "object" && !String(v).includes("-----BEGIN")).slice(0, 12);
  return html`<${Page} title=${`${kind === "cert" ? "Certificate" : "Issuer"} ${id}`}>
    <${Crumbs} mount=${mount} path=${sub} />
    <${Async} state=${state}>${(doc) => html`
      <${KeyValues} label="Details" pairs=${scalars(doc.data)} />
      <h2>Certificate (PEM)</h2>
      <pre class="pem" tabindex="0" aria-label="PEM certificate">${doc.data.certificate}</pre>`}</${Async}>
  </${Page}>`;
}

function PkiList({ mount }) {
  const base = `/v1/${encPath(mount.path)}`;
  const listing = (p) => async () => {
    try {
      return (await get("secrets", base + p, { query: { list: "true" } })).data;
    } catch (e) {
      if (e.status === 404) return { keys: [] };
      throw e;
    }
  };
  const issuers = useAsync(listing("issuers"), [mount.path]);
  const certs = useAsync(listing("certs"), [mount.path]);
  const link = (k, key) => html`<${Link} href=${`/ui/secrets/${encPath(mount.path)}${k}/${encodeURIComponent(key)}`}><code>${key}</code></${Link}>`;
  return html`<${Page} title=${`PKI ${mount.path}`}>
    <h2>Issuers</h2>
    <${Async} state=${issuers}>${(d) => html`<${Table} caption="Issuers" head=${["Issuer id", "Name"]}
      rows=${(d.keys || []).map((k) => [link("issuer", k), ((d.key_info || {})[k] || {}).issuer_name || ""])} />`}</${Async}>
    <h2>Certificates</h2>
    <${Async} state=${certs}>${(d) => html`<${Table} caption="Issued certificates" head=${["Serial number"]}
      rows=${(d.keys || []).map((k) => [link("cert", k)])} />`}</${Async}>
  </${Page}>`;
}
