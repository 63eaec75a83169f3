// The conversation page: the transcript from the event stream (replayed
// from the first event, then live), approvals, the composer and
// attachments. Events are applied once each, in order, by their id: a
// reconnect (EventSource sends Last-Event-ID) or a replay repeats
// nothing.
import { api, el, say, guard, render, when } from './app.js';
import { Terminal } from './terminal.js';

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
let reply = null; // the current model call's reply box, for its model's name (usage)
const tools = new Map();
let setupTerm = null; // the project setup's output
let pageTitle = document.title;

// copyText puts s on the clipboard: the Clipboard API where the page is
// a secure context (https, localhost), else a selection and the copy
// command (a server reached over plain http on another host).
async function copyText(s) {
  if (navigator.clipboard && window.isSecureContext) {
    await navigator.clipboard.writeText(s);
    return;
  }
  const back = document.activeElement;
  const ta = el('textarea', { class: 'sr', readonly: true, 'aria-hidden': 'true', tabindex: '-1' });
  ta.value = s;
  document.body.append(ta);
  ta.select();
  const ok = document.execCommand('copy');
  ta.remove();
  back?.focus();
  if (!ok) throw new Error('This browser refused to copy here; select the text and copy it by hand.');
}

function copyButton(label, what, source) {
  const b = el('button', { type: 'button', class: 'copy', 'aria-label': label }, 'Copy');
  b.addEventListener('click', () => guard(async () => {
    await copyText(source());
    say(`${what} copied.`);
  }));
  return b;
}

// role is a message's heading: who wrote it, in words (not colour alone).
function role(name) {
  return el('h2', { class: 'role' }, name);
}

// The server's Markdown puts each code block in a figure.code: each gets
// its copy button once it is in the page (render replaces the text when
// the server's HTML arrives).
new MutationObserver((records) => {
  for (const r of records) {
    for (const n of r.addedNodes) {
      if (n.nodeType !== 1) continue;
      const figs = n.matches('figure.code') ? [n] : n.querySelectorAll('figure.code');
      for (const f of figs) {
        if (f.querySelector(':scope > .copy')) continue;
        const pre = f.querySelector('pre');
        const lang = f.querySelector('figcaption')?.textContent;
        f.prepend(copyButton(lang ? `Copy the ${lang} code` : 'Copy the code', 'The code', () => pre?.textContent || ''));
      }
    }
  }
}).observe(transcript, { childList: true, subtree: true });

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
    const t = { body, raw: '' };
    const box = el('article', { class: 'msg assistant', 'aria-label': 'Assistant' }, role('Assistant'), body,
      el('div', { class: 'row actions' }, copyButton('Copy the reply', 'The reply', () => t.raw)));
    t.box = box;
    transcript.append(box);
    text = t;
    reply = box;
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
  const more = el('button', { type: 'button', class: 'link show-all', 'aria-expanded': 'false', hidden: true });
  const card = el('details', { class: 'tool', 'data-tool': d.id }, el('summary', {}, el('span', { class: 'name', text: d.name || 'tool' }), ' ', state), el('h3', { class: 'sr', text: 'Arguments' }), args, el('h3', { class: 'sr', text: 'Output' }), out, more);
  transcript.append(card);
  t = { card, out, state, more, term: new Terminal(out), open: false };
  more.addEventListener('click', () => { t.open = !t.open; fold(t); });
  tools.set(d.id, t);
  return t;
}

// FOLD_LINES is how much of a long output a tool card shows until "Show
// all".
const FOLD_LINES = 25;

function fold(t) {
  const n = t.term.lines + (t.out.textContent.endsWith('\n') ? 0 : 1);
  const long = n > FOLD_LINES + 5;
  t.more.hidden = !long;
  t.out.classList.toggle('folded', long && !t.open);
  t.more.setAttribute('aria-expanded', String(long && t.open));
  t.more.textContent = t.open ? 'Show less' : `Show all ${n} lines`;
}

function toolOutput(d, whole) {
  const t = toolCard(d);
  if (whole) t.term.clear();
  t.term.write(whole ? d.output || '' : d.text || '');
  fold(t);
}

function approvalCard(a) {
  document.getElementById('approval-' + a.id)?.remove();
  if (a.status !== 'pending') { waiting(); return; }
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
    waiting();
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
    waiting();
  }));
  row.querySelector('.approve').onclick = () => decide('approve');
  row.querySelector('.deny').onclick = () => decide('deny');
  row.querySelector('.always')?.addEventListener('click', () => decide('always_allow'));
  card.append(row);
  card.setAttribute('tabindex', '-1');
  approvals.append(card);
  // Told to a screen reader, shown and focused: unless the person is
  // typing a message, whose keys must not land on the card's buttons.
  document.getElementById('announce').textContent = `Approval needed: ${host ? 'use the host network' : 'run ' + cmd}`;
  const act = document.activeElement;
  card.scrollIntoView({ block: 'nearest' });
  if (!(act?.tagName === 'TEXTAREA' && act.value)) card.focus({ preventScroll: true });
  waiting();
}

// waiting puts the pending approvals in the tab's title while the page
// is in the background (and, with none left, takes back the
// announcement).
function waiting() {
  const n = approvals.querySelectorAll('.approval').length;
  if (!n) document.getElementById('announce').textContent = '';
  document.title = n && document.visibilityState === 'hidden' ? `(${n}) Approval waiting · ${pageTitle}` : pageTitle;
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
  const row = el('div', { class: 'row actions', 'data-turn': turn }, copyButton('Copy your message', 'Your message', () => content));
  const act = (label, cls, f) => {
    const b = el('button', { type: 'button', class: cls }, label);
    b.addEventListener('click', () => guard(f));
    row.append(b);
  };
  act('Edit', 'edit', async () => {
    if (row.nextElementSibling?.classList.contains('editor')) return;
    const box = el('textarea', { rows: 3, 'aria-label': 'Edited message' });
    box.value = content;
    box.addEventListener('keydown', (e) => {
      if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) { e.preventDefault(); form.requestSubmit(); }
      if (e.key === 'Escape') { e.stopPropagation(); form.remove(); row.querySelector('.edit').focus(); }
    });
    const save = el('button', { type: 'submit', class: 'save' }, 'Send edited');
    const form = el('form', { class: 'editor' }, box, el('p', { class: 'hint', text: 'The conversation branches here; the workspace goes back to where this message began.' }), save);
    form.addEventListener('submit', (e) => {
      e.preventDefault();
      const edited = box.value;
      if (!edited.trim()) return;
      guard(async () => {
        const m = await turnMessage(turn);
        await api(`${base}/messages/${encodeURIComponent(m.id)}`, { method: 'PUT', body: { content: edited } });
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
      transcript.append(el('article', { class: 'msg user', 'aria-label': 'You' }, role('You'), body, ev.turn ? messageActions(ev.turn, d.content || '') : null));
      render(body, d.content || '');
      running(true);
      break;
    }
    case 'reasoning_delta': reasoning(d); break;
    case 'text_delta': thought = null; assistantText(d.text || '', ev.time); break;
    case 'tool_call_requested': finishText(); toolCard(d); break;
    case 'tool_output_delta': toolOutput(d, false); break;
    case 'tool_output': toolOutput(d, true); break;
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
    case 'setup_started': notice('Project setup is running…'); setupTerm = null; break;
    case 'setup_output':
      if (!setupTerm) {
        finishText();
        const pre = el('pre', { class: 'output setup' });
        transcript.append(pre);
        setupTerm = new Terminal(pre);
      }
      setupTerm.write(d.text || '');
      break;
    case 'setup_finished': notice(d.cached ? 'Project setup reused.' : 'Project setup finished.'); break;
    case 'setup_failed': notice('Project setup failed: ' + (d.error || ''), 'error'); break;
    case 'usage':
      // The model's name on the reply its call wrote.
      if (reply && d.model) reply.querySelector('.role').append(' ', el('span', { class: 'model', text: '· ' + d.model }));
      reply = null;
      break;
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
  // Enter sends, Shift+Enter is a new line (and so is Enter while an
  // input method composes).
  box.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      form.requestSubmit();
    }
  });
  const stop = () => guard(() => api(`${base}/cancel`, { method: 'POST', allow: [202, 409] }));
  cancelBtn.addEventListener('click', stop);
  const help = document.getElementById('help');
  const openHelp = () => { if (!help.open) help.showModal(); };
  document.getElementById('show-help').addEventListener('click', openHelp);
  document.getElementById('close-help').addEventListener('click', () => help.close());
  document.addEventListener('keydown', (e) => {
    if (help.open || e.defaultPrevented || e.isComposing) return;
    const typing = e.target.closest?.('input, textarea, select, [contenteditable]');
    if (e.key === 'Escape' && !cancelBtn.hidden) { e.preventDefault(); stop(); } else if (e.key === '?' && !typing && !e.ctrlKey && !e.metaKey && !e.altKey) {
      e.preventDefault();
      openHelp();
    }
  });
  document.addEventListener('visibilitychange', waiting);
}

// setupTitle is the conversation's Rename.
function setupTitle() {
  const h1 = document.querySelector('.titlebar h1');
  const btn = document.getElementById('rename');
  const form = document.getElementById('rename-form');
  const input = document.getElementById('new-title');
  const close = () => { form.hidden = true; btn.hidden = false; btn.focus(); };
  btn.addEventListener('click', () => {
    input.value = h1.textContent;
    btn.hidden = true;
    form.hidden = false;
    input.focus();
    input.select();
  });
  form.addEventListener('keydown', (e) => { if (e.key === 'Escape') { e.stopPropagation(); close(); } });
  document.getElementById('rename-cancel').addEventListener('click', close);
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    guard(async () => {
      const r = await api(base, { method: 'PATCH', body: { title: input.value } });
      h1.textContent = r.data.title;
      pageTitle = `${r.data.title} · Codumentor`;
      waiting();
      close();
      say('Renamed.');
    });
  });
}

// setupModel is the conversation's model profile switch: the server's
// model or one of the user's profiles, from the next turn on.
async function setupModel() {
  const sel = document.getElementById('model-profile');
  const [c, p] = await Promise.all([api(base), api('/model-profiles', { allow: [404, 405, 503] })]);
  if (p.status !== 200) return;
  for (const x of p.data.model_profiles || []) sel.append(el('option', { value: x.name }, `${x.name} (${x.model})`));
  let current = c.data.model_profile || '';
  sel.value = current;
  sel.closest('.model-switch').hidden = false;
  sel.addEventListener('change', () => guard(async () => {
    try {
      await api(base, { method: 'PATCH', body: { model_profile: sel.value } });
    } catch (e) {
      sel.value = current;
      throw e;
    }
    current = sel.value;
    say(`The next turn uses ${sel.selectedOptions[0].textContent}.`);
  }));
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
  setupTitle();
  guard(setupModel);
  setupAttachments();
  guard(listAttachments);
  follow();
}
