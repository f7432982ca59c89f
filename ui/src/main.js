// The console's shell: login, navigation landmarks, and the routes of the three sections.
import { render } from "preact";
import { useState } from "preact/hooks";
import { call, session } from "./api.js";
import { ErrorBox, Link, html, navigate, useLocation } from "./ui.js";
import { Routes } from "./routes.js";

// Who-am-I of each API: a token is known to it when this answers 200 (a scheduler with its ACLs
// off answers 400: it knows no tokens). Workspace team and organization tokens have no user
// behind them, so the workspace API is asked for its organizations, which any token may list.
const PROBES = [
  ["secrets", "/v1/auth/token/lookup-self", "/ui/secrets"],
  ["workspace", "/api/v2/organizations", "/ui/workspaces"],
  ["scheduler", "/v1/acl/token/self", "/ui/jobs"],
];

function Login({ onIn }) {
  const [token, setToken] = useState("");
  const [errors, setErrors] = useState([]);
  const [busy, setBusy] = useState(false);
  const submit = async (e) => {
    e.preventDefault();
    setBusy(true);
    setErrors([]);
    session.login(token);
    // Each API decides for itself; the token is in if one of them knows it. One at a time,
    // stopping at the first that does: the browser logs each refusal as a console error.
    const refusals = [];
    for (const [api, path, home] of PROBES) {
      try {
        await call(api, path);
      } catch (error) {
        refusals.push(error);
        continue;
      }
      setBusy(false);
      setToken("");
      // From the bare /ui/, land in the first section whose API knows the token.
      if (/^\/ui\/?$/.test(location.pathname)) navigate(home, { replace: true });
      onIn();
      return;
    }
    setBusy(false);
    session.logout();
    setErrors(refusals);
  };
  return html`<main id="main" class="login">
    <form class="card" onSubmit=${submit} aria-labelledby="login-h">
      <h1 id="login-h">Sign in to Trellis</h1>
      <p class="muted">Your token is kept in this browser tab only and forgotten when you sign out.</p>
      <label for="token">Token</label>
      <input id="token" name="token" type="password" autocomplete="off" required value=${token} onInput=${(e) => setToken(e.target.value)} />
      ${errors.map((error) => html`<${ErrorBox} error=${error} />`)}
      <button type="submit" disabled=${busy}>Sign in</button>
    </form>
  </main>`;
}

const SECTIONS = [
  ["/ui/secrets", "Secrets"],
  ["/ui/policies", "Policies"],
  ["/ui/workspaces", "Workspaces"],
  ["/ui/jobs", "Jobs"],
  ["/ui/nodes", "Nodes"],
];

function Shell({ onOut }) {
  const loc = useLocation();
  const path = loc.split("?")[0];
  return html`
    <a class="skip" href="#main">Skip to content</a>
    <header class="top">
      <span class="brand" aria-hidden="true">Trellis</span>
      <nav aria-label="Sections"><ul>
        ${SECTIONS.map(([href, label]) => html`<li><${Link} href=${href} aria-current=${path.startsWith(href) ? "page" : undefined}>${label}</${Link}></li>`)}
      </ul></nav>
      <button type="button" class="logout" onClick=${() => { session.logout(); onOut(); }}>Sign out</button>
    </header>
    <main id="main" tabindex="-1"><${Routes} loc=${loc} /></main>`;
}

function App() {
  const [signedIn, setSignedIn] = useState(Boolean(session.token));
  useLocation(); // re-render on navigation
  // Signed out, the bare /ui/ stays put: signing in picks the section to land in.
  if (signedIn && /^\/ui\/?$/.test(location.pathname)) navigate("/ui/secrets", { replace: true });
  return signedIn ? html`<${Shell} onOut=${() => setSignedIn(false)} />` : html`<${Login} onIn=${() => setSignedIn(true)} />`;
}

render(html`<${App} />`, document.getElementById("app"));
