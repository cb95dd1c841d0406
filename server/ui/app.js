// redrive dashboard: a single page over the REST API (/v1). No framework,
// no build step, no external requests. Every value coming from the API is
// put in the page as text (never as HTML): job payloads and error
// messages are data from outside.
'use strict';

const app = document.getElementById('app');
const dialog = document.getElementById('dialog');
const statusEl = document.getElementById('status');

// ---- DOM helpers -------------------------------------------------------

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  setAttrs(el, attrs);
  append(el, children);
  return el;
}

const SVGNS = 'http://www.w3.org/2000/svg';
function s(tag, attrs, ...children) {
  const el = document.createElementNS(SVGNS, tag);
  setAttrs(el, attrs);
  append(el, children);
  return el;
}

function setAttrs(el, attrs) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'style') for (const [p, val] of Object.entries(v)) el.style.setProperty(p, val);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
}

function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

function badge(text, kind) {
  return h('span', { class: 'badge b-' + (kind || text) }, text);
}

// ---- formatting --------------------------------------------------------

const nf = new Intl.NumberFormat();
const fmtN = (n) => nf.format(n || 0);
const pad = (n) => String(n).padStart(2, '0');

function fmtTime(iso) {
  if (!iso) return '—';
  const d = new Date(iso);
  if (isNaN(d)) return iso;
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

function fmtAgo(iso) {
  if (!iso) return '';
  const sec = (Date.now() - new Date(iso).getTime()) / 1000;
  const a = Math.abs(sec);
  // Each unit is used while it rounds below the next one: 59m50s is 1h,
  // not 60m.
  const v = a < 59.5 ? `${Math.round(a)}s` : a < 3570 ? `${Math.round(a / 60)}m` : a < 84600 ? `${Math.round(a / 3600)}h` : `${Math.round(a / 86400)}d`;
  return sec >= 0 ? `${v} ago` : `in ${v}`;
}

// fmtBytes formats a number of bytes with binary units (1.5 MiB).
function fmtBytes(n) {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB', 'PiB', 'EiB'];
  let v = Math.max(Number(n) || 0, 0);
  let i = 0;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return i === 0 ? `${v} B` : `${v.toFixed(v < 10 ? 2 : v < 100 ? 1 : 0)} ${units[i]}`;
}

// progressText says how far a job's progress is: bytes of a known total
// with the percentage, or a count when the total is unknown.
function progressText(p) {
  if (p.total > 0) {
    const pct = Math.min(100, Math.floor((p.done / p.total) * 100));
    return `${pct}% · ${fmtBytes(p.done)} of ${fmtBytes(p.total)}`;
  }
  return `${fmtN(p.done)} done`;
}

// progressBar shows a job's progress (see Job.progress in the API): a bar
// (indeterminate when the total is unknown) and its text; mini is the
// jobs table's small bar.
function progressBar(p, mini) {
  const known = p.total > 0;
  const bar = h('progress', known ? { max: p.total, value: Math.min(p.done, p.total) } : {});
  const exact = `${fmtN(p.done)} of ${known ? fmtN(p.total) : 'unknown total'}, sent ${fmtTime(p.at)}`;
  return h('span', { class: mini ? 'job-progress mini' : 'job-progress', title: exact, 'data-progress-done': p.done, 'data-progress-total': p.total },
    bar, h('span', { class: 'progress-text' }, mini && known ? `${Math.min(100, Math.floor((p.done / p.total) * 100))}%` : progressText(p)));
}

// fmtMs formats a duration given in milliseconds (the API's unit).
function fmtMs(ms) {
  if (ms === undefined || ms === null) return '—';
  if (ms < 1) return `${Math.round(ms * 1000)}µs`;
  if (ms < 1000) return `${Math.round(ms)}ms`;
  const sec = ms / 1000;
  if (sec < 60) return `${sec.toFixed(sec < 10 ? 2 : 1)}s`;
  if (sec < 3600) return `${Math.floor(sec / 60)}m${pad(Math.round(sec % 60))}s`;
  return `${Math.floor(sec / 3600)}h${pad(Math.round((sec % 3600) / 60))}m`;
}

function shortFP(fp) { return fp ? fp.slice(0, 10) : '—'; }

// traceLink shows a trace id: a link to the trace viewer when serve has a
// --trace-url-template (the redrive-trace-url meta element), plain text
// otherwise. The id is 32 hex digits: nothing else is put in the URL.
function traceLink(id) {
  const meta = document.querySelector('meta[name="redrive-trace-url"]');
  const tmpl = meta ? meta.content : '';
  if (!tmpl || !/^[0-9a-f]{32}$/.test(id)) return h('span', { class: 'mono' }, id);
  return h('a', { class: 'mono', href: tmpl.split('{trace_id}').join(id), target: '_blank', rel: 'noopener noreferrer' }, id);
}

// ---- API ---------------------------------------------------------------

class APIError extends Error {
  constructor(status, body) {
    const e = (body && body.error) || {};
    super(e.message || `HTTP ${status}`);
    this.status = status;
    this.code = e.code;
    this.field = e.field;
  }
}

async function request(method, path, body) {
  const init = { method, credentials: 'same-origin', headers: { Accept: 'application/json' } };
  if (method !== 'GET') init.headers['X-Redrive-Request'] = '1';
  if (body !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const res = await fetch(path, init);
  if (res.status === 401) {
    // The session ended: the page shows the login form again.
    location.reload();
    throw new APIError(401, { error: { message: 'signed out' } });
  }
  let data = null;
  const text = await res.text();
  if (text) {
    try { data = JSON.parse(text); } catch { data = null; }
  }
  if (!res.ok) throw new APIError(res.status, data);
  return data;
}

const api = {
  get: (p) => request('GET', p),
  post: (p, b) => request('POST', p, b === undefined ? {} : b),
  put: (p, b) => request('PUT', p, b),
  del: (p) => request('DELETE', p),
};

function qs(params) {
  const u = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (Array.isArray(v)) v.forEach((x) => x && u.append(k, x));
    else if (v !== undefined && v !== null && v !== '') u.set(k, v);
  }
  const str = u.toString();
  return str ? '?' + str : '';
}

// ---- routing -----------------------------------------------------------

// extraPages holds the pages defined in the dashboard's other scripts
// (schedules.js, operations.js, breakers.js), by the first part of their
// path: registerPage('operations', { page: (parts, params) => element,
// nav, refresh, liveOnly }) serves #/operations and #/operations/... .
const extraPages = {};
function registerPage(name, def) { extraPages[name] = def; }

let refreshTimer = null;
let renderSeq = 0;

function parseHash() {
  const raw = location.hash.replace(/^#/, '') || '/';
  const [path, query] = raw.split('?');
  return { parts: path.split('/').filter(Boolean).map(decodeURIComponent), params: new URLSearchParams(query || '') };
}

function go(hash) { location.hash = hash; }

async function render() {
  clearInterval(refreshTimer);
  refreshTimer = null;
  const seq = ++renderSeq;
  const { parts, params } = parseHash();
  // refresh: seconds between renders of a page that shows live state.
  // liveOnly: refresh only while the page shows something live
  // (data-live: a job that has not ended).
  let page, nav, refresh = 0, liveOnly = false;
  if (parts.length === 0) { page = () => overview(); nav = 'overview'; refresh = 5; }
  else if (parts[0] === 'jobs' && parts[1]) { page = () => jobPage(parts[1]); nav = 'jobs'; refresh = 2; liveOnly = true; }
  else if (parts[0] === 'jobs') { page = () => jobsPage(params); nav = 'jobs'; }
  else if (parts[0] === 'dlq' && parts[1]) { page = () => groupPage(parts[1], params); nav = 'dlq'; }
  else if (parts[0] === 'dlq') { page = () => dlqPage(params); nav = 'dlq'; }
  else if (parts[0] === 'workers' && !parts[1]) { page = () => workersPage(); nav = 'workers'; refresh = 5; }
  else if (extraPages[parts[0]]) {
    const x = extraPages[parts[0]];
    page = () => x.page(parts.slice(1), params); nav = x.nav || parts[0]; refresh = x.refresh || 0; liveOnly = !!x.liveOnly;
  }
  else { page = async () => h('div', { class: 'empty' }, 'No such page. ', h('a', { href: '#/' }, 'Overview')); nav = ''; }
  for (const a of document.querySelectorAll('[data-nav]')) a.classList.toggle('active', a.dataset.nav === nav);
  await show(page, seq);
  if (refresh && seq === renderSeq) autoRefresh(refresh, page, seq, liveOnly);
}

// show renders a page into #app, unless the user navigated away meanwhile.
async function show(page, seq) {
  let el;
  try {
    el = await page();
  } catch (e) {
    el = h('div', { class: 'card error', role: 'alert' }, `Could not load this page: ${e.message}`);
  }
  if (seq !== renderSeq) return;
  app.replaceChildren(el);
  statusEl.textContent = `updated ${fmtTime(new Date().toISOString()).slice(11)}`;
}

// autoRefresh renders page again every few seconds, as long as the user
// stays on it (render starts a new sequence, and clears the timer, on
// every navigation) and no dialog is open; with liveOnly, only while the
// page shows something live (data-live: a job that has not ended).
function autoRefresh(seconds, page, seq, liveOnly) {
  clearInterval(refreshTimer);
  refreshTimer = setInterval(() => {
    if (seq !== renderSeq || dialog.open) return;
    if (liveOnly && !app.querySelector('[data-live]')) return;
    show(page, seq);
  }, seconds * 1000);
}

window.addEventListener('hashchange', render);

// ---- overview ----------------------------------------------------------

const STATES = ['pending', 'scheduled', 'running', 'completed', 'dead', 'canceled'];
const CLASS_COLORS = {
  transient: 'var(--warn)', rate_limited: 'var(--violet)', permanent: 'var(--bad)',
  needs_auth: 'var(--info)', unknown: 'var(--grey)',
};

async function overview() {
  const [queues, series, breakers, managed, kept] = await Promise.all([
    api.get('/v1/queues'),
    api.get('/v1/stats/series?since=1h'),
    api.get('/v1/breakers'),
    api.get('/v1/amqp/queues'),
    api.get('/v1/kafka/topics'),
  ]);
  const amqpQueues = (managed && managed.queues) || [];
  const kafkaTopics = (kept && kept.topics) || [];
  const totals = Object.fromEntries(STATES.map((st) => [st, 0]));
  for (const q of queues.queues || []) {
    for (const [st, n] of Object.entries(q.jobs || {})) totals[st] = (totals[st] || 0) + n;
  }
  const tiles = h('div', { class: 'tiles' }, STATES.map((st) =>
    h('a', { class: 'tile', href: st === 'dead' ? '#/dlq' : `#/jobs?state=${st}`, 'data-state': st },
      h('div', { class: 'n' }, fmtN(totals[st])), h('div', { class: 'l' }, st))));

  return h('div', {},
    h('h1', {}, 'Overview'),
    tiles,
    h('div', { class: 'row' },
      h('section', { class: 'card chart', id: 'chart-outcomes' },
        h('h2', {}, 'Outcomes per minute, last hour'),
        outcomeChart(series)),
      h('section', { class: 'card chart', id: 'chart-classes' },
        h('h2', {}, 'Failures by class, last hour'),
        classChart(series))),
    h('div', { class: 'row' },
      h('section', { class: 'card', id: 'queues' }, h('h2', {}, 'Queues'), queueTable(queues)),
      h('section', { class: 'card', id: 'breakers' }, h('h2', {}, 'Circuit breakers'), breakerTable(breakers))),
    amqpQueues.length > 0 && amqpSection(amqpQueues),
    kafkaTopics.length > 0 && kafkaSection(kafkaTopics));
}

function queueTable(queues) {
  const rows = queues.queues || [];
  if (rows.length === 0) return h('p', { class: 'empty' }, 'No queue has jobs yet.');
  return h('table', {},
    h('thead', {}, h('tr', {}, h('th', {}, 'Queue'), STATES.map((st) => h('th', { class: 'num' }, st)),
      h('th', { class: 'num', title: 'How long the oldest due job has waited since it was due' }, 'latency'), h('th', {}, ''))),
    h('tbody', {}, rows.map((q) => h('tr', { 'data-queue': q.name },
      h('td', {}, h('a', { href: `#/jobs?queue=${encodeURIComponent(q.name)}` }, q.name), ' ',
        q.paused && h('span', { title: `paused ${fmtTime(q.paused_at)}` }, badge('paused'))),
      STATES.map((st) => h('td', { class: 'num' }, fmtN((q.jobs || {})[st]))),
      h('td', { class: 'num', 'data-latency-ms': q.latency_ms || 0 }, q.oldest_due_at ? fmtMs(q.latency_ms) : '—',
        q.unconsumed && [' ', h('span', { title: 'Due jobs and no live worker serves this queue' }, badge('unconsumed', 'dead'))]),
      h('td', {}, h('button', { class: 'small', 'data-needs': 'operate', 'data-action': q.paused ? 'resume' : 'pause', onclick: () => togglePause(q) },
        q.paused ? 'Resume' : 'Pause'))))));
}

async function togglePause(q) {
  const verb = q.paused ? 'resume' : 'pause';
  const ok = await confirmDialog(`${q.paused ? 'Resume' : 'Pause'} queue ${q.name}?`,
    q.paused ? 'Workers will fetch its jobs again.'
      : 'Workers stop fetching its jobs; running jobs finish, pending jobs wait. Nothing is lost.',
    q.paused ? 'Resume' : 'Pause', q.paused ? 'primary' : 'danger');
  if (!ok) return;
  try {
    await api.post(`/v1/queues/${encodeURIComponent(q.name)}/${verb}`);
  } catch (e) {
    await messageDialog('Failed', e.message);
  }
  render();
}

function breakerTable(list) {
  if (!list || list.length === 0) return h('p', { class: 'empty' }, 'No circuit breaker has been used yet.');
  return h('table', {},
    h('thead', {}, h('tr', {}, h('th', {}, 'Dependency'), h('th', {}, 'State'), h('th', { class: 'num' }, 'Failures'),
      h('th', { class: 'num' }, 'Trips'), h('th', {}, 'Opened by'), h('th', {}, 'Opened'), h('th', {}, 'Probe at'))),
    h('tbody', {}, list.map((b) => h('tr', { 'data-breaker': b.name },
      h('td', {}, h('a', { href: '#/breakers' }, b.name)), h('td', {}, badge(b.state.replace('_', '-'), b.state)),
      h('td', { class: 'num' }, fmtN(b.failures)), h('td', { class: 'num' }, fmtN(b.trips)), h('td', {}, b.opened_by || '—'),
      h('td', {}, b.opened_at ? fmtAgo(b.opened_at) : '—'), h('td', {}, b.ready_at ? fmtAgo(b.ready_at) : '—')))));
}

// ---- RabbitMQ queues ----------------------------------------------------
//
// The RabbitMQ queues `redrive serve --amqp-url` manages for consumers in
// any language (GET /v1/amqp/queues): where their messages wait, and what
// the router and the dead-letter keeper did.

// amqpSamples keeps, per managed queue, the router's counters as each
// poll of the overview found them over the last minute or so: the rates
// of retries and dead letters are computed from them, in the browser.
const amqpSamples = new Map();
const RATE_WINDOW_MS = 60000;

// amqpRates records a poll of mq's counters and returns its retries and
// dead letters per minute since the oldest sample kept, or null until two
// polls (at least a second apart) exist.
function amqpRates(mq) {
  const key = `${mq.broker}\n${mq.queue}`;
  const now = Date.now();
  const r = mq.router || {};
  const cur = { t: now, retried: r.retried || 0, dead: r.dead || 0 };
  let list = amqpSamples.get(key) || [];
  const last = list[list.length - 1];
  // Counters that went back: serve restarted, and counts from zero again.
  if (last && (cur.retried < last.retried || cur.dead < last.dead)) list = [];
  // A poll right after another (a navigation) replaces it.
  if (list.length && now - list[list.length - 1].t < 1000) list.pop();
  list.push(cur);
  // The base is the newest sample at least a window old, if any.
  while (list.length > 2 && now - list[1].t >= RATE_WINDOW_MS) list.shift();
  amqpSamples.set(key, list);
  if (list.length < 2) return null;
  const base = list[0];
  const min = (now - base.t) / 60000;
  return { retried: (cur.retried - base.retried) / min, dead: (cur.dead - base.dead) / min };
}

function fmtRate(v) {
  if (v === null || v === undefined || !isFinite(v)) return '—';
  if (v === 0) return '0/min';
  return `${v < 10 ? v.toFixed(1) : fmtN(Math.round(v))}/min`;
}

// fmtDelay formats a delay queue's delay, given in milliseconds, in its
// largest whole unit: 10ms, 2s, 20s, 5m, 1h.
function fmtDelay(delay) {
  const ms = Math.round(delay || 0);
  for (const [unit, n] of [['h', 3600000], ['m', 60000], ['s', 1000]]) {
    if (ms >= n && ms % n === 0) return `${ms / n}${unit}`;
  }
  return ms >= 1000 ? fmtMs(ms) : `${ms}ms`;
}

const AMQP_ROLES = {
  work: { order: 0, label: 'work queue' },
  failed: { order: 1, label: 'failures' },
  tier: { order: 2, label: 'delay' },
  dlq: { order: 3, label: 'dead letters' },
};

function amqpSection(list) {
  return h('section', { class: 'card', id: 'amqp' },
    h('h2', {}, 'RabbitMQ queues'),
    list.map(amqpQueue));
}

// amqpQueue shows one managed queue: its facts and rates, then the depth
// of each queue of its topology, in the order a message goes through
// them: the work queue, the failure queue, the delay queues, the DLQ.
function amqpQueue(mq) {
  const rates = amqpRates(mq);
  const order = (d) => (AMQP_ROLES[d.role] ? AMQP_ROLES[d.role].order : 9);
  const depths = (mq.queues || []).slice().sort((a, b) => order(a) - order(b) || (a.delay || 0) - (b.delay || 0));
  const work = depths.find((d) => d.role === 'work');
  const dlq = depths.find((d) => d.role === 'dlq');
  const r = mq.router || {};
  const kept = mq.dead_letters === 'store'
    ? h('span', { 'data-kept': 'store' }, 'in the store, as ',
      h('a', { href: '#/dlq' + qs({ queue: mq.queue }) }, `dead jobs of queue ${mq.queue}`),
      mq.keeper ? h('span', { class: 'muted' }, ` (${fmtN(mq.keeper.kept)} stored since serve started)`) : '')
    : h('span', { 'data-kept': 'broker' }, 'in the broker, in ', h('span', { class: 'mono' }, dlq ? dlq.name : `${mq.queue}-dlq`));
  const kv = (k, v, attrs) => [h('dt', {}, k), h('dd', attrs || {}, v)];
  return h('div', { class: 'amqp-queue', 'data-amqp-queue': mq.queue },
    h('h3', {}, h('span', { class: 'mono' }, mq.queue), mq.broker && h('span', { class: 'muted' }, ` on ${mq.broker}`)),
    mq.error && h('p', { class: 'error', role: 'alert', 'data-amqp-error': '' }, `RabbitMQ could not be asked: ${mq.error}`),
    h('div', { class: 'row' },
      h('dl', { class: 'kv' },
        kv('Consumers', work && !work.missing ? fmtN(work.consumers) : '—',
          { 'data-stat': 'consumers', title: 'Consumers subscribed to the work queue' }),
        kv('Retries', fmtRate(rates && rates.retried),
          { 'data-rate': 'retried', title: `${fmtN(r.retried)} retries scheduled since serve started` }),
        kv('Dead letters', fmtRate(rates && rates.dead),
          { 'data-rate': 'dead', title: `${fmtN(r.dead)} messages dead-lettered since serve started` }),
        kv('Kept', kept),
        mq.failure_exchange && kv('Failures to', h('span', { class: 'mono' }, mq.failure_exchange), { title: 'The exchange consumers report failures to' })),
      depths.length > 0 && h('table', { class: 'amqp-depths' },
        h('thead', {}, h('tr', {}, h('th', {}, 'Broker queue'), h('th', {}, 'Role'), h('th', {}, 'Delay'),
          h('th', { class: 'num', title: 'Messages ready (not those held by consumers)' }, 'Ready'), h('th', { class: 'num' }, 'Consumers'))),
        h('tbody', {}, depths.map((d) => h('tr', { 'data-broker-queue': d.name, 'data-role': d.role },
          h('td', { class: 'mono' }, d.name, d.missing && [' ', h('span', { title: 'The queue does not exist on the broker' }, badge('missing', 'dead'))]),
          h('td', {}, (AMQP_ROLES[d.role] || { label: d.role }).label),
          h('td', { class: 'delay' }, d.role === 'tier' ? fmtDelay(d.delay) : ''),
          h('td', { class: 'num', 'data-messages': d.messages || 0 }, d.missing ? '—' : fmtN(d.messages)),
          h('td', { class: 'num' }, d.missing ? '—' : fmtN(d.consumers))))))));
}

// ---- Kafka topics ------------------------------------------------------
//
// The Kafka topics whose dead letters `redrive serve --kafka-topics` keeps
// in the store (GET /v1/kafka/topics): the offsets each topic of their
// topology spans (an upper bound on its records: transaction markers and
// aborted records take offsets too), the dead letters of the DLT
// (records, counted), the consumers' lag, and what the keeper stored.

const KAFKA_ROLES = {
  main: { order: 0, label: 'main topic' },
  tier: { order: 1, label: 'retry tier' },
  dlt: { order: 2, label: 'dead letters' },
};

function kafkaSection(list) {
  return h('section', { class: 'card', id: 'kafka' },
    h('h2', {}, 'Kafka topics'),
    list.map(kafkaTopic));
}

// fmtLag shows a topic's lag and the group it is of, or a dash when no
// group consumes it.
function fmtLag(c) {
  if (!c || c.lag === undefined || c.lag === null) return '—';
  return fmtN(c.lag);
}

// kafkaTopic shows one kept topic: its facts, then each topic of its
// topology in the order a record goes through them: the main topic, the
// retry tiers by delay, the dead-letter topic.
function kafkaTopic(kt) {
  const rows = [Object.assign({ role: 'main' }, kt.main || {})]
    .concat((kt.tiers || []).map((t) => Object.assign({ role: 'tier' }, t)))
    .concat([Object.assign({ role: 'dlt' }, kt.dlt || {})]);
  const kv = (k, v, attrs) => [h('dt', {}, k), h('dd', attrs || {}, v)];
  const dlt = kt.dlt || {};
  const brokers = (kt.brokers || []).join(', ');
  return h('div', { class: 'kafka-topic', 'data-kafka-topic': kt.topic },
    h('h3', {}, h('span', { class: 'mono' }, kt.topic), brokers && h('span', { class: 'muted' }, ` on ${brokers}`)),
    kt.error && h('p', { class: 'error', role: 'alert', 'data-kafka-error': '' }, `Kafka could not be asked: ${kt.error}`),
    h('div', { class: 'row' },
      h('dl', { class: 'kv' },
        kv('Consumer group', kt.group ? h('span', { class: 'mono' }, kt.group) : '—', { 'data-stat': 'group' }),
        kv('Lag', fmtLag(kt.main), { 'data-stat': 'lag', title: 'Offsets of the main topic the consumer group is behind: an upper bound on the records it has not consumed yet' }),
        kv('Dead letters', h('span', { 'data-kept': 'store' }, 'in the store, as ',
          h('a', { href: '#/dlq' + qs({ queue: kt.topic }) }, `dead jobs of queue ${kt.topic}`),
          kt.keeper ? h('span', { class: 'muted' }, ` (${fmtN(kt.keeper.kept)} stored since serve started)`) : '')),
        kv('Not stored yet', fmtLag(dlt), { 'data-stat': 'unkept', title: dlt.records === undefined ?
          'Offsets of the DLT the keeper is behind (its dead letters are not counted yet): an upper bound on the dead letters not stored yet' :
          'Dead letters of the DLT the keeper has not stored yet' })),
      h('table', { class: 'kafka-topics' },
        h('thead', {}, h('tr', {}, h('th', {}, 'Kafka topic'), h('th', {}, 'Role'), h('th', {}, 'Delay'),
          h('th', { class: 'num', title: 'End offsets minus start offsets: an upper bound on the records the topic retains, not a count (transaction markers and aborted records take offsets too)' }, 'Offsets'),
          h('th', { class: 'num', title: 'Records a read_committed reader sees: counted on the dead-letter topic (its dead letters)' }, 'Records'),
          h('th', { class: 'num', title: 'How far the group is behind: offsets on the main topic and the tiers, records on a dead-letter topic whose records are counted' }, 'Lag'))),
        h('tbody', {}, rows.map((c) => h('tr', { 'data-kafka-row': c.topic, 'data-role': c.role },
          h('td', { class: 'mono' }, c.topic, c.missing && [' ', h('span', { title: 'The topic does not exist on the cluster' }, badge('missing', 'dead'))]),
          h('td', {}, KAFKA_ROLES[c.role].label),
          h('td', { class: 'delay' }, c.role === 'tier' ? fmtDelay(c.delay) : ''),
          h('td', { class: 'num', 'data-offsets': c.offsets || 0 }, c.missing ? '—' : fmtN(c.offsets)),
          h('td', { class: 'num', 'data-records': c.records === undefined ? '' : c.records },
            c.missing || c.records === undefined ? '—' : fmtN(c.records)),
          h('td', { class: 'num', title: c.lag_group ? `group ${c.lag_group}` : '' }, c.missing ? '—' : fmtLag(c))))))));
}

// minutes returns the 60 minute slots ending with the current minute and
// the points of the series indexed by slot.
function minutes(series) {
  const now = new Date();
  now.setSeconds(0, 0);
  const start = now.getTime() - 59 * 60000;
  const slots = Array.from({ length: 60 }, (_, i) => ({ t: start + i * 60000, p: null }));
  for (const p of series.points || []) {
    const i = Math.round((new Date(p.at).getTime() - start) / 60000);
    if (i >= 0 && i < 60) slots[i].p = p;
  }
  return slots;
}

function outcomeChart(series) {
  const keys = [
    { key: 'succeeded', label: 'completed', color: 'var(--ok)' },
    { key: 'retried', label: 'retried', color: 'var(--warn)' },
    { key: 'dead', label: 'dead', color: 'var(--bad)' },
  ];
  const slots = minutes(series).map((sl) => ({ t: sl.t, v: keys.map((k) => (sl.p && sl.p.counts && sl.p.counts[k.key]) || 0), partial: sl.p && sl.p.partial }));
  return barChart(slots, keys);
}

function classChart(series) {
  const slots = minutes(series);
  const names = new Set();
  for (const sl of slots) for (const c of Object.keys((sl.p && sl.p.failed) || {})) names.add(c);
  const order = Object.keys(CLASS_COLORS);
  const keys = [...names].sort((a, b) => order.indexOf(a) - order.indexOf(b))
    .map((c) => ({ key: c, label: c.replace('_', ' '), color: CLASS_COLORS[c] || 'var(--grey)' }));
  if (keys.length === 0) {
    return h('div', {}, barChart(slots.map((sl) => ({ t: sl.t, v: [] })), []), h('p', { class: 'muted' }, 'No failed attempt in the last hour.'));
  }
  return barChart(slots.map((sl) => ({ t: sl.t, v: keys.map((k) => (sl.p && sl.p.failed && sl.p.failed[k.key]) || 0) })), keys);
}

// barChart draws stacked bars, one per minute slot, with a legend giving
// each series' total.
function barChart(slots, keys) {
  const W = 600, H = 190, L = 38, B = 18, T = 8;
  const max = Math.max(1, ...slots.map((sl) => sl.v.reduce((a, b) => a + b, 0)));
  const top = niceMax(max);
  const bw = (W - L) / slots.length;
  const y = (v) => H - B - (v / top) * (H - B - T);
  const svg = s('svg', { viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: 'none', role: 'img', 'aria-label': keys.map((k) => k.label).join(', ') + ' per minute' });
  for (const f of [0, 0.5, 1]) {
    const v = top * f;
    svg.append(s('line', { class: 'axis', x1: L, x2: W, y1: y(v), y2: y(v) }));
    svg.append(s('text', { x: L - 4, y: y(v) + 3, 'text-anchor': 'end' }, fmtN(v)));
  }
  slots.forEach((sl, i) => {
    let base = 0;
    sl.v.forEach((v, k) => {
      if (!v) return;
      const r = s('rect', { x: L + i * bw + 1, width: Math.max(1, bw - 2), y: y(base + v), height: y(base) - y(base + v), fill: keys[k].color, 'data-series': keys[k].key },
        s('title', {}, `${new Date(sl.t).toTimeString().slice(0, 5)} ${keys[k].label}: ${fmtN(v)}${sl.partial ? ' (minute in progress)' : ''}`));
      svg.append(r);
      base += v;
    });
    if (i % 15 === 0 || i === slots.length - 1) {
      const last = i === slots.length - 1;
      svg.append(s('text', { x: last ? W : L + i * bw + bw / 2, y: H - 4, 'text-anchor': last ? 'end' : 'middle' },
        new Date(sl.t).toTimeString().slice(0, 5)));
    }
  });
  const totals = keys.map((_, k) => slots.reduce((a, sl) => a + (sl.v[k] || 0), 0));
  return h('div', {}, svg, h('div', { class: 'legend' }, keys.map((k, i) => h('span', { style: { '--c': k.color }, 'data-total': k.key }, `${k.label} ${fmtN(totals[i])}`))));
}

function niceMax(v) {
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 5, 10]) if (v <= m * p) return m * p;
  return 10 * p;
}

// ---- jobs --------------------------------------------------------------

async function jobsPage(params) {
  const f = {
    state: params.get('state') || '', queue: params.get('queue') || '', kind: params.get('kind') || '',
    class: params.get('class') || '', q: params.get('q') || '', error_prefix: params.get('error_prefix') || '',
    match: params.get('match') || '',
  };
  const cursor = params.get('cursor') || '';
  const res = await api.get('/v1/jobs' + qs({ ...f, cursor, limit: 50 }));
  const form = filterForm(f, true, (nf) => go('#/jobs' + qs(nf)));
  const next = res.next ? h('a', { href: '#/jobs' + qs({ ...f, cursor: res.next }) }, 'Next page →') : null;
  const idInput = h('input', { id: 'goto-job', type: 'number', min: '1', step: '1', placeholder: 'job id', 'aria-label': 'job id', style: { width: '9em' } });
  const gotoJob = h('form', { class: 'goto', onsubmit: (ev) => {
    ev.preventDefault();
    if (/^\d+$/.test(idInput.value)) go(`#/jobs/${idInput.value}`);
  } }, idInput, h('button', { type: 'submit' }, 'Open job'));
  return h('div', {},
    h('div', { class: 'actions', style: { 'justify-content': 'space-between' } }, h('h1', {}, 'Jobs'), gotoJob),
    h('div', { class: 'card' }, form,
      res.jobs.length === 0 ? h('p', { class: 'empty' }, 'No job matches.') : jobTable(res.jobs),
      h('div', { class: 'pager' }, cursor && h('a', { href: '#/jobs' + qs(f) }, '← First page'), next)));
}

function filterForm(f, withState, submit) {
  const field = (name, label, el) => h('label', {}, label, el);
  const inputs = {
    queue: h('input', { name: 'queue', value: f.queue, size: 12 }),
    kind: h('input', { name: 'kind', value: f.kind, size: 12 }),
    class: h('select', { name: 'class' }, h('option', { value: '' }, 'any'),
      Object.keys(CLASS_COLORS).map((c) => h('option', { value: c, selected: f.class === c }, c))),
    q: h('input', { name: 'q', value: f.q, placeholder: 'error contains…', size: 22 }),
    // The start of the error, case-sensitive (the API's error_prefix):
    // indexed for dead jobs, so fast at any depth.
    error_prefix: h('input', { name: 'error_prefix', value: f.error_prefix || '', placeholder: 'error starts with…', size: 18,
      title: 'jobs whose last error starts with this text (case-sensitive)' }),
  };
  if (withState) {
    inputs.state = h('select', { name: 'state' }, h('option', { value: '' }, 'any'),
      STATES.map((st) => h('option', { value: st, selected: f.state === st }, st)));
    // The payload search of the API's match (the CLI's --match).
    inputs.match = h('input', { name: 'match', value: f.match || '', placeholder: 'payload.customer_id=42', size: 22,
      title: 'jobs whose payload holds this value: payload.FIELD=VALUE' });
  }
  return h('form', {
    class: 'filters', onsubmit: (ev) => {
      ev.preventDefault();
      const nf = {};
      // A prefix keeps its spaces: "cause " is not "cause".
      for (const [k, el] of Object.entries(inputs)) nf[k] = k === 'error_prefix' ? el.value : el.value.trim();
      submit(nf);
    },
  },
  withState && field('state', 'State', inputs.state),
  field('queue', 'Queue', inputs.queue), field('kind', 'Kind', inputs.kind),
  field('class', 'Last error class', inputs.class), field('q', 'Error text', inputs.q),
  field('error_prefix', 'Error starts with', inputs.error_prefix),
  withState && field('match', 'Payload', inputs.match),
  h('button', { type: 'submit', class: 'primary' }, 'Filter'));
}

function jobTable(jobs, select) {
  return h('table', { class: 'jobs' },
    h('thead', {}, h('tr', {}, select && h('th', {}, select.all), h('th', { class: 'num' }, 'ID'), h('th', {}, 'Queue'), h('th', {}, 'Kind'),
      h('th', {}, 'Summary'), h('th', {}, 'State'), h('th', { class: 'num' }, 'Attempt'), h('th', {}, 'Last error'), h('th', {}, 'When'))),
    h('tbody', {}, jobs.map((j) => h('tr', { class: 'click', 'data-job': j.id, onclick: (ev) => { if (ev.target.tagName !== 'INPUT') go(`#/jobs/${j.id}`); } },
      select && h('td', {}, select.box(j)),
      h('td', { class: 'num' }, h('a', { href: `#/jobs/${j.id}` }, j.id)),
      h('td', {}, j.queue), h('td', {}, j.kind),
      h('td', { class: 'clip mono summary', title: j.summary || '' }, j.summary || ''),
      h('td', {}, badge(j.state), j.state === 'running' && j.progress && progressBar(j.progress, true),
        j.blocked_dependents > 0 && h('span', { class: 'muted blocked-deps', title: 'workflow jobs blocked until this job is redriven and completes' },
          ` ${fmtN(j.blocked_dependents)} blocked`)),
      h('td', { class: 'num' }, j.attempt),
      lastErrorCell(j),
      whenCell(j)))));
}

// lastErrorCell shows a job's last error; a completed job's is a failure
// it got past, not a current one.
function lastErrorCell(j) {
  if (!j.last_error) return h('td', { class: 'clip' });
  const before = j.state === 'completed';
  return h('td', { class: before ? 'clip muted' : 'clip', title: before ? `failed before success: ${j.last_error}` : j.last_error },
    before && h('span', { class: 'before' }, 'before success: '), badge(j.last_error_class), ' ', j.last_error);
}

// jobWhen says which moment of a job matters now: when it runs (pending,
// scheduled), since when it runs (running), or when it ended.
function jobWhen(j) {
  switch (j.state) {
    case 'pending':
    case 'scheduled':
      return { at: j.run_at, verb: new Date(j.run_at).getTime() > Date.now() ? 'runs' : 'due', label: 'runs at' };
    case 'running':
      return { at: j.attempted_at || j.run_at, verb: 'started', label: 'attempt started at' };
    case 'completed':
      return { at: j.finished_at, verb: 'finished', label: 'completed at' };
    case 'dead':
      return { at: j.dead_at || j.finished_at, verb: 'died', label: 'dead since' };
    case 'canceled':
      return { at: j.finished_at, verb: 'canceled', label: 'canceled at' };
    default:
      return { at: j.created_at, verb: 'created', label: 'created at' };
  }
}

function whenCell(j) {
  let w = jobWhen(j);
  if (!w.at) w = { at: j.created_at, verb: 'created', label: 'created at' };
  return h('td', { class: 'when', 'data-when': w.verb, title: `${w.label} ${fmtTime(w.at)}` }, `${w.verb} ${fmtAgo(w.at)}`);
}

const EVENT_COLORS = {
  completed: 'var(--ok)', retry: 'var(--warn)', dead: 'var(--bad)', snoozed: 'var(--violet)', deferred: 'var(--violet)',
  released: 'var(--grey)', canceled: 'var(--grey)', redriven: 'var(--info)', running: 'var(--warn)',
};

async function jobPage(id) {
  if (!/^\d+$/.test(id)) throw new Error(`"${id}" is not a job id`);
  const j = await api.get(`/v1/jobs/${id}`);
  const actions = h('div', { class: 'actions' });
  if (j.state === 'scheduled') {
    // A delayed job, or one waiting for its next retry: run it now.
    const retry = (j.history || []).length > 0 && j.history[j.history.length - 1].kind === 'retry';
    actions.append(h('button', { class: 'primary', id: 'run-now', 'data-needs': 'operate', onclick: () => runNow(j, retry) }, retry ? 'Retry now' : 'Run now'));
  }
  if (['pending', 'scheduled', 'running', 'dead'].includes(j.state)) {
    // A dead job leaves the DLQ unrun when canceled, as a purge: admin.
    actions.append(h('button', { 'data-needs': j.state === 'dead' ? 'admin' : 'operate', onclick: () => cancelJob(j) }, 'Cancel'));
  }
  if (j.state === 'dead') {
    actions.append(
      h('button', { class: 'primary', id: 'redrive-job', 'data-needs': 'operate', disabled: !j.reprocessable, onclick: () => redriveDialog({ ids: [j.id] }, 1) }, 'Redrive'),
      h('button', { id: 'edit-redrive-job', 'data-needs': 'admin', disabled: !j.reprocessable, onclick: () => editRedriveDialog({ ids: [j.id] }, 1, j.payload) }, 'Edit and redrive'));
  }
  const kv = (k, v, id) => [h('dt', {}, k), h('dd', { id }, v === undefined || v === null || v === '' ? '—' : v)];
  const waiting = j.state === 'pending' || j.state === 'scheduled';
  return h('div', { 'data-job-page': j.id },
    h('h1', {}, `Job ${j.id} `, badge(j.state)),
    h('div', { class: 'row' },
      h('section', { class: 'card' }, h('h2', {}, 'Job'),
        h('dl', { class: 'kv' },
          kv('Queue', h('a', { href: `#/jobs?queue=${encodeURIComponent(j.queue)}` }, j.queue)), kv('Kind', j.kind),
          // Live (the page refreshes) until the job ends: a page opened
          // while the job waits shows it start and its progress.
          kv('State', h('span', { 'data-live': !['completed', 'dead', 'canceled'].includes(j.state) }, j.state)),
          j.progress && kv(j.state === 'running' ? 'Progress' : 'Final progress', progressBar(j.progress), 'progress'),
          kv('Priority', `${j.priority || 0}${j.priority > 0 ? ' (starts before lower priorities)' : j.priority < 0 ? ' (waits for higher priorities)' : ' (default)'}`, 'priority'),
          kv('Attempt', `${j.attempt}${j.max_retries >= 0 ? ` of ${j.max_retries + 1}` : ''}`),
          kv('Created', fmtTime(j.created_at)),
          waiting ? kv('Next run', [fmtTime(j.run_at), ' ', h('span', { class: 'muted' }, `(${fmtAgo(j.run_at)})`)], 'next-run')
            : kv('Last due', fmtTime(j.run_at)),
          j.limit && kv('Limit', limitLine(j), 'job-limit'),
          waiting && kv('Why then', whyThen(j), 'why-then'),
          kv('Finished', fmtTime(j.finished_at)), kv('Dependency', j.dependency),
          kv('Idempotency key', j.idempotency_key), kv('Redriven', j.redriven === 1 ? 'once' : j.redriven ? `${j.redriven} times` : 'never'),
          j.replay_of && kv('Replays', h('a', { href: `#/jobs/${j.replay_of}` }, `job ${j.replay_of}`), 'replay-of'),
          j.trace && kv('Trace', traceLink(j.trace.split(' ')[0].split('-')[1] || ''), 'trace-id'),
          j.state === 'dead' && kv('Dead reason', j.dead_reason),
          j.blocked_dependents > 0 && kv('Blocked dependents',
            `${fmtN(j.blocked_dependents)} workflow job(s) wait for this one: redriving it releases them once it completes; purging it cancels them`, 'blocked-dependents'),
          j.fingerprint && kv('Cause', h('a', { href: `#/dlq/${j.fingerprint}` }, shortFP(j.fingerprint))),
          !j.reprocessable && kv('Reprocessable', 'no: this job may not be redriven'),
          j.last_error && (j.state === 'completed'
            ? kv('Failed before success', h('span', { class: 'muted' }, badge(j.last_error_class), ' ', j.last_error), 'last-error')
            : kv('Last error', [badge(j.last_error_class), ' ', j.last_error], 'last-error'))),
        h('div', { style: { 'margin-top': '12px' } }, actions)),
      h('section', { class: 'card' }, h('h2', {}, 'Payload'), h('pre', { id: 'payload' }, pretty(j.payload)))),
    (j.result !== undefined || j.result_error) && h('section', { class: 'card' }, h('h2', {}, 'Result'),
      j.result_error ? h('p', { id: 'result', class: 'muted' }, j.result_error) : h('pre', { id: 'result' }, pretty(j.result))),
    j.kind === 'amqp' && messageCard(j.payload),
    j.kind === 'kafka' && recordCard(j.payload),
    h('section', { class: 'card' }, h('h2', {}, 'Attempt timeline'), timeline(withCurrent(j))));
}

// messageCard shows the RabbitMQ message a job of kind amqp holds (a dead
// letter of a managed queue kept in the store): its body decoded as its
// body_encoding says, its content type and the queue it goes back to.
function messageCard(p) {
  if (!p || typeof p !== 'object' || Array.isArray(p)) return null;
  const m = decodeMessageBody(p);
  const kv = (k, v, id) => [h('dt', {}, k), h('dd', { id }, v === undefined || v === null || v === '' ? '—' : v)];
  const headers = p.headers && typeof p.headers === 'object' ? Object.keys(p.headers).length : 0;
  return h('section', { class: 'card', id: 'message' },
    h('h2', {}, 'RabbitMQ message'),
    h('dl', { class: 'kv' },
      kv('Origin queue', p.queue ? h('span', { class: 'mono' }, p.queue) : '', 'message-queue'),
      kv('Content type', p.content_type, 'message-content-type'),
      kv('Body', `${m.what}${m.size !== undefined ? `, ${fmtN(m.size)} bytes` : ''}`, 'message-encoding'),
      p.message_id && kv('Message ID', h('span', { class: 'mono' }, p.message_id)),
      p.broker && kv('Broker', p.broker)),
    p.queue && h('p', { class: 'muted' }, `Redriving this job publishes the message back to queue ${p.queue}.`),
    m.error ? h('p', { class: 'error', id: 'message-error' }, m.error) : h('pre', { id: 'message-body', class: m.hex ? 'hexdump' : '' }, m.text),
    headers > 0 && [h('h3', {}, 'Headers'), h('pre', { id: 'message-headers' }, pretty(p.headers))]);
}

// MAX_DUMP bounds the bytes of a binary body shown as a hex dump.
const MAX_DUMP = 64 * 1024;

// decodeMessageBody decodes the body of an amqp payload: JSON
// pretty-printed, text as it is, binary (base64) as a hex dump.
function decodeMessageBody(p) {
  return decodeBytes(p.body, p.body_encoding, 'body');
}

// decodeBytes decodes bytes a payload holds in encoding enc (json, text
// or base64, as the transports' payloads keep them): JSON
// pretty-printed, text as it is, binary as a hex dump. what names them
// in an error.
function decodeBytes(value, enc, what) {
  enc = enc || 'text';
  try {
    switch (enc) {
      case 'json':
        return { what: 'JSON', text: pretty(value) };
      case 'text':
        if (typeof value !== 'string') throw new Error(`the ${what} is not a string`);
        return { what: 'text', text: value, size: new TextEncoder().encode(value).length };
      case 'base64': {
        if (typeof value !== 'string') throw new Error(`the ${what} is not a string`);
        const bytes = base64Bytes(value);
        return { what: 'binary', text: bytes.length ? hexDump(bytes, MAX_DUMP) : '(empty)', size: bytes.length, hex: true, bytes };
      }
      default:
        throw new Error(`unknown encoding ${JSON.stringify(enc)}`);
    }
  } catch (e) {
    return { what: String(enc), error: `The ${what} cannot be decoded: ${e.message}. The payload above holds it as stored.` };
  }
}

function base64Bytes(b64) {
  const bin = atob(b64);
  const bytes = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
  return bytes;
}

// recordCard shows the Kafka record a job of kind kafka holds (a dead
// letter kept in the store): its key and value decoded as their
// encodings say, its headers, and the topic it goes back to.
function recordCard(p) {
  if (!p || typeof p !== 'object' || Array.isArray(p)) return null;
  const kv = (k, v, id) => [h('dt', {}, k), h('dd', { id }, v === undefined || v === null || v === '' ? '—' : v)];
  const part = (value, enc, what, id) => {
    if (value === undefined || value === null) {
      return { label: 'none (null)', el: null };
    }
    const m = decodeBytes(value, enc, what);
    return {
      label: `${m.what}${m.size !== undefined ? `, ${fmtN(m.size)} bytes` : ''}`,
      el: m.error ? h('p', { class: 'error', id: `${id}-error` }, m.error) : h('pre', { id, class: m.hex ? 'hexdump' : '' }, m.text),
    };
  };
  const key = part(p.key, p.key_encoding, 'key', 'record-key');
  const value = part(p.value, p.value_encoding, 'value', 'record-value');
  const headers = Array.isArray(p.headers) ? p.headers : [];
  return h('section', { class: 'card', id: 'record' },
    h('h2', {}, 'Kafka record'),
    h('dl', { class: 'kv' },
      kv('Topic', p.topic ? h('span', { class: 'mono' }, p.topic) : '', 'record-topic'),
      kv('Key', key.label, 'record-key-encoding'),
      kv('Value', value.label, 'record-value-encoding'),
      p.origin && kv('First consumed at', h('span', { class: 'mono' }, p.origin), 'record-origin'),
      p.dead_letter && kv('Dead letter at', h('span', { class: 'mono' }, p.dead_letter), 'record-dead-letter')),
    p.topic && h('p', { class: 'muted' }, `Redriving this job produces the record back to topic ${p.topic}.`),
    key.el && [h('h3', {}, 'Key'), key.el],
    h('h3', {}, 'Value'), value.el || h('p', { class: 'muted', id: 'record-value' }, 'No value (a tombstone).'),
    headers.length > 0 && [h('h3', {}, 'Headers'),
      h('table', { id: 'record-headers' },
        h('thead', {}, h('tr', {}, h('th', {}, 'Key'), h('th', {}, 'Value'))),
        h('tbody', {}, headers.map((hd) => h('tr', { 'data-header': headerKey(hd) },
          h('td', { class: 'mono' }, headerKey(hd)),
          h('td', { class: 'mono' }, headerValue(hd))))))]);
}

// headerKey is a record header's key as text.
function headerKey(hd) {
  if (hd.key_encoding !== 'base64') return String(hd.key);
  try {
    return new TextDecoder().decode(base64Bytes(hd.key));
  } catch {
    return String(hd.key);
  }
}

// headerValue shows a record header's value: text or JSON as it is,
// binary as hex bytes.
function headerValue(hd) {
  if (hd.value === undefined || hd.value === null) return h('span', { class: 'muted' }, 'null');
  if (hd.value_encoding === 'json') return JSON.stringify(hd.value);
  if (hd.value_encoding !== 'base64') return String(hd.value);
  try {
    const bytes = base64Bytes(hd.value);
    const shown = Array.from(bytes.subarray(0, 256), (b) => b.toString(16).padStart(2, '0')).join(' ');
    return [shown, h('span', { class: 'muted' }, ` (binary, ${fmtN(bytes.length)} bytes${bytes.length > 256 ? ', the first 256 shown' : ''})`)];
  } catch {
    return String(hd.value);
  }
}

// hexDump formats bytes as hexdump -C does: per line of 16 bytes, the
// offset, the bytes in hex, and the printable ASCII ones ('.' for the
// others); at most limit bytes.
function hexDump(bytes, limit) {
  const n = Math.min(bytes.length, limit);
  const hex2 = (b) => b.toString(16).padStart(2, '0');
  const lines = [];
  for (let off = 0; off < n; off += 16) {
    const row = bytes.subarray(off, Math.min(off + 16, n));
    let hex = '';
    for (let i = 0; i < 16; i++) {
      hex += i < row.length ? hex2(row[i]) + ' ' : '   ';
      if (i === 7) hex += ' ';
    }
    const chars = Array.from(row, (b) => (b >= 0x20 && b < 0x7f ? String.fromCharCode(b) : '.')).join('');
    lines.push(`${off.toString(16).padStart(8, '0')}  ${hex} |${chars}|`);
  }
  if (bytes.length > n) lines.push(`… ${fmtN(bytes.length - n)} more bytes not shown`);
  return lines.join('\n');
}

// limitLine says which concurrency limit a job is under and its group's
// use now: "waiting on limit per-host (group example.com: 5 of 5
// running)" when the job is due and its group full (or held by its rate
// or a Retry-After: with the next start). Such a job starts as
// soon as a job of its group ends, so the page refreshes while it waits
// (data-live).
function limitLine(j) {
  const l = j.limit;
  let use = l.max > 0 ? `${fmtN(l.running)} of ${fmtN(l.max)} running` : `${fmtN(l.running)} running`;
  if (l.next_start) use += `, next start ${fmtTime(l.next_start)}`;
  const group = l.key ? `group ${l.key}: ${use}` : use;
  const name = h('a', { href: '#/limits', class: 'mono' }, l.name);
  if (l.waiting) {
    const when = l.next_start && !(l.max > 0 && l.running >= l.max)
      ? ' — it uses no attempt, and starts when its group\'s rate or hold allows'
      : ' — it uses no attempt, and starts when a job of its group ends';
    return h('span', { 'data-limit-waiting': 'true', 'data-live': 'true' }, 'waiting on limit ', name, ` (${group})`,
      h('span', { class: 'muted' }, when));
  }
  return h('span', { 'data-limit-waiting': 'false' }, 'under limit ', name, ` (${group})`);
}

// whyThen says why a waiting job runs when it does: what its last event
// (the failure and the delay the retry policy chose, a snooze, an open
// breaker, a redrive) or its enqueue asked for.
function whyThen(j) {
  const events = j.history || [];
  const e = events[events.length - 1];
  if (!e) {
    const later = new Date(j.run_at).getTime() - new Date(j.created_at).getTime();
    return later >= 1000 ? `scheduled when enqueued, ${fmtMs(later)} after its creation` : 'enqueued to run at once';
  }
  const reason = e.reason ? [' ', h('span', { class: 'mono' }, e.reason)] : '';
  switch (e.kind) {
    case 'retry': {
      // last_delay is what the policy chose; the event's delay is the
      // one applied, longer when the queue's retry budget pushed it out.
      const chose = j.last_delay || e.delay;
      return h('span', {},
        `attempt ${e.attempt} failed: `, badge(e.class || 'unknown'), reason,
        ` — the retry policy chose a delay of ${fmtMs(chose)}`,
        e.delay && chose && e.delay - chose >= 1 ? `, which the queue's retry budget pushed out to ${fmtMs(e.delay)}` : '');
    }
    case 'snoozed':
      return h('span', {}, `the handler snoozed attempt ${e.attempt} for ${fmtMs(e.delay)}`, reason);
    case 'deferred':
      return h('span', {}, `its circuit breaker was open: deferred for ${fmtMs(e.delay)}, no attempt used`, reason);
    case 'released':
      return h('span', {}, `a worker's shutdown interrupted attempt ${e.attempt}; it runs again at once`, reason);
    case 'redriven':
      return 'redriven from the dead-letter queue';
    case 'replayed':
      return h('span', {}, 'enqueued by a replay of ', h('a', { href: `#/jobs/${e.replay_of}` }, `job ${e.replay_of}`));
    default:
      return h('span', {}, `last event: ${e.kind}`, reason);
  }
}

function pretty(v) {
  try { return JSON.stringify(v, null, 2); } catch { return String(v); }
}

// withCurrent returns the job's history followed by what the job's own
// fields say of its latest attempt: the attempt that completed it (the
// engine records a success on the job — attempt, attempted_at,
// last_duration — and as an event only when the handler recorded a
// result, as the http kind does) or the one running now.
function withCurrent(j) {
  const events = (j.history || []).slice();
  const last = events[events.length - 1];
  const recorded = last && last.kind === 'completed' && last.attempt === j.attempt;
  if (j.state === 'completed' && j.attempted_at && j.finished_at && !recorded) {
    // last_duration is the handler's own time; jobs finished before the
    // store kept it have only the span to their recorded completion.
    events.push({ kind: 'completed', attempt: j.attempt, at: j.attempted_at,
      duration: j.last_duration !== undefined ? j.last_duration
        : new Date(j.finished_at).getTime() - new Date(j.attempted_at).getTime() });
  } else if (j.state === 'running' && j.attempted_at) {
    events.push({ kind: 'running', attempt: j.attempt, at: j.attempted_at, worker: j.worker,
      note: j.cancel_requested ? 'cancellation requested' : `lease until ${fmtTime(j.lease_until)}` });
  }
  return events;
}

// eventTitle names what an event of the timeline is: an attempt, a
// deferral (which uses none) or an operator's action.
function eventTitle(e) {
  if (e.kind === 'deferred') return 'Deferred';
  return e.attempt ? `Attempt ${e.attempt}` : 'Operator';
}

// eventGloss says in words what uses no attempt: a deferral by an open
// breaker, an attempt a snooze or a shutdown gave back.
function eventGloss(e) {
  switch (e.kind) {
    case 'deferred': {
      const name = (e.reason || '').startsWith('breaker_open:') ? e.reason.slice('breaker_open:'.length) : '';
      return `circuit breaker ${name || 'of its dependency'} was open: the job did not run, no attempt used`;
    }
    case 'snoozed':
      return `the handler snoozed: attempt ${e.attempt} given back, no attempt used`;
    case 'released':
      return `a shutdown interrupted it: attempt ${e.attempt} given back, no attempt used`;
    default:
      return '';
  }
}

function timeline(events) {
  if (events.length === 0) return h('p', { class: 'muted' }, 'No attempt yet.');
  return h('ol', { class: 'timeline' }, events.map((e) => h('li', { style: { '--c': EVENT_COLORS[e.kind] || 'var(--grey)' }, 'data-event': e.kind },
    h('div', {},
      h('strong', {}, eventTitle(e)), ' ', badge(e.kind),
      e.class && [' ', badge(e.class)], e.reason && [' ', h('span', { class: 'mono muted' }, e.reason)]),
    eventGloss(e) && h('div', { class: 'gap' }, eventGloss(e)),
    h('div', { class: 'when' }, fmtTime(e.at),
      e.duration ? ` · ran ${fmtMs(e.duration)}` : '', e.worker ? ` · ${e.worker}` : ''),
    e.error && h('div', { class: 'err' }, e.error),
    e.replay_of && h('div', { class: 'gap' }, 'replays ', h('a', { href: `#/jobs/${e.replay_of}` }, `job ${e.replay_of}`)),
    e.note && h('div', { class: 'gap' }, e.note),
    e.delay ? h('div', { class: 'gap' }, `next run after ${fmtMs(e.delay)}`) : null)));
}

async function runNow(j, retry) {
  const ok = await confirmDialog(`${retry ? 'Retry' : 'Run'} job ${j.id} now?`,
    `It is due ${fmtAgo(j.run_at)}; it becomes due at once. This uses no attempt: its attempt count and history are kept.`,
    retry ? 'Retry now' : 'Run now', 'primary');
  if (!ok) return;
  try { await api.post(`/v1/jobs/${j.id}/run`); } catch (e) { await messageDialog('Failed', e.message); }
  render();
}

async function cancelJob(j) {
  const ok = await confirmDialog(`Cancel job ${j.id}?`,
    j.state === 'running' ? 'The worker running it is asked to stop at its next heartbeat.' : 'The job will not run again.', 'Cancel job', 'danger');
  if (!ok) return;
  try { await api.post(`/v1/jobs/${j.id}/cancel`); } catch (e) { await messageDialog('Failed', e.message); }
  render();
}

// ---- dead-letter queue -------------------------------------------------

async function dlqPage(params) {
  const f = { queue: params.get('queue') || '', kind: params.get('kind') || '', class: params.get('class') || '', q: params.get('q') || '',
    error_prefix: params.get('error_prefix') || '' };
  const res = await api.get('/v1/dlq/groups' + qs({ ...f, limit: 200 }));
  const groups = res.groups || [];
  const total = groups.reduce((a, g) => a + g.count, 0);
  const rows = groups.map((g) => h('tr', { class: 'click', 'data-group': g.fingerprint, onclick: (ev) => { if (ev.target.tagName !== 'BUTTON') go(`#/dlq/${g.fingerprint}`); } },
    h('td', { class: 'num' }, h('strong', {}, fmtN(g.count))),
    h('td', {}, `${g.queue} / ${g.kind}`),
    h('td', {}, badge(g.class), g.reason ? [' ', h('span', { class: 'mono muted' }, g.reason)] : ''),
    h('td', { class: 'clip', title: g.sample_error }, g.sample_error),
    h('td', { title: fmtTime(g.last_dead_at) }, fmtAgo(g.last_dead_at)),
    h('td', {}, h('div', { class: 'actions' },
      h('button', { class: 'small primary', 'data-needs': 'operate', onclick: () => redriveDialog({ filter: { fingerprint: g.fingerprint } }, g.count) }, 'Redrive'),
      h('button', { class: 'small', 'data-needs': 'admin', onclick: () => purgeDialog({ fingerprint: g.fingerprint }, g.count) }, 'Purge')))));
  const table = h('table', { class: 'groups' },
    h('thead', {}, h('tr', {}, h('th', { class: 'num' }, 'Jobs'), h('th', {}, 'Queue / kind'), h('th', {}, 'Class'),
      h('th', {}, 'Error (latest)'), h('th', {}, 'Last dead'), h('th', {}, ''))),
    h('tbody', {}, rows));
  return h('div', {},
    h('h1', {}, 'Dead letters'),
    h('div', { class: 'card' },
      filterForm(f, false, (nf) => go('#/dlq' + qs(nf))),
      groups.length === 0
        ? h('p', { class: 'empty' }, 'The dead-letter queue is empty. Nothing to fix.')
        : [h('p', { class: 'muted' }, `${fmtN(total)} dead jobs in ${fmtN(groups.length)} groups, one group per cause (same queue, kind, class, reason and normalized error).`), table]));
}

async function groupPage(fp, params) {
  if (!/^[0-9a-f]{1,128}$/i.test(fp)) throw new Error('not a group fingerprint');
  const cursor = params.get('cursor') || '';
  const [groupsRes, res] = await Promise.all([
    api.get('/v1/dlq/groups' + qs({ fingerprint: fp, limit: 1 })),
    api.get('/v1/dlq' + qs({ fingerprint: fp, cursor, limit: 100 })),
  ]);
  const g = (groupsRes.groups || [])[0];
  if (!g) {
    return h('div', {}, h('h1', {}, 'Dead-letter group'),
      h('div', { class: 'card empty' }, 'This group is empty now: its jobs were redriven or purged. ', h('a', { href: '#/dlq' }, 'Back to dead letters')));
  }
  const selected = new Set();
  const redriveSel = h('button', { class: 'primary', id: 'redrive-selected', 'data-needs': 'operate', disabled: true, onclick: () => redriveDialog({ ids: [...selected] }, selected.size) }, 'Redrive selected');
  const editSel = h('button', { id: 'edit-selected', 'data-needs': 'admin', disabled: true, onclick: () => {
    const first = res.jobs.find((j) => selected.has(j.id));
    editRedriveDialog({ ids: [...selected] }, selected.size, first ? first.payload : null);
  } }, 'Edit and redrive selected');
  const update = () => {
    redriveSel.disabled = editSel.disabled = selected.size === 0;
    redriveSel.textContent = selected.size ? `Redrive ${selected.size} selected` : 'Redrive selected';
  };
  const boxes = [];
  const select = {
    all: h('input', { type: 'checkbox', 'aria-label': 'select all on this page', onchange: (ev) => {
      for (const b of boxes) { b.checked = ev.target.checked; b.onchange(); }
    } }),
    box: (j) => {
      const b = h('input', { type: 'checkbox', 'aria-label': `select job ${j.id}`, 'data-select': j.id });
      b.onchange = () => { if (b.checked) selected.add(j.id); else selected.delete(j.id); update(); };
      boxes.push(b);
      return b;
    },
  };
  const filter = { fingerprint: fp };
  return h('div', {},
    h('p', {}, h('a', { href: '#/dlq' }, '← Dead letters')),
    h('h1', {}, `${fmtN(g.count)} dead jobs: ${g.queue} / ${g.kind}`),
    h('section', { class: 'card' },
      h('dl', { class: 'kv' },
        h('dt', {}, 'Class'), h('dd', {}, badge(g.class)), h('dt', {}, 'Reason'), h('dd', {}, g.reason || '—'),
        h('dt', {}, 'Error'), h('dd', { class: 'mono' }, g.sample_error),
        h('dt', {}, 'First dead'), h('dd', {}, fmtTime(g.first_dead_at)), h('dt', {}, 'Last dead'), h('dd', {}, fmtTime(g.last_dead_at)),
        h('dt', {}, 'Fingerprint'), h('dd', { class: 'mono' }, g.fingerprint)),
      h('div', { class: 'actions', style: { 'margin-top': '12px' } },
        h('button', { class: 'primary', id: 'redrive-group', 'data-needs': 'operate', onclick: () => redriveDialog({ filter }, g.count) }, `Redrive all ${fmtN(g.count)}`),
        h('button', { id: 'edit-redrive-group', 'data-needs': 'admin', onclick: () => editRedriveDialog({ filter }, g.count, res.jobs[0] && res.jobs[0].payload) }, 'Edit and redrive all'),
        h('button', { class: 'danger', id: 'purge-group', 'data-needs': 'admin', onclick: () => purgeDialog(filter, g.count) }, `Purge all ${fmtN(g.count)}`))),
    h('section', { class: 'card' },
      h('div', { class: 'actions', style: { 'margin-bottom': '8px' } }, redriveSel, editSel),
      jobTable(res.jobs, select),
      h('div', { class: 'pager' }, cursor && h('a', { href: `#/dlq/${fp}` }, '← First page'),
        res.next && h('a', { href: `#/dlq/${fp}` + qs({ cursor: res.next }) }, 'Next page →'))));
}

// ---- workers -----------------------------------------------------------

// workerKinds is the cell of the job kinds a worker has handlers for:
// "any" when it did not record them (an older version, which may run any
// kind, so enqueues are not refused on its account).
function workerKinds(w) {
  if (!w.kinds) return h('td', { class: 'kinds muted', title: 'not recorded by this worker\'s version: it may run any kind' }, 'any (not recorded)');
  if (w.kinds.length === 0) return h('td', { class: 'kinds muted' }, 'none');
  return h('td', { class: 'kinds mono' }, w.kinds.join(', '));
}

async function workersPage() {
  const res = await api.get('/v1/workers');
  const workers = res.workers || [];
  const count = (st) => workers.filter((w) => w.state === st).length;
  const rows = workers.map((w) => {
    const capacity = Object.values(w.queues || {}).reduce((a, n) => a + n, 0);
    const active = w.state === 'live' || w.state === 'silent';
    // A silent worker (no heartbeat for a minute, by the server's clock)
    // is not stopped but stale: hung, killed, or on a host that lost the
    // store. Its leases expire and its jobs are rescued.
    const stale = w.state === 'silent';
    return h('tr', { 'data-worker': w.id, 'data-state': w.state, class: active ? '' : 'muted' },
      h('td', { class: 'mono' }, w.id,
        w.remote && [' ', h('span', { class: 'badge b-remote', title: 'a worker in another process or language, on the HTTP worker protocol (its jobs are rescued at lease expiry)' }, 'remote')]),
      h('td', {}, badge(w.state),
        stale && [' ', h('span', { class: 'stale', title: 'no heartbeat for longer than a minute' }, `stale: no heartbeat for ${fmtAgo(w.heartbeat_at).replace(/ ago$/, '')}`)],
        w.state === 'gone' && w.stop_reason && [' ', h('span', { class: 'mono muted' }, w.stop_reason)]),
      h('td', {}, w.host, w.pid ? h('span', { class: 'muted' }, ` pid ${w.pid}`) : ''),
      h('td', { class: 'mono' }, w.version || '—'),
      h('td', {}, Object.entries(w.queues || {}).sort(([a], [b]) => a.localeCompare(b)).map(([q, n], i) =>
        [i ? ', ' : '', h('a', { href: `#/jobs?queue=${encodeURIComponent(q)}` }, q), ` × ${n}`])),
      workerKinds(w),
      h('td', { class: 'num', 'data-running': w.running }, active ? `${fmtN(w.running)} of ${fmtN(capacity)}` : fmtN(w.running)),
      h('td', { title: fmtTime(w.heartbeat_at) }, w.stopped_at ? `${w.state} ${fmtAgo(w.stopped_at)}` : fmtAgo(w.heartbeat_at)),
      h('td', { title: fmtTime(w.started_at) }, fmtAgo(w.started_at)));
  });
  const summary = ['live', 'silent', 'stopped', 'gone'].filter(count).map((st) => `${fmtN(count(st))} ${st}`).join(' · ');
  return h('div', {},
    h('h1', {}, 'Workers'),
    h('div', { class: 'card' },
      workers.length === 0
        ? h('p', { class: 'empty' }, 'No worker has registered: a worker registers when it starts (Worker.Run).')
        : [h('p', { class: 'muted', id: 'workers-summary' }, `${summary}. A worker is silent when it has not sent a heartbeat for a minute: its running jobs are rescued when their leases expire.`),
          h('table', { class: 'workers' },
            h('thead', {}, h('tr', {}, h('th', {}, 'ID'), h('th', {}, 'State'), h('th', {}, 'Host'), h('th', {}, 'Version'),
              h('th', {}, 'Queues × concurrency'), h('th', {}, 'Kinds'), h('th', { class: 'num' }, 'Running'), h('th', {}, 'Last heartbeat'), h('th', {}, 'Started'))),
            h('tbody', {}, rows))]));
}

// ---- dialogs and operations --------------------------------------------

function openDialog(...children) {
  dialog.replaceChildren();
  append(dialog, children);
  if (!dialog.open) dialog.showModal();
}

function closeDialog() { if (dialog.open) dialog.close(); }

// onDialogClose calls fn once, when the dialog closes while it shows what
// the caller opened, and returns a function that forgets fn. A dialog's
// close event is dispatched in a task of its own: the close event of the
// dialog before (closed by a click just earlier) can come after the next
// dialog opened, and is ignored, since the dialog is open then; a real
// close (Escape, a button) leaves it closed.
function onDialogClose(fn) {
  const handler = () => {
    if (dialog.open) return;
    dialog.removeEventListener('close', handler);
    fn();
  };
  dialog.addEventListener('close', handler);
  return () => dialog.removeEventListener('close', handler);
}

function confirmDialog(title, text, confirmLabel, kind) {
  return new Promise((resolve) => {
    const forget = onDialogClose(() => resolve(false));
    const done = (v) => { forget(); closeDialog(); resolve(v); };
    openDialog(h('h2', {}, title), h('p', {}, text),
      h('div', { class: 'actions' },
        h('button', { onclick: () => done(false) }, 'Back'),
        h('button', { class: kind || 'primary', id: 'confirm', onclick: () => done(true) }, confirmLabel)));
  });
}

function messageDialog(title, text) {
  return new Promise((resolve) => {
    onDialogClose(() => resolve());
    openDialog(h('h2', {}, title), h('p', {}, text), h('div', { class: 'actions' }, h('button', { onclick: closeDialog }, 'Close')));
  });
}

function selectionText(sel, count) {
  return sel.ids ? `${fmtN(count)} selected dead job${count === 1 ? '' : 's'}` : `the ${fmtN(count)} dead job${count === 1 ? '' : 's'} of this group`;
}

function redriveDialog(sel, count, payload) {
  const rate = h('input', { type: 'number', min: '0', step: 'any', value: '', placeholder: 'no limit', id: 'rate' });
  const note = h('input', { type: 'text', maxlength: '1000', placeholder: 'who and why (kept in each job\'s history)', id: 'note', size: 40 });
  const err = h('p', { class: 'error', role: 'alert' });
  openDialog(
    h('h2', {}, payload === undefined ? 'Redrive' : 'Edit and redrive'),
    h('p', {}, `Move ${selectionText(sel, count)} back to pending. Their attempt counters reset; their history is kept.`),
    payload !== undefined && h('p', { class: 'muted' }, 'Every redriven job gets the edited payload.'),
    h('form', { class: 'filters', onsubmit: (ev) => ev.preventDefault() },
      h('label', {}, 'Rate (jobs per second)', rate), h('label', {}, 'Note', note)),
    err,
    h('div', { class: 'actions' },
      h('button', { onclick: closeDialog }, 'Back'),
      h('button', { class: 'primary', id: 'confirm', onclick: () => {
        const body = Object.assign({}, sel);
        if (rate.value !== '') body.rate = Number(rate.value);
        if (note.value.trim()) body.note = note.value.trim();
        if (payload !== undefined) body.payload = payload;
        runOperation('Redrive', () => api.post('/v1/dlq/redrive', body), err);
      } }, `Redrive ${fmtN(count)}`)));
}

function editRedriveDialog(sel, count, payload) {
  const ta = h('textarea', { id: 'payload-editor', spellcheck: 'false' });
  ta.value = pretty(payload === undefined ? null : payload);
  const err = h('p', { class: 'error', role: 'alert' });
  openDialog(
    h('h2', {}, 'Edit the payload'),
    h('p', {}, `The payload below replaces the payload of ${selectionText(sel, count)}.`),
    ta, err,
    h('div', { class: 'actions' },
      h('button', { onclick: closeDialog }, 'Back'),
      h('button', { class: 'primary', id: 'next', onclick: () => {
        let v;
        try { v = JSON.parse(ta.value); } catch (e) { err.textContent = `Not valid JSON: ${e.message}`; return; }
        redriveDialog(sel, count, v);
      } }, 'Continue')));
}

function purgeDialog(filter, count) {
  openDialog(
    h('h2', {}, `Purge ${fmtN(count)} dead jobs?`),
    h('p', {}, 'They are deleted for good: their payloads and histories are gone. Export them first if you may need them (redrive dlq export).'),
    h('div', { class: 'actions' },
      h('button', { onclick: closeDialog }, 'Back'),
      h('button', { class: 'danger', id: 'confirm', onclick: () =>
        runOperation('Purge', () => api.del('/v1/dlq' + qs(filter)), null) }, `Purge ${fmtN(count)}`)));
}

// runOperation starts a redrive or purge, which the server answers with an
// operation ({"operation": ...}), and shows its progress until it ends
// (done, failed or canceled): a worker runs it; until one claims it, it is
// pending.
async function runOperation(title, start, errEl) {
  const bar = h('progress', { max: 1, value: 0, id: 'progress' });
  const text = h('p', { id: 'progress-text' }, 'Starting…');
  const closeBtn = h('button', { id: 'close', disabled: true, onclick: () => { closeDialog(); render(); } }, 'Close');
  const cancelBtn = h('button', { id: 'cancel-op' }, 'Stop');
  let res;
  try {
    res = await start();
  } catch (e) {
    if (errEl) errEl.textContent = e.field ? `${e.field}: ${e.message}` : e.message;
    else await messageDialog(`${title} failed`, e.message);
    return;
  }
  openDialog(h('h2', {}, `${title} in progress`), bar, text, h('div', { class: 'actions' }, cancelBtn, closeBtn));
  let op = res.operation;
  cancelBtn.onclick = async () => {
    cancelBtn.disabled = true;
    try { await api.del(`/v1/operations/${op.id}`); } catch (e) { text.textContent = e.message; }
  };
  for (;;) {
    showProgress(title, op, bar, text);
    if (opFinal(op)) break;
    await new Promise((r) => setTimeout(r, 250));
    try {
      op = (await api.get(`/v1/operations/${op.id}`)).operation;
    } catch (e) {
      text.textContent = `Lost track of the operation: ${e.message}`;
      break;
    }
  }
  dialog.querySelector('h2').textContent = op.state === 'done' ? `${title} done` : `${title} ${op.state}`;
  cancelBtn.hidden = true;
  closeBtn.disabled = false;
  closeBtn.focus();
}

// opFinal reports whether an operation has ended.
function opFinal(op) {
  return op.state === 'done' || op.state === 'failed' || op.state === 'canceled';
}

function showProgress(title, op, bar, text) {
  if (op.state === 'pending' && !op.processed) {
    text.textContent = 'Waiting for a worker to run it…';
    return;
  }
  // processed counts redriven + refused + skipped, or purged.
  const done = op.processed;
  const total = Math.max(op.matched, done, 1);
  bar.max = total;
  bar.value = op.state === 'done' ? total : done;
  const parts = title === 'Purge'
    ? [`${fmtN(op.purged)} purged`]
    : [`${fmtN(op.redriven)} of ${fmtN(op.matched)} redriven`, op.refused ? `${fmtN(op.refused)} refused (not reprocessable)` : '', op.skipped ? `${fmtN(op.skipped)} skipped (no longer dead)` : ''];
  if (op.state === 'paused') parts.push('paused');
  if (op.error) parts.push(`error: ${op.error}`);
  text.textContent = parts.filter(Boolean).join(' · ');
}

// The other scripts (deferred, after this one) register their pages first.
document.addEventListener('DOMContentLoaded', render);
