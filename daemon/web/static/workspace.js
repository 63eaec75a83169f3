// The workspace page: the overlay's files, a file's content, the diff of
// the changes and the push form, which sends the SHA-256 of exactly the
// diff bytes shown: the server pushes only if the workspace still makes
// that diff.
import { api, el, say, guard, render } from './app.js';
import { sha256 } from './sha256.js';

const id = document.body.dataset.conversation;
const base = `/conversations/${encodeURIComponent(id)}`;
let shown = ''; // the digest of the diff on screen

// fence wraps text as a Markdown code block that text cannot close.
function fence(text, lang) {
  const runs = text.match(/`{3,}/g) || [];
  const n = Math.max(3, ...runs.map((r) => r.length + 1));
  const f = '`'.repeat(n);
  return `${f}${lang}\n${text}\n${f}\n`;
}

function language(name) {
  const m = /\.([A-Za-z0-9+#-]{1,10})$/.exec(name);
  return m ? m[1] : '';
}

async function list(path) {
  const r = await api(`${base}/workspace/files?path=${encodeURIComponent(path)}`);
  document.getElementById('path').textContent = '/' + path;
  const ul = document.getElementById('tree');
  ul.replaceChildren();
  if (path) {
    const up = path.split('/').slice(0, -1).join('/');
    const b = el('button', { type: 'button', class: 'link' }, '.. (up)');
    b.onclick = () => guard(() => list(up));
    ul.append(el('li', {}, b));
  }
  for (const e of r.data.entries || []) {
    const p = path ? `${path}/${e.name}` : e.name;
    const b = el('button', { type: 'button', class: 'link', 'data-path': p }, e.type === 'dir' ? e.name + '/' : e.name);
    b.onclick = () => guard(() => (e.type === 'dir' ? list(p) : show(p)));
    ul.append(el('li', { class: e.type }, b));
  }
}

async function show(path) {
  const r = await api(`${base}/workspace/files?path=${encodeURIComponent(path)}`, { raw: true });
  const view = document.getElementById('file');
  view.replaceChildren(el('h3', { class: 'filename', text: path }));
  const bytes = new Uint8Array(r.data || new ArrayBuffer(0));
  if (bytes.includes(0)) { view.append(el('p', { class: 'hint', text: `A binary file of ${bytes.length} bytes.` })); return; }
  const body = el('div', { class: 'md' });
  view.append(body);
  render(body, fence(new TextDecoder().decode(bytes), language(path)));
}

async function diff() {
  const res = await fetch(`/api/v1${base}/workspace/diff`, { credentials: 'same-origin' });
  if (!res.ok) {
    let msg = `${res.status}`;
    try { msg = (await res.json()).error.message; } catch { /* not JSON */ }
    throw new Error(msg);
  }
  const bytes = new Uint8Array(await res.arrayBuffer());
  shown = await sha256(bytes);
  const out = document.getElementById('diff');
  const form = document.getElementById('push');
  if (!bytes.length) {
    out.replaceChildren(el('p', { class: 'hint', text: 'No changes.' }));
    if (form) form.hidden = true;
    return;
  }
  const body = el('div', { class: 'md diff' });
  out.replaceChildren(body);
  render(body, fence(new TextDecoder().decode(bytes), 'diff'));
  if (form) { form.hidden = false; form.dataset.digest = shown; }
}

export function start() {
  guard(() => list(''));
  document.getElementById('load-diff').addEventListener('click', () => guard(diff));
  const form = document.getElementById('push');
  form?.addEventListener('submit', (e) => {
    e.preventDefault();
    guard(async () => {
      const r = await api(`${base}/workspace/push`, { method: 'POST', body: { branch: form.branch.value, message: form.message.value, diff_sha256: shown } });
      document.getElementById('push-result').textContent = `Pushed ${r.data.commit || ''} to ${r.data.branch || form.branch.value}.`;
      say('Pushed.');
    });
  });
}
