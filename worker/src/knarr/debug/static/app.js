// The debug UI: a hash router over the views, the live WebSocket, and the header. Each view lives in
// views/<name>.js and exports {title, mount(root, route, ctx)} returning {onEvent?, unmount?}.

import * as api from "./api.js";
import { h, fmtSeconds } from "./dom.js";
import overview from "./views/overview.js";
import events from "./views/events.js";
import trace from "./views/trace.js";
import tasks from "./views/tasks.js";
import dlq from "./views/dlq.js";
import fleet from "./views/fleet.js";
import probe from "./views/probe.js";
import config from "./views/config.js";
import links from "./views/links.js";

const VIEWS = { overview, events, trace, tasks, dlq, fleet, probe, config, links };
const RECENT_MAX = 200;

const state = {
  current: null, // {name, view handle}
  recent: [], // the latest events pushed over the WebSocket, newest first
  socket: null,
  retryMs: 500,
  liveCount: 0,
  worker: {}, // what the header shows about the worker
};

function parseRoute() {
  const raw = window.location.hash.replace(/^#\/?/, "");
  const [path, query = ""] = raw.split("?");
  const decode = (part) => { try { return decodeURIComponent(part); } catch { return part; } };
  const [name, ...parts] = path.split("/").filter(Boolean).map(decode);
  return { name: VIEWS[name] ? name : "overview", parts, query: new URLSearchParams(query) };
}

function showError(err) {
  const banner = document.getElementById("error-banner");
  if (!err) {
    banner.hidden = true;
    banner.replaceChildren();
    return;
  }
  banner.hidden = false;
  banner.dataset.status = String(err.status ?? "");
  banner.replaceChildren(h("strong", {}, err.status === 401 ? "Not authorised. " : "Error. "), err.message || String(err));
}

const ctx = {
  api,
  recent: () => state.recent,
  navigate(hash) { window.location.hash = hash; },
  // Runs a load and reports its failure in the banner; a success clears an earlier failure.
  async load(promise) {
    try {
      const value = await promise;
      showError(null);
      return value;
    } catch (err) {
      showError(err);
      throw err;
    }
  },
  showError,
  // The header's line about the worker: the overview and the WebSocket's hello each know part of it.
  setWorker(info) {
    if (!info) return;
    for (const key of ["worker", "consumer_group", "cluster", "topic"]) if (info[key]) state.worker[key] = info[key];
    const w = state.worker;
    const el = document.getElementById("worker-name");
    el.textContent = [w.worker, w.topic && `topic ${w.topic}`, w.consumer_group && `group ${w.consumer_group}`,
      w.cluster && `cluster ${w.cluster}`].filter(Boolean).join(" · ");
    if (info.uptime_seconds !== undefined) el.title = `up ${fmtSeconds(info.uptime_seconds)}`;
    if (w.worker) document.title = `knarr debug · ${w.worker}`;
  },
};

function render() {
  const route = parseRoute();
  if (state.current?.handle?.unmount) state.current.handle.unmount();
  for (const link of document.querySelectorAll("#nav a")) {
    link.classList.toggle("active", link.dataset.view === route.name);
  }
  const root = document.getElementById("view");
  root.replaceChildren();
  root.dataset.view = route.name;
  const view = VIEWS[route.name];
  root.append(h("h1", { testid: "view-title" }, view.title));
  const body = h("div", { testid: `view-${route.name}` });
  root.append(body);
  state.current = { name: route.name, handle: view.mount(body, route, ctx) || {} };
}

// --- live events ---------------------------------------------------------------------------------

function setLive(status, detail) {
  const el = document.getElementById("ws-status");
  el.dataset.state = status;
  el.textContent = { live: "live", connecting: "connecting…", offline: "offline" }[status];
  el.title = detail || "";
}

function connect() {
  setLive("connecting");
  let socket;
  try {
    socket = new WebSocket(api.wsUrl());
  } catch (err) {
    setLive("offline", err.message);
    return;
  }
  state.socket = socket;
  socket.addEventListener("open", () => { state.retryMs = 500; setLive("live", "events arrive as they are recorded"); });
  socket.addEventListener("message", (message) => {
    let event;
    try { event = JSON.parse(message.data); } catch { return; }
    if (event.type === "hello") {
      ctx.setWorker(event);
      if (event.ws_min_duration_ms) {
        setLive("live", `events arrive as they are recorded (those shorter than ${event.ws_min_duration_ms} ms are not pushed: debug.ws_min_duration_ms)`);
      }
      return;
    }
    if (event.type && !event.kind) return;
    state.recent.unshift(event);
    if (state.recent.length > RECENT_MAX) state.recent.length = RECENT_MAX;
    state.liveCount += 1;
    document.getElementById("live-count").textContent = `${state.liveCount} live`;
    state.current?.handle?.onEvent?.(event);
  });
  socket.addEventListener("close", () => {
    setLive("offline", "reconnecting");
    state.socket = null;
    setTimeout(connect, state.retryMs);
    state.retryMs = Math.min(state.retryMs * 2, 10000);
  });
}

function buildNav() {
  const nav = document.getElementById("nav");
  for (const [name, view] of Object.entries(VIEWS)) {
    nav.append(h("a", { href: `#/${name}`, testid: `nav-${name}`, dataset: { view: name } }, view.nav || view.title));
  }
}

document.getElementById("download-db").addEventListener("click", async () => {
  try {
    await api.download("db", "knarr-flight-recorder.sqlite");
  } catch (err) {
    showError(err);
  }
});

buildNav();
window.addEventListener("hashchange", render);
render();
connect();
// The header names the worker, its topic and group on every view, not only after the overview loaded.
api.get("overview").then((o) => ctx.setWorker(o), () => { /* the view's own load reports the error */ });
