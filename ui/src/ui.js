// Small shared pieces: the html tag, the router, data hooks, and accessible building blocks.
import { h } from "preact";
import { useCallback, useEffect, useRef, useState } from "preact/hooks";
import htm from "htm";
import { ApiError, call } from "./api.js";

export const html = htm.bind(h);
export const BASE = "/ui";

// --- routing: real URLs under /ui/, so deep links and the back button work -----------------
const listeners = new Set();
export function navigate(to, { replace = false } = {}) {
  if (replace) history.replaceState(null, "", to);
  else history.pushState(null, "", to);
  listeners.forEach((fn) => fn());
}
window.addEventListener("popstate", () => listeners.forEach((fn) => fn()));

export function useLocation() {
  const [loc, setLoc] = useState(location.pathname + location.search);
  useEffect(() => {
    const fn = () => setLoc(location.pathname + location.search);
    listeners.add(fn);
    return () => listeners.delete(fn);
  }, []);
  return loc;
}

export function Link({ href, children, ...rest }) {
  const onClick = (e) => {
    if (e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey)
      return;
    e.preventDefault();
    navigate(href);
  };
  return html`<a href=${href} onClick=${onClick} ...${rest}>${children}</a>`;
}

// --- data ----------------------------------------------------------------------------------
// One request, re-run when `deps` change or `reload()` is called.
export function useAsync(fn, deps) {
  const [state, setState] = useState({ loading: true });
  const [tick, setTick] = useState(0);
  useEffect(() => {
    let live = true;
    setState((s) => ({ ...s, loading: true }));
    fn().then(
      (data) => live && setState({ data, loading: false }),
      (error) => live && setState({ error, loading: false }),
    );
    return () => {
      live = false;
    };
  }, [...deps, tick]);
  const reload = useCallback(() => setTick((t) => t + 1), []);
  return { ...state, reload };
}

// A scheduler blocking query kept open: each answer carries X-Sched-Index, the next request
// waits for a change past it. The page updates itself when an allocation starts or fails.
export function useBlocking(path, query = {}, deps = []) {
  const [state, setState] = useState({ loading: true });
  const key = path + JSON.stringify(query);
  useEffect(() => {
    const ctl = new AbortController();
    let index = "";
    let failures = 0;
    setState({ loading: true });
    (async () => {
      while (!ctl.signal.aborted) {
        try {
          const q = index ? { ...query, index, wait: "30s" } : query;
          const r = await call("scheduler", path, { query: q, signal: ctl.signal });
          failures = 0;
          if (r.index !== index) setState({ data: r.data, loading: false });
          index = r.index || "";
          if (!index) return; // not a blocking endpoint: one answer is all
        } catch (error) {
          if (ctl.signal.aborted) return;
          setState((s) => ({ ...s, error, loading: false }));
          // A refusal will not change by asking again; a lost connection might.
          if (error instanceof ApiError && error.status < 500) return;
          failures += 1;
          await new Promise((r) => setTimeout(r, Math.min(500 * 2 ** failures, 10000)));
        }
      }
    })();
    return () => ctl.abort();
  }, [key, ...deps]);
  return state;
}

// --- building blocks -----------------------------------------------------------------------
export function ErrorBox({ error }) {
  if (!error) return null;
  const who = error.api ? `The ${error.api} API answered` : "Error";
  const status = error.status ? ` ${error.status}` : "";
  return html`<div class="error" role="alert"><strong>${who}${status}:</strong> ${error.message}</div>`;
}

export function Loading({ what = "Loading" }) {
  return html`<p class="muted" role="status" aria-live="polite">${what}…</p>`;
}

// Renders an async state: loading, the API's refusal, or the content.
export function Async({ state, children }) {
  if (state.error && state.data === undefined) return html`<${ErrorBox} error=${state.error} />`;
  if (state.data === undefined) return html`<${Loading} />`;
  return html`${state.error ? html`<${ErrorBox} error=${state.error} />` : null}${children(state.data)}`;
}

export function Page({ title, children, actions }) {
  // New page: move focus to its heading so screen readers announce it.
  const ref = useRef();
  useEffect(() => {
    ref.current && ref.current.focus({ preventScroll: true });
  }, [title]);
  return html`<section aria-labelledby="page-title">
    <div class="page-head">
      <h1 id="page-title" tabindex="-1" ref=${ref}>${title}</h1>
      ${actions ? html`<div class="actions">${actions}</div>` : null}
    </div>
    ${children}
  </section>`;
}

export function Status({ value }) {
  const v = String(value || "unknown").toLowerCase();
  return html`<span class=${`status status-${v}`}>${value || "unknown"}</span>`;
}

export function Table({ caption, head, rows, empty = "Nothing here yet." }) {
  if (!rows.length) return html`<p class="muted">${empty}</p>`;
  return html`<div class="table-wrap"><table>
    <caption>${caption}</caption>
    <thead><tr>${head.map((c) => html`<th scope="col">${c}</th>`)}</tr></thead>
    <tbody>${rows.map((r) => html`<tr>${r.map((c) => html`<td>${c}</td>`)}</tr>`)}</tbody>
  </table></div>`;
}

export function KeyValues({ label, pairs }) {
  return html`<dl class="kv" aria-label=${label}>
    ${pairs.map(([k, v]) => html`<div><dt>${k}</dt><dd>${v === undefined || v === null || v === "" ? "—" : String(v)}</dd></div>`)}
  </dl>`;
}

export const fmtTime = (t) => {
  if (!t) return "—";
  // Nomad's times are nanoseconds since the epoch; the others are RFC 3339.
  const d = typeof t === "number" ? new Date(t > 1e14 ? t / 1e6 : t * 1000) : new Date(t);
  return isNaN(d) ? String(t) : d.toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
};
