// The loom web UI: plain JavaScript over loom serve's JSON API
// (docs/operations.md). Hash routes: #/ executions, #/execution/ID,
// #/timers, #/nodes, #/rack. Nothing is fetched from anywhere else.
'use strict';

const STATUSES = ['running', 'suspended', 'completed', 'failed', 'cancelled', 'continued'];
const $ = (sel, root = document) => root.querySelector(sel);
const main = $('#main');
let timer = null;  // the current page's refresh

function esc(v) {
  return String(v).replace(/[&<>"']/g, (c) => ({'&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;'}[c]));
}
function time(ms) {
  if (!ms) return '-';
  return new Date(ms).toISOString().replace('T', ' ').replace('Z', '');
}
function dur(ms) {
  if (ms < 1000) return ms + ' ms';
  if (ms < 60000) return (ms / 1000).toFixed(1) + ' s';
  return (ms / 60000).toFixed(1) + ' min';
}
function short(v, n = 120) {
  const s = typeof v === 'string' ? v : JSON.stringify(v);
  return s.length > n ? s.slice(0, n - 3) + '...' : s;
}
function statusBadge(s) { return `<span class="status ${esc(s)}">${esc(s)}</span>`; }

async function api(path, options = {}) {
  const res = await fetch(path, options);
  const body = await res.json().catch(() => ({}));
  if (!res.ok) {
    const e = body.error || {};
    throw new Error(`${res.status} ${e.code || ''}: ${e.message || res.statusText}`);
  }
  return body;
}

function toast(text, error = false) {
  const t = $('#toast');
  t.textContent = text;
  t.className = 'toast' + (error ? ' error' : '');
  t.hidden = false;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => { t.hidden = true; }, 6000);
}

// Every action asks first.
function confirmAction(text) {
  return new Promise((resolve) => {
    $('#modal-text').textContent = text;
    $('#modal').hidden = false;
    const done = (ok) => { $('#modal').hidden = true; resolve(ok); };
    $('#modal-ok').onclick = () => done(true);
    $('#modal-cancel').onclick = () => done(false);
  });
}

async function act(id, verb, body, question) {
  if (!(await confirmAction(question))) return null;
  const token = $('#token').value.trim();
  try {
    const out = await api(`/api/v1/executions/${encodeURIComponent(id)}/${verb}`, {
      method: 'POST',
      headers: {'Content-Type': 'application/json', 'Authorization': 'Bearer ' + token},
      body: JSON.stringify(body || {}),
    });
    toast(`${verb}: ${short(out, 200)}`);
    return out;
  } catch (e) {
    toast(`${verb} refused: ${e.message}`, true);
    return null;
  }
}

// ---- Executions -----------------------------------------------------------

const listState = {status: '', workflow: '', parked_on: '', id_prefix: '', started_after: '', started_before: '', cursors: [''], page: 0};

function listQuery() {
  const p = new URLSearchParams();
  for (const k of ['status', 'workflow', 'parked_on', 'id_prefix', 'started_after', 'started_before']) {
    if (listState[k]) p.set(k, listState[k]);
  }
  p.set('limit', '50');
  const cursor = listState.cursors[listState.page];
  if (cursor) p.set('cursor', cursor);
  return p.toString();
}

async function renderCounts() {
  const box = $('#counts');
  if (!box) return;
  try {
    const c = await api('/api/v1/counts');
    if (!c.counts) { box.innerHTML = '<span class="muted">counting...</span>'; return; }
    const all = `<span class="count${listState.status ? '' : ' selected'}" data-status="">all<b>${c.counts.total}</b></span>`;
    const html = all + STATUSES.map((s) =>
      `<span class="count${listState.status === s ? ' selected' : ''}" data-status="${s}" data-testid="count-${s}">${s}<b>${c.counts[s]}</b></span>`).join('') +
      `<span class="muted">inbox ${c.counts.inbox_pending} pending; counted ${time(c.as_of_ms)} in ${c.query_ms} ms</span>`;
    // Re-rendered only when something changed: a click never lands on a replaced node.
    if (box.dataset.html === html) return;
    box.dataset.html = html;
    box.innerHTML = html;
    box.querySelectorAll('.count').forEach((el) => el.onclick = () => {
      listState.status = el.dataset.status;
      $('#f-status').value = listState.status;
      resetPaging();
      renderList();
      renderCounts();
    });
  } catch (e) {
    box.innerHTML = `<span class="muted">${esc(e.message)}</span>`;
  }
}

function resetPaging() { listState.cursors = ['']; listState.page = 0; }

async function renderList() {
  const box = $('#rows');
  if (!box) return;
  try {
    const page = await api('/api/v1/executions?' + listQuery());
    listState.cursors[listState.page + 1] = page.next_cursor || '';
    box.innerHTML = `<table id="executions"><thead><tr><th>Execution</th><th>Workflow</th><th>Status</th>
      <th>Started</th><th>Updated</th><th>Events</th><th>Fence</th><th>Parked on</th></tr></thead><tbody>` +
      page.executions.map((r) => `<tr data-id="${esc(r.execution_id)}">
        <td class="mono"><a href="#/execution/${encodeURIComponent(r.execution_id)}">${esc(r.execution_id)}</a></td>
        <td>${esc(r.workflow)}</td><td>${statusBadge(r.status)}</td><td class="mono">${time(r.started_ms)}</td>
        <td class="mono">${time(r.updated_ms)}</td><td>${r.head}</td><td>${r.fence}</td><td>${esc(r.parked_on.join(', '))}</td></tr>`).join('') +
      '</tbody></table>' +
      `<div class="pager"><button id="prev" ${listState.page === 0 ? 'disabled' : ''}>Newer</button>
       <span class="muted">page ${listState.page + 1}; ${page.executions.length} shown, ${page.scanned} examined</span>
       <button id="next" ${page.next_cursor ? '' : 'disabled'}>Older</button></div>`;
    $('#prev').onclick = () => { listState.page--; renderList(); };
    $('#next').onclick = () => { listState.page++; renderList(); };
  } catch (e) {
    box.innerHTML = `<p class="muted">${esc(e.message)}</p>`;
  }
}

function pageExecutions() {
  main.innerHTML = `<h2>Executions</h2>
    <div id="counts" class="counts"></div>
    <form class="filters" id="filters">
      <label>status <select id="f-status"><option value="">any</option>${STATUSES.map((s) => `<option>${s}</option>`).join('')}</select></label>
      <label>workflow <input id="f-workflow" size="12"></label>
      <label>parked on <select id="f-parked"><option value="">any</option><option>timer</option><option>message</option><option>child</option></select></label>
      <label>id prefix <input id="f-prefix" size="14"></label>
      <label>started after <input id="f-after" size="16" placeholder="2024-05-01"></label>
      <label>started before <input id="f-before" size="16" placeholder="2024-05-02T12:00:00"></label>
      <button type="submit">Filter</button>
    </form>
    <div id="rows"></div>`;
  $('#f-status').value = listState.status;
  $('#f-workflow').value = listState.workflow;
  $('#f-parked').value = listState.parked_on;
  $('#f-prefix').value = listState.id_prefix;
  $('#f-after').value = listState.started_after;
  $('#f-before').value = listState.started_before;
  $('#filters').onsubmit = (ev) => {
    ev.preventDefault();
    listState.status = $('#f-status').value;
    listState.workflow = $('#f-workflow').value.trim();
    listState.parked_on = $('#f-parked').value;
    listState.id_prefix = $('#f-prefix').value.trim();
    listState.started_after = $('#f-after').value.trim();
    listState.started_before = $('#f-before').value.trim();
    resetPaging();
    renderList();
    renderCounts();
  };
  renderCounts();
  renderList();
  // Live: counts every 2 s; the first page every 5 s.
  let tick = 0;
  timer = setInterval(() => {
    renderCounts();
    if (++tick % 3 === 0 && listState.page === 0) renderList();
  }, 2000);
}

// ---- One execution --------------------------------------------------------

function timeline(events) {
  // Which resume answered which park; fences as they moved; time since the
  // previous event (a step's duration is the time to its STEP_* event).
  const answeredBy = {};
  for (const e of events) {
    if (e.kind === 'EXECUTION_RESUMED' && e.payload && e.payload.park_seq) answeredBy[e.payload.park_seq] = e;
  }
  let fence = 0;
  let prev = null;
  return `<table id="timeline"><thead><tr><th>Seq</th><th>Time</th><th>+</th><th>Kind</th><th>Fence</th><th>Payload</th></tr></thead><tbody>` +
    events.map((e) => {
      const moved = e.fence !== fence && e.fence !== 0;
      const cls = e.kind === 'EXECUTION_SUSPENDED' ? 'park' : e.kind === 'EXECUTION_RESUMED' ? 'answer' : moved ? 'fence-moved' : '';
      let note = '';
      if (e.kind === 'EXECUTION_SUSPENDED') {
        const waits = (e.payload.waits || []).map((w) => w.type + (w.topic ? ':' + w.topic : w.key ? ':' + w.key : w.wake_at_ms ? ' at ' + time(w.wake_at_ms) : '')).join(', ');
        const a = answeredBy[e.sequence];
        note = `<div><b>parked on</b> ${esc(waits)}; ${a ? `answered by #${a.sequence} (${esc(a.payload.wait ? a.payload.wait.type : 'nothing')}${a.payload.by ? ', by ' + esc(a.payload.by) : ''}) after ${dur(a.time_ms - e.time_ms)}` : '<b>open</b>'}</div>`;
      }
      if (moved) note += `<div><b>fence ${fence} &rarr; ${e.fence}</b></div>`;
      if (e.fence !== 0) fence = e.fence;
      const plus = prev ? dur(e.time_ms - prev.time_ms) : '';
      prev = e;
      return `<tr class="${cls}" data-kind="${esc(e.kind)}"><td>${e.sequence}</td><td class="mono">${time(e.time_ms)}</td><td class="mono">${plus}</td>
        <td class="mono">${esc(e.kind)}</td><td>${e.fence}</td><td class="payload mono">${note}${esc(short(e.payload, 300))}</td></tr>`;
    }).join('') + '</tbody></table>';
}

async function pageExecution(id) {
  main.innerHTML = `<p class="muted">loading ${esc(id)}...</p>`;
  let x;
  try {
    x = await api('/api/v1/executions/' + encodeURIComponent(id));
  } catch (e) {
    main.innerHTML = `<p><a href="#/">&larr; executions</a></p><p class="muted">${esc(e.message)}</p>`;
    return;
  }
  const r = x.execution;
  const live = r.status === 'running' || r.status === 'suspended';
  main.innerHTML = `<p><a href="#/">&larr; executions</a></p>
    <h2 class="mono">${esc(id)} ${statusBadge(r.status)}</h2>
    <p>workflow <b>${esc(r.workflow)}</b>; started ${time(r.started_ms)}; updated ${time(r.updated_ms)};
       ${r.head} events; fence <b>${r.fence}</b>; owner ${x.owner ? esc(x.owner) : '<span class="muted">not recorded</span>'}
       ${r.parent_id ? `; parent <a class="mono" href="#/execution/${encodeURIComponent(r.parent_id)}">${esc(r.parent_id)}</a>` : ''}</p>
    ${x.open_park ? `<p>parked at #${x.open_park.sequence} (${esc(x.open_park.call)}) on <span class="mono">${esc(short(x.open_park.waits, 300))}</span></p>` : ''}
    ${(x.problems || []).map((p) => `<p class="problem">event #${p.sequence}: ${esc(p.problem)}</p>`).join('')}
    ${r.result !== null ? `<p>result <span class="mono">${esc(short(r.result, 300))}</span></p>` : ''}
    <div class="actions" ${live ? '' : 'hidden'}>
      <button id="a-cancel" class="danger">Cancel</button>
      <button id="a-resume" ${x.open_park ? '' : 'disabled'}>Resume</button>
      <input id="a-topic" placeholder="topic" size="10"><input id="a-message" placeholder='{"ok": true}' size="18">
      <button id="a-send">Send</button>
    </div>
    <div class="actions"><input id="a-step" type="number" min="0" value="0" style="width:5em"><button id="a-fork">Fork from step</button></div>
    <h3>Timeline</h3>${timeline(x.events)}
    ${x.events_truncated ? '<p class="muted">later events not shown</p>' : ''}
    <h3>Timers</h3>${x.timers.length ? `<table><tr><th>Wake at</th><th>Kind</th><th>Lease</th></tr>${x.timers.map((t) => `<tr><td class="mono">${time(t.wake_at_ms)}</td><td>${t.redrive_attempt === null ? 'park timer' : 're-drive #' + t.redrive_attempt}</td><td>${esc(t.lease_owner || '-')}</td></tr>`).join('')}</table>` : '<p class="muted">none</p>'}
    <h3>Pending messages</h3>${x.pending_messages.length ? `<table><tr><th>Topic</th><th>#</th><th>Message</th></tr>${x.pending_messages.map((m) => `<tr><td>${esc(m.topic)}</td><td>${m.seq}</td><td class="mono">${esc(short(m.message))}</td></tr>`).join('')}</table>` : '<p class="muted">none</p>'}
    <h3>Children</h3>${x.children.length ? `<table><tr><th>Key</th><th>Execution</th><th>Workflow</th><th>Status</th></tr>${x.children.map((c) => `<tr><td>${esc(c.key)}</td><td class="mono"><a href="#/execution/${encodeURIComponent(c.execution_id)}">${esc(c.execution_id)}</a></td><td>${esc(c.workflow)}</td><td>${statusBadge(c.status)}</td></tr>`).join('')}</table>` : '<p class="muted">none</p>'}`;
  const reload = () => pageExecution(id);
  $('#a-cancel').onclick = async () => { if (await act(id, 'cancel', {reason: 'cancelled from the web UI'}, `Cancel ${id}? Whoever runs it is fenced out.`)) reload(); };
  $('#a-resume').onclick = async () => { if (await act(id, 'resume', {}, `Resume ${id} at its open park?`)) reload(); };
  $('#a-send').onclick = async () => {
    let message;
    try { message = JSON.parse($('#a-message').value || 'null'); } catch (e) { toast('the message is not JSON', true); return; }
    if (await act(id, 'send', {topic: $('#a-topic').value, message}, `Send to ${id} on topic "${$('#a-topic').value}"?`)) reload();
  };
  $('#a-fork').onclick = async () => {
    const step = Number($('#a-step').value);
    const out = await act(id, 'fork', {from_step: step}, `Fork ${id} from its first ${step} steps into a new execution?`);
    if (out) location.hash = '#/execution/' + encodeURIComponent(out.execution_id);
  };
}

// ---- Timers, nodes --------------------------------------------------------

async function pageTimers() {
  main.innerHTML = `<h2>Timers</h2><form class="filters" id="tf"><label>due within (ms) <input id="t-within" value="3600000" size="10"></label><button>Show</button></form><div id="trows"></div>`;
  const load = async () => {
    try {
      const p = await api('/api/v1/timers?limit=200&due_within_ms=' + encodeURIComponent($('#t-within').value));
      $('#trows').innerHTML = p.timers.length ? `<table id="timers"><tr><th>Execution</th><th>Wake at</th><th>Due</th><th>Kind</th><th>Lease</th></tr>` +
        p.timers.map((t) => `<tr><td class="mono"><a href="#/execution/${encodeURIComponent(t.execution_id)}">${esc(t.execution_id)}</a></td><td class="mono">${time(t.wake_at_ms)}</td>
          <td>${t.wake_at_ms <= p.now_ms ? '<b>late ' + dur(p.now_ms - t.wake_at_ms) + '</b>' : 'in ' + dur(t.wake_at_ms - p.now_ms)}</td>
          <td>${t.redrive_attempt === null ? 'park timer' : 're-drive #' + t.redrive_attempt}</td><td>${esc(t.lease_owner || '-')}${t.lease_until_ms ? ' until ' + time(t.lease_until_ms) : ''}</td></tr>`).join('') + '</table>'
        : '<p class="muted">no timer due in that window</p>';
    } catch (e) { $('#trows').innerHTML = `<p class="muted">${esc(e.message)}</p>`; }
  };
  $('#tf').onsubmit = (ev) => { ev.preventDefault(); load(); };
  load();
  timer = setInterval(load, 5000);
}

async function pageNodes() {
  main.innerHTML = '<h2>Nodes and leases</h2><div id="nrows"></div><h2>Queues</h2><div id="qrows"></div>';
  for (const [what, box] of [['nodes', '#nrows'], ['queues', '#qrows']]) {
    try {
      const p = await api('/api/v1/' + what);
      const rows = p[what] || [];
      if (!rows.length) { $(box).innerHTML = '<p class="muted">none</p>'; continue; }
      const cols = Object.keys(rows[0]);
      $(box).innerHTML = `<table><tr>${cols.map((c) => `<th>${esc(c)}</th>`).join('')}</tr>` +
        rows.map((r) => `<tr>${cols.map((c) => `<td class="mono">${esc(typeof r[c] === 'object' ? JSON.stringify(r[c]) : r[c])}</td>`).join('')}</tr>`).join('') + '</table>';
    } catch (e) { $(box).innerHTML = `<p class="muted">${esc(e.message)}</p>`; }
  }
}

// ---- Rack -----------------------------------------------------------------

function cubby(s) {
  if (!s) return '';
  const info = s.info || {}, b = s.boundary || {}, sess = s.session || {}, jobs = (s.jobs && s.jobs.jobs) || [];
  const running = jobs.find((j) => Object.values(j.statuses || {}).some((st) => st.state === 'running'));
  const errors = (sess.errors || []).map((e) => e.kind + (e.message ? ': ' + e.message : ''));
  if (!s.reachable) errors.push('unreachable: ' + ((s.info && s.info.error) || ''));
  const cls = !s.reachable ? 'down' : info.trusted === false ? 'untrusted' : '';
  return `<div class="cubby ${cls}" data-cubby="${s.cubby}">
    <h4>cubby ${s.cubby} <span class="muted">${esc(info.baseboard || s.baseboard || '')}</span></h4>
    <div>version ${esc(info.build_version || '-')}</div>
    <div>session <span class="mono">${esc(short(sess.active || info.active_session || '-', 14))}</span></div>
    <div>job ${running ? `<span class="mono">${esc(short(running.job_id, 14))}</span>` : '-'}</div>
    <div>boundary: ${b.executions ?? '-'} run, ${b.skipped ?? '-'} skipped, ${b.interrupted ?? '-'} interrupted; gate ${esc(b.gate || '-')}</div>
    <div>locker <b>${esc(b.locker_verdict || '-')}</b>${b.trusted === false ? ' (untrusted: ' + esc(b.untrusted_reason || '') + ')' : ''}</div>
    ${errors.map((e) => `<div class="err">${esc(short(e, 80))}</div>`).join('')}
  </div>`;
}

async function pageRack() {
  main.innerHTML = `<h2>Rack</h2><div id="grid" class="grid"></div>
    <h3>A job on every sled</h3><form class="filters" id="jf"><label>job id <input id="j-id" size="30"></label><button>Show</button></form><div id="jrows"></div>
    <h3>Recent jobs</h3><div id="recent"></div>`;
  const load = async () => {
    try {
      const r = await api('/api/v1/rack');
      const byCubby = {};
      r.sleds.forEach((s, i) => { byCubby[s.cubby >= 0 ? s.cubby : i] = s; });
      let html = '';
      for (let c = 0; c < 32; c++) html += byCubby[c] ? cubby(byCubby[c]) : `<div class="cubby empty" data-cubby="${c}"><h4>cubby ${c}</h4>empty</div>`;
      $('#grid').innerHTML = html;
      const seen = new Set();
      const recent = [];
      for (const s of r.sleds) for (const j of ((s.jobs && s.jobs.jobs) || [])) if (!seen.has(j.job_id)) { seen.add(j.job_id); recent.push(j); }
      $('#recent').innerHTML = recent.length ? `<table id="recent-jobs"><tr><th>Job</th><th>Command</th><th>Target</th></tr>` + recent.map((j) =>
        `<tr><td class="mono"><a href="#" data-job="${esc(j.job_id)}">${esc(j.job_id)}</a></td><td class="mono">${esc(short(j.command, 60))}</td><td>${esc(short(j.target, 40))}</td></tr>`).join('') + '</table>' : '<p class="muted">no jobs</p>';
      document.querySelectorAll('[data-job]').forEach((a) => a.onclick = (ev) => { ev.preventDefault(); $('#j-id').value = a.dataset.job; showJob(); });
    } catch (e) { $('#grid').innerHTML = `<p class="muted">${esc(e.message)}</p>`; }
  };
  const showJob = async () => {
    const id = $('#j-id').value.trim();
    if (!id) return;
    try {
      const r = await api('/api/v1/rack/jobs/' + encodeURIComponent(id));
      const rows = [];
      for (const s of r.sleds) {
        const statuses = (s.job && s.job.statuses) || {};
        const own = statuses[s.baseboard] || Object.values(statuses)[0];
        rows.push(`<tr><td>${s.cubby}</td><td class="mono">${esc(s.baseboard)}</td><td>${own ? esc(own.state) : esc((s.job && s.job.error && (s.job.error.message || s.job.error)) || '-')}</td>
          <td>${own && own.skip_reason ? esc(own.skip_reason) : ''}</td><td class="mono">${own ? esc(short(own.detail || (own.exit ? JSON.stringify(own.exit) : ''), 120)) : ''}</td></tr>`);
      }
      $('#jrows').innerHTML = `<table id="job-statuses"><tr><th>Cubby</th><th>Sled</th><th>Status</th><th>Skip reason</th><th>Detail</th></tr>${rows.join('')}</table>`;
    } catch (e) { $('#jrows').innerHTML = `<p class="muted">${esc(e.message)}</p>`; }
  };
  $('#jf').onsubmit = (ev) => { ev.preventDefault(); showJob(); };
  load();
  timer = setInterval(load, 2000);
}

// ---- Routing --------------------------------------------------------------

function route() {
  clearInterval(timer);
  timer = null;
  const hash = location.hash || '#/';
  const nav = hash.startsWith('#/execution') ? 'executions' : hash.slice(2) || 'executions';
  document.querySelectorAll('[data-nav]').forEach((a) => a.classList.toggle('active', a.dataset.nav === nav));
  if (hash.startsWith('#/execution/')) return pageExecution(decodeURIComponent(hash.slice('#/execution/'.length)));
  if (hash === '#/timers') return pageTimers();
  if (hash === '#/nodes') return pageNodes();
  if (hash === '#/rack') return pageRack();
  return pageExecutions();
}

$('#token').value = sessionStorage.getItem('loom-token') || '';
$('#token').onchange = () => sessionStorage.setItem('loom-token', $('#token').value.trim());
api('/api/v1/info').then((i) => { $('#store').textContent = i.store; }).catch(() => {});
window.addEventListener('hashchange', route);
route();
