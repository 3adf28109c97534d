// The slowest and the failed tasks, each linked to the trace of its message.

import { h, replace, card, table, timeCell, fmtMs, traceLink, argsText, notice, field } from "../dom.js";
import { taskTraceLink } from "./shared.js";

// The reason, and the last line the task wrote on stderr (what an operator looks for first).
function reasonCell(reason, stderr) {
  const last = String(stderr || "").split("\n").filter(Boolean).slice(-1)[0];
  return h("span", {}, reason ?? "", last ? h("div", { class: "mono small muted", testid: "task-stderr-tail" }, last) : null);
}

function tasksTable(list, testid, empty) {
  return table([
    { title: "time", cell: (t) => timeCell(t.ts ?? t.started_at), class: "nowrap" },
    { title: "task", cell: (t) => h("a", { href: `#/events?task_id=${encodeURIComponent(t.task_id ?? "")}`, class: "mono" }, t.task_id ?? "") },
    { title: "message", cell: (t) => (t.offset === null || t.offset === undefined
      ? taskTraceLink(t.task_id, t.partition) : traceLink(t.partition, t.offset)), class: "nowrap" },
    { title: "duration", cell: (t) => fmtMs(t.duration_ms), class: "num nowrap" },
    { title: "exit", cell: (t) => String(field(t, "exit_code") ?? "–"), class: "num" },
    { title: "attempt", cell: (t) => String(field(t, "attempt") ?? "–"), class: "num" },
    { title: "args", cell: (t) => h("code", {}, argsText(field(t, "args"))) },
    { title: "reason", cell: (t) => reasonCell(field(t, "reason"), field(t, "stderr")) },
  ], list || [], { testid, empty, rowProps: (t) => ({ testid: "task-row", dataset: { taskId: t.task_id ?? "" } }) });
}

export default {
  title: "Slow & failed tasks",
  nav: "Slow & failed",
  mount(root, route, ctx) {
    const minMs = route.query.get("min_ms") ?? "500";
    const input = h("input", { type: "number", min: 0, name: "min_ms", value: minMs, testid: "slow-min-ms", class: "narrow" });
    const slow = h("div", {}, notice("Loading…")), failed = h("div", {}, notice("Loading…"));
    root.append(
      h("form", { class: "filters", onsubmit: (e) => { e.preventDefault(); ctx.navigate(`#/tasks?min_ms=${Number(input.value)}`); } },
        h("label", {}, "slower than (ms)", input), h("button", { type: "submit", testid: "slow-apply" }, "Apply")),
      card("Slow tasks", slow), card("Failed tasks", failed));
    const fill = async (holder, path, params, testid, empty) => {
      try {
        const answer = await ctx.load(ctx.api.get(path, params));
        replace(holder, tasksTable(answer.tasks, testid, empty),
          answer.truncated ? notice("Only the first rows (debug.max_ui_rows).") : null);
      } catch (err) {
        replace(holder, notice(err.message, "bad"));
      }
    };
    fill(slow, "tasks/slow", { min_ms: minMs }, "slow-table", `No task took longer than ${minMs} ms.`);
    fill(failed, "tasks/failed", {}, "failed-table", "No failed task recorded.");
    return {};
  },
};
