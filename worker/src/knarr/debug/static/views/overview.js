// What the worker is doing now: partitions and their offsets, the executor pool, backpressure,
// throughput, the recorder, and the latest events as they arrive.

import { h, replace, card, stat, table, fmtNum, fmtMs, fmtSeconds, argsText, kv, notice } from "../dom.js";
import { eventsTable, newestFirst, throttle } from "./shared.js";

const REFRESH_MS = 2000;
const LATEST = 15;

function partitionsTable(partitions) {
  return table([
    { title: "partition", cell: (p) => h("a", { href: `#/events?partition=${Number(p.partition)}` }, String(p.partition)), class: "num" },
    { title: "committed", cell: (p) => fmtNum(p.committed), class: "num" },
    { title: "watermark", cell: (p) => h("span", { title: "the offset the worker may commit next; – when nothing waits" }, fmtNum(p.watermark)), class: "num" },
    { title: "high watermark", cell: (p) => fmtNum(p.high_watermark), class: "num" },
    { title: "lag", cell: (p) => h("span", { class: p.lag > 0 ? "warn-text" : "" }, fmtNum(p.lag)), class: "num" },
    { title: "queued", cell: (p) => fmtNum(p.queued), class: "num" },
    { title: "in flight", cell: (p) => fmtNum(p.in_flight), class: "num" },
    { title: "state", cell: (p) => (p.stall ? h("span", { class: "warn-text", testid: "partition-stall" }, String(p.stall)) : "ok") },
  ], partitions || [], {
    testid: "partitions-table", empty: "No partitions assigned.",
    rowProps: (p) => ({ testid: "partition-row", dataset: { partition: p.partition } }),
  });
}

function poolBar(pool) {
  const max = Math.max(1, Number(pool.max) || 1), used = Number(pool.in_use) || 0;
  const fill = h("div", { class: "bar-fill" });
  fill.style.width = `${Math.min(100, (100 * used) / max)}%`;
  return h("div", { class: "bar", title: `${used} of ${pool.max} executor slots in use` }, fill);
}

function slotsTable(pool) {
  const now = Date.now() / 1000;
  return table([
    { title: "slot", cell: (r) => String(r.slot ?? "–"), class: "num" },
    { title: "task", cell: (r) => h("span", { class: "mono" }, r.task_id ?? "") },
    { title: "partition", cell: (r) => String(r.partition ?? "–"), class: "num" },
    { title: "args", cell: (r) => h("code", {}, argsText(r.args)) },
    { title: "running for", cell: (r) => (r.started_at ? fmtMs((now - r.started_at) * 1000) : "–"), class: "num nowrap" },
  ], pool.running || [], {
    testid: "pool-table", empty: "All slots idle.",
    rowProps: (r) => ({ testid: "slot-row", dataset: { slot: r.slot ?? "" } }),
  });
}

function render(root, o, latest) {
  const pool = o.pool || {}, bp = o.backpressure || {}, tp = o.throughput || {}, rec = o.recorder || {};
  const lag = (o.partitions || []).reduce((sum, p) => sum + (Number(p.lag) || 0), 0);
  replace(root,
    h("div", { class: "stats", testid: "overview-stats" },
      stat("messages / s", fmtNum(tp.messages_per_second, 1), "stat-messages-per-second"),
      stat("tasks / s", fmtNum(tp.tasks_per_second, 1), "stat-tasks-per-second"),
      stat("slots in use", `${fmtNum(pool.in_use)} / ${fmtNum(pool.max)}`, "stat-pool",
        pool.waiting ? `${pool.waiting} tasks waiting for a slot` : "no task waiting for a slot"),
      stat("total lag", fmtNum(lag), "stat-lag", "sum over the assigned partitions"),
      stat("backpressure", bp.paused ? "paused" : "flowing", "stat-backpressure",
        bp.paused ? `paused partitions: ${(bp.partitions || []).join(", ")}` : "consuming"),
      stat("uptime", fmtSeconds(o.uptime_seconds), "stat-uptime")),
    h("div", { class: "columns" },
      card("Partitions", partitionsTable(o.partitions)),
      card("Executor pool", poolBar(pool), slotsTable(pool),
        h("p", { class: "muted small", testid: "pool-waiting" }, `${fmtNum(pool.waiting ?? 0)} task(s) waiting for a slot`))),
    h("div", { class: "columns" },
      card("Backpressure", bp.paused
        ? notice(`Paused: partitions ${(bp.partitions || []).join(", ")} wait for the pipeline to catch up.`, "warn", "backpressure-state")
        : notice("Flowing: no partition is paused.", "good", "backpressure-state"),
        kv([
          ["work: queued + in flight", `${fmtNum(bp.load)} / ${fmtNum(bp.high)}`],
          ["awaiting the sinks' confirmation", `${fmtNum(bp.delivering)} / ${fmtNum(bp.delivery_high)}`],
        ])),
      card("Flight recorder", kv([
        ["events recorded", fmtNum(rec.events)],
        ["dropped (buffer full)", h("span", { class: rec.dropped > 0 ? "warn-text" : "" }, fmtNum(rec.dropped))],
        ["database", h("span", { class: "mono" }, rec.db_path || "in memory")],
      ], "recorder-stats"))),
    card("Latest events", latest.el));
}

export default {
  title: "Overview",
  mount(root, route, ctx) {
    let latest = eventsTable(newestFirst(ctx.recent()).slice(0, LATEST), { testid: "overview-events", max: LATEST });
    let stopped = false;
    const refresh = async () => {
      try {
        const o = await ctx.load(ctx.api.get("overview"));
        if (stopped) return;
        ctx.setWorker(o);
        render(root, o, latest);
      } catch (err) {
        if (!root.children.length) root.append(notice(err.message, "bad", "overview-error"));
      }
    };
    const live = throttle(refresh, 1000);
    (async () => {
      // The page may open before any live event: start the list from the recorder.
      if (!ctx.recent().length) {
        try {
          const { events } = await ctx.api.get("events", { limit: LATEST });
          if (!stopped) latest = eventsTable(newestFirst(events || []).slice(0, LATEST), { testid: "overview-events", max: LATEST });
        } catch { /* the overview's own load reports the error */ }
      }
      await refresh();
    })();
    const timer = setInterval(refresh, REFRESH_MS);
    return {
      onEvent(event) { latest.prepend(event); live(); },
      unmount() { stopped = true; clearInterval(timer); live.cancel(); },
    };
  },
};
