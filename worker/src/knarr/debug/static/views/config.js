// The worker's configuration as the worker sees it, secrets masked by the server.

import { h, replace, card, notice, pre, fmtJson } from "../dom.js";

function value(v) {
  if (v === null) return h("span", { class: "muted" }, "null");
  if (typeof v === "boolean") return h("span", { class: "bool" }, String(v));
  if (typeof v === "number") return h("span", { class: "num" }, String(v));
  if (typeof v === "string") return v === "" ? h("span", { class: "muted" }, "\"\"") : h("span", { class: "str" }, v);
  if (Array.isArray(v) && v.every((x) => x === null || typeof x !== "object")) {
    return v.length ? h("span", { class: "str" }, v.map(String).join(", ")) : h("span", { class: "muted" }, "[]");
  }
  return tree(v);
}

function tree(obj) {
  const entries = Array.isArray(obj) ? obj.map((v, i) => [String(i), v]) : Object.entries(obj ?? {});
  if (!entries.length) return h("span", { class: "muted" }, Array.isArray(obj) ? "[]" : "{}");
  return h("table", { class: "config" }, h("tbody", {}, entries.map(([k, v]) =>
    h("tr", { dataset: { key: k } }, h("th", { class: "mono" }, k), h("td", {}, value(v))))));
}

export default {
  title: "Configuration",
  nav: "Config",
  mount(root, route, ctx) {
    const holder = h("div", { testid: "config-view" }, notice("Loading…"));
    root.append(notice("Secrets (passwords, tokens, keys, URLs with credentials) are masked by the worker before they leave it."), holder);
    (async () => {
      try {
        const config = await ctx.load(ctx.api.get("config"));
        replace(holder,
          ...Object.entries(config).map(([section, v]) =>
            h("details", { class: "card section", open: true, dataset: { section } },
              h("summary", {}, h("h2", {}, section)), value(v))),
          h("details", { class: "card" }, h("summary", {}, h("h2", {}, "as JSON")), pre(fmtJson(config), "config-json")));
      } catch (err) {
        replace(holder, notice(err.message, "bad"));
      }
    })();
    return {};
  },
};
