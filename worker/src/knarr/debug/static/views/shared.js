// Pieces more than one view shows: the events table, a task tree, a throttle for live refreshes.

import * as api from "../api.js";
import { h, table, timeCell, fmtMs, traceLink, oneLine, fmtJson, pre, field, argsText } from "../dom.js";

export const EVENT_KINDS = [
  "consumed", "window_arranged", "task_queued", "task_started", "task_finished", "task_failed", "task_replaced",
  "task_complete", "message_complete", "window_complete", "delivered", "dead_lettered", "committed", "assigned", "revoked",
  "backpressure_on", "backpressure_off",
];

// What a row says about an event in one line, by kind; the full data is in the row's details.
export function eventSummary(event) {
  const d = event.data || {};
  switch (event.kind) {
    case "task_started": return `slot ${d.slot ?? "?"}, waited ${fmtMs(d.slot_wait_ms)}`;
    case "task_finished": return `exit ${d.exit_code ?? "?"}${d.attempt > 1 ? `, attempt ${d.attempt}` : ""}`;
    case "task_failed": {
      const reason = d.reason ?? "failed";
      const exit = d.exit_code === undefined || d.exit_code === null || reason.includes(`exit ${d.exit_code}`) ? "" : `, exit ${d.exit_code}`;
      return `${reason}${exit}`;
    }
    case "task_replaced": return `replaced by ${(d.replacements || []).join(", ")}`;
    case "message_complete": return `${d.total ?? "?"} tasks: ${d.succeeded ?? 0} ok, ${d.failed ?? 0} failed, ${d.replaced ?? 0} replaced`;
    case "delivered": return `${d.count ?? "?"} to ${d.sink ?? "?"}${d.stage ? ` (${d.stage})` : ""}`;
    case "dead_lettered": return `${d.reason ?? ""}${d.stage ? ` (${d.stage})` : ""}`;
    case "task_queued": return d.offsets ? `for offsets ${d.offsets.join(", ")}` : oneLine(d);
    case "task_complete": return `on_task_complete: ${d.output_message_count ?? 0} output${d.output_message_count === 1 ? "" : "s"}`;
    case "consumed": return `${d.size ?? "?"} bytes${d.key !== null && d.key !== undefined ? `, key ${oneLine(d.key, 60)}` : ""}`;
    case "window_arranged": return `window ${d.window_id ?? "?"}: ${d.tasks ?? "?"} tasks for offsets ${(d.offsets || []).join(", ")}`;
    case "window_complete": return `window ${d.window_id ?? "?"}: ${d.task_count ?? "?"} tasks, ${d.output_message_count ?? 0} outputs`;
    case "assigned": case "revoked": return `partitions ${(d.partitions || []).join(", ")}${d.lost ? " (lost)" : ""}`;
    default: return Object.keys(d).length ? oneLine(d) : "";
  }
}

export function kindBadge(kind) {
  const tone = /failed|dead|revoked|backpressure_on/.test(kind) ? "bad"
    : /finished|complete|delivered|committed/.test(kind) ? "good" : "neutral";
  return h("span", { class: `badge badge-${tone}`, testid: "event-kind" }, kind);
}

// Task events carry the offset of their task's first message; those a recorder wrote before they
// did name only their task: the task's task_queued event knows the offsets, so the link asks for
// it when clicked and opens that message's trace.
export function taskTraceLink(taskId, partition) {
  if (!taskId) return "–";
  const link = h("a", {
    href: "#", class: "mono nowrap", testid: "task-trace-link", title: "open the trace of this task's message",
    onclick: async (e) => {
      e.preventDefault();
      e.stopPropagation();
      try {
        const { events } = await api.get("events", { kind: "task_queued", task_id: taskId, limit: 1 });
        const queued = events?.[0];
        const offset = queued ? queued.offset ?? queued.data?.offsets?.[0] : null;
        if (offset === null || offset === undefined) link.textContent = "not recorded";
        else window.location.hash = `#/trace/${Number(queued.partition ?? partition)}/${Number(offset)}`;
      } catch (err) {
        link.textContent = err.message;
      }
    },
  }, partition === null || partition === undefined ? "trace →" : `p${partition} → trace`);
  return link;
}

function messageCell(event) {
  if (event.offset === null || event.offset === undefined) return event.task_id ? taskTraceLink(event.task_id, event.partition) : "–";
  return traceLink(event.partition, event.offset);
}

function eventRow(event, fresh) {
  const details = h("tr", { class: "details", hidden: true },
    h("td", { colspan: 7 }, pre(fmtJson(event.data ?? {}), "event-data")));
  const row = h("tr", {
    class: `clickable${fresh ? " fresh" : ""}`, testid: "event-row",
    dataset: { kind: event.kind, eventId: event.id ?? "" },
    title: "show the event's data", tabindex: 0,
    onclick: (e) => { if (e.target.tagName !== "A") details.hidden = !details.hidden; },
    onkeydown: (e) => { if (e.key === "Enter" && e.target === e.currentTarget) details.hidden = !details.hidden; },
  },
  h("td", { class: "nowrap" }, timeCell(event.ts)),
  h("td", {}, kindBadge(event.kind)),
  h("td", { class: "nowrap" }, messageCell(event)),
  h("td", { class: "mono nowrap" }, event.task_id ?? ""),
  h("td", { class: "num nowrap" }, event.duration_ms === null || event.duration_ms === undefined ? "" : fmtMs(event.duration_ms)),
  h("td", { class: "summary" }, eventSummary(event)),
  h("td", { class: "muted nowrap" }, event.worker ?? ""));
  return [row, details];
}

// A table of events, newest first, to which live events can be prepended (and the oldest dropped).
export function eventsTable(list, { testid = "events-table", max = 500 } = {}) {
  const body = h("tbody");
  const el = h("table", { class: "grid events", testid },
    h("thead", {}, h("tr", {}, ["time", "kind", "message", "task", "duration", "what", "worker"].map((t) => h("th", {}, t)))),
    body);
  const empty = h("tr", { class: "empty" }, h("td", { colspan: 7 }, "No events match."));
  for (const event of list) body.append(...eventRow(event, false));
  if (!list.length) body.append(empty);
  return {
    el,
    prepend(event) {
      empty.remove();
      body.prepend(...eventRow(event, true));
      while (body.children.length > 2 * max) body.lastChild.remove();
    },
  };
}

export function newestFirst(list) {
  return [...list].sort((a, b) => (b.id ?? 0) - (a.id ?? 0) || (b.ts ?? 0) - (a.ts ?? 0));
}

// --- the task tree ---------------------------------------------------------------------------------

function statusBadge(status) {
  const tone = { succeeded: "good", failed: "bad", replaced: "warn", running: "live" }[status] || "neutral";
  return h("span", { class: `badge badge-${tone}`, testid: "task-status" }, status ?? "unknown");
}

function output(label, text, testid) {
  if (!text) return null;
  const lines = String(text).replace(/\n$/, "").split("\n").length;
  return h("details", { class: "output", open: lines <= 12 || undefined },
    h("summary", {}, `${label} (${lines} line${lines === 1 ? "" : "s"})`), pre(String(text), testid));
}

function taskNode(task, parentStatus) {
  const exit = task.exit_code === undefined || task.exit_code === null ? null : task.exit_code;
  const head = h("div", { class: "task-head" },
    statusBadge(task.status),
    h("span", { class: "mono task-id", testid: "task-id" }, task.task_id),
    exit === null ? null : h("span", { class: `exit ${exit === 0 ? "ok" : "bad"}`, testid: "task-exit" }, `exit ${exit}`),
    task.attempt > 1 ? h("span", { class: "muted" }, `attempt ${task.attempt}`) : null,
    h("span", { class: "spacer" }),
    task.slot !== undefined && task.slot !== null ? h("span", { class: "metric" }, "slot ", h("b", {}, String(task.slot))) : null,
    task.pid ? h("span", { class: "metric" }, "pid ", h("b", {}, String(task.pid))) : null,
    h("span", { class: "metric", title: "time waiting for an executor slot" }, "slot wait ",
      h("b", { testid: "task-slot-wait" }, fmtMs(task.slot_wait_ms))),
    h("span", { class: "metric", title: "run time of the subprocess" }, "duration ",
      h("b", { testid: "task-duration" }, fmtMs(task.duration_ms))));
  const args = field(task, "args");
  const node = h("li", { testid: "task-node", dataset: { taskId: task.task_id, status: task.status ?? "" } },
    parentStatus === "replaced" ? h("div", { class: "replaced-by" }, "replacement") : null,
    h("div", { class: `task task-${task.status ?? "unknown"}` }, head,
      h("div", { class: "task-args" }, h("span", { class: "muted" }, "args "),
        h("code", { testid: "task-args" }, argsText(args))),
      task.reason ? h("div", { class: "task-reason" }, h("span", { class: "muted" }, "reason "),
        h("span", { testid: "task-reason" }, task.reason)) : null,
      task.error && task.error !== task.reason ? h("div", { class: "task-reason" }, String(task.error)) : null,
      output("stdout", task.stdout, "task-stdout"),
      output("stderr", task.stderr, "task-stderr"),
      task.attempts?.length > 1 ? h("details", { class: "output" }, h("summary", {}, `${task.attempts.length} attempts`),
        pre(fmtJson(task.attempts), "task-attempts")) : null));
  if (task.children?.length) {
    node.append(h("ul", { class: "tree", testid: "task-children" }, task.children.map((c) => taskNode(c, task.status))));
  }
  return node;
}

export function taskTree(roots, testid = "task-tree") {
  if (!roots?.length) return h("p", { class: "muted", testid }, "No tasks.");
  return h("ul", { class: "tree root", testid }, roots.map((t) => taskNode(t, null)));
}

export function groupStats(group, testid) {
  const g = group || {};
  const item = (label, value, cls) => h("div", { class: `gstat ${cls}` }, h("b", { testid: `group-${label}` }, value ?? "–"), label);
  return h("div", { class: "gstats", testid },
    item("total", g.total, ""), item("succeeded", g.succeeded, "good"), item("failed", g.failed, "bad"),
    item("replaced", g.replaced, "warn"));
}

export function deliveriesTable(list, testid) {
  return table([
    { title: "time", cell: (e) => timeCell(e.ts), class: "nowrap" },
    { title: "sink", cell: (e) => h("span", { class: "mono" }, field(e, "sink") ?? "") },
    { title: "stage", cell: (e) => field(e, "stage") ?? "" },
    { title: "payloads", cell: (e) => String(field(e, "count") ?? ""), class: "num" },
  ], list || [], { testid, empty: "Nothing delivered for this message." });
}

export function deadLettersTable(list, testid, empty = "No dead letters.") {
  return table([
    { title: "time", cell: (e) => timeCell(e.ts), class: "nowrap" },
    { title: "message", cell: (e) => traceLink(e.partition, e.offset), class: "nowrap" },
    { title: "stage", cell: (e) => field(e, "stage") ?? "" },
    { title: "reason", cell: (e) => field(e, "reason") ?? "" },
    { title: "data", cell: (e) => h("details", {}, h("summary", {}, oneLine(e.data ?? {}, 80)), pre(fmtJson(e.data ?? {}))) },
  ], list || [], { testid, empty });
}

// Calls fn at most once per `ms` (the last call of a burst still runs), so live events refresh a
// view without a request per event.
export function throttle(fn, ms) {
  let timer = null, last = 0;
  const call = () => {
    if (timer) return;
    timer = setTimeout(() => { timer = null; last = Date.now(); fn(); }, Math.max(0, last + ms - Date.now()));
  };
  call.cancel = () => { clearTimeout(timer); timer = null; };
  return call;
}
