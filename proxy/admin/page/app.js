'use strict';
// rebound's admin page (docs/operations.md, "Admin page"): what GET /dependencies, /metrics,
// /dlq and /config say, refreshed every 5 s, and a replay button per dead letter. The admin
// token lives only in its input field, in this tab: it is sent as the API expects
// (Authorization: Bearer) with each write and never saved anywhere.
(() => {
  const $ = (id) => document.getElementById(id);
  const statuses = ['PENDING', 'IN_FLIGHT', 'SUCCEEDED', 'DEAD_LETTERED', 'CANCELLED', 'EXHAUSTED'];
  const hasStore = document.body.dataset.store === 'yes';

  // Every value goes in as text, never as markup: task paths and keys come from clients.
  function cell(row, text, cls) {
    const td = row.insertCell();
    td.textContent = text;
    if (cls) td.className = cls;
    return td;
  }

  function say(text, kind) {
    const m = $('message');
    m.textContent = text;
    m.className = kind || '';
  }

  function duration(ms) {
    const s = Math.floor(ms / 1000);
    if (s < 60) return s + ' s';
    if (s < 3600) return Math.floor(s / 60) + ' min';
    if (s < 86400) return (s / 3600).toFixed(1) + ' h';
    return (s / 86400).toFixed(1) + ' d';
  }

  async function problem(r) {
    const body = await r.json().catch(() => ({}));
    const e = body.error && typeof body.error === 'object' ? body.error : body;
    return r.status + ' ' + (e.message || e.type || e.error || r.statusText);
  }

  async function getJson(path) {
    const r = await fetch(path, {cache: 'no-store'});
    if (!r.ok) throw new Error(path + ': ' + await problem(r));
    return r.json();
  }

  // The concurrency limit (all workers added up), what is in flight, and the minimum RTT
  // an adaptive limit measured.
  function concurrency(c) {
    if (!c || c.mode === 'off') return 'off';
    let text = 'limit ' + c.limit + ', ' + c.in_flight + ' in flight';
    if (c.mode === 'adaptive')
      text += c.probing ? ', measuring min RTT' : ', min RTT ' + c.min_rtt_ms.toFixed(1) + ' ms';
    return text;
  }

  // The addresses ejected for failing in a row (issue 50), each with the time it has left.
  function ejected(list) {
    if (!list || list.length === 0) return 'none';
    return list.map(e => e.address + ' (' + duration(e.remaining_ms) + ' left)').join(', ');
  }

  async function loadDependencies() {
    const body = await getJson('/dependencies');
    const rows = $('dependencies').tBodies[0];
    const names = $('dependency-names');
    rows.replaceChildren();
    names.replaceChildren();
    for (const d of body.dependencies) {
      const tr = rows.insertRow();
      tr.dataset.dependency = d.name;
      cell(tr, d.name);
      cell(tr, d.breaker.state, d.breaker.state);
      cell(tr, duration(d.breaker.in_state_ms), 'num');
      cell(tr, (d.budget_utilization * 100).toFixed(1) + ' %', 'num');
      cell(tr, d.retries_in_window + ' / ' + d.retries_allowed, 'num');
      cell(tr, String(d.requests_in_window), 'num');
      cell(tr, concurrency(d.concurrency));
      cell(tr, ejected(d.ejected_addresses));
      const option = document.createElement('option');
      option.value = d.name;
      names.appendChild(option);
    }
  }

  // The counts the scheduler took last (every 10 s), as Prometheus scrapes them.
  async function loadCounts() {
    const r = await fetch('/metrics', {cache: 'no-store'});
    if (!r.ok) throw new Error('/metrics: ' + r.status);
    const counts = {};
    let over24h = null;
    let oldest = null;
    for (const line of (await r.text()).split('\n')) {
      let m = /^retry_tasks\{[^}]*status="([A-Z_]+)"[^}]*\} (\S+)$/.exec(line);
      if (m) counts[m[1]] = Number(m[2]);
      m = /^retry_tasks_pending_over_24h\{[^}]*\} (\S+)$/.exec(line);
      if (m) over24h = Number(m[1]);
      m = /^retry_task_oldest_pending_age_seconds\{[^}]*\} (\S+)$/.exec(line);
      if (m) oldest = Number(m[1]);
    }
    const row = $('tasks').tBodies[0].rows[0];
    row.replaceChildren();
    for (const s of statuses) cell(row, s in counts ? String(counts[s]) : '-', 'num').dataset.status = s;
    cell(row, over24h === null ? '-' : String(over24h), 'num');
    cell(row, oldest === null ? '-' : (oldest > 0 ? duration(oldest * 1000) : 'none'), 'num');
  }

  function dlqQuery() {
    const q = new URLSearchParams({limit: '100'});
    const dependency = $('f-dependency').value.trim();
    if (dependency) q.set('dependency', dependency);
    for (const [input, name] of [['f-since', 'since'], ['f-until', 'until']]) {
      const v = $(input).value;
      if (v) q.set(name, new Date(v).toISOString());
    }
    return '/dlq?' + q;
  }

  async function loadDlq() {
    const body = await getJson(dlqQuery());
    const rows = $('dlq').tBodies[0];
    rows.replaceChildren();
    for (const t of body.items) {
      const tr = rows.insertRow();
      tr.dataset.task = t.id;
      cell(tr, t.id).className = 'id';
      cell(tr, t.dependency);
      cell(tr, t.method + ' ' + t.path);
      cell(tr, String(t.attempts), 'num');
      cell(tr, t.created_at);
      cell(tr, t.dead_lettered_at);
      cell(tr, t.idempotency_key);
      const button = document.createElement('button');
      button.type = 'button';
      button.textContent = 'Replay';
      button.className = 'replay';
      button.addEventListener('click', () => replay(t.id, button));
      cell(tr, '').appendChild(button);
    }
    $('dlq-note').textContent = body.items.length === 0 ?
        'No dead letters match.' :
        body.items.length + ' dead letter(s)' + (body.next ? ', the first 100 shown: narrow the filter' : '') + '.';
  }

  async function replay(id, button) {
    button.disabled = true;
    const headers = {};
    const token = $('token').value;
    if (token) headers.Authorization = 'Bearer ' + token;
    try {
      const r = await fetch('/dlq/' + encodeURIComponent(id) + '/replay', {method: 'POST', headers, cache: 'no-store'});
      if (r.status === 202) {
        say('Replayed ' + id + ': due now, with its idempotency key and a fresh retry window.', 'ok');
        await refresh();
        return;
      }
      say(r.status === 401 ? 'Replay refused: the admin token is missing or wrong (admin.token_file).' :
                             'Replay of ' + id + ' failed: ' + await problem(r),
          'error');
    } catch (e) {
      say('Replay of ' + id + ' failed: ' + e.message, 'error');
    }
    button.disabled = false;
  }

  async function loadConfig() {
    const config = await getJson('/config');
    $('config').textContent = JSON.stringify(config, null, 2);
    if (config.service) $('service').textContent = config.service;
  }

  async function refresh() {
    const loads = [loadDependencies(), loadCounts()];
    if (hasStore) loads.push(loadDlq());
    const failed = (await Promise.allSettled(loads)).filter((r) => r.status === 'rejected');
    if (failed.length) say('Could not read the admin API: ' + failed.map((r) => r.reason.message).join('; '), 'error');
    $('updated').textContent = 'updated ' + new Date().toLocaleTimeString();
  }

  $('dlq-filter').addEventListener('submit', (e) => {
    e.preventDefault();
    loadDlq().catch((err) => say(err.message, 'error'));
  });
  $('f-clear').addEventListener('click', () => {
    for (const id of ['f-dependency', 'f-since', 'f-until']) $(id).value = '';
    loadDlq().catch((err) => say(err.message, 'error'));
  });
  if (!hasStore) {
    for (const id of ['tasks', 'dlq-filter', 'dlq']) $(id).hidden = true;
    $('dlq-note').textContent = 'No task store: this instance hands nothing over (store: in the config).';
  }
  loadConfig().catch((err) => say(err.message, 'error'));
  refresh();
  setInterval(refresh, 5000);
})();
