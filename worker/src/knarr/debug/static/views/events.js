// The timeline: recorded events with filters (kind, partition, offset, task), from this worker or
// merged over the consumer group's workers; live events that match are added at the top.

import { h, replace, notice } from "../dom.js";
import { EVENT_KINDS, eventsTable, newestFirst } from "./shared.js";

const FILTERS = ["kind", "partition", "offset", "task_id", "limit", "source"];

function matches(event, f) {
  if (f.kind && event.kind !== f.kind) return false;
  if (f.partition !== "" && f.partition !== undefined && String(event.partition) !== String(f.partition)) return false;
  if (f.offset !== "" && f.offset !== undefined && String(event.offset) !== String(f.offset)) return false;
  if (f.task_id && event.task_id !== f.task_id && event.parent_task_id !== f.task_id) return false;
  return true;
}

export default {
  title: "Events",
  mount(root, route, ctx) {
    const f = Object.fromEntries(FILTERS.map((k) => [k, route.query.get(k) ?? ""]));
    if (!f.limit) f.limit = "200";
    const input = (name, props) => h("label", {}, props.label,
      h("input", { name, value: f[name], testid: `filter-${name}`, ...props, label: undefined }));
    const kind = h("select", { name: "kind", testid: "filter-kind" },
      h("option", { value: "" }, "all kinds"), EVENT_KINDS.map((k) => h("option", { value: k, selected: f.kind === k || undefined }, k)));
    const source = h("select", { name: "source", testid: "filter-source" },
      h("option", { value: "" }, "this worker"),
      h("option", { value: "fleet", selected: f.source === "fleet" || undefined }, "whole consumer group"));
    const live = h("input", { type: "checkbox", checked: true, testid: "filter-live" });
    const form = h("form", {
      class: "filters", testid: "events-filters",
      onsubmit: (e) => {
        e.preventDefault();
        const data = new FormData(form);
        const query = new URLSearchParams();
        for (const key of FILTERS) if (data.get(key)) query.set(key, data.get(key));
        ctx.navigate(`#/events?${query}`);
      },
    },
    h("label", {}, "kind", kind),
    input("partition", { label: "partition", type: "number", min: 0, class: "narrow" }),
    input("offset", { label: "offset", type: "number", min: 0, class: "narrow" }),
    input("task_id", { label: "task", placeholder: "task id" }),
    input("limit", { label: "rows", type: "number", min: 1, class: "narrow" }),
    h("label", {}, "source", source),
    h("button", { type: "submit", testid: "filter-apply" }, "Apply"),
    h("label", { class: "check", title: "add matching events as they are recorded" }, live, "live"));
    const status = h("div", { testid: "events-status", class: "muted" }, "Loading…");
    const holder = h("div");
    root.append(form, status, holder);

    let list = null, stopped = false, loaded = 0, arrived = 0, note = "";
    const showCount = () => {
      status.textContent = `${loaded} event${loaded === 1 ? "" : "s"}${arrived ? ` + ${arrived} live` : ""}, newest first${note}`;
    };
    (async () => {
      const params = { kind: f.kind, partition: f.partition, offset: f.offset, task_id: f.task_id, limit: f.limit };
      try {
        const answer = await ctx.load(ctx.api.get(f.source === "fleet" ? "fleet/events" : "events", params));
        if (stopped) return;
        const events = newestFirst(answer.events || []);
        list = eventsTable(events, { max: Number(f.limit) || 500 });
        replace(holder, list.el);
        loaded = events.length;
        note = (answer.truncated ? ` — only the latest ${events.length} (debug.max_ui_rows or rows); narrow the filters to see older ones` : "")
          + (f.source === "fleet" ? " — merged over the consumer group's workers" : "");
        showCount();
      } catch (err) {
        replace(status, notice(err.message, "bad", "events-error"));
      }
    })();
    return {
      onEvent(event) {
        if (list && live.checked && f.source !== "fleet" && matches(event, f)) {
          list.prepend(event);
          arrived += 1;
          showCount();
        }
      },
      unmount() { stopped = true; },
    };
  },
};
