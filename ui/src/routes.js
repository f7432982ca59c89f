// Path -> page. Deep links work because the gateway serves the app for every /ui/* page path.
import { html, Page } from "./ui.js";
import { Mounts, Policies, Policy, SecretsPath } from "./secrets.js";
import { Organizations, WorkspaceDetail, WorkspaceList } from "./workspaces.js";
import { JobDetail, Jobs, Nodes } from "./jobs.js";

const dec = (s) => {
  try {
    return decodeURIComponent(s);
  } catch (_) {
    return s;
  }
};

export function Routes({ loc }) {
  const [pathname, q = ""] = loc.split("?");
  const search = q ? "?" + q : "";
  const parts = pathname.replace(/^\/ui\/?/, "").split("/");
  const [section, ...rest] = parts;
  const restPath = rest.map(dec).join("/");
  switch (section) {
    case "secrets":
      return restPath ? html`<${SecretsPath} key=${restPath} rest=${restPath} search=${search} />` : html`<${Mounts} />`;
    case "policies":
      return restPath ? html`<${Policy} key=${restPath} name=${restPath} search=${search} />` : html`<${Policies} />`;
    case "workspaces":
      if (!rest[0]) return html`<${Organizations} />`;
      if (!rest[1]) return html`<${WorkspaceList} key=${rest[0]} org=${dec(rest[0])} search=${search} />`;
      return html`<${WorkspaceDetail} key=${rest.join("/")} org=${dec(rest[0])} name=${dec(rest[1])} />`;
    case "jobs":
      return rest[0] ? html`<${JobDetail} key=${rest[0]} id=${dec(rest[0])} />` : html`<${Jobs} key=${search} search=${search} />`;
    case "nodes":
      return html`<${Nodes} />`;
    default:
      return html`<${Page} title="Not found"><p>No console page lives at <code>${pathname}</code>.</p></${Page}>`;
  }
}
