// Building the page from data without ever parsing data as HTML. Messages, arguments, stdout and
// config values are untrusted: every text goes in through text nodes, every attribute through
// setAttribute, every link through safeUrl. Nothing in this app assigns innerHTML.

export function h(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") el.className = value;
    else if (key === "testid") el.dataset.testid = value;
    else if (key === "dataset") for (const [k, v] of Object.entries(value)) el.dataset[k] = String(v);
    else if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else if (key === "href") el.setAttribute("href", safeUrl(value));
    else if (key === "value") el.value = value;
    else if (key === "checked") el.checked = Boolean(value);
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  append(el, children);
  return el;
}

export function append(el, children) {
  for (const child of [children].flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : String(child));
  }
  return el;
}

// In-app routes, relative paths and http(s) URLs only: a javascript: or data: URL from a config
// value or a peer's debug_url must not become a clickable link.
export function safeUrl(url) {
  const text = String(url ?? "");
  if (text.startsWith("#") || text.startsWith("api/") || text.startsWith("static/")) return text;
  try {
    const parsed = new URL(text, document.baseURI);
    if (parsed.protocol === "http:" || parsed.protocol === "https:") return parsed.href;
  } catch { /* not a URL: fall through */ }
  return "#";
}

export function externalLink(url, text, testid) {
  if (safeUrl(url) === "#") return h("span", { class: "muted", title: "not an http(s) URL: not linked", testid }, text ?? url);
  return h("a", { href: url, target: "_blank", rel: "noopener noreferrer", testid }, text ?? url);
}

// --- formatting --------------------------------------------------------------------------------

const pad = (n, width = 2) => String(n).padStart(width, "0");

export function fmtTime(ts) {
  if (ts === null || ts === undefined || ts === "") return "–";
  const d = new Date(Number(ts) * 1000);
  if (Number.isNaN(d.getTime())) return String(ts);
  return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
}

export function fmtDateTime(ts) {
  if (ts === null || ts === undefined || ts === "") return "–";
  const d = new Date(Number(ts) * 1000);
  return Number.isNaN(d.getTime()) ? String(ts) : d.toISOString().replace("T", " ").replace("Z", " UTC");
}

export function timeCell(ts) {
  return h("time", { title: fmtDateTime(ts) }, fmtTime(ts));
}

export function fmtMs(ms) {
  if (ms === null || ms === undefined || ms === "") return "–";
  const n = Number(ms);
  if (Number.isNaN(n)) return String(ms);
  if (n < 1) return `${n.toFixed(2)} ms`;
  if (n < 1000) return `${n.toFixed(n < 10 ? 1 : 0)} ms`;
  if (n < 60000) return `${(n / 1000).toFixed(2)} s`;
  return `${Math.floor(n / 60000)} min ${Math.round((n % 60000) / 1000)} s`;
}

export function fmtSeconds(s) {
  if (s === null || s === undefined) return "–";
  const n = Math.floor(Number(s));
  const days = Math.floor(n / 86400), hours = Math.floor((n % 86400) / 3600);
  const minutes = Math.floor((n % 3600) / 60), seconds = n % 60;
  if (days) return `${days} d ${hours} h`;
  if (hours) return `${hours} h ${minutes} min`;
  if (minutes) return `${minutes} min ${seconds} s`;
  return `${seconds} s`;
}

export function fmtNum(n, digits = 0) {
  if (n === null || n === undefined || n === "") return "–";
  const v = Number(n);
  return Number.isNaN(v) ? String(n) : v.toLocaleString("en", { maximumFractionDigits: digits });
}

export function fmtJson(value) {
  try { return JSON.stringify(value, null, 2); } catch { return String(value); }
}

// One line of a value (args, data) for a table cell; the full value is one click away.
export function oneLine(value, max = 160) {
  const text = typeof value === "string" ? value : JSON.stringify(value) ?? "";
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}

export function argsText(args) {
  if (!Array.isArray(args)) return args === undefined || args === null ? "" : oneLine(args, 400);
  return args.map((a) => (/^[\w@%+=:,./-]+$/.test(String(a)) ? String(a) : JSON.stringify(String(a)))).join(" ");
}

// --- small components --------------------------------------------------------------------------

export function table(columns, rows, { testid, empty = "Nothing yet.", rowProps } = {}) {
  const head = h("thead", {}, h("tr", {}, columns.map((c) => h("th", { class: c.class }, c.title))));
  const body = h("tbody");
  for (const row of rows) {
    body.append(h("tr", rowProps ? rowProps(row) : {}, columns.map((c) => h("td", { class: c.class }, c.cell(row)))));
  }
  const el = h("table", { class: "grid", testid }, head, body);
  if (!rows.length) body.append(h("tr", { class: "empty" }, h("td", { colspan: columns.length }, empty)));
  return el;
}

export function badge(text, kind = String(text)) {
  return h("span", { class: `badge badge-${kind.replace(/[^a-z_-]/gi, "")}` }, text);
}

export function card(title, ...body) {
  return h("section", { class: "card" }, title ? h("h2", {}, title) : null, body);
}

export function stat(label, value, testid, hint) {
  return h("div", { class: "stat", testid, title: hint }, h("div", { class: "stat-value" }, value),
    h("div", { class: "stat-label" }, label));
}

export function kv(pairs, testid) {
  return h("dl", { class: "kv", testid }, pairs.filter(Boolean).map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]));
}

export function pre(text, testid, cls = "") {
  return h("pre", { class: `out ${cls}`, testid }, text);
}

export function traceLink(partition, offset) {
  if (partition === null || partition === undefined || offset === null || offset === undefined) return "–";
  return h("a", { href: `#/trace/${Number(partition)}/${Number(offset)}`, class: "mono", testid: "trace-link" },
    `${partition}/${offset}`);
}

export function notice(text, cls = "muted", testid) {
  return h("p", { class: `notice ${cls}`, testid }, text);
}

export function field(row, name) {
  if (row && row[name] !== undefined && row[name] !== null) return row[name];
  return row && row.data ? row.data[name] : undefined;
}

// replaceChildren, with the same skipping of null/false children as h() (a DOM call would print "null").
export function replace(el, ...children) {
  el.replaceChildren();
  return append(el, children);
}
