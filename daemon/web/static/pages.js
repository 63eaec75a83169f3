// The conversations list, secrets and model profiles pages.
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

export function start(page) {
  if (page === 'conversations') { guard(conversations); guard(newConversation); }
  if (page === 'secrets') guard(secrets);
  if (page === 'profiles') guard(profiles);
}
