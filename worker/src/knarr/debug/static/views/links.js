// Prometheus dashboards for this worker and the links the operator configured (debug.custom_links).

import { h, replace, card, notice, externalLink } from "../dom.js";

function list(items, testid, empty) {
  if (!items?.length) return notice(empty, "muted", testid);
  return h("ul", { class: "links", testid }, items.map((l) => h("li", {}, externalLink(l.url, l.title || l.url, "link"),
    h("div", { class: "muted mono small" }, l.url))));
}

export default {
  title: "Links",
  mount(root, route, ctx) {
    const holder = h("div", {}, notice("Loading…"));
    root.append(holder);
    (async () => {
      try {
        const links = await ctx.load(ctx.api.get("links"));
        replace(holder,
          card("Prometheus", list(links.prometheus, "links-prometheus", "No Prometheus configured (debug.prometheus_url).")),
          card("Custom links", list(links.custom, "links-custom", "No custom links configured (debug.custom_links).")));
      } catch (err) {
        replace(holder, notice(err.message, "bad"));
      }
    })();
    return {};
  },
};
