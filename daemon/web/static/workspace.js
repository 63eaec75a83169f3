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

// The file tree: a directory's entries are fetched when it is first
// opened, and it then opens and closes in place. Entries the
// workspace's ignore rules ignore (the diff and the push leave them
// out) say so.
function treeItem(dir, e) {
  const p = dir ? `${dir}/${e.name}` : e.name;
  const b = el('button', { type: 'button', class: 'link', 'data-path': p }, e.type === 'dir' ? e.name + '/' : e.name);
  const li = el('li', { class: e.type + (e.ignored ? ' ignored' : '') }, b);
  if (e.ignored) li.append(' ', el('span', { class: 'tag', text: 'ignored' }));
  if (e.type !== 'dir') {
    b.onclick = () => guard(async () => {
      await show(p);
      document.querySelectorAll('#tree button[aria-current]').forEach((x) => x.removeAttribute('aria-current'));
      b.setAttribute('aria-current', 'true');
    });
    return li;
  }
  b.setAttribute('aria-expanded', 'false');
  let sub = null;
  b.onclick = () => guard(async () => {
    const open = b.getAttribute('aria-expanded') !== 'true';
    if (open && !sub) {
      sub = el('ul', { class: 'tree' });
      await fill(sub, p, '');
      li.append(sub);
    }
    b.setAttribute('aria-expanded', String(open));
    sub.hidden = !open;
  });
  return li;
}

// fill appends a page of dir's entries to ul, and a button for the next.
async function fill(ul, dir, cursor) {
  const q = `path=${encodeURIComponent(dir)}` + (cursor ? `&cursor=${encodeURIComponent(cursor)}` : '');
  const r = await api(`${base}/workspace/files?${q}`);
  if (r.data.ignore_error) ul.append(el('li', { class: 'hint', text: r.data.ignore_error }));
  for (const e of r.data.entries || []) ul.append(treeItem(dir, e));
  if (r.data.next_cursor) {
    const more = el('button', { type: 'button', class: 'link' }, 'More entries');
    const li = el('li', {}, more);
    more.onclick = () => guard(async () => { await fill(ul, dir, r.data.next_cursor); li.remove(); });
    ul.append(li);
  }
  if (!cursor && !(r.data.entries || []).length) ul.append(el('li', { class: 'hint', text: 'Empty.' }));
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

// diffParts splits a git diff into its files: each part's text from its
// "diff --git" line on, the path it changes and its added and removed
// lines; the patch's "#" notes before the first file are a part
// without a path.
function diffParts(text) {
  const parts = [];
  let cur = null;
  for (const line of text.replace(/\n$/, '').split('\n')) {
    if (line.startsWith('diff --git ') || !cur) {
      cur = { lines: [], path: '', file: line.startsWith('diff --git '), adds: 0, dels: 0, hunk: false };
      parts.push(cur);
      const m = /^diff --git a\/(.*) b\/(.*)$/.exec(line);
      if (cur.file) cur.path = m ? m[2] : line.slice(11);
    }
    cur.lines.push(line);
    if (line.startsWith('@@')) cur.hunk = true;
    else if (!cur.hunk) {
      const m = /^(?:\+\+\+ "?b|--- "?a)\/(.*?)"?$/.exec(line);
      if (m && (line.startsWith('+') || !cur.named)) { cur.path = m[1]; cur.named = true; }
    } else if (line.startsWith('+')) cur.adds++;
    else if (line.startsWith('-')) cur.dels++;
  }
  return parts.map((p) => ({ ...p, text: p.lines.join('\n') + '\n' }));
}

// showDiff shows the diff file by file, each in a disclosure that shows
// its changes when first opened (the first ones are open).
function showDiff() {
  const out = document.getElementById('diff');
  out.replaceChildren();
  const parts = diffParts(diffText);
  parts.forEach((p, i) => {
    if (!p.file) { out.append(el('pre', { class: 'plain notes', tabindex: '0', text: p.text })); return; }
    const body = el('div', { class: 'md diff' });
    const d = el('details', { class: 'diff-file', open: i < 30 },
      el('summary', {}, el('span', { class: 'filename', text: p.path }), ' ',
        el('span', { class: 'stat add-n', text: `+${p.adds}` }), ' ',
        el('span', { class: 'stat del-n', text: `\u2212${p.dels}` }),
        el('span', { class: 'sr', text: ` (${p.adds} added, ${p.dels} removed lines)` })),
      body);
    let shownAs = null;
    const fillBody = () => {
      if (!d.open || shownAs === sideBySide) return;
      shownAs = sideBySide;
      body.replaceChildren();
      if (sideBySide) body.append(sbs(p.text, p.path));
      else code(body, p.text, 'diff');
    };
    d.addEventListener('toggle', fillBody);
    out.append(d);
    fillBody();
  });
  const all = document.getElementById('diff-collapse');
  all.hidden = parts.filter((p) => p.file).length < 2;
  all.textContent = parts.some((p, i) => p.file && i < 30) ? 'Collapse all files' : 'Expand all files';
}

// sbs lays a unified diff out side by side: removed lines on the left,
// added on the right, paired in order; context on both.
function sbs(text, path) {
  const table = el('table', { class: 'sbs' }, el('caption', { class: 'sr', text: `Changes to ${path}, side by side` }));
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
    if (line.startsWith('diff --git')) { flush(); inHunk = false; continue; }
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
  guard(() => fill(document.getElementById('tree'), '', ''));
  document.getElementById('diff-collapse').addEventListener('click', () => {
    const ds = [...document.querySelectorAll('#diff details.diff-file')];
    const open = !ds.some((d) => d.open);
    ds.forEach((d) => { d.open = open; });
    document.getElementById('diff-collapse').textContent = open ? 'Collapse all files' : 'Expand all files';
  });
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
