// Run one message through the worker's handler (arrange, the real subprocesses, the hooks) without
// delivering or committing anything, and show what would have been delivered and the group's trace.

import { h, replace, card, notice, pre, fmtJson, fmtMs, table, argsText, oneLine, kv } from "../dom.js";
import { taskTree, groupStats } from "./shared.js";

const EXAMPLE = '{\n  "key": "k1",\n  "value": {"id": 1},\n  "headers": {},\n  "partition": 0,\n  "offset": 0\n}';

// The text is a message ({"value": …, "key"?, "headers"?, "partition"?, "offset"?}) when it is a JSON
// object with a "value"; anything else is taken as the message's value itself.
export function messageFrom(text) {
  let parsed;
  try { parsed = JSON.parse(text); } catch { return { message: { value: text }, as: "the message's value (not JSON)" }; }
  if (parsed && typeof parsed === "object" && !Array.isArray(parsed) && "value" in parsed) {
    return { message: parsed, as: "a message" };
  }
  return { message: { value: parsed }, as: "the message's value" };
}

function payloads(wouldDeliver) {
  const entries = Object.entries(wouldDeliver || {});
  if (!entries.length) return notice("Nothing would be delivered.", "muted", "probe-deliveries");
  return h("div", { testid: "probe-deliveries" }, entries.map(([sink, list]) =>
    h("div", { class: "sink", dataset: { sink } },
      h("h3", {}, h("span", { class: "mono" }, sink), ` — ${list.length} payload${list.length === 1 ? "" : "s"}`),
      pre(list.map((p) => (typeof p === "string" ? p : JSON.stringify(p))).join("\n"), "probe-payloads"))));
}

function outputsText(outputs) {
  const parts = Object.entries(outputs || {}).map(([kind, n]) => `${n} ${kind}`);
  return parts.length ? parts.join(", ") : "nothing";
}

// What each output hook did: one row per call, with what it returned and whether it raised.
function stages(byStage) {
  const rows = Object.entries(byStage || {}).flatMap(([stage, calls]) =>
    (Array.isArray(calls) ? calls : []).map((call) => ({ stage, call })));
  return table([
    { title: "hook", cell: (r) => h("span", { class: "mono" }, r.stage) },
    { title: "returned", cell: (r) => outputsText(r.call.outputs) },
    { title: "error", cell: (r) => (r.call.error ? h("span", { class: "bad-text" }, r.call.error) : "–") },
    { title: "call", cell: (r) => h("details", {}, h("summary", {}, "details"), pre(fmtJson(r.call))) },
  ], rows, { testid: "probe-stages", empty: "No output hook ran." });
}

function errorText(e) {
  if (typeof e === "string") return e;
  const where = e.where ? ` (at ${e.where})` : "";
  return e.stage ? `${e.stage}: ${e.error ?? oneLine(e, 1000)}${where}` : oneLine(e, 1000);
}

function messageCard(message) {
  if (!message) return null;
  return card("The message as the handler got it", kv([
    ["partition / offset", `${message.partition ?? "–"} / ${message.offset ?? "–"}`],
    ["key", message.key === null || message.key === undefined ? "–" : h("code", {}, String(message.key))],
    message.parse_error ? ["parse error", h("span", { class: "bad-text", testid: "probe-parse-error" }, String(message.parse_error))] : null,
    ["payload", pre(fmtJson(message.payload ?? message.value), "probe-payload")],
  ]));
}

function render(holder, report, as) {
  const errors = report.errors || [];
  replace(holder,
    notice(`Ran as ${as} in ${fmtMs(report.duration_ms)}: nothing was delivered and no offset was committed.`, "good", "probe-done"),
    errors.length ? card("Errors", h("ul", { class: "errors", testid: "probe-errors" }, errors.map((e) => h("li", {}, errorText(e))))) : null,
    h("div", { class: "columns" },
      card("Group", groupStats(report.group, "probe-group")),
      card("Arranged tasks", table([
        { title: "task", cell: (t) => h("span", { class: "mono" }, t.task_id ?? "") },
        { title: "args", cell: (t) => h("code", {}, argsText(t.args)) },
      ], report.arranged || [], { testid: "probe-arranged", empty: "arrange() returned no task." }))),
    card("Would deliver", payloads(report.would_deliver)),
    report.dead_letters?.length ? card("Would dead-letter", table([
      { title: "stage", cell: (d) => d.stage ?? "" },
      { title: "reason", cell: (d) => d.reason ?? "" },
      { title: "task", cell: (d) => h("span", { class: "mono" }, d.task_id ?? "") },
    ], report.dead_letters, { testid: "probe-dead-letters" })) : null,
    card("Tasks", h("p", { class: "muted" }, "Replacement tasks hang under the task they replaced."), taskTree(report.tasks, "probe-task-tree")),
    card("Hooks", stages(report.stages)),
    messageCard(report.message));
}

export default {
  title: "Message probe",
  nav: "Probe",
  mount(root, route, ctx) {
    const text = h("textarea", { testid: "probe-input", rows: 10, spellcheck: "false", placeholder: EXAMPLE });
    const file = h("input", {
      type: "file", testid: "probe-file", accept: ".json,.txt,application/json,text/plain",
      onchange: async () => { if (file.files[0]) text.value = await file.files[0].text(); },
    });
    const result = h("div", { testid: "probe-result" });
    const run = h("button", { type: "submit", testid: "probe-run" }, "Run probe");
    const form = h("form", {
      class: "probe-form", testid: "probe-form",
      onsubmit: async (e) => {
        e.preventDefault();
        const source = text.value.trim() || EXAMPLE;
        const { message, as } = messageFrom(source);
        run.disabled = true;
        replace(result, notice("Running the handler on the message…", "muted", "probe-running"));
        try {
          const report = await ctx.load(ctx.api.post("probe", { message }));
          render(result, report, as);
        } catch (err) {
          replace(result, notice(err.message, "bad", "probe-error"));
        } finally {
          run.disabled = false;
        }
      },
    },
    h("p", { class: "muted" }, "Paste a message as JSON — {\"value\": …} with optional \"key\", \"headers\", \"partition\" and \"offset\" — "
      + "or just its value, or upload a file. The worker's handler arranges it, the tasks run for real, the hooks run; "
      + "sinks and the commit are left out."),
    text,
    h("div", { class: "row" }, h("label", {}, "or upload ", file), h("span", { class: "spacer" }), run));
    root.append(card(null, form), result);
    return {};
  },
};
