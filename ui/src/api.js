// Talks to the three APIs through the gateway's same-origin proxy (/ui/api/<api>/...), with the
// user's token in each API's own header. The token lives in sessionStorage only: never in a
// URL, never in localStorage; logout forgets it.

const KEY = "trellis.console.token";

export const session = {
  get token() {
    return sessionStorage.getItem(KEY) || "";
  },
  login(token) {
    sessionStorage.setItem(KEY, token);
  },
  logout() {
    sessionStorage.removeItem(KEY);
  },
};

const HEADERS = {
  secrets: (t) => ({ "X-Vault-Token": t, "X-Svc-Request": "true" }),
  workspace: (t) => ({ Authorization: `Bearer ${t}` }),
  scheduler: (t) => ({ "X-Nomad-Token": t }),
};

export class ApiError extends Error {
  constructor(api, status, message) {
    super(message);
    this.api = api;
    this.status = status;
  }
}

// Each API words its refusals its own way: show the API's words.
function errorText(api, status, text) {
  try {
    const doc = JSON.parse(text);
    if (Array.isArray(doc.errors)) {
      // The secrets API answers a path with nothing there as 404 `{"errors":[]}`.
      if (!doc.errors.length) return status === 404 ? "nothing at this path" : `HTTP ${status}`;
      return doc.errors
        .map((e) => (typeof e === "string" ? e : [e.title, e.detail].filter(Boolean).join(": ")))
        .join("; ");
    }
  } catch (_) {
    /* plain text (the scheduler API) */
  }
  return text.trim() || `HTTP ${status}`;
}

export async function call(api, path, { method = "GET", body, signal, query, text: raw } = {}) {
  const headers = { ...HEADERS[api](session.token) };
  let payload;
  if (body !== undefined) {
    payload = JSON.stringify(body);
    headers["Content-Type"] = api === "workspace" ? "application/vnd.api+json" : "application/json";
  }
  let url = `/ui/api/${api}${path}`;
  if (query) {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(query)) if (v !== undefined && v !== "") q.set(k, v);
    const s = q.toString();
    if (s) url += (url.includes("?") ? "&" : "?") + s;
  }
  const resp = await fetch(url, {
    method,
    headers,
    body: payload,
    signal,
    credentials: "omit",
    cache: "no-store",
    referrerPolicy: "no-referrer",
  });
  const text = await resp.text();
  if (!resp.ok) throw new ApiError(api, resp.status, errorText(api, resp.status, text));
  const data = raw ? text : text ? JSON.parse(text) : null;
  return { data, index: resp.headers.get("X-Sched-Index") };
}

export const get = async (api, path, opts) => (await call(api, path, opts)).data;

// Path segments are user data: encode each one, keep the slashes.
export const encPath = (p) => p.split("/").map(encodeURIComponent).join("/");
