// The JSON API behind every page. The bearer token is read once from the page's ?token= and kept
// in memory only; it goes out as an Authorization header (and as ?token= on the WebSocket, which
// cannot carry headers from a browser).

const token = new URLSearchParams(window.location.search).get("token") || "";

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

function apiUrl(path, params) {
  const url = new URL(`api/${path}`, document.baseURI);
  for (const [key, value] of Object.entries(params || {})) {
    if (value !== undefined && value !== null && value !== "") url.searchParams.set(key, String(value));
  }
  return url;
}

function headers(extra = {}) {
  return token ? { ...extra, Authorization: `Bearer ${token}` } : extra;
}

async function answer(response, what) {
  if (response.status === 401) {
    throw new ApiError(401, token
      ? "The debug token was refused: open this page with the worker's debug.token as ?token=…"
      : "This worker needs a debug token: open this page with ?token=<debug.token> in its address.");
  }
  const text = await response.text();
  let body;
  try { body = text ? JSON.parse(text) : {}; } catch { body = { error: text }; }
  if (!response.ok) {
    const reason = body && (body.error || body.message || body.detail);
    throw new ApiError(response.status, `${what} failed (HTTP ${response.status})${reason ? `: ${reason}` : ""}`);
  }
  return body;
}

export async function get(path, params) {
  let response;
  try {
    response = await fetch(apiUrl(path, params), { headers: headers(), cache: "no-store" });
  } catch (err) {
    throw new ApiError(0, `The worker does not answer (${err.message}); is it still running?`);
  }
  return answer(response, `GET /api/${path}`);
}

export async function post(path, body) {
  let response;
  try {
    response = await fetch(apiUrl(path), {
      method: "POST", headers: headers({ "Content-Type": "application/json" }), body: JSON.stringify(body),
    });
  } catch (err) {
    throw new ApiError(0, `The worker does not answer (${err.message}); is it still running?`);
  }
  return answer(response, `POST /api/${path}`);
}

// A download through fetch, so the token travels in the header and never in a link.
export async function download(path, filename) {
  const response = await fetch(apiUrl(path), { headers: headers() });
  if (!response.ok) await answer(response, `GET /api/${path}`);
  const blob = await response.blob();
  const link = document.createElement("a");
  link.href = URL.createObjectURL(blob);
  link.download = filename;
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(link.href), 10000);
}

export function wsUrl() {
  const url = apiUrl("ws", token ? { token } : {});
  url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
  return url.href;
}
