// The conversations list, secrets, model profiles, code search and usage
// pages.
import { api, el, say, guard, when } from './app.js';

// confirmButton is a button that asks once more in place (no dialog).
function confirmButton(label, action) {
  const b = el('button', { type: 'button', class: 'danger' }, label);
  let armed = false;
  b.onclick = () => {
    if (!armed) { armed = true; b.textContent = 'Confirm: ' + label.toLowerCase(); return; }
    guard(action);
  };
  return b;
}

async function conversations() {
  const list = document.getElementById('conversations');
  const search = document.getElementById('search');
  const r = await api('/conversations?limit=200');
  const cs = (r.data.conversations || []).sort((a, b) => (a.updated < b.updated ? 1 : -1));
  document.getElementById('empty').hidden = cs.length > 0;
  const items = [];
  for (const c of cs) {
    const badge = el('span', { class: 'badge', hidden: true });
    const li = el('li', { 'data-title': (c.title || '').toLowerCase() },
      el('a', { href: '/c/' + encodeURIComponent(c.id) }, c.title || 'Untitled'), ' ',
      el('span', { class: 'hint', text: when(c.updated) }), ' ', badge, ' ',
      confirmButton('Delete', async () => { await api('/conversations/' + encodeURIComponent(c.id), { method: 'DELETE' }); li.remove(); say('Deleted.'); }));
    list.append(li);
    items.push([c, badge]);
  }
  search.addEventListener('input', () => {
    const q = search.value.trim().toLowerCase();
    for (const li of list.children) li.hidden = !!q && !li.dataset.title.includes(q);
  });
  // Pending approvals, for conversations with a running turn.
  for (const [c, badge] of items.filter(([c]) => c.active_turn).slice(0, 50)) {
    guard(async () => {
      const a = await api(`/conversations/${encodeURIComponent(c.id)}/approvals?status=pending`);
      const n = (a.data.approvals || []).length;
      if (n) { badge.hidden = false; badge.textContent = n === 1 ? '1 approval pending' : `${n} approvals pending`; }
    });
  }
}

async function newConversation() {
  const repo = document.getElementById('new-repo');
  const profile = document.getElementById('new-profile');
  // The handler first: the form must never submit by itself.
  document.getElementById('new-conv').addEventListener('submit', (e) => {
    e.preventDefault();
    guard(async () => {
      const body = { title: document.getElementById('new-title').value };
      if (repo.value) body.repository = repo.value;
      if (profile.value) body.model_profile = profile.value;
      const mode = document.getElementById('new-mode')?.value;
      if (mode) { body.mode = mode; delete body.repository; }
      const c = await api('/conversations', { method: 'POST', body });
      location.assign('/c/' + encodeURIComponent(c.data.id));
    });
  });
  const r = await api('/repositories', { allow: [403, 404, 503] });
  for (const x of r.data?.repositories || []) repo.append(el('option', { value: x.id }, x.name));
  const p = await api('/model-profiles', { allow: [404, 405, 503] });
  for (const x of p.data?.model_profiles || []) profile.append(el('option', { value: x.name }, `${x.name} (${x.model})`));
  if (p.status !== 200) { profile.hidden = true; document.querySelector('label[for="new-profile"]').hidden = true; }
}

async function secrets() {
  const ul = document.getElementById('secrets');
  const load = async () => {
    const r = await api('/secrets');
    ul.replaceChildren();
    for (const s of r.data.secrets || []) {
      const li = el('li', {}, el('code', { text: s.name }), ' ', el('span', { class: 'hint', text: 'updated ' + when(s.updated) }), ' ',
        confirmButton('Delete', async () => { await api('/secrets/' + encodeURIComponent(s.name), { method: 'DELETE' }); say('Deleted.'); load(); }));
      ul.append(li);
    }
    if (!ul.children.length) ul.append(el('li', { class: 'hint', text: 'No secrets yet.' }));
  };
  document.getElementById('secret-form').addEventListener('submit', (e) => {
    e.preventDefault();
    const f = e.target;
    guard(async () => {
      await api('/secrets/' + encodeURIComponent(f.elements.name.value), { method: 'PUT', body: { value: f.elements.value.value } });
      f.reset();
      say('Saved.');
      await load();
    });
  });
  await load();
}

async function profiles() {
  const ul = document.getElementById('profiles');
  const form = document.getElementById('profile-form');
  const load = async () => {
    const r = await api('/model-profiles', { allow: [404, 405, 503] });
    if (r.status !== 200) {
      document.getElementById('profiles-off').hidden = false;
      form.hidden = true;
      return;
    }
    const sel = form.endpoint;
    const endpoints = r.data.allowed_endpoints || [];
    sel.replaceChildren(...endpoints.map((u) => el('option', { value: u }, u)));
    // Without an endpoint the operator allowed, nothing can be saved.
    document.getElementById('profiles-none').hidden = endpoints.length > 0;
    form.hidden = endpoints.length === 0;
    ul.replaceChildren();
    for (const p of r.data.model_profiles || []) {
      const what = p.unreadable
        ? el('span', { class: 'notice', text: 'unreadable (stored under a secret the server no longer has): save it again with its API key' })
        : el('span', { text: `${p.model} at ${p.endpoint}${p.tool_calls ? `, tool calls: ${p.tool_calls}` : ''}${p.system_prompt ? ', its own system prompt' : ''}` });
      ul.append(el('li', {}, el('strong', { text: p.name }), ' ', what, ' ',
        el('span', { class: 'hint', text: p.has_api_key ? 'key stored' : 'no key' }), ' ',
        confirmButton('Delete', async () => { await api('/model-profiles/' + encodeURIComponent(p.name), { method: 'DELETE' }); say('Deleted.'); load(); })));
    }
  };
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    guard(async () => {
      const body = { endpoint: form.endpoint.value, model: form.model.value };
      if (form.api_key.value) body.api_key = form.api_key.value;
      if (form.tool_calls.value) body.tool_calls = form.tool_calls.value;
      if (form.system_prompt.value) body.system_prompt = form.system_prompt.value;
      await api('/model-profiles/' + encodeURIComponent(form.elements.name.value), { method: 'PUT', body });
      form.reset();
      say('Saved.');
      await load();
    });
  });
  await load();
}


// searchTerms are what to mark of a query in a snippet: its words and
// phrases (split as the index splits identifiers), sym: names and
// /regex/ as given; path:, lang:, repo:, branch: and -excluded terms are not
// in a snippet's text.
function searchTerms(q) {
  const out = [];
  for (const m of q.matchAll(/(-?)(?:([a-z]+):)?(?:"([^"]*)"|\/((?:\\.|[^/\\])+)\/|(\S+))/g)) {
    const [, neg, field, phrase, re, word] = m;
    if (neg || (field && field !== 'sym')) continue;
    if (re) {
      try { out.push(new RegExp(re, 'giu')); } catch { /* the server says what is wrong */ }
      continue;
    }
    const text = (phrase ?? word).replace(/([\p{Ll}\p{N}])(\p{Lu})/gu, '$1 $2');
    for (const w of text.split(/[^\p{L}\p{N}]+/u)) if (w.length > 1) out.push(w.toLowerCase());
  }
  return out;
}

// marked is line as text nodes, what terms match in <mark>.
function marked(line, terms) {
  const spans = [];
  const low = line.toLowerCase();
  for (const t of terms) {
    if (typeof t === 'string') {
      if (low.length !== line.length) continue; // case folding moved the offsets
      for (let i = low.indexOf(t); i >= 0; i = low.indexOf(t, i + t.length)) spans.push([i, i + t.length]);
    } else {
      t.lastIndex = 0;
      for (let m, n = 0; n < 200 && (m = t.exec(line)); n++) {
        if (!m[0].length) { t.lastIndex++; continue; }
        spans.push([m.index, m.index + m[0].length]);
      }
    }
  }
  spans.sort((a, b) => a[0] - b[0]);
  const out = [];
  let at = 0;
  for (const [a, b] of spans) {
    if (b <= at) continue;
    const from = Math.max(a, at);
    if (from > at) out.push(line.slice(at, from));
    out.push(el('mark', { text: line.slice(from, b) }));
    at = b;
  }
  if (at < line.length) out.push(line.slice(at));
  return out;
}

// snippet is a hit's lines, numbered, the query's terms marked.
function snippet(h, terms) {
  const body = el('tbody');
  h.snippet.replace(/\n$/, '').split('\n').forEach((line, i) => {
    body.append(el('tr', {}, el('th', { scope: 'row', class: 'ln', text: String(h.start_line + i) }), el('td', {}, el('code', {}, ...marked(line, terms)))));
  });
  const where = `${h.path}, lines ${h.start_line} to ${h.end_line}`;
  return el('div', { class: 'snippet', role: 'region', 'aria-label': where, tabindex: '0' },
    el('table', {}, el('caption', { class: 'sr', text: where }), body));
}

async function search() {
  const form = document.getElementById('search-form');
  const q = document.getElementById('q');
  const repo = document.getElementById('search-repo');
  const k = document.getElementById('search-k');
  const branch = document.getElementById('search-branch');
  const branches = document.getElementById('search-branches');
  const summary = document.getElementById('search-summary');
  const results = document.getElementById('search-results');
  const repos = new Map();
  const r = await api('/repositories', { allow: [403, 404, 503] });
  for (const x of r.data?.repositories || []) {
    repos.set(x.id, x);
    repo.append(el('option', { value: x.id }, x.name));
  }
  // The branch suggestions: the chosen repository's, or every one's.
  const suggest = () => {
    const names = new Set();
    for (const x of repos.values()) if (!repo.value || x.id === repo.value) for (const b of x.branches || [x.branch]) names.add(b);
    branches.replaceChildren(...[...names].sort().map((b) => el('option', { value: b })));
  };
  repo.addEventListener('change', suggest);
  suggest();
  const run = async () => {
    const params = new URLSearchParams({ q: q.value, k: k.value });
    if (repo.value) params.set('repository', repo.value);
    if (branch.value.trim()) params.set('branch', branch.value.trim());
    history.replaceState(null, '', '?' + params);
    summary.classList.remove('error');
    summary.textContent = 'Searching…';
    const res = await api('/search?' + params, { allow: [400, 404, 503] });
    results.replaceChildren();
    if (res.status !== 200) {
      summary.textContent = res.data?.error?.message || `The search failed (${res.status}).`;
      summary.classList.add('error');
      return;
    }
    const hits = res.data.results || [];
    const files = new Map();
    for (const h of hits) {
      const key = h.repository + '\n' + (h.branch || '') + '\n' + h.path;
      if (!files.has(key)) files.set(key, []);
      files.get(key).push(h);
    }
    summary.textContent = hits.length
      ? `${hits.length} ${hits.length === 1 ? 'result' : 'results'} in ${files.size} ${files.size === 1 ? 'file' : 'files'}, best first.`
      : 'Nothing found.';
    const terms = searchTerms(q.value);
    for (const hs of files.values()) {
      const h0 = hs[0];
      const rp = repos.get(h0.repository);
      // The commit the hit's branch was indexed at: what it shows.
      const onDefault = !h0.branch || h0.branch === rp?.branch;
      const commit = (h0.branch && rp?.indexed_commits?.[h0.branch]) || (onDefault ? rp?.indexed_commit : '') || '';
      const open = el('button', { type: 'button', class: 'open-conv' }, 'Open in a conversation');
      open.onclick = () => guard(async () => {
        const body = { title: `${h0.path}:${h0.start_line}`.slice(-200), repository: h0.repository };
        if (commit) body.ref = commit;
        const c = await api('/conversations', { method: 'POST', body });
        location.assign('/c/' + encodeURIComponent(c.data.id));
      });
      const sec = el('section', { class: 'card hit-file' },
        el('h2', { class: 'hit-path' }, el('span', { class: 'hint', text: (rp?.name || h0.repository) + (h0.branch ? ` (${h0.branch})` : '') + ' ' }), h0.path),
        el('p', { class: 'row' }, open, commit ? el('span', { class: 'hint', text: `${h0.branch ? `branch ${h0.branch} ` : ''}at commit ${commit.slice(0, 12)}, as indexed` }) : null));
      for (const h of [...hs].sort((a, b) => a.start_line - b.start_line)) sec.append(snippet(h, terms));
      results.append(sec);
    }
  };
  form.addEventListener('submit', (e) => { e.preventDefault(); guard(run); });
  const u = new URLSearchParams(location.search);
  if (u.get('repository')) { repo.value = u.get('repository'); suggest(); }
  if (u.get('branch')) branch.value = u.get('branch');
  if (['10', '25', '50', '100'].includes(u.get('k'))) k.value = u.get('k');
  if (u.get('q')) { q.value = u.get('q'); await run(); }
}

const num = (n) => (n ?? 0).toLocaleString('en');
const usageKeys = { model: 'Model', day: 'Day (UTC)', user: 'User' };

// usageTable fills table with a usage report's groups and total.
function usageTable(table, r) {
  const cols = [usageKeys[r.group_by] || r.group_by, 'Calls', 'Prompt tokens', 'Completion tokens', 'Total tokens', 'Estimated calls'];
  table.tHead.replaceChildren(el('tr', {}, ...cols.map((c, i) => el('th', { scope: 'col', class: i ? 'num' : null, text: c }))));
  const cells = (g) => [num(g.calls), num(g.prompt_tokens), num(g.completion_tokens), num(g.total_tokens), num(g.estimated)].map((v) => el('td', { class: 'num', text: v }));
  table.tBodies[0].replaceChildren(...(r.groups || []).map((g) => el('tr', {}, el('th', { scope: 'row', text: g.name || g.key }), ...cells(g))));
  if (!(r.groups || []).length) table.tBodies[0].append(el('tr', {}, el('td', { colspan: 6, class: 'hint', text: `No model calls since ${when(r.since)}.` })));
  table.tFoot.replaceChildren(el('tr', {}, el('th', { scope: 'row', text: 'Total' }), ...cells(r.total || {})));
}

function quotaText(q) {
  if (!q) return '';
  if (!q.daily_tokens) return `No daily token quota; ${num(q.used_today)} tokens used today (UTC).`;
  return `${num(q.used_today)} of ${num(q.daily_tokens)} tokens of the daily quota (${q.source === 'user' ? 'set for this user' : 'the default'}) used today (UTC); it resets ${when(q.resets)}.`;
}

async function usage() {
  const show = async (form, path, table, quota) => {
    const params = new URLSearchParams();
    for (const [k, v] of new FormData(form)) if (v) params.set(k, v);
    const r = await api(path + '?' + params, { allow: [400] });
    if (r.status !== 200) { say(r.data?.error?.message || `${r.status}`, true); return; }
    usageTable(table, r.data);
    quota.textContent = quotaText(r.data.quota);
  };
  const mine = document.getElementById('mine-form');
  const mineShow = () => show(mine, '/me/usage', document.getElementById('mine'), document.getElementById('quota'));
  mine.addEventListener('submit', (e) => { e.preventDefault(); guard(mineShow); });
  const all = document.getElementById('all-form');
  const allShow = () => show(all, '/admin/usage', document.getElementById('all'), document.getElementById('all-quota'));
  all?.addEventListener('submit', (e) => { e.preventDefault(); guard(allShow); });
  await Promise.all([mineShow(), all && allShow()]);
}

export function start(page) {
  if (page === 'conversations') { guard(conversations); guard(newConversation); }
  if (page === 'secrets') guard(secrets);
  if (page === 'profiles') guard(profiles);
  if (page === 'search') guard(search);
  if (page === 'usage') guard(usage);
}
