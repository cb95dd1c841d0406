// operations.js: the dashboard's operations page (registerPage, app.js):
// every durable operation (replay, bulk redrive, purge, export, bulk
// cancel), newest first, with its progress, counts per outcome and
// state, and buttons to pause, resume and cancel it.
'use strict';

// OP_OUTCOMES are the counts an operation keeps, in the order shown.
const OP_OUTCOMES = ['replayed', 'redriven', 'refused', 'skipped', 'purged', 'exported', 'canceled', 'failed'];

// opBadge shows an operation's state.
function opBadge(op) {
  const kinds = { pending: 'scheduled', running: 'running', paused: 'scheduled', done: 'completed', failed: 'dead', canceled: 'canceled' };
  return badge(op.state, kinds[op.state] || op.state);
}

// opFilterText words an operation's selection: queue=mail states=completed.
function opFilterText(op) {
  const f = op.filter || {};
  const parts = [];
  for (const [k, v] of Object.entries(f)) {
    if (k === 'ids') parts.push(`${v.length} id${v.length === 1 ? '' : 's'}`);
    else parts.push(`${k}=${Array.isArray(v) ? v.join(',') : typeof v === 'string' ? v : JSON.stringify(v)}`);
  }
  if (op.dir) parts.push(`dir=${op.dir}`);
  return parts.join(' ') || 'every job';
}

// opAction pauses, resumes or cancels an operation, after the operator
// confirms a cancel.
async function opAction(op, verb) {
  if (verb === 'cancel') {
    const ok = await confirmDialog(`Cancel ${op.kind} ${op.id}?`,
      'Its runner stops after its current batch. What it did stays done; it cannot be resumed.', 'Cancel operation', 'danger');
    if (!ok) return;
  }
  try {
    await api.post(`/v1/operations/${encodeURIComponent(op.id)}/${verb}`);
  } catch (e) {
    await messageDialog('Failed', e.message);
  }
  render();
}

// opProgress is a bar of processed of matched, and the counts.
function opProgress(op) {
  const total = Math.max(op.matched, op.processed, 1);
  const ended = op.state === 'done';
  const counts = OP_OUTCOMES.filter((k) => op[k] > 0).map((k) => h('span', { class: 'op-count', 'data-outcome': k }, `${fmtN(op[k])} ${k}`));
  return h('div', { class: 'op-progress' },
    h('progress', { max: total, value: ended ? total : op.processed }),
    h('span', { class: 'op-processed' }, op.state === 'pending' && !op.processed ? 'waiting for a worker' : `${fmtN(op.processed)} of ${fmtN(op.matched)}`),
    counts.length ? [' · ', counts.map((c, i) => [i ? ', ' : '', c])] : '');
}

async function operationsPage(params) {
  const before = params.get('before') || '';
  const res = await api.get('/v1/operations' + qs({ limit: 50, before }));
  const list = res.operations || [];
  const rows = list.map((op) => h('tr', { 'data-operation': op.id, 'data-state': op.state },
    h('td', { class: 'mono', title: op.id }, op.id.slice(0, 11) + '…'),
    h('td', {}, op.kind),
    h('td', {}, opBadge(op), op.error ? h('div', { class: 'muted op-error' }, op.error) : ''),
    h('td', {}, opProgress(op)),
    h('td', { class: 'muted' }, opFilterText(op), op.rate ? ` · ${op.rate}/s` : '', ` · batch ${op.batch}`, op.note ? ` · ${op.note}` : ''),
    h('td', { title: fmtTime(op.started_at) }, fmtAgo(op.started_at)),
    h('td', { class: 'row-actions' }, h('div', { class: 'actions' },
      op.state === 'pending' || op.state === 'running'
        ? h('button', { class: 'small', 'data-needs': 'operate', 'data-action': 'pause', onclick: () => opAction(op, 'pause') }, 'Pause') : '',
      op.state === 'paused'
        ? h('button', { class: 'small', 'data-needs': 'operate', 'data-action': 'resume', onclick: () => opAction(op, 'resume') }, 'Resume') : '',
      op.state === 'pending' || op.state === 'running' || op.state === 'paused'
        ? h('button', { class: 'small danger', 'data-needs': 'operate', 'data-action': 'cancel', onclick: () => opAction(op, 'cancel') }, 'Cancel') : ''))));
  return h('div', {},
    h('h1', {}, 'Operations'),
    h('div', { class: 'card' },
      list.length === 0
        ? h('p', { class: 'empty' }, 'No operation yet: replays, bulk redrives, purges and exports show here while they run and after.')
        : [h('p', { class: 'muted' }, 'Operations are kept in the store and run by the worker that leads the fleet; one interrupted continues where it stopped. A pending one waits for a worker.'),
          h('table', { class: 'operations' },
            h('thead', {}, h('tr', {}, h('th', {}, 'Id'), h('th', {}, 'Kind'), h('th', {}, 'State'), h('th', {}, 'Progress'),
              h('th', {}, 'Selection'), h('th', {}, 'Started'), h('th', {}, ''))),
            h('tbody', {}, rows)),
          res.next ? h('p', {}, h('a', { href: `#/operations?before=${encodeURIComponent(res.next)}`, id: 'older' }, 'Older operations')) : '']));
}

registerPage('operations', { page: (parts, params) => operationsPage(params), refresh: 2 });
