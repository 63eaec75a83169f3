// The admin pages: users, repositories, MCP servers, the sandbox doctor,
// the system prompt, the audit log.
import { api, el, say, guard, when } from './app.js';

const row = (...cells) => el('tr', {}, ...cells.map((c) => (c instanceof Node ? el('td', {}, c) : el('td', { text: c ?? '' }))));

async function users() {
  const tbody = document.querySelector('#users tbody');
  const load = async () => {
    const r = await api('/admin/users');
    tbody.replaceChildren();
    for (const u of r.data.users || []) {
      const acts = el('div', { class: 'row' });
      const toggle = el('button', { type: 'button' }, u.disabled ? 'Enable' : 'Disable');
      toggle.onclick = () => guard(async () => { await patch(u.id, { disabled: !u.disabled }); await load(); });
      acts.append(toggle);
      if (u.source !== 'ldap') {
        const pw = el('input', { type: 'password', autocomplete: 'new-password', 'aria-label': `New password for ${u.name}` });
        const reset = el('button', { type: 'button' }, 'Reset password');
        reset.onclick = () => guard(async () => { await patch(u.id, { password: pw.value }); pw.value = ''; say('Password reset.'); });
        acts.append(pw, reset);
      }
      tbody.append(row(u.name, u.role, u.disabled ? 'disabled' : 'active', acts));
    }
  };
  const patch = async (id, body) => {
    const r = await api('/admin/users/' + encodeURIComponent(id), { method: 'PATCH', body, allow: [404, 405] });
    if (r.status === 404 || r.status === 405) throw new Error('Changing users is not enabled on this server.');
  };
  document.getElementById('user-form').addEventListener('submit', (e) => {
    e.preventDefault();
    const f = e.target;
    guard(async () => {
      await api('/admin/users', { method: 'POST', body: { name: f.elements.name.value, password: f.password.value, admin: f.admin.checked } });
      f.reset();
      say('User added.');
      await load();
    });
  });
  await load();
}

async function watchJob(id, bar, label) {
  for (;;) {
    const j = (await api('/jobs/' + encodeURIComponent(id))).data;
    const p = j.progress;
    if (p && p.total) { bar.max = p.total; bar.value = p.done; label.textContent = `${p.done}/${p.total} ${p.unit || ''}`; }
    if (j.status === 'succeeded' || j.status === 'failed') {
      label.textContent = j.status + (j.last_error ? ': ' + j.last_error : '');
      return;
    }
    await new Promise((res) => setTimeout(res, 1000));
  }
}

async function repositories() {
  const tbody = document.querySelector('#repos tbody');
  const form = document.getElementById('repo-form');
  const load = async () => {
    const r = await api('/repositories', { allow: [404, 503] });
    if (r.status !== 200) { document.getElementById('repos-off').hidden = false; form.hidden = true; return; }
    tbody.replaceChildren();
    for (const x of r.data.repositories || []) {
      const bar = el('progress', { max: 1, value: 0, 'aria-label': `Sync progress of ${x.name}` });
      const label = el('span', { class: 'hint', text: x.synced ? 'synced ' + when(x.synced) : 'never synced' });
      const sync = el('button', { type: 'button' }, 'Sync');
      sync.onclick = () => guard(async () => {
        const j = await api(`/repositories/${encodeURIComponent(x.id)}/sync`, { method: 'POST' });
        await watchJob(j.data.job.id, bar, label);
        await load();
      });
      const access = el('button', { type: 'button', class: 'access-open', 'aria-expanded': 'false' }, 'Access');
      const editorRow = el('tr', { hidden: '' });
      access.onclick = () => guard(async () => {
        if (!editorRow.hidden) { editorRow.hidden = true; access.setAttribute('aria-expanded', 'false'); return; }
        editorRow.replaceChildren(el('td', { colspan: '5' }, await accessEditor(x)));
        editorRow.hidden = false;
        access.setAttribute('aria-expanded', 'true');
      });
      tbody.append(row(x.name, x.branch, (x.head || '').slice(0, 12), el('div', { class: 'row' }, sync, bar, label), access), editorRow);
    }
  };
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    guard(async () => {
      await api('/repositories', { method: 'POST', body: { name: form.elements.name.value, url: form.url.value, branch: form.branch.value } });
      form.reset();
      say('Repository added; sync it to use it.');
      await load();
    });
  });
  await load();
}

// accessEditor edits repository x's access entries: who (a user, a
// group, or all signed-in users) may read, push or administer it.
async function accessEditor(x) {
  const path = `/repositories/${encodeURIComponent(x.id)}/access`;
  const list = el('div', { class: 'access-entries' });
  const option = (v, cur) => { const o = el('option', { value: v }, v); if (v === cur) o.selected = true; return o; };
  const entry = (e) => {
    const kind = el('select', { 'aria-label': 'Who' }, ...['user', 'group', 'all'].map((v) => option(v, e.kind)));
    const name = el('input', { value: e.name || '', 'aria-label': 'User or group name', placeholder: 'name' });
    const level = el('select', { 'aria-label': 'Level' }, ...['read', 'push', 'admin'].map((v) => option(v, e.level)));
    const remove = el('button', { type: 'button' }, 'Remove');
    const line = el('div', { class: 'row' }, kind, name, level, remove);
    const sync = () => { name.hidden = kind.value === 'all'; };
    kind.onchange = sync;
    sync();
    remove.onclick = () => line.remove();
    line.entry = () => (kind.value === 'all' ? { kind: 'all', level: level.value } : { kind: kind.value, name: name.value.trim(), level: level.value });
    return line;
  };
  const show = (entries) => list.replaceChildren(...(entries || []).map(entry));
  show((await api(path)).data.entries);
  const add = el('button', { type: 'button', class: 'access-add' }, 'Add entry');
  add.onclick = () => list.append(entry({ kind: 'group', level: 'read' }));
  const save = el('button', { type: 'button', class: 'access-save' }, 'Save access');
  save.onclick = () => guard(async () => {
    const entries = [...list.children].map((l) => l.entry());
    show((await api(path, { method: 'PUT', body: { entries } })).data.entries);
    say(`Access to ${x.name} saved.`);
  });
  return el('div', { class: 'card' }, el('p', { class: 'hint', text: 'read: see, search, start conversations; push: push to unprotected branches; admin: sync and access. No entry: administrators only.' }), list, el('div', { class: 'row' }, add, save));
}

// What an MCP server's process has, as the server reports it (the
// values its sandbox is built from).
const mcpNetwork = {
  none: 'Network: none',
  egress_allowlist: 'Network: only its egress allow-list, through the egress proxy',
  host: "Network: the host's, its 127.0.0.1 services too",
};
const mcpFiles = {
  sandbox: 'Files: its sandbox only (/usr, a curated /etc, its command and read_only paths, an empty home)',
  service_user: "Files: all of the service user's (its ~/.ssh, the instance's database and keys)",
};

function mcpConfinement(s) {
  return el('ul', { class: 'mcp-list' },
    s.sandboxed ? el('li', { text: 'Sandboxed' }) : el('li', { class: 'warn-text', text: 'NOT sandboxed (mode: off): runs unconfined as the service user' }),
    el('li', { text: mcpNetwork[s.network] || 'Network: ' + s.network }),
    el('li', { text: mcpFiles[s.files] || 'Files: ' + s.files }));
}

// mcpTools lists every tool, those the model is not offered marked so
// in words, with why.
function mcpTools(s) {
  const ul = el('ul', { class: 'mcp-list' });
  for (const t of s.tools || []) {
    ul.append(t.offered
      ? el('li', {}, el('code', { text: t.name }))
      : el('li', { class: 'not-offered' }, el('code', { text: t.name }), ' ', el('strong', { class: 'warn-text', text: 'not offered:' }), ' ' + (t.reason || '')));
  }
  return ul;
}

async function mcp() {
  const r = await api('/admin/mcp');
  const tbody = document.querySelector('#mcp tbody');
  const servers = r.data.servers || [];
  document.getElementById('mcp-off').hidden = servers.length > 0;
  for (const s of servers) tbody.append(row(s.name, s.state, mcpConfinement(s), mcpTools(s), s.last_error || ''));
}

async function doctor() {
  const r = await api('/admin/doctor');
  const v = document.getElementById('verdict');
  v.textContent = r.data.ready ? 'Ready: every check passes.' : 'Not ready: see the failing checks below.';
  v.classList.add(r.data.ready ? 'ok' : 'bad');
  const tbody = document.querySelector('#checks tbody');
  for (const c of r.data.checks || []) tbody.append(row(c.name, c.ok ? 'ok' : 'FAILED', c.detail || '', c.remedy || ''));
  const ul = document.getElementById('warnings');
  for (const w of r.data.warnings || []) ul.append(el('li', { class: 'notice', text: w }));
}

const promptSources = {
  'built-in': 'It is the built-in template: neither llm.system_prompt nor llm.system_prompt_file is set.',
  'llm.system_prompt': 'Its template is llm.system_prompt in config.yaml.',
  'llm.system_prompt_file': 'Its template is the file llm.system_prompt_file names.',
};

async function sysprompt() {
  const r = await api('/admin/system-prompt');
  const d = r.data;
  document.getElementById('prompt-source').textContent = (promptSources[d.source] || d.source) + ' A model profile may have its own.';
  const ex = d.example || {};
  const rules = ex.auto_approved || [];
  document.getElementById('prompt-example').textContent = 'For an example conversation on ' + ex.repository + ' at ' + ex.commit +
    ', with the server\'s tools and ' + (rules.length ? 'your approval rules (' + rules.join('; ') + ')' : 'no approval rules') + '.';
  document.getElementById('prompt-rendered').textContent = d.rendered;
  document.getElementById('prompt-template').textContent = d.template;
}


// auditKinds are the kinds the filter suggests (daemon/audit's); any
// other can be typed.
const auditKinds = ['login', 'login_rate_limited', 'approval', 'approval_rule', 'sandbox_launch', 'browser_launch',
  'secret_create', 'secret_use', 'secret_delete', 'model_profile_put', 'model_profile_delete', 'repository_sync',
  'push', 'attachment', 'workspace_discard', 'admin', 'config'];

// auditData shows a record's data: short as it is, long in a disclosure.
function auditData(d) {
  const text = JSON.stringify(d ?? {});
  if (text.length <= 160) return el('code', { text });
  return el('details', {}, el('summary', {}, el('code', { text: text.slice(0, 100) + '…' })),
    el('pre', { class: 'plain', tabindex: '0', text: JSON.stringify(d, null, 2) }));
}

async function auditLog() {
  document.getElementById('audit-kinds').append(...auditKinds.map((k) => el('option', { value: k })));
  const names = new Map();
  const ur = await api('/admin/users');
  for (const u of ur.data.users || []) names.set(u.id, u.name);
  const verdict = document.getElementById('audit-verdict');
  const verify = async (head) => {
    verdict.className = 'verdict';
    verdict.textContent = 'Checking the chain…';
    const r = await api('/admin/audit/verify' + (head ? '?head=' + encodeURIComponent(head) : ''), { allow: [400] });
    if (r.status !== 200) { verdict.textContent = r.data?.error?.message || `${r.status}`; verdict.classList.add('bad'); return; }
    const v = r.data;
    const against = head ? `, and it reaches the head ${head}` : '';
    verdict.textContent = v.intact
      ? `Intact: ${v.records} ${v.records === 1 ? 'record' : 'records'} checked${against}.${v.head ? ' Newest: ' + v.head : ''}`
      : `Broken${v.broken_at ? ' at record ' + v.broken_at : ''}: ${v.problem} (${v.records} records before it check out).`;
    verdict.classList.add(v.intact ? 'ok' : 'bad');
  };
  document.getElementById('verify-form').addEventListener('submit', (e) => {
    e.preventDefault();
    guard(() => verify(e.target.elements.head.value.trim()));
  });
  const tbody = document.querySelector('#audit tbody');
  const more = document.getElementById('audit-more');
  const filter = document.getElementById('audit-filter');
  let next = 0;
  const load = async (after) => {
    const params = new URLSearchParams({ limit: '100' });
    for (const k of ['kind', 'user']) if (filter.elements[k].value.trim()) params.set(k, filter.elements[k].value.trim());
    const since = filter.elements.since.value;
    if (since) params.set('since', new Date(since).toISOString());
    if (after) params.set('after', String(after));
    const r = await api('/admin/audit?' + params, { allow: [400] });
    if (r.status !== 200) { say(r.data?.error?.message || `${r.status}`, true); return; }
    if (!after) tbody.replaceChildren();
    for (const x of r.data.records || []) {
      tbody.append(row(String(x.seq), when(x.time), x.kind, names.get(x.user) || x.user || '', x.source || '', auditData(x.data)));
    }
    next = r.data.next || 0;
    more.hidden = !next;
    document.getElementById('audit-empty').hidden = tbody.children.length > 0;
  };
  filter.addEventListener('submit', (e) => { e.preventDefault(); guard(() => load(0)); });
  more.addEventListener('click', () => guard(() => load(next)));
  await Promise.all([verify(''), load(0)]);
}

export function start(page) {
  guard({ users, repositories, mcp, doctor, sysprompt, audit: auditLog }[page]);
}
