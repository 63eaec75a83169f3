// Codumentor's pages: shared helpers and the per-page entry point.
// Everything a server, a model or a user wrote is inserted as text
// (textContent); HTML comes only from POST /api/v1/render/markdown,
// which the server sanitizes.

const csrf = document.querySelector('meta[name="csrf-token"]')?.content || '';

// api calls the JSON API with the session cookie (and, for a change, the
// CSRF token). It returns {status, data}; data is parsed JSON or null.
export async function api(path, opts = {}) {
  const headers = { 'X-CSRF-Token': csrf, ...(opts.headers || {}) };
  let body = opts.body;
  if (body !== undefined && !(body instanceof FormData) && typeof body !== 'string') {
    body = JSON.stringify(body);
    headers['Content-Type'] = 'application/json';
  }
  const res = await fetch('/api/v1' + path, { method: opts.method || 'GET', headers, body, credentials: 'same-origin' });
  if (res.status === 401 && !opts.allow401) {
    location.assign('/login?next=' + encodeURIComponent(location.pathname));
    throw new Error('signed out');
  }
  let data = null;
  const type = res.headers.get('Content-Type') || '';
  if (type.startsWith('application/json')) data = await res.json();
  else if (opts.raw) data = await res.arrayBuffer();
  if (!res.ok && !opts.allow?.includes(res.status)) {
    throw new Error(data?.error?.message || `${res.status} ${res.statusText}`);
  }
  return { status: res.status, data, headers: res.headers };
}

// el builds an element: attributes (never on*), then children (strings
// become text nodes).
export function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === false || v == null) continue;
    if (k === 'text') e.textContent = v;
    else e.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children) if (c != null) e.append(c);
  return e;
}

// say shows a short message in the page's live region.
export function say(msg, isError) {
  const s = document.getElementById('status');
  s.textContent = msg;
  s.classList.toggle('error', !!isError);
}

// guard runs f, showing its failure.
export async function guard(f) {
  try { return await f(); } catch (e) { if (e.message !== 'signed out') say(e.message, true); }
}

// Markdown rendering, batched: render(el, text) shows text at once and
// replaces it with the server's rendering when that arrives. A batch
// holds at most 256 KiB of text (the server formats a request's texts
// for a second, then returns the rest as typed).
let queue = [];
let timer = 0;
export function render(target, text) {
  target.textContent = text;
  queue.push([target, text]);
  if (!timer) timer = setTimeout(flush, 30);
}
async function flush() {
  timer = 0;
  let n = 0;
  for (let bytes = 0; n < queue.length && n < 500 && (n === 0 || bytes + queue[n][1].length <= 256 * 1024); n++) bytes += queue[n][1].length;
  const batch = queue.splice(0, n);
  if (!batch.length) return;
  const r = await guard(() => api('/render/markdown', { method: 'POST', body: { texts: batch.map((b) => b[1]) } }));
  if (r) batch.forEach(([t], i) => { t.innerHTML = r.data.html[i]; });
  if (queue.length) timer = setTimeout(flush, 0);
}

export function when(t) {
  if (!t) return '';
  const d = new Date(t);
  return isNaN(d) ? '' : d.toLocaleString();
}

const page = document.body.dataset.page;
const modules = {
  conversation: './conversation.js', workspace: './workspace.js',
  conversations: './pages.js', secrets: './pages.js', profiles: './pages.js', search: './pages.js', usage: './pages.js',
  users: './admin.js', repositories: './admin.js', mcp: './admin.js', doctor: './admin.js', sysprompt: './admin.js', audit: './admin.js',
};
// data-ready marks a page whose handlers are attached (tests wait for it).
const ready = () => { document.body.dataset.ready = '1'; };
if (modules[page]) import(modules[page]).then((m) => { m.start(page); ready(); }).catch((e) => say(e.message, true));
else ready();
