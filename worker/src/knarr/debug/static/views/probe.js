// Run one message through the worker's handler (arrange, the real subprocesses, the hooks) without
// delivering or committing anything, and show what would have been delivered and the group's trace.

import { h, replace, card, notice, pre, fmtJson, fmtMs, table, argsText, oneLine } from "../dom.js";
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

function stages(byStage) {
  const entries = Object.entries(byStage || {});
  if (!entries.length) return null;
  return card("Hooks", table([
    { title: "stage", cell: ([stage]) => h("span", { class: "mono" }, stage) },
    { title: "results", cell: ([, list]) => String(Array.isArray(list) ? list.length : 0), class: "num" },
    { title: "what they returned", cell: ([, list]) => h("details", {}, h("summary", {}, oneLine(list, 100)), pre(fmtJson(list))) },
  ], entries, { testid: "probe-stages" }));
}

function render(holder, report, as) {
  const errors = report.errors || [];
  replace(holder,
    notice(`Ran as ${as} in ${fmtMs(report.duration_ms)}: nothing was delivered and no offset was committed.`, "good", "probe-done"),
    errors.length ? card("Errors", h("ul", { class: "errors", testid: "probe-errors" },
      errors.map((e) => h("li", {}, typeof e === "string" ? e : oneLine(e, 1000))))) : null,
    h("div", { class: "columns" },
      card("Group", groupStats(report.group, "probe-group")),
      card("Arranged tasks", table([
        { title: "task", cell: (t) => h("span", { class: "mono" }, t.task_id ?? "") },
        { title: "args", cell: (t) => h("code", {}, argsText(t.args)) },
      ], report.arranged || [], { testid: "probe-arranged", empty: "arrange() returned no task." }))),
    card("Would deliver", payloads(report.would_deliver)),
    card("Tasks", h("p", { class: "muted" }, "Replacement tasks hang under the task they replaced."), taskTree(report.tasks, "probe-task-tree")),
    stages(report.stages));
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
