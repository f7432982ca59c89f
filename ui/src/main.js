// The console's shell: login, navigation landmarks, and the routes of the three sections.
import { render } from "preact";
import { useState } from "preact/hooks";
import { call, session } from "./api.js";
import { ErrorBox, Link, html, navigate, useLocation } from "./ui.js";
import { Routes } from "./routes.js";

function Login({ onIn }) {
  const [token, setToken] = useState("");
  const [error, setError] = useState(null);
  const [busy, setBusy] = useState(false);
  const submit = async (e) => {
    e.preventDefault();
    setBusy(true);
    setError(null);
    session.login(token);
    // Each API decides for itself; the token is accepted if at least one of them knows it.
    const tries = await Promise.allSettled([
      call("secrets", "/v1/auth/token/lookup-self"),
      call("workspace", "/api/v2/account/details"),
    ]);
    setBusy(false);
    if (tries.some((t) => t.status === "fulfilled")) {
      setToken("");
      onIn();
      return;
    }
    session.logout();
    setError(tries[0].reason);
  };
  return html`<main id="main" class="login">
    <form class="card" onSubmit=${submit} aria-labelledby="login-h">
      <h1 id="login-h">Sign in to Trellis</h1>
      <p class="muted">Your token is kept in this browser tab only and forgotten when you sign out.</p>
      <label for="token">Token</label>
      <input id="token" name="token" type="password" autocomplete="off" required value=${token} onInput=${(e) => setToken(e.target.value)} />
      <${ErrorBox} error=${error} />
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
  if (location.pathname === "/ui/" || location.pathname === "/ui") navigate("/ui/secrets", { replace: true });
  return signedIn ? html`<${Shell} onOut=${() => setSignedIn(false)} />` : html`<${Login} onIn=${() => setSignedIn(true)} />`;
}

render(html`<${App} />`, document.getElementById("app"));
