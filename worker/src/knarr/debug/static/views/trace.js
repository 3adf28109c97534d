// One message's story: when it was consumed, its group (every task with its arguments, exit code,
// duration, slot wait and output, replacements as children of the task they replaced), what was
// delivered for it, dead letters, and the commit that covered it.

import { h, replace, card, kv, notice, timeCell, fmtDateTime, table, traceLink, fmtNum } from "../dom.js";
import { taskTree, groupStats, deliveriesTable, deadLettersTable, throttle, eventsTable, newestFirst } from "./shared.js";

function openForm(ctx, partition, offset) {
  const p = h("input", { type: "number", min: 0, name: "partition", value: partition ?? "", testid: "trace-partition", class: "narrow", required: true });
  const o = h("input", { type: "number", min: 0, name: "offset", value: offset ?? "", testid: "trace-offset", class: "narrow", required: true });
  return h("form", {
    class: "filters", testid: "trace-form",
    onsubmit: (e) => { e.preventDefault(); ctx.navigate(`#/trace/${Number(p.value)}/${Number(o.value)}`); },
  }, h("label", {}, "partition", p), h("label", {}, "offset", o), h("button", { type: "submit", testid: "trace-open" }, "Open trace"));
}

async function recentMessages(root, ctx) {
  const holder = h("div", {}, notice("Loading the latest consumed messages…"));
  root.append(card("Latest messages", holder));
  try {
    const { events } = await ctx.load(ctx.api.get("events", { kind: "consumed", limit: 50 }));
    replace(holder, table([
      { title: "consumed", cell: (e) => timeCell(e.ts), class: "nowrap" },
      { title: "message", cell: (e) => traceLink(e.partition, e.offset) },
      { title: "worker", cell: (e) => e.worker ?? "", class: "muted" },
    ], events || [], { testid: "recent-messages", empty: "No message consumed yet." }));
  } catch (err) {
    replace(holder, notice(err.message, "bad"));
  }
}

function commitText(committed, offset) {
  if (!committed) return h("span", { class: "warn-text", testid: "trace-commit" }, "not committed yet");
  return h("span", { testid: "trace-commit" }, `offset ${fmtNum(committed.offset)} at `, timeCell(committed.ts),
    committed.offset > offset ? " (covers this message)" : "");
}

function render(holder, t) {
  const g = t.group || {};
  if (!t.consumed_at && !t.tasks?.length && !t.events?.length) {
    replace(holder, notice(`The recorder has nothing about message ${t.partition}/${t.offset}: not consumed yet, `
      + "recorded by another worker of the group (see Fleet), or past debug.retention_hours / retention_max_events.", "warn", "trace-missing"));
    return;
  }
  replace(holder,
    h("div", { class: "columns" },
      card(`Message ${t.partition}/${t.offset}`, kv([
        ["partition", String(t.partition)],
        ["offset", String(t.offset)],
        ["consumed", t.consumed_at ? h("span", { testid: "trace-consumed" }, fmtDateTime(t.consumed_at)) : "–"],
        ["group closed", g.closed_at ? h("span", { testid: "trace-closed" }, fmtDateTime(g.closed_at)) : h("span", { class: "warn-text", testid: "trace-closed" }, "still open")],
        ["committed", commitText(t.committed, t.offset)],
      ], "trace-summary"), h("p", {}, h("a", { href: `#/events?partition=${t.partition}&offset=${t.offset}` }, "all events of this message"))),
      card("Group", groupStats(g, "trace-group"))),
    card("Tasks", h("p", { class: "muted" }, "Replacement tasks hang under the task they replaced."), taskTree(t.tasks)),
    h("div", { class: "columns" },
      card("Deliveries", deliveriesTable(t.deliveries, "trace-deliveries")),
      card("Dead letters", deadLettersTable(t.dead_letters, "trace-dead-letters", "Nothing dead-lettered for this message."))),
    t.events?.length ? h("details", { class: "card" }, h("summary", {}, h("h2", {}, `Events of this message (${t.events.length})`)),
      eventsTable(newestFirst(t.events), { testid: "trace-events" }).el) : null);
}

export default {
  title: "Trace",
  mount(root, route, ctx) {
    const [partition, offset] = route.parts;
    root.append(openForm(ctx, partition, offset));
    if (partition === undefined || offset === undefined) {
      recentMessages(root, ctx);
      return {};
    }
    const holder = h("div", { testid: "trace" }, notice("Loading the trace…"));
    root.append(holder);
    let stopped = false;
    const load = async () => {
      try {
        const t = await ctx.load(ctx.api.get(`trace/${Number(partition)}/${Number(offset)}`));
        if (!stopped) render(holder, t);
      } catch (err) {
        if (!stopped) {
          replace(holder, notice(err.status === 404
            ? `No message ${partition}/${offset} in the recorder (not consumed yet, or past the retention).`
            : err.message, "bad", "trace-error"));
        }
      }
    };
    load();
    const live = throttle(load, 1000);
    return {
      // Tasks of the message may still be running: follow them while the page is open.
      onEvent(event) { if (event.partition === null || event.partition === undefined || String(event.partition) === partition) live(); },
      unmount() { stopped = true; live.cancel(); },
    };
  },
};
