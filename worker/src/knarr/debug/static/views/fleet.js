// The workers of this consumer group (found through the recorder's worker_config table) and their
// events merged into one timeline.

import { h, replace, card, table, notice, fmtNum, externalLink, fmtSeconds, timeCell } from "../dom.js";
import { eventsTable, newestFirst } from "./shared.js";

function parseState(state) {
  if (!state) return {};
  if (typeof state === "string") { try { return JSON.parse(state); } catch { return {}; } }
  return state;
}

function workersTable(workers) {
  const now = Date.now() / 1000;
  return table([
    { title: "worker", cell: (w) => h("span", { class: "mono" }, w.worker ?? "") },
    { title: "debug UI", cell: (w) => (w.debug_url ? externalLink(w.debug_url, w.debug_url) : "–") },
    { title: "last seen", cell: (w) => h("span", {}, timeCell(w.updated_at), w.updated_at ? ` (${fmtSeconds(now - w.updated_at)} ago)` : ""), class: "nowrap" },
    { title: "partitions", cell: (w) => (parseState(w.state).partitions || []).map((p) => p.partition).join(", ") || "–" },
    { title: "lag", cell: (w) => fmtNum((parseState(w.state).partitions || []).reduce((s, p) => s + (Number(p.lag) || 0), 0)), class: "num" },
    { title: "slots", cell: (w) => { const p = parseState(w.state).pool || {}; return p.max ? `${fmtNum(p.in_use)} / ${fmtNum(p.max)}` : "–"; }, class: "num" },
  ], workers || [], { testid: "fleet-workers", empty: "No worker found.", rowProps: (w) => ({ testid: "fleet-worker", dataset: { worker: w.worker ?? "" } }) });
}

export default {
  title: "Fleet",
  mount(root, route, ctx) {
    const workers = h("div", {}, notice("Loading…")), merged = h("div", {}, notice("Loading…"));
    root.append(card("Workers of this consumer group", workers),
      card("Merged timeline", h("p", {}, h("a", { href: "#/events?source=fleet" }, "the whole merged timeline, with filters")), merged));
    (async () => {
      try {
        const fleet = await ctx.load(ctx.api.get("fleet"));
        replace(workers, workersTable(fleet.workers),
          h("p", { class: "muted", testid: "fleet-merged" }, `${fmtNum(fleet.merged?.events)} events in the merged databases`));
        const { events } = await ctx.api.get("fleet/events", { limit: 30 });
        replace(merged, eventsTable(newestFirst(events || []), { testid: "fleet-events" }).el);
      } catch (err) {
        replace(workers, notice(err.message, "bad"));
        replace(merged);
      }
    })();
    return {};
  },
};
