// The conversation page: the transcript from the event stream (replayed
// from the first event, then live), approvals, the composer and
// attachments. Events are applied once each, in order, by their id: a
// reconnect (EventSource sends Last-Event-ID) or a replay repeats
// nothing.
import { api, el, say, guard, render, when } from './app.js';

const id = document.body.dataset.conversation;
const base = `/conversations/${encodeURIComponent(id)}`;
const transcript = document.getElementById('transcript');
const approvals = document.getElementById('approvals');
const turnState = document.getElementById('turn-state');
const cancelBtn = document.getElementById('cancel');

// Exposed for tests and the latency benchmark.
const probe = { last: 0, applied: 0, dups: 0, gaps: 0, latencies: [], opens: 0 };
window.codumentor = probe;

let text = null; // the assistant text being streamed: {box, body, raw}
let thought = null; // the reasoning being streamed: {box, body}
const tools = new Map();

function finishText() {
  if (text) render(text.body, text.raw);
  text = null;
  thought = null;
}

// A reasoning model's thinking, before its answer: collapsed, as plain
// text (it is never Markdown the model meant to show).
function reasoning(d) {
  if (!thought) {
    finishText();
    const body = el('div', { class: 'reasoning-text' });
    const box = el('details', { class: 'reasoning' }, el('summary', { text: 'Reasoning' }), body);
    transcript.append(box);
    thought = { box, body };
  }
  if (d.text) thought.body.append(d.text);
  if (d.omitted) thought.box.append(el('p', { class: 'hint', text: `${d.omitted} more bytes of reasoning were not kept.` }));
}

function assistantText(s, serverTime) {
  if (!text) {
    const body = el('div', { class: 'md' });
    const box = el('article', { class: 'msg assistant', 'aria-label': 'Assistant' }, body);
    transcript.append(box);
    text = { box, body, raw: '' };
  }
  text.raw += s;
  text.body.append(s);
  if (serverTime) {
    const t = Date.parse(serverTime);
    if (!isNaN(t)) probe.latencies.push(Date.now() - t);
  }
}

function toolCard(d) {
  let t = tools.get(d.id);
  if (t) return t;
  const out = el('pre', { class: 'output' });
  const args = el('pre', { class: 'args', text: d.arguments || '' });
  const state = el('span', { class: 'state', text: 'running' });
  const card = el('details', { class: 'tool', 'data-tool': d.id }, el('summary', {}, el('span', { class: 'name', text: d.name || 'tool' }), ' ', state), el('h3', { class: 'sr', text: 'Arguments' }), args, el('h3', { class: 'sr', text: 'Output' }), out);
  transcript.append(card);
  t = { card, out, state };
  tools.set(d.id, t);
  return t;
}

function approvalCard(a) {
  document.getElementById('approval-' + a.id)?.remove();
  if (a.status !== 'pending') return;
  const host = a.kind === 'host_network';
  const cmd = a.command_shown || a.command;
  const card = el('section', { class: 'approval card', id: 'approval-' + a.id, 'aria-label': 'Approval needed' },
    el('h2', { text: host ? 'Use the host network for this investigation?' : 'Run this command?' }),
    host ? el('p', { text: 'Approved, the sandbox shares the host\'s network; denied or expired, it stays isolated.' }) : el('pre', { class: 'command', text: cmd }),
    a.invisible?.length ? el('p', { class: 'error', text: 'The command holds invisible characters, shown as [U+XXXX].' }) : null,
    el('dl', {},
      el('dt', { text: 'Tool' }), el('dd', { text: a.tool || '' }),
      el('dt', { text: 'Working directory' }), el('dd', { text: a.cwd || '' }),
      el('dt', { text: 'Expires' }), el('dd', { text: when(a.expires) })));
  const row = el('div', { class: 'row' });
  const decide = (d) => guard(async () => {
    row.querySelectorAll('button').forEach((b) => { b.disabled = true; });
    await api(`${base}/approvals/${encodeURIComponent(a.id)}`, { method: 'POST', body: { decision: d } });
    card.remove();
  });
  row.append(el('button', { type: 'button', class: 'approve' }, 'Approve'));
  row.append(el('button', { type: 'button', class: 'deny' }, 'Deny'));
  if (!host) row.append(el('button', { type: 'button', class: 'always' }, `Always allow ${a.tool || 'this tool'} in this conversation`));
  // The server's proposal: the exact argv prefix the rule would allow.
  const rule = (a.proposed_rule || []).join(' ');
  if (!host && rule) row.append(el('button', { type: 'button', class: 'allow-rule' }, 'Always allow commands like this: ', el('code', { text: rule + ' …' })));
  row.querySelector('.allow-rule')?.addEventListener('click', () => guard(async () => {
    row.querySelectorAll('button').forEach((b) => { b.disabled = true; });
    await api(`${base}/approvals/${encodeURIComponent(a.id)}/rule`, { method: 'POST' });
    card.remove();
  }));
  row.querySelector('.approve').onclick = () => decide('approve');
  row.querySelector('.deny').onclick = () => decide('deny');
  row.querySelector('.always')?.addEventListener('click', () => decide('always_allow'));
  card.append(row);
  approvals.append(card);
}

function notice(s, cls = 'notice') {
  finishText();
  transcript.append(el('p', { class: cls, text: s }));
}

// turnMessage finds the user message that began turn in the active
// history: message IDs are not in events, the history has them.
async function turnMessage(turn) {
  const r = await api(`${base}/messages`);
  const m = (r.data?.messages || []).find((x) => x.role === 'user' && x.turn === turn);
  if (!m) throw new Error('That message is no longer on the active branch of the conversation.');
  return m;
}

// messageActions are a user message's edit / regenerate / fork.
function messageActions(turn, content) {
  const row = el('div', { class: 'row actions', 'data-turn': turn });
  const act = (label, cls, f) => {
    const b = el('button', { type: 'button', class: cls }, label);
    b.addEventListener('click', () => guard(f));
    row.append(b);
  };
  act('Edit', 'edit', async () => {
    if (row.nextElementSibling?.classList.contains('editor')) return;
    const box = el('textarea', { rows: 3, 'aria-label': 'Edited message' });
    box.value = content;
    const save = el('button', { type: 'submit', class: 'save' }, 'Send edited');
    const form = el('form', { class: 'editor' }, box, el('p', { class: 'hint', text: 'The conversation branches here; the workspace goes back to where this message began.' }), save);
    form.addEventListener('submit', (e) => {
      e.preventDefault();
      if (!box.value.trim()) return;
      guard(async () => {
        const m = await turnMessage(turn);
        await api(`${base}/messages/${encodeURIComponent(m.id)}`, { method: 'PUT', body: { content: box.value } });
        form.remove();
      });
    });
    row.after(form);
    box.focus();
  });
  act('Regenerate', 'regenerate', async () => {
    const m = await turnMessage(turn);
    await api(`${base}/messages/${encodeURIComponent(m.id)}/regenerate`, { method: 'POST' });
  });
  act('Fork', 'fork', async () => {
    const m = await turnMessage(turn);
    const r = await api(`${base}/messages/${encodeURIComponent(m.id)}/fork`, { method: 'POST' });
    location.assign('/c/' + encodeURIComponent(r.data.id));
  });
  return row;
}

// undoButton takes back a turn's changes to the workspace.
function undoButton(turn) {
  if (!turn || transcript.querySelector(`.undo[data-turn="${CSS.escape(turn)}"]`)) return;
  const b = el('button', { type: 'button', class: 'undo', 'data-turn': turn }, 'Undo changes');
  b.addEventListener('click', () => guard(async () => {
    await api(`${base}/turns/${encodeURIComponent(turn)}/revert`, { method: 'POST' });
    say('The workspace is back to where it was before that turn.');
  }));
  transcript.append(el('div', { class: 'row' }, b));
}

function running(on) {
  cancelBtn.hidden = !on;
  turnState.textContent = on ? 'The assistant is working…' : '';
}

function apply(type, ev) {
  const d = ev.data || {};
  switch (type) {
    case 'turn_started': {
      finishText();
      const body = el('div', { class: 'md' });
      transcript.append(el('article', { class: 'msg user', 'aria-label': 'You' }, body, ev.turn ? messageActions(ev.turn, d.content || '') : null));
      render(body, d.content || '');
      running(true);
      break;
    }
    case 'reasoning_delta': reasoning(d); break;
    case 'text_delta': thought = null; assistantText(d.text || '', ev.time); break;
    case 'tool_call_requested': finishText(); toolCard(d); break;
    case 'tool_output_delta': toolCard(d).out.append(d.text || ''); break;
    case 'tool_output': { const t = toolCard(d); t.out.textContent = d.output || ''; break; }
    case 'tool_finished': { const t = toolCard(d); t.state.textContent = d.error ? 'failed: ' + d.error : 'done'; break; }
    case 'approval_pending': finishText(); approvalCard(d); break;
    case 'approval_decided':
      approvalCard(d);
      if (d.rule) notice(`Ran without asking: ${d.command_shown || d.command} (allowed by ${d.rule})`, 'notice auto-approved');
      break;
    case 'subagent_started': notice(`Subagent ${d.subagent || ''} started: ${d.task || ''}`); break;
    case 'subagent_finished': notice(`Subagent ${d.subagent || ''} finished${d.error ? ': ' + d.error : ''}`); break;
    case 'sandbox_unavailable': notice('The sandbox is unavailable: ' + (d.error || ''), 'error'); break;
    case 'sandbox_limit': notice(d.message || 'A command hit a sandbox limit.', 'error'); break;
    case 'sandbox_waiting': turnState.textContent = d.status === 'starting' ? 'Waiting for the sandbox to start…' : 'The assistant is working…'; break;
    case 'seccomp_violation': notice(`A command made a blocked system call (${d.syscall || ''}).`, 'error'); break;
    case 'setup_started': notice('Project setup is running…'); break;
    case 'setup_output': notice(d.text || '', 'setup'); break;
    case 'setup_finished': notice(d.cached ? 'Project setup reused.' : 'Project setup finished.'); break;
    case 'setup_failed': notice('Project setup failed: ' + (d.error || ''), 'error'); break;
    case 'turn_usage': notice(`${(d.prompt_tokens + d.completion_tokens).toLocaleString()} tokens, ${d.calls} model call${d.calls === 1 ? '' : 's'}${d.estimated ? ' (estimated in part)' : ''}`, 'usage'); break;
    case 'context_compacted': notice(`Earlier messages were summarized to fit the model's context window (about ${d.tokens_before} → ${d.tokens_after} tokens); they are still shown here. Summary: ${d.summary || ''}`); break;
    case 'turn_finished': if (d.message) notice(d.message, d.reason === 'stop' ? 'notice' : 'notice stopped'); finishText(); running(false); undoButton(ev.turn); break;
    case 'turn_failed': notice('The turn failed: ' + (d.error || ''), 'error'); running(false); undoButton(ev.turn); break;
    case 'turn_cancelled': notice('Stopped.'); running(false); undoButton(ev.turn); break;
    case 'workspace_reverted': notice(d.reason === 'branch' ? 'The workspace went back to where this message began.' : 'The workspace went back to where an earlier turn began.'); break;
    default: break;
  }
}

const TYPES = ['turn_started', 'reasoning_delta', 'text_delta', 'tool_call_requested', 'approval_pending', 'approval_decided', 'tool_output',
  'tool_finished', 'tool_output_delta', 'subagent_started', 'subagent_finished', 'sandbox_unavailable', 'sandbox_limit',
  'sandbox_waiting', 'seccomp_violation', 'usage', 'turn_usage', 'context_compacted', 'turn_finished', 'turn_failed', 'turn_cancelled', 'setup_started', 'setup_output', 'setup_finished', 'setup_failed', 'workspace_reverted'];

function follow() {
  const es = new EventSource(`/api/v1${base}/events`);
  es.onopen = () => { probe.opens++; };
  const on = (e) => {
    const seq = Number(e.lastEventId);
    if (!(seq > probe.last)) { probe.dups++; return; }
    if (seq !== probe.last + 1) probe.gaps++;
    probe.last = seq;
    probe.applied++;
    let ev;
    try { ev = JSON.parse(e.data); } catch { return; }
    apply(e.type, ev);
  };
  for (const t of TYPES) es.addEventListener(t, on);
  es.onerror = () => {
    if (es.readyState === EventSource.CLOSED) {
      // Refused (signed out, or too many streams): ask who we are.
      guard(() => api('/me')).then((me) => { if (me) setTimeout(follow, 3000); });
    }
  };
}

function setupComposer() {
  const form = document.getElementById('composer');
  const box = document.getElementById('message');
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    const content = box.value;
    if (!content.trim()) return;
    guard(async () => {
      await api(`${base}/messages`, { method: 'POST', body: { content } });
      box.value = '';
    });
  });
  box.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) form.requestSubmit();
  });
  cancelBtn.addEventListener('click', () => guard(() => api(`${base}/cancel`, { method: 'POST', allow: [202, 409] })));
}

async function listAttachments() {
  const r = await api(`${base}/attachments`, { allow: [404, 503] });
  const ul = document.getElementById('attachments');
  ul.replaceChildren();
  for (const a of r.data?.attachments || []) ul.append(el('li', { text: `${a.name} (${a.kind}, ${a.bytes} bytes)` }));
}

function setupAttachments() {
  const input = document.getElementById('attach');
  const bar = document.getElementById('upload');
  input.addEventListener('change', () => {
    const f = input.files[0];
    if (!f) return;
    const fd = new FormData();
    fd.append('file', f);
    const x = new XMLHttpRequest();
    x.open('POST', `/api/v1${base}/attachments`);
    x.setRequestHeader('X-CSRF-Token', document.querySelector('meta[name="csrf-token"]').content);
    bar.hidden = false;
    bar.value = 0;
    x.upload.onprogress = (e) => { if (e.lengthComputable) bar.value = Math.round((100 * e.loaded) / e.total); };
    x.onload = () => {
      bar.hidden = true;
      input.value = '';
      if (x.status === 201) { say(`Attached ${f.name}.`); guard(listAttachments); return; }
      let msg = `${x.status}`;
      try { msg = JSON.parse(x.responseText).error.message; } catch { /* not JSON */ }
      say('The upload failed: ' + msg, true);
    };
    x.onerror = () => { bar.hidden = true; say('The upload failed.', true); };
    x.send(fd);
  });
}

export function start() {
  setupComposer();
  setupAttachments();
  guard(listAttachments);
  follow();
}
