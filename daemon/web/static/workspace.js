// The workspace page: the overlay's files, a file's content, the diff of
// the changes and the push form, which sends the SHA-256 of exactly the
// diff bytes shown: the server pushes only if the workspace still makes
// that diff.
import { api, el, say, guard, render } from './app.js';
import { sha256 } from './sha256.js';

const id = document.body.dataset.conversation;
const base = `/conversations/${encodeURIComponent(id)}`;
let shown = ''; // the digest of the diff on screen
let diffText = ''; // and its text
let sideBySide = false;

// fence wraps text as a Markdown code block that text cannot close.
function fence(text, lang) {
  const runs = text.match(/`{3,}/g) || [];
  const n = Math.max(3, ...runs.map((r) => r.length + 1));
  const f = '`'.repeat(n);
  return `${f}${lang}\n${text}\n${f}\n`;
}

// code shows text highlighted as lang, or as typed where the server
// would not format it (over 64 KiB: web.MaxMarkdown).
function code(body, text, lang) {
  const f = fence(text, lang);
  if (new TextEncoder().encode(f).length > 64 * 1024) body.append(el('pre', { class: 'plain', tabindex: '0', text }));
  else render(body, f);
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
  code(body, new TextDecoder().decode(bytes), language(path));
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
  diffText = new TextDecoder().decode(bytes);
  showDiff();
  document.getElementById('diff-mode').hidden = false;
  if (form) { form.hidden = false; form.dataset.digest = shown; }
}

function showDiff() {
  const out = document.getElementById('diff');
  if (sideBySide) { out.replaceChildren(sbs(diffText)); return; }
  const body = el('div', { class: 'md diff' });
  out.replaceChildren(body);
  code(body, diffText, 'diff');
}

// sbs lays a unified diff out side by side: removed lines on the left,
// added on the right, paired in order; context on both.
function sbs(text) {
  const table = el('table', { class: 'sbs' }, el('caption', { class: 'sr', text: 'Changes, side by side' }));
  const body = el('tbody');
  table.append(el('thead', {}, el('tr', {}, el('th', { scope: 'col', text: 'Before' }), el('th', { scope: 'col', text: 'After' }))), body);
  let dels = [], adds = [];
  const flush = () => {
    for (let i = 0; i < Math.max(dels.length, adds.length); i++) {
      body.append(el('tr', {},
        el('td', { class: i < dels.length ? 'del' : 'none', text: dels[i] ?? '' }),
        el('td', { class: i < adds.length ? 'add' : 'none', text: adds[i] ?? '' })));
    }
    dels = []; adds = [];
  };
  let inHunk = false;
  for (const line of text.split('\n')) {
    if (line.startsWith('diff --git')) { flush(); inHunk = false; body.append(el('tr', {}, el('th', { colspan: 2, class: 'file', text: line.slice(11) }))); continue; }
    if (line.startsWith('@@')) { flush(); inHunk = true; body.append(el('tr', {}, el('td', { colspan: 2, class: 'hunk', text: line }))); continue; }
    if (!inHunk) continue;
    if (line.startsWith('-')) dels.push(line.slice(1));
    else if (line.startsWith('+')) adds.push(line.slice(1));
    else { flush(); if (line.startsWith(' ')) body.append(el('tr', {}, el('td', { class: 'ctx', text: line.slice(1) }), el('td', { class: 'ctx', text: line.slice(1) }))); }
  }
  flush();
  return table;
}

export function start() {
  guard(() => list(''));
  document.getElementById('load-diff').addEventListener('click', () => guard(diff));
  const mode = document.getElementById('diff-mode');
  mode.addEventListener('click', () => {
    sideBySide = !sideBySide;
    mode.textContent = sideBySide ? 'Unified' : 'Side by side';
    mode.setAttribute('aria-pressed', String(sideBySide));
    showDiff();
  });
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
